"""``manage.py export_dataset <name> --format jsonl|csv [--output FILE]``: write a rating dataset in
the format of ``import_dataset judgments`` (:mod:`crowd.dataset_export`) and print the
``import_dataset`` line that re-imports it (to stderr when the data go to stdout)."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from crowd.dataset_export import EXPORT_FORMATS, export_dataset, import_command
from crowd.importers.base import shorten
from crowd.models import Dataset


class Command(BaseCommand):
    help = "Export a rating dataset as a judgments file (JSON Lines or CSV) that import_dataset judgments reads back."

    def add_arguments(self, parser):
        parser.add_argument("name", help="dataset name")
        parser.add_argument("--format", required=True, choices=EXPORT_FORMATS, help="jsonl or csv")
        parser.add_argument("--output", default=None, metavar="FILE", help="file to write (default: stdout)")

    def handle(self, *args, name, format, output=None, **options):
        dataset = Dataset.objects.filter(name=name).first()
        if dataset is None:
            raise CommandError(f"unknown dataset {shorten(name)}")
        notes: list[str] = []
        if output:
            path = Path(output)
            if path.is_dir():
                raise CommandError(f"--output {shorten(output)} is a folder; give a file name")
            tmp = path.with_name(path.name + ".part")
            try:
                with tmp.open("w", encoding="utf-8", newline="") as handle:
                    mapping = export_dataset(dataset, format, handle, notes)
                tmp.replace(path)
            except ValueError as exc:
                tmp.unlink(missing_ok=True)
                raise CommandError(str(exc)) from None
            except OSError as exc:
                tmp.unlink(missing_ok=True)
                raise CommandError(f"cannot write {shorten(output)}: {exc.strerror}") from None
            info, target = self.stdout, str(path)
        else:
            try:
                mapping = export_dataset(dataset, format, self.stdout, notes)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            info, target = self.stderr, f"FILE.{format}"
        for note in notes:
            info.write(f"note: {note}")
        info.write("re-import with: " + import_command(name, target, mapping))
