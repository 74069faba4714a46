"""python manage.py placeholder_images DATASET DIR [--set-source] [--width 480 --height 320]

Write one labelled placeholder picture per image of DATASET into DIR (``DIR/<key>``, JPEG or PNG by
the key's extension, JPEG when it has none), for a demo or a trial run when the real pictures are
not at hand: each says "placeholder" and names its key, so nobody mistakes it for the photograph.
Flickr8k's photographs are not redistributable, so ``./run demo`` uses this for Flickr8k-Expert
unless ``FLICKR8K_IMAGES`` names a folder of the real ones. ``--set-source`` then makes DIR the
dataset's image source (``set_image_source DATASET --images-dir DIR``).

Keys that cannot name a file in a folder (:func:`crowd.images.check_key`) are refused before any
file is written; existing files are left as they are (a second run writes nothing new).
"""
from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from crowd import images
from crowd.models import Dataset

BACKGROUND, INK = (233, 236, 239), (73, 80, 87)


class Command(BaseCommand):
    help = "Write a labelled placeholder picture per image key of a dataset (demos without the real pictures)."

    def add_arguments(self, parser):
        parser.add_argument("dataset")
        parser.add_argument("dir")
        parser.add_argument("--set-source", action="store_true", help="make DIR the dataset's image source")
        parser.add_argument("--width", type=int, default=480)
        parser.add_argument("--height", type=int, default=320)

    def handle(self, *args, **o):
        from PIL import Image as Picture, ImageDraw, ImageFont

        try:
            dataset = Dataset.objects.get(name=o["dataset"])
        except Dataset.DoesNotExist:
            raise CommandError(f"no dataset named {o['dataset']!r}")
        if not (16 <= o["width"] <= 4000 and 16 <= o["height"] <= 4000):
            raise CommandError("--width and --height must be between 16 and 4000 pixels")
        keys = list(dataset.images.order_by("key").values_list("key", flat=True))
        try:
            for key in keys:
                images.check_key(key)
        except images.ImageSourceError as exc:
            raise CommandError(str(exc))
        root = Path(o["dir"]).resolve()
        root.mkdir(parents=True, exist_ok=True)
        size = max(10, o["width"] // 30)  # px: readable on a phone
        font = ImageFont.load_default(size=size)
        written = 0
        for key in keys:
            path = root / key
            if path.exists():
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            picture = Picture.new("RGB", (o["width"], o["height"]), BACKGROUND)
            draw = ImageDraw.Draw(picture)
            draw.rectangle([4, 4, o["width"] - 5, o["height"] - 5], outline=INK, width=2)
            draw.text((16, 16), f"placeholder for {dataset.name}", fill=INK, font=font)
            draw.text((16, 16 + 2 * size), f"image {key}", fill=INK, font=font)
            draw.text((16, o["height"] - 16 - 2 * size), "(the real picture is not bundled)", fill=INK, font=font)
            fmt = "PNG" if path.suffix.lower() == ".png" else "JPEG"
            tmp = path.with_name(path.name + ".part")
            picture.save(tmp, fmt)
            tmp.replace(path)  # whole or not at all
            written += 1
        self.stdout.write(f"{written:,} placeholder pictures written to {root} ({len(keys) - written:,} were there)")
        if o["set_source"]:
            try:
                images.set_source(dataset, images_dir=root)
            except images.ImageSourceError as exc:
                raise CommandError(str(exc))
            self.stdout.write(f"image source of {dataset.name}: the folder {root}")
