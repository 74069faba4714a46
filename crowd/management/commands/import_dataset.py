"""``manage.py import_dataset <format> <dir> --name <name> [--references N] [--seed S]``: import a
human-judgment dataset with the importer registered for ``<format>`` (:data:`crowd.importers.IMPORTERS`;
the ``--`` options are those the importers declare, e.g. ``--references``/``--seed`` of PASCAL-50S).

``--image-url TEMPLATE`` or ``--images-dir DIR`` give the dataset its image source
(:mod:`crowd.images`); without them a dataset whose keys are COCO file names (THumB) gets the
public COCO URL template."""
import re
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from crowd import images
from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.base import shorten
from crowd.models import Dataset


def _declared_options() -> dict:
    """Option name -> (its declaration, formats that accept it), over every registered importer."""
    out: dict = {}
    for fmt, importer in IMPORTERS.items():
        for opt_name, option in importer.options.items():
            out.setdefault(opt_name, (option, []))[1].append(fmt)
    return out


class Command(BaseCommand):
    help = "Import a dataset of captions and human judgments. Kinds: " + ", ".join(IMPORTERS)

    def add_arguments(self, parser):
        parser.add_argument("kind", help="dataset format: " + ", ".join(IMPORTERS))
        parser.add_argument("directory", help="folder holding the dataset's files")
        parser.add_argument("--name", required=True, help="name of the dataset in this platform")
        pictures = parser.add_mutually_exclusive_group()
        pictures.add_argument("--image-url", default="", metavar="TEMPLATE",
                              help="image source: http(s) URL template with {key} (default for COCO file names: "
                                   "the public COCO server)")
        pictures.add_argument("--images-dir", default="", metavar="DIR",
                              help="image source: a local folder of the pictures (file names = image keys)")
        for opt_name, (option, formats) in _declared_options().items():
            parser.add_argument(
                f"--{opt_name}", type=int, default=None, metavar="N" if opt_name == "references" else opt_name[0].upper(),
                help=f"{option.help} ({', '.join(formats)} only; default {option.default})",
            )

    def handle(self, *args, kind, directory, name, image_url="", images_dir="", **options):
        if kind not in IMPORTERS:
            raise CommandError(f"unknown dataset kind {shorten(kind)}; known kinds: {', '.join(IMPORTERS)}")
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", name):
            raise CommandError(f"invalid --name {shorten(name)}: use letters, digits, '-' and '_' (at most 100)")
        importer = IMPORTERS[kind]
        declared = _declared_options()
        given = {k: options[k] for k in declared if options.get(k) is not None}
        for opt_name, value in given.items():
            if opt_name not in importer.options:
                note = declared[opt_name][0].absent_note
                raise CommandError(f"--{opt_name} is not an option of kind {kind!r}" + (f" ({note})" if note else ""))
            minimum = importer.options[opt_name].minimum
            if minimum is not None and value < minimum:
                raise CommandError(f"--{opt_name} must be at least {minimum}, got {value}")
        if image_url:
            try:
                images.UrlTemplateSource(image_url)
            except images.ImageSourceError as exc:
                raise CommandError(f"--image-url: {exc}") from None
        if images_dir and not Path(images_dir).expanduser().is_dir():
            raise CommandError(f"--images-dir {images_dir[:200]!r} is not an existing folder")
        try:
            summary = importer(directory, name, **given)
        except (DatasetFormatError, DatasetExistsError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
        dataset = Dataset.objects.get(name=name)
        if image_url or images_dir:
            source = images.set_source(dataset, image_url=image_url or None, images_dir=images_dir or None)
        else:
            source = images.default_source(dataset)
        if source is not None:
            self.stdout.write(f"image source: {source.describe()}")
