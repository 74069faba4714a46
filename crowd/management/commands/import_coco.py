"""``manage.py import_coco --name NAME [--annotations F] [--results SYSTEM=F ...] [--objects F]``.

A dataset without an image source whose annotation file names a COCO split (``captions_val2014.json``)
gets the public COCO server for that split (:func:`crowd.images.default_source`)."""
import re
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from crowd import images
from crowd.importers import DatasetExistsError, DatasetFormatError
from crowd.importers.base import shorten
from crowd.importers.coco import import_coco, parse_system_file
from crowd.models import Dataset


class Command(BaseCommand):
    help = (
        "Import COCO-format caption sets: references from a COCO annotation JSON, systems' caption sets "
        "from COCO results JSON (several entries per image) or {image_id, captions: [...]} files, and "
        "object labels per image (CSV/JSON/COCO instances/POPE). Adds to an existing dataset."
    )

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True, help="dataset name (created if new)")
        parser.add_argument("--annotations", metavar="FILE", help="COCO caption annotation JSON: the references")
        parser.add_argument(
            "--results", metavar="SYSTEM=FILE", action="append", default=[],
            help="a system's caption sets (repeatable)",
        )
        parser.add_argument("--objects", metavar="FILE", help="object labels per image (for VIFIDEL)")
        parser.add_argument("--references-name", default="coco-references", help="name of the reference system")

    def handle(self, *args, name, annotations, results, objects, references_name, **options):
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", name):
            raise CommandError(f"invalid --name {shorten(name)}: use letters, digits, '-' and '_' (at most 100)")
        try:
            systems = [parse_system_file(spec) for spec in results]
            summary = import_coco(name, annotations, systems, objects, references_name=references_name)
        except (ValueError, DatasetFormatError, DatasetExistsError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
        # keys are COCO ids: the split comes from the annotation file's name (captions_val2014.json)
        source = images.default_source(Dataset.objects.get(name=name), hint=Path(annotations).name if annotations else "")
        if source is not None:
            self.stdout.write(f"image source: {source.describe()}")
