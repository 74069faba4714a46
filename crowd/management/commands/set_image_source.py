"""``python manage.py set_image_source DATASET (--image-url TEMPLATE | --images-dir DIR | --coco SPLIT | --uploads | --none)``

Gives a dataset its image source (:mod:`crowd.images`): an http(s) URL template with ``{key}``, the
public COCO server for a split (keys = COCO image ids), a local folder the platform serves, the pictures uploaded for it, or none. Without an option it
prints the current source. Errors are one line; nothing is changed on error.
"""
from django.core.management.base import BaseCommand, CommandError

from crowd import images
from crowd.models import Dataset


class Command(BaseCommand):
    help = ("Set where a dataset's pictures come from: --image-url TEMPLATE, --images-dir DIR, --coco SPLIT, "
            "--uploads or --none")

    def add_arguments(self, parser):
        parser.add_argument("dataset")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--image-url", default="", metavar="TEMPLATE",
                           help="http(s) URL with {key}, e.g. http://images.cocodataset.org/val2014/{key}")
        group.add_argument("--images-dir", default="", metavar="DIR", help="a local folder, file names = image keys")
        group.add_argument("--coco", default="", metavar="SPLIT",
                           help="the public COCO server, for COCO image ids: " + ", ".join(images.COCO_SPLITS))
        group.add_argument("--uploads", action="store_true", help="the pictures uploaded on the dataset's upload page")
        group.add_argument("--none", action="store_true", help="no pictures")

    def handle(self, *args, dataset, image_url, images_dir, coco, uploads, none, **options):
        ds = Dataset.objects.filter(name=dataset).first()
        if ds is None:
            known = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported"
            raise CommandError(f"unknown dataset {dataset[:100]!r} (datasets: {known})")
        if not (image_url or images_dir or coco or uploads or none):
            try:
                source = images.source_for(ds)
            except images.ImageSourceError as exc:
                raise CommandError(f"dataset {ds.name!r} has an invalid image source: {exc}") from None
            self.stdout.write(f"{ds.name}: {source.describe() if source else 'no image source'}")
            return
        try:
            source = images.set_source(ds, image_url=image_url or None, images_dir=images_dir or None,
                                       upload=uploads, none=none, coco=coco or None)
        except images.ImageSourceError as exc:
            raise CommandError(str(exc)) from None
        line = f"{ds.name}: {source.describe() if source else 'no image source'}"
        if source is not None and source.kind in (images.FOLDER, images.UPLOAD):
            n, first = images.missing_files(ds, ds.images.values_list("key", flat=True).iterator())
            if n:
                line += f" ({n:,} of {ds.images.count():,} pictures missing, e.g. {', '.join(first)})"
        self.stdout.write(line)
