"""``manage.py correlate``: how well metrics agree with a benchmark's human judgments.

Default: a readable table of the item-level statistics with 95% intervals, pairwise accuracy and
significance clusters (the benchmark report, :func:`analysis.benchmarks.benchmark_report`).
``--level``, ``--statistic`` and ``--format table|json|csv|latex`` choose what is computed and how it
is printed; ``--compare`` prints the matrix of every metric on every benchmark. ``--json`` keeps the
earlier item-level report (:func:`analysis.reports.correlation_report`) for scripts that parse it.
"""
import io
import json

from django.core.management.base import BaseCommand, CommandError

from analysis.benchmarks import (
    DEFAULT_ALPHA,
    DEFAULT_PERMUTATIONS,
    LABELS,
    LEVELS,
    benchmark_report,
    column_title,
    comparison,
    comparison_csv_rows,
    comparison_latex,
)
from analysis.reports import DEFAULT_RESAMPLES, ReportError, correlation_report
from captioneval.stats import STATISTICS
from crowd.models import Dataset
from captioneval.utils import csvsafe
from metrics.pipeline import PipelineError
from captioneval.metrics.registry import METRICS

FORMATS = ("table", "json", "csv", "latex")


def _x100(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}"


def _cell(value, ci) -> str:
    text = _x100(value)
    if ci and ci[0] is not None and value is not None:
        text += f" [{_x100(ci[0])}, {_x100(ci[1])}]"
    return text


def format_table(report: dict) -> str:
    """Plain-text table of the item-level report of earlier versions (kept for ``--json`` users
    who also want text): tau-c, tau-b, Pearson, Spearman (x 100) with 95% CIs, per-image rho."""
    head = (
        f"{report['dataset']}: {report['n_pairs']:,} pairs, {report['n_ratings']:,} ratings, "
        f"{report['n_images']:,} images; x100, 95% CI from {report['bootstrap']['n_resamples']} "
        f"bootstrap resamples of images"
    )
    cols = ("kendall_tau_c", "kendall_tau_b", "pearson", "spearman")
    lines = [head, f"{'metric':<9}" + "".join(f"{c:>22}" for c in ("tau-c", "tau-b", "Pearson", "Spearman")) + f"{'per-image rho':>15}"]
    for m in report["metrics"].values():
        rho = m["per_image"]["spearman"]
        lines.append(f"{m['name']:<9}" + "".join(f"{_cell(m[c], m['ci95'].get(c)):>22}" for c in cols) + f"{_x100(rho):>15}")
    return "\n".join(lines)


def _rows_of(report: dict) -> list[tuple[str, list[str]]]:
    """(section title, table lines) for each level of a benchmark report."""
    ranks = (report.get("significance", {}).get("permutation") or {}).get("ranks", {})
    width = max([len(m["name"]) for m in report["metrics"].values()] + [12]) + 2
    out = []
    if report["task"] == Dataset.TASK_FORCED_CHOICE:
        cats = report["protocol"].get("categories") or []
        lines = [f"{'metric':<{width}}{'rank':>5}{'all':>20}" + "".join(f"{c:>20}" for c in cats)]
        for key, m in report["metrics"].items():
            lines.append(f"{m['name']:<{width}}{ranks.get(key, ''):>5}{_cell(m['accuracy'], m['ci95']):>20}" + "".join(
                f"{_cell(m['per_category'].get(c, {}).get('accuracy'), m['per_category'].get(c, {}).get('ci95')):>20}" for c in cats))
        return [("forced-choice accuracy (x100, 95% CI over pairs)", lines)]
    stats = report["settings"]["statistics"]
    for level in report["settings"]["levels"]:
        lines = [f"{'metric':<{width}}" + (f"{'rank':>5}" if level == "item" else "")
                 + "".join(f"{LABELS[s]:>22}" for s in stats)
                 + ("".join(f"{h:>10}" for h in ("tau_23", "acc_23", "acc_eq")) if level == "item" else "")]
        problem = None
        for key, m in report["metrics"].items():
            block = m.get(level, {})
            if "error" in block:
                problem = block["error"]
                continue
            line = f"{m['name']:<{width}}" + (f"{ranks.get(key, ''):>5}" if level == "item" else "")
            line += "".join(f"{_cell(block['values'].get(s), block['ci95'].get(s)):>22}" for s in stats)
            if level == "item":
                pw = block["pairwise"]
                line += "".join(f"{_x100(pw[k]):>10}" for k in ("kendall_tau_23", "pairwise_accuracy", "acc_eq"))
            lines.append(line)
        title = {"item": "item level (pooled rows)", "image": "per image (averaged within-image agreement)",
                 "system": "system level (system means)"}[level]
        out.append((title, [problem] if problem and len(lines) == 1 else lines))
    return out


