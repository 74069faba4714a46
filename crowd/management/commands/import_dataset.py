"""``manage.py import_dataset <format> <dir> --name <name> [--references N] [--seed S]``: import a
human-judgment dataset with the importer registered for ``<format>`` (:data:`crowd.importers.IMPORTERS`;
the ``--`` options are those the importers declare, e.g. ``--references``/``--seed`` of PASCAL-50S)."""
import re

from django.core.management.base import BaseCommand, CommandError

from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.base import shorten


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
        for opt_name, (option, formats) in _declared_options().items():
            parser.add_argument(
                f"--{opt_name}", type=int, default=None, metavar="N" if opt_name == "references" else opt_name[0].upper(),
                help=f"{option.help} ({', '.join(formats)} only; default {option.default})",
            )

    def handle(self, *args, kind, directory, name, **options):
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
        try:
            summary = importer(directory, name, **given)
        except (DatasetFormatError, DatasetExistsError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
