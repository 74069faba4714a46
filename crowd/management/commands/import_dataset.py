"""``manage.py import_dataset <format> <dir> --name <name> [--references N] [--seed S]``: import a
human-judgment dataset with the importer registered for ``<format>`` (:data:`crowd.importers.IMPORTERS`;
the ``--`` options are those the importers declare, e.g. ``--references``/``--seed`` of PASCAL-50S).

``manage.py import_dataset judgments <file> --name <name> [--image-field F] [--candidate-field F]
[--references-field F] [--score-field F ...] [--no-scores] [--system-field F] [--rater-field F]
[--key-field F] [--criterion NAME ...] [--references-file F] [--rows mean|ratings] [--headline STAT]
[--format json|jsonl|csv|tsv] [--human-system NAME] [--reference-system NAME]
[--published-as BENCHMARK]``:
your own benchmark from one file (:mod:`crowd.importers.judgments`); the positional argument is then
the file. These options belong to ``judgments`` only, and the other formats' options are refused
with ``judgments``.

``--image-url TEMPLATE`` or ``--images-dir DIR`` give the dataset its image source
(:mod:`crowd.images`); without them a dataset whose keys are COCO file names (THumB) gets the
public COCO URL template."""
import re
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from crowd import images
from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.base import shorten
from crowd.importers.judgments import FORMATS, HEADLINES, PUBLISHED_AS, JudgmentMapping, import_judgments
from crowd.models import Dataset


def _declared_options() -> dict:
    """Option name -> (its declaration, formats that accept it), over every registered importer."""
    out: dict = {}
    for fmt, importer in IMPORTERS.items():
        for opt_name, option in importer.options.items():
            out.setdefault(opt_name, (option, []))[1].append(fmt)
    return out


#: (option, default field, what it holds) of the judgments format's field options.
JUDGMENT_FIELDS = (
    ("image-field", "image", "image id"), ("candidate-field", "candidate", "candidate caption"),
    ("references-field", "references", "reference captions (a JSON list, or columns F.1, F.2...)"),
    ("system-field", "none: one system", "system name"), ("rater-field", "none", "rater (each row is then one rating)"),
    ("key-field", "none", "candidate caption id"),
)
#: Keyword names (argparse dests) of every option of the judgments format.
JUDGMENT_OPTIONS = tuple(o.replace("-", "_") for o, _, _ in JUDGMENT_FIELDS) + (
    "score_field", "no_scores", "criterion", "references_file", "rows", "headline", "format", "human_system", "published_as",
    "reference_system",
)


def judgment_mapping(own: dict) -> JudgmentMapping:
    """The :class:`JudgmentMapping` of the judgments options given (``{dest: value}``, None = not given)."""
    if own.get("no_scores") and own.get("score_field"):
        raise CommandError("--no-scores and --score-field exclude each other")
    kwargs = {}
    for dest, attr in (("image_field", "image"), ("candidate_field", "candidate"), ("references_field", "references"),
                       ("system_field", "system"), ("rater_field", "rater"), ("key_field", "key"),
                       ("references_file", "references_file"), ("rows", "rows"), ("headline", "headline"),
                       ("format", "format"), ("human_system", "human_system"), ("published_as", "published_as"),
                       ("reference_system", "reference_system")):
        if own.get(dest) is not None:
            kwargs[attr] = own[dest]
    if own.get("no_scores"):
        kwargs["scores"] = ()
    elif own.get("score_field"):
        kwargs["scores"] = tuple(own["score_field"])
    if own.get("criterion"):
        kwargs["criteria"] = tuple(own["criterion"])
    return JudgmentMapping(**kwargs)


class Command(BaseCommand):
    help = "Import a dataset of captions and human judgments. Kinds: " + ", ".join(IMPORTERS)

    def add_arguments(self, parser):
        parser.add_argument("kind", help="dataset format: " + ", ".join(IMPORTERS))
        parser.add_argument("directory", help="folder holding the dataset's files (judgments: the file)")
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
        own = parser.add_argument_group("judgments (your own benchmark from one file)")
        for opt, default, what in JUDGMENT_FIELDS:
            own.add_argument(f"--{opt}", default=None, metavar="F", help=f"field of the {what} (default {default})")
        own.add_argument("--score-field", action="append", default=None, metavar="F",
                         help="a score field, one criterion each (repeat; default score)")
        own.add_argument("--no-scores", action="store_true", default=None, help="the rows have no scores (captions only)")
        own.add_argument("--criterion", action="append", default=None, metavar="NAME",
                         help="criterion name of each --score-field, in order (default the field names)")
        own.add_argument("--references-file", default=None, metavar="F",
                         help="COCO caption annotation JSON giving the references by image id")
        own.add_argument("--rows", default=None, choices=["mean", "ratings"],
                         help="correlation rows: the mean of each caption's ratings (default) or every rating")
        own.add_argument("--headline", default=None, choices=HEADLINES, help="headline statistic (default kendall_tau_c)")
        own.add_argument("--format", default=None, choices=sorted(set(FORMATS.values())),
                         help="file format (default: by extension)")
        own.add_argument("--human-system", default=None, metavar="NAME",
                         help="the system of human-written candidates (system-level reports also without it)")
        own.add_argument("--reference-system", default=None, metavar="NAME",
                         help="name of the references' system (default references)")
        own.add_argument("--published-as", default=None, choices=PUBLISHED_AS,
                         help="published values this dataset is compared with")

    def handle(self, *args, kind, directory, name, image_url="", images_dir="", **options):
        if kind not in IMPORTERS:
            raise CommandError(f"unknown dataset kind {shorten(kind)}; known kinds: {', '.join(IMPORTERS)}")
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", name):
            raise CommandError(f"invalid --name {shorten(name)}: use letters, digits, '-' and '_' (at most 100)")
        importer = IMPORTERS[kind]
        declared = _declared_options()
        given = {k: options[k] for k in declared if options.get(k) is not None}
        own = {k: options.get(k) for k in JUDGMENT_OPTIONS if options.get(k) is not None}
        if kind == "judgments":
            if given:
                raise CommandError(f"--{next(iter(given))} is not an option of kind 'judgments'")
            run = lambda: import_judgments(directory, name, judgment_mapping(own))  # noqa: E731
        else:
            if own:
                raise CommandError(f"--{next(iter(own)).replace('_', '-')} is an option of kind 'judgments' only, not of {kind!r}")
            run = lambda: importer(directory, name, **given)  # noqa: E731
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
            summary = run()
        except (DatasetFormatError, DatasetExistsError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
        dataset = Dataset.objects.get(name=name)
        if image_url or images_dir:
            source = images.set_source(dataset, image_url=image_url or None, images_dir=images_dir or None)
        else:
            source = images.default_source(dataset)
        if source is not None:
            self.stdout.write(f"image source: {source.describe()}")
