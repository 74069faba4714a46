"""``manage.py import_dataset <kind> <dir> --name <name>``: import a human-judgment dataset."""
import re

from django.core.management.base import BaseCommand, CommandError

from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError


class Command(BaseCommand):
    help = "Import a dataset of captions and human judgments. Kinds: " + ", ".join(IMPORTERS)

    def add_arguments(self, parser):
        parser.add_argument("kind", help="dataset format: " + ", ".join(IMPORTERS))
        parser.add_argument("directory", help="folder holding the dataset's files")
        parser.add_argument("--name", required=True, help="name of the dataset in this platform")

    def handle(self, *args, kind, directory, name, **options):
        if kind not in IMPORTERS:
            raise CommandError(f"unknown dataset kind {kind!r}; known kinds: {', '.join(IMPORTERS)}")
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", name):
            raise CommandError(f"invalid --name {name!r}: use letters, digits, '-' and '_' (at most 100)")
        try:
            summary = IMPORTERS[kind](directory, name)
        except (DatasetFormatError, DatasetExistsError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
