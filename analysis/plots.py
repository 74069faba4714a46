"""Server-side plots (matplotlib, Agg backend): no JavaScript library or CDN is needed to view them.

Every label may be user text (system, metric and caption names), so the module turns mathtext and
TeX off for the whole process when it is imported: ``$x$`` or a lone ``$`` in a name is shown as
typed instead of being parsed (a malformed formula would make ``savefig`` raise). Process-wide on
purpose: ``matplotlib.rc_context`` per call is not thread-safe, and two charts drawn at once by a
threaded server could leave the global setting in either state.
"""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

matplotlib.rcParams.update({"text.parse_math": False, "text.usetex": False})


def scatter_png(metric_values, human_values, metric_name: str, human_label: str, title: str = "") -> bytes:
    """PNG scatter of per-caption metric score (x) against mean human rating (y) with the
    least-squares line y = a x + b (numpy.polyfit, degree 1).

    metric_values, human_values : 1-D arrays of equal length n >= 2.
    """
    x, y = np.asarray(metric_values, float), np.asarray(human_values, float)
    fig, ax = plt.subplots(figsize=(4.2, 3.4), dpi=100)
    ax.scatter(x, y, s=8, alpha=0.35, color="#1f77b4", edgecolors="none")
    if len(x) >= 2 and np.ptp(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
        xs = np.linspace(x.min(), x.max(), 50)
        ax.plot(xs, slope * xs + intercept, color="#d62728", lw=2, label=f"fit: y = {slope:.2f}x + {intercept:.2f}")
        ax.legend(loc="lower right", fontsize=8, frameon=False)
    ax.set_xlabel(metric_name)
    ax.set_ylabel(human_label)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def correlation_bars_png(correlations: dict, ceiling: dict, title: str = "", statistic: str = "kendall_tau_b") -> bytes:
    """PNG bar chart of one statistic per metric with its 95% interval, and the human ceiling
    (split-half reliability, same statistic when available, else Spearman-Brown Pearson) as a
    horizontal band: metrics cannot be expected to agree with people better than people agree
    with each other.

    correlations : {metric: {"name", statistic: float, "ci95": {statistic: [lo, hi]}}}
    ceiling : split-half dict (see analysis.statistics.split_half_reliability) or {}.
    """
    names = [m["name"] for m in correlations.values()]
    values = [m.get(statistic) or 0.0 for m in correlations.values()]
    lo, hi = [], []
    for v, m in zip(values, correlations.values()):
        # a percentile bootstrap interval need not contain the estimate: clip, never a negative error bar
        low, high = (m.get("ci95") or {}).get(statistic) or (None, None)
        lo.append(0.0 if low is None else max(0.0, v - low))
        hi.append(0.0 if high is None else max(0.0, high - v))
    fig, ax = plt.subplots(figsize=(max(3.5, 0.8 * len(names) + 1.5), 3.4), dpi=100)
    if names:
        ax.bar(names, values, yerr=[lo, hi], color="#2a7ae2", capsize=3)
    ceil_key = statistic if statistic in ("pearson", "spearman", "kendall_tau_b") else "kendall_tau_b"
    level = ceiling.get(ceil_key) if ceiling else None
    if level is not None:
        ci = (ceiling.get("ci") or {}).get(ceil_key)
        ax.axhline(level, color="#d62728", lw=2, label=f"human ceiling (split-half {ceil_key}) {level:.2f}")
        if ci and None not in ci:
            ax.axhspan(ci[0], ci[1], color="#d62728", alpha=0.12)
        ax.legend(loc="upper right", fontsize=7, frameon=False)
    ax.set_ylabel(statistic.replace("_", " "))
    ax.axhline(0, color="#444", lw=0.8)
    if title:
        ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# Caption-set diversity (Wang & Chan 2019): the figures of the paper
# --------------------------------------------------------------------------------------------
_COLOURS = plt.get_cmap("tab10").colors


def _png(fig) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def diversity_accuracy_png(points, diversity_name: str = "Self-CIDEr diversity", accuracy_name: str = "accuracy (CIDEr-D)") -> bytes:
    """PNG scatter of diversity (x) against accuracy (y), one labelled point per system
    (Wang & Chan 2019, Fig. 4).

    points : sequence of (system name, diversity in [0, 1], accuracy >= 0); NaN points are skipped.
    """
    fig, ax = plt.subplots(figsize=(5.0, 3.8), dpi=100)
    for i, (name, div, acc) in enumerate(points):
        if div is None or acc is None or not (np.isfinite(div) and np.isfinite(acc)):
            continue
        ax.scatter([div], [acc], s=50, color=_COLOURS[i % 10], zorder=3)
        ax.annotate(name, (div, acc), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel(diversity_name)
    ax.set_ylabel(accuracy_name)
    ax.set_title("diversity vs accuracy per system", fontsize=10)
    ax.grid(alpha=0.3)
    return _png(fig)


def f_score_bars_png(names, values, beta2: float) -> bytes:
    """PNG bars of the F-score per system (Wang & Chan 2019, Sec. 5; beta^2 weights diversity).

    names : system names; values : F-scores (NaN drawn as 0 with no label).
    """
    vals = [0.0 if v is None or not np.isfinite(v) else float(v) for v in values]
    fig, ax = plt.subplots(figsize=(max(3.5, 0.8 * len(names) + 1.5), 3.4), dpi=100)
    bars = ax.bar(list(names), vals, color=[_COLOURS[i % 10] for i in range(len(vals))])
    for bar, v in zip(bars, values):
        if v is not None and np.isfinite(v):
            ax.annotate(f"{v:.3f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel(f"F-score (beta^2 = {beta2:g})")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def vocabulary_png(curves) -> bytes:
    """PNG with two panels: vocabulary size per system (bars) and word-frequency curves (frequency of
    the r-th most frequent word against r, log-log; Wang & Chan 2019, Figs. 2-3).

    curves : {system name: sorted word counts, most frequent first}.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 3.6), dpi=100)
    names = list(curves)
    left.bar(names, [len(c) for c in curves.values()], color=[_COLOURS[i % 10] for i in range(len(names))])
    left.set_ylabel("vocabulary size (distinct words)")
    left.tick_params(axis="x", labelrotation=30, labelsize=8)
    for i, (name, counts) in enumerate(curves.items()):
        if len(counts):
            right.loglog(np.arange(1, len(counts) + 1), counts, label=name, color=_COLOURS[i % 10], lw=1.5)
    right.set_xlabel("word rank")
    right.set_ylabel("frequency")
    right.legend(fontsize=7, frameon=False)
    right.grid(alpha=0.3, which="both")
    return _png(fig)


def radar_png(coordinates, labels, title: str = "") -> bytes:
    """PNG radar chart: each caption (one polygon) on the k strongest latent semantics (axes)
    (Wang & Chan 2019, appendix visualisation).

    coordinates : array (m captions, k axes); labels : m short caption labels for the legend.
    """
    coords = np.asarray(coordinates, float)
    m, k = coords.shape
    angles = np.linspace(0, 2 * np.pi, k, endpoint=False)
    closed = np.concatenate([angles, angles[:1]])
    fig = plt.figure(figsize=(4.6, 4.0), dpi=100)
    ax = fig.add_subplot(111, projection="polar")
    for i in range(m):
        values = np.concatenate([coords[i], coords[i, :1]])
        ax.plot(closed, values, color=_COLOURS[i % 10], lw=1.3, label=labels[i][:40])
        ax.fill(closed, values, color=_COLOURS[i % 10], alpha=0.06)
    ax.set_xticks(angles)
    ax.set_xticklabels([f"s{j + 1}" for j in range(k)], fontsize=8)
    ax.tick_params(axis="y", labelsize=6)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=6, frameon=False)
    fig.subplots_adjust(right=0.6)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def mds_png(coordinates, groups, title: str = "") -> bytes:
    """PNG map of captions in 2-D (multidimensional scaling of caption similarities; Wang & Chan
    2019, Fig. 9), coloured by system.

    coordinates : array (n captions, 2); groups : n system names.
    """
    xy = np.asarray(coordinates, float)
    fig, ax = plt.subplots(figsize=(5.0, 4.0), dpi=100)
    for i, name in enumerate(dict.fromkeys(groups)):
        idx = [j for j, g in enumerate(groups) if g == name]
        ax.scatter(xy[idx, 0], xy[idx, 1], s=30, color=_COLOURS[i % 10], label=name, alpha=0.8)
    ax.legend(fontsize=7, frameon=False)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return _png(fig)


def benchmark_bars_png(entries: list[dict], statistic_label: str, ceiling: dict | None, title: str = "", ceiling_note: str = "") -> bytes:
    """PNG bar chart of one benchmark: a metric per bar with its 95% bootstrap interval, bars
    labelled with their significance-cluster rank, and the human ceiling as a red line with its
    interval as a band (people's agreement with each other bounds what a metric can reach).

    entries : [{"name": str, "value": float | None, "ci95": [lo, hi], "rank": int | None}]
    ceiling : {"value": float, "ci95": [lo, hi]} or None (then the chart says why: ``ceiling_note``).
    """
    names = [e["name"] for e in entries]
    values = [e["value"] if e["value"] is not None else 0.0 for e in entries]
    lo = [max(0.0, v - (e["ci95"][0] if e["ci95"][0] is not None else v)) for v, e in zip(values, entries)]
    hi = [max(0.0, (e["ci95"][1] if e["ci95"][1] is not None else v) - v) for v, e in zip(values, entries)]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.75 * len(names) + 2.0), 3.6), dpi=100)
    if names:
        bars = ax.bar(names, values, yerr=[lo, hi], color="#2a7ae2", capsize=3)
        for bar, e in zip(bars, entries):
            if e.get("rank"):
                ax.annotate(f"#{e['rank']}", (bar.get_x() + bar.get_width() / 2, 0), xytext=(0, 3),
                            textcoords="offset points", ha="center", fontsize=7, color="white")
    if ceiling and ceiling.get("value") is not None:
        level = ceiling["value"]
        ax.axhline(level, color="#d62728", lw=2, label=f"human ceiling {level:.3f}")
        ci = ceiling.get("ci95") or [None, None]
        if None not in ci:
            ax.axhspan(ci[0], ci[1], color="#d62728", alpha=0.12)
        ax.legend(loc="upper right", fontsize=7, frameon=False)
    ax.set_ylabel(statistic_label)
    ax.axhline(0, color="#444", lw=0.8)
    if title:
        ax.set_title(title, fontsize=9)
    if not (ceiling and ceiling.get("value") is not None) or ceiling_note:
        # Said below the title, never over the bars: why there is no ceiling line, or what it measures.
        ax.annotate(ceiling_note or "no human ceiling", (0.5, 1.0), xycoords="axes fraction", xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="#d62728")
        ax.set_title(title, fontsize=9, pad=12)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def p_value_heatmap_png(names: list[str], p_values: list[list], alpha: float, title: str = "") -> bytes:
    """PNG heat map of the pairwise significance matrix (row metric better than column metric):
    cells with p < alpha are dark; numbers printed in each cell. names in rank order."""
    n = len(names)
    p = np.array([[np.nan if v is None else float(v) for v in row] for row in p_values], dtype=float).reshape(n, n)
    fig, ax = plt.subplots(figsize=(max(3.5, 0.6 * n + 2), max(3.0, 0.5 * n + 1.5)), dpi=100)
    shown = np.where(np.isnan(p), 1.0, p)
    ax.imshow(shown < alpha, cmap="Blues", vmin=0, vmax=1.4)
    for i in range(n):
        for j in range(n):
            if not np.isnan(p[i, j]):
                ax.text(j, i, f"{p[i, j]:.3f}", ha="center", va="center", fontsize=7,
                        color="white" if p[i, j] < alpha else "#222")
    ax.set_xticks(range(n), names, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(n), names, fontsize=8)
    ax.set_title(title or f"p-value: row better than column (dark: p < {alpha})", fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()