def format_benchmark(report: dict) -> str:
    """The readable default output of ``correlate``."""
    s = report["settings"]
    if report["task"] == Dataset.TASK_FORCED_CHOICE:
        c = report["counts"]
        head = f"{report['dataset']} (forced choice): {c['pairs']:,} pairs, {c['votes']:,} votes, {c['tied_pairs']} tied pairs left out"
    else:
        c = report["counts"]
        head = (f"{report['dataset']} ({report['criterion']}): {c['rows']:,} rows "
                f"({'caption means' if report['protocol']['rows'] == 'mean' else 'one per rating'}), {c['captions']:,} captions, "
                f"{c['images']:,} images, {c['systems']} system(s); headline {LABELS[report['headline']]}")
    lines = [head, f"x100; 95% CI from {s['n_resamples']} bootstrap resamples of {s['bootstrap_unit']}s (seed {s['seed']}); "
             f"ranks: significance clusters, paired permutation test ({s['n_permutations']} permutations, alpha {s['alpha']})"]
    for title, rows in _rows_of(report):
        lines += ["", title, *rows]
    ceiling = report["ceiling"]["item"]
    lines.append("")
    if "error" in ceiling:
        lines.append(f"human ceiling: {ceiling['error']}")
    else:
        lines.append(f"human ceiling ({ceiling['method']}, {LABELS.get(ceiling['statistic'], ceiling['statistic'])}): "
                     f"{_cell(ceiling['value'], ceiling['ci95'])}")
    return "\n".join(lines)


def format_comparison(matrix: dict) -> str:
    """The comparison matrix as text: metrics x benchmarks, value^rank (x100)."""
    cols = matrix["columns"]
    width = max([len(r["name"]) for r in matrix["rows"]] + [14]) + 2
    lines = [f"{'metric':<{width}}" + "".join(f"{column_title(c)[:18]:>20}" for c in cols),
             f"{'':<{width}}" + "".join(f"{LABELS.get(c['statistic'], c['statistic'])[:18]:>20}" for c in cols)]
    for r in matrix["rows"]:
        cells = []
        for c in cols:
            cell = r["cells"].get(c["id"])
            text = "-" if not cell or cell["value"] is None else _x100(cell["value"]) + (f" ({cell['rank']})" if cell.get("rank") else "")
            cells.append(f"{text:>20}")
        lines.append(f"{r['name']:<{width}}" + "".join(cells))
    lines.append(f"{'Human ceiling':<{width}}" + "".join(f"{_x100(c['ceiling']['value']) if c['ceiling'] else '-':>20}" for c in cols))
    for s in matrix["skipped"]:
        lines.append(f"skipped {s['dataset']}: {s['reason']}")
    return "\n".join(lines)


def _csv(rows) -> str:
    """CSV text of ``rows`` (None as empty; formula-like text neutralised, numbers unchanged)."""
    buf = io.StringIO()
    writer = csvsafe.writer(buf)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def benchmark_csv_rows(report: dict):
    """Long-format rows (header first) of a benchmark report: metric, level, statistic, value, CI."""
    yield ["dataset", "criterion", "metric", "name", "level", "statistic", "value", "ci95_lo", "ci95_hi", "rank"]
    ranks = (report.get("significance", {}).get("permutation") or {}).get("ranks", {})
    for key, m in report["metrics"].items():
        if report["task"] == Dataset.TASK_FORCED_CHOICE:
            yield [report["dataset"], "", key, m["name"], "item", "accuracy", m["accuracy"], *m["ci95"], ranks.get(key)]
            for cat, a in m["per_category"].items():
                yield [report["dataset"], "", key, m["name"], "item", f"accuracy_{cat}", a["accuracy"], *a["ci95"], ""]
            continue
        for level in report["settings"]["levels"]:
            block = m.get(level, {})
            for stat, value in block.get("values", {}).items():
                yield [report["dataset"], report["criterion"], key, m["name"], level, stat, value, *block["ci95"].get(stat, [None, None]),
                       ranks.get(key) if level == "item" and stat == report["headline"] else ""]
            for stat, value in block.get("pairwise", {}).items():
                yield [report["dataset"], report["criterion"], key, m["name"], level, stat, value, None, None, ""]


