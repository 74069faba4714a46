"""``manage.py correlate --dataset <name> [--metric M ...] [--json]``: metric-human correlations."""
import json

from django.core.management.base import BaseCommand, CommandError

from analysis.reports import DEFAULT_RESAMPLES, ReportError, correlation_report
from metrics.pipeline import PipelineError
from metrics.scorers.registry import METRICS


def format_table(report: dict) -> str:
    """Plain-text table: tau-c, tau-b, Pearson, Spearman (x 100) with 95% CIs, and per-image agreement."""
    head = (
        f"{report['dataset']}: {report['n_pairs']:,} pairs, {report['n_ratings']:,} ratings, "
        f"{report['n_images']:,} images; x100, 95% CI from {report['bootstrap']['n_resamples']} "
        f"bootstrap resamples of images"
    )
    cols = ("kendall_tau_c", "kendall_tau_b", "pearson", "spearman")
    lines = [head, f"{'metric':<9}" + "".join(f"{c:>22}" for c in ("tau-c", "tau-b", "Pearson", "Spearman")) + f"{'per-image rho':>15}"]

    def cell(m, stat):
        value, ci = m[stat], m["ci95"].get(stat)
        if value is None:
            return f"{'n/a':>22}"
        text = f"{100 * value:.1f}" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci and ci[0] is not None else "")
        return f"{text:>22}"

    for m in report["metrics"].values():
        rho = m["per_image"]["spearman"]
        lines.append(f"{m['name']:<9}" + "".join(cell(m, c) for c in cols) + f"{'n/a' if rho is None else f'{100 * rho:.1f}':>15}")
    return "\n".join(lines)


class Command(BaseCommand):
    help = "Correlate stored metric scores with the dataset's human judgments."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True)
        parser.add_argument(
            "--metric", nargs="+", action="extend", dest="metrics", metavar="M",
            help=f"metrics (default: every computed one): {', '.join(METRICS)}",
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples (0 = no CIs)")
        parser.add_argument("--cider-df", metavar="FILE", help="use the CIDEr-D run computed with this document-frequency table")
        parser.add_argument("--seed", type=int, default=0, help="bootstrap random seed")
        parser.add_argument(
            "--weighting", metavar="KIND:MEASURE",
            help="also report gap-weighted metrics (Kershaw & Bober 2019): gap:<measure> = M x Lexical Gap, "
            "ldr:<measure> = M x lexical diversity ratio; measures: ttr, root_ttr, log_ttr, hdd, mtld",
        )

    def handle(self, *args, dataset, metrics, resamples, seed, cider_df, weighting, **options):
        as_json = options["json"]
        if resamples < 0:
            raise CommandError("--resamples must be >= 0")
        try:
            report = correlation_report(
                dataset, metrics, n_resamples=resamples, seed=seed, cider_df=cider_df, weighting=weighting
            )
        except (PipelineError, ReportError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(json.dumps(report, indent=None) if as_json else format_table(report))


