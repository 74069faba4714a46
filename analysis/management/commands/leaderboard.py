"""``manage.py leaderboard --dataset NAME``: the system leaderboard of a dataset.

Every candidate system's corpus score per computed metric and mean per human criterion with 95%
bootstrap intervals over images and ranks, paired significance tests between systems (against
``--baseline`` or all pairs), significance clusters and system-level metric-human agreement
(:func:`analysis.leaderboard.leaderboard`). Computed here directly (not through Celery); a progress
line goes to stderr for each long step. ``--json`` prints the report; ``--format`` a table (default),
CSV (the systems, then a blank line and the paired comparisons) or a LaTeX table.
"""
import io
import json

from django.core.management.base import BaseCommand, CommandError

from analysis.leaderboard import (
    DEFAULT_ALPHA,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    DEFAULT_TEST,
    TESTS,
    LeaderboardError,
    comparison_csv_rows,
    leaderboard,
    leaderboard_csv_rows,
    leaderboard_latex,
    leaderboard_table,
)
from captioneval.utils import csvsafe

FORMATS = ("table", "csv", "latex", "json")


class Command(BaseCommand):
    help = (
        "System leaderboard of a dataset: corpus score of each computed metric and mean of each human criterion "
        "per system with 95% bootstrap intervals over images, ranks, paired bootstrap or approximate randomization "
        "tests between systems, significance clusters and system-level agreement with the humans."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="dataset name")
        parser.add_argument("--metric", action="append", default=[], metavar="M",
                            help="metric key (repeatable; default: every computed metric)")
        parser.add_argument("--criterion", action="append", default=[], metavar="C",
                            help="human criterion (repeatable; default: every judged criterion)")
        parser.add_argument("--baseline", metavar="SYSTEM", help="compare every system with this one (default: all pairs)")
        parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                            help=f"bootstrap resamples and randomization trials (default {DEFAULT_RESAMPLES})")
        parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
        parser.add_argument("--test", default=DEFAULT_TEST, help=f"paired test: {' or '.join(TESTS)} (default {DEFAULT_TEST})")
        parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help=f"significance level (default {DEFAULT_ALPHA})")
        parser.add_argument("--json", action="store_true", help="print the report as JSON (same as --format json)")
        parser.add_argument("--format", default=None, help=f"output: {', '.join(FORMATS)} (default table)")

    def handle(self, *args, dataset, metric, criterion, baseline, resamples, seed, test, alpha, json: bool, format,
               **options):
        fmt = "json" if json else (format or "table")
        if json and format not in (None, "json"):
            raise CommandError(f"--json and --format {format} disagree: give one of them")
        if fmt not in FORMATS:
            raise CommandError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        stderr = self.stderr

        def progress(message: str) -> None:
            stderr.write(f"leaderboard {dataset}: {message}")
            stderr.flush()

        try:
            report = leaderboard(dataset, metrics=metric or None, criteria=criterion or None, baseline=baseline,
                                 n_resamples=resamples, seed=seed, test=test, alpha=alpha, progress=progress)
        except LeaderboardError as exc:
            raise CommandError(str(exc)) from None
        if fmt == "json":
            self.stdout.write(_json_dumps(report))
        elif fmt == "table":
            self.stdout.write(leaderboard_table(report))
        elif fmt == "latex":
            self.stdout.write(leaderboard_latex(report), ending="")
        else:
            buffer = io.StringIO()
            writer = csvsafe.writer(buffer, lineterminator="\n")
            writer.writerows(leaderboard_csv_rows(report))
            if report["comparisons"]:
                buffer.write("\n")
                writer.writerows(comparison_csv_rows(report))
            self.stdout.write(buffer.getvalue(), ending="")


def _json_dumps(report: dict) -> str:
    """The report as indented JSON (a module function: ``json`` is an option name inside handle())."""
    return json.dumps(report, indent=2)

