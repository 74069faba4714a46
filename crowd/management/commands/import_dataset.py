"""``manage.py import_dataset <kind> <dir> --name <name> [--references N] [--seed S]``: import a
human-judgment dataset (``--references``/``--seed`` only for kinds that sample references)."""
import re

from django.core.management.base import BaseCommand, CommandError

from crowd.importers import IMPORTER_OPTIONS, IMPORTERS, DatasetExistsError, DatasetFormatError


class Command(BaseCommand):
    help = "Import a dataset of captions and human judgments. Kinds: " + ", ".join(IMPORTERS)

    def add_arguments(self, parser):
        parser.add_argument("kind", help="dataset format: " + ", ".join(IMPORTERS))
        parser.add_argument("directory", help="folder holding the dataset's files")
        parser.add_argument("--name", required=True, help="name of the dataset in this platform")
        with_options = ", ".join(k for k, opts in IMPORTER_OPTIONS.items() if "references" in opts)
        parser.add_argument(
            "--references", type=int, default=None, metavar="N",
            help=f"references sampled per image ({with_options} only; default 5)",
        )
        parser.add_argument(
            "--seed", type=int, default=None, metavar="S",
            help=f"seed of the reference sampling ({with_options} only; default 0)",
        )

    def handle(self, *args, kind, directory, name, references=None, seed=None, **options):
        if kind not in IMPORTERS:
            raise CommandError(f"unknown dataset kind {kind!r}; known kinds: {', '.join(IMPORTERS)}")
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", name):
            raise CommandError(f"invalid --name {name!r}: use letters, digits, '-' and '_' (at most 100)")
        given = {k: v for k, v in (("references", references), ("seed", seed)) if v is not None}
        supported = IMPORTER_OPTIONS.get(kind, ())
        unsupported = [k for k in given if k not in supported]
        if unsupported:
            raise CommandError(f"--{unsupported[0]} is not an option of kind {kind!r} (it does not sample references)")
        if "references" in given and given["references"] < 1:
            raise CommandError(f"--references must be at least 1, got {given['references']}")
        try:
            summary = IMPORTERS[kind](directory, name, **given)
        except (DatasetFormatError, DatasetExistsError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