class Command(BaseCommand):
    help = ("Correlate stored metric scores with a benchmark's human judgments (levels, statistics, "
            "significance clusters, human ceiling), or compare every metric across benchmarks (--compare).")

    def add_arguments(self, parser):
        parser.add_argument("--dataset", nargs="+", action="extend", dest="datasets", metavar="NAME",
                            help="benchmark dataset(s); with --compare, default every dataset")
        parser.add_argument("--metric", nargs="+", action="extend", dest="metrics", metavar="M",
                            help=f"metrics (default: every computed one): {', '.join(METRICS)}")
        parser.add_argument("--criterion", help="judged criterion (default the dataset's main one; THumB: precision, recall)")
        parser.add_argument("--level", nargs="+", action="extend", dest="levels", choices=LEVELS,
                            help="item (all rows pooled, mt-metrics-eval average_by=none), image (per-image average, "
                                 "average_by=item), system (correlation of system means); default all")
        parser.add_argument("--statistic", nargs="+", action="extend", dest="statistics", choices=STATISTICS,
                            help="correlation statistics (default all four; tau_23, acc_23 and acc_eq are always reported)")
        parser.add_argument("--format", choices=FORMATS, default="table", help="output: table (default), json, csv, latex (--compare)")
        parser.add_argument("--compare", action="store_true", help="every metric on every benchmark (the comparison matrix)")
        parser.add_argument("--out", metavar="FILE", help="write the output to FILE instead of printing it")
        parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples (0 = no CIs)")
        parser.add_argument("--permutations", type=int, default=DEFAULT_PERMUTATIONS, help="permutation-test draws (0 = no significance)")
        parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level of the clusters")
        parser.add_argument("--seed", type=int, default=0, help="random seed of the bootstrap and permutation draws")
        parser.add_argument("--cider-df", metavar="FILE", help="use the CIDEr-D run computed with this document-frequency table")
        parser.add_argument("--json", action="store_true", help="print the earlier item-level report as one JSON object")
        parser.add_argument(
            "--weighting", metavar="KIND:MEASURE",
            help="with --json or the earlier report: gap-weighted metrics (Kershaw & Bober 2019): gap:<measure> = M x "
            "Lexical Gap, ldr:<measure> = M x lexical diversity ratio; measures: ttr, root_ttr, log_ttr, hdd, mtld",
        )

    def handle(self, *args, datasets, metrics, criterion, levels, statistics, resamples, permutations, alpha, seed,
               cider_df, weighting, compare, out, **options):
        fmt = options["format"]
        if resamples < 0 or permutations < 0:
            raise CommandError("--resamples and --permutations must be >= 0")
        try:
            if compare:
                matrix = comparison(datasets, metrics, n_resamples=resamples, seed=seed, n_permutations=permutations, alpha=alpha)
                text = {"table": format_comparison, "json": lambda m: json.dumps(m, indent=2),
                        "csv": lambda m: _csv(comparison_csv_rows(m)), "latex": comparison_latex}[fmt](matrix)
            else:
                if not datasets or len(datasets) != 1:
                    raise CommandError("name one --dataset (or use --compare for several)")
                dataset = datasets[0]
                if options["json"] or weighting:
                    report = correlation_report(dataset, metrics, n_resamples=resamples, seed=seed, cider_df=cider_df,
                                                weighting=weighting, criterion=criterion)
                    text = json.dumps(report, indent=None) if options["json"] else format_table(report)
                else:
                    if fmt == "latex":
                        raise CommandError("--format latex is for the comparison matrix: add --compare")
                    report = benchmark_report(dataset, metrics, criterion=criterion, levels=levels, statistics=statistics,
                                              n_resamples=resamples, seed=seed, n_permutations=permutations, alpha=alpha,
                                              cider_df=cider_df)
                    text = {"table": format_benchmark, "json": lambda r: json.dumps(r, indent=2),
                            "csv": lambda r: _csv(benchmark_csv_rows(r))}[fmt](report)
        except (PipelineError, ReportError) as exc:
            raise CommandError(str(exc)) from None
        if out:
            with open(out, "w", encoding="utf-8") as fh:
                fh.write(text if text.endswith("\n") else text + "\n")
            self.stdout.write(f"wrote {out}")
        else:
            self.stdout.write(text)
