"""``manage.py upload_scores --dataset D --name "My Metric" --file scores.csv [--higher worse] [--no-replace]``.

Stores a researcher's own per-caption scores (CSV ``image,caption,score`` or ``caption_id,score``)
as the metric ``user_my_metric`` of the dataset, so that correlation reports include it like the
built-in metrics. See :mod:`metrics.uploads` for the format, validation and replacement rules.
"""
from django.core.management.base import BaseCommand, CommandError

from metrics.uploads import DIRECTIONS, UploadError, upload_scores


class Command(BaseCommand):
    help = "Upload per-caption scores of your own metric (CSV) for a dataset's correlation reports."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="dataset name")
        parser.add_argument("--name", required=True, help='metric name, e.g. "My Metric" (key: user_my_metric)')
        parser.add_argument(
            "--file", required=True, metavar="CSV",
            help="UTF-8 CSV with a header: image,caption,score (Image.key, Caption.key; add system when caption "
            "keys repeat across systems) or caption_id,score",
        )
        parser.add_argument(
            "--higher", choices=DIRECTIONS, default="better",
            help="what a higher score means (default: better); scores are stored as given",
        )
        parser.add_argument(
            "--no-replace", action="store_true",
            help="refuse instead of replacing an existing upload of the same name on this dataset",
        )

    def handle(self, *args, dataset, name, file, higher, no_replace, **options):
        try:
            summary = upload_scores(dataset, file, name, higher=higher, replace=not no_replace)
        except UploadError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(summary))
        if summary.changed:
            self.stdout.write(f"every judged candidate caption has a score ({summary.n_judged:,})")
