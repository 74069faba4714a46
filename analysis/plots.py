"""Server-side plots (matplotlib, Agg backend): no JavaScript library or CDN is needed to view them.

Every label may be user text (system, metric and caption names), so the module turns mathtext and
TeX off for the whole process when it first loads matplotlib (:func:`pyplot`, before the first figure
is drawn): ``$x$`` or a lone ``$`` in a name is shown as typed instead of being parsed (a malformed
formula would make ``savefig`` raise). Process-wide on purpose: ``matplotlib.rc_context`` per call is
not thread-safe, and two charts drawn at once by a threaded server could leave the global setting in
either state. matplotlib itself loads on the first chart, not when the URLconf imports the views
(half a second of every process start: workers, management commands).
"""
from __future__ import annotations

import functools
import io
import threading

import numpy as np

#: the export formats of every figure, with their content types
FORMATS = {"png": "image/png", "svg": "image/svg+xml", "pdf": "application/pdf"}
#: the ten colours of matplotlib's ``tab10`` map (series colours of every chart)
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf")
_LOADING = threading.Lock()


@functools.cache
def pyplot():
    """``matplotlib.pyplot`` with the Agg backend and this module's process-wide settings (mathtext
    and TeX off, SVG text as paths), loaded once on first use (the lock: one thread imports)."""
    with _LOADING:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        matplotlib.rcParams.update({"text.parse_math": False, "text.usetex": False})
        # SVG text as paths: no font is needed to view it, and no user text ends up as SVG markup
        matplotlib.rcParams["svg.fonttype"] = "path"
        return plt


def save(fig, fmt: str = "png", **kwargs) -> bytes:
    """The figure as ``fmt`` bytes (one of :data:`FORMATS`; ValueError otherwise), then closed."""
    if fmt not in FORMATS:
        pyplot().close(fig)
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, **kwargs)
    pyplot().close(fig)
    return buf.getvalue()


def _legend_below(ax, fig=None, ncol: int = 1) -> None:
    """The legend under the plot area (outside the axes), never over the marks."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, frameon=False, ncol=ncol)


def scatter_figure(metric_values, human_values, metric_name: str, human_label: str, title: str = "",
                   fmt: str = "png", fit: dict | None = None, y_domain=None) -> bytes:
    """Scatter of per-caption metric score (x) against mean human rating (y), every caption drawn,
    with the least-squares line clipped to the data (:func:`analysis.charts.clipped_fit`: over
    the data's x range, inside its y range; computed here unless ``fit`` is given) and the y axis
    limited to the rating scale (``y_domain`` [lo, hi], default the data's range). Legend below.

    metric_values, human_values : 1-D arrays of equal length; fmt : "png", "svg" or "pdf".
    """
    from .charts import clipped_fit

    x, y = np.asarray(metric_values, float), np.asarray(human_values, float)
    fig, ax = pyplot().subplots(figsize=(4.6, 4.0), dpi=100)
    ax.scatter(x, y, s=8, alpha=0.35 if len(x) < 5000 else 0.12, color="#1f77b4", edgecolors="none")
    fit = fit if fit is not None else clipped_fit(x, y)
    if fit:
        ax.plot(fit["x"], fit["y"], color="#d62728", lw=2,
                label=f"least-squares fit over the data: y = {fit['slope']:.3g}x + {fit['intercept']:.3g}")
        _legend_below(ax)
    if y_domain is None and len(y):
        y_domain = [float(np.nanmin(y)), float(np.nanmax(y))]
    if y_domain and y_domain[1] > y_domain[0]:
        pad = 0.04 * (y_domain[1] - y_domain[0])
        ax.set_ylim(y_domain[0] - pad, y_domain[1] + pad)
    ax.set_xlabel(metric_name)
    ax.set_ylabel(human_label)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save(fig, fmt)


def scatter_png(metric_values, human_values, metric_name: str, human_label: str, title: str = "") -> bytes:
    """PNG of :func:`scatter_figure`."""
    return scatter_figure(metric_values, human_values, metric_name, human_label, title)


def correlation_bars_png(correlations: dict, ceiling: dict, title: str = "", statistic: str = "kendall_tau_b",
                         fmt: str = "png") -> bytes:
    """Bar chart of one statistic per metric, x100 as in the tables, with its 95% interval, and
    the human ceiling (split-half reliability) as a red line with its interval as a band only when
    the ceiling was computed in that same statistic (a Kendall tau-b ceiling is not drawn on a
    tau-c chart; the subtitle says so). Legend below the bars.

    correlations : {metric: {"name", statistic: float, "ci95": {statistic: [lo, hi]}}}
    ceiling : split-half dict (see captioneval.stats.split_half_reliability) or {}.
    """
    names = [m["name"] for m in correlations.values()]
    values = [100 * (m.get(statistic) or 0.0) for m in correlations.values()]
    lo, hi = [], []
    for v, m in zip(values, correlations.values()):
        # a percentile bootstrap interval need not contain the estimate: clip, never a negative error bar
        low, high = (m.get("ci95") or {}).get(statistic) or (None, None)
        lo.append(0.0 if low is None else max(0.0, v - 100 * low))
        hi.append(0.0 if high is None else max(0.0, 100 * high - v))
    fig, ax = pyplot().subplots(figsize=(max(3.5, 0.8 * len(names) + 1.5), 3.8), dpi=100)
    if names:
        ax.bar(names, values, yerr=[lo, hi], color="#2a7ae2", capsize=3)
    level = ceiling.get(statistic) if ceiling else None
    if level is not None:
        ci = (ceiling.get("ci") or {}).get(statistic)
        ax.axhline(100 * level, color="#d62728", lw=2, label=f"human ceiling (split-half {statistic.replace('_', ' ')}) {100 * level:.1f}")
        if ci and None not in ci:
            ax.axhspan(100 * ci[0], 100 * ci[1], color="#d62728", alpha=0.12)
        _legend_below(ax)
    elif ceiling:
        ax.annotate(f"no human ceiling in {statistic.replace('_', ' ')}", (0.5, 1.0), xycoords="axes fraction",
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="#d62728")
    ax.set_ylabel(statistic.replace("_", " ") + " (x100)")
    ax.axhline(0, color="#444", lw=0.8)
    if title:
        ax.set_title(title, fontsize=9, pad=12)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    return save(fig, fmt)


# --------------------------------------------------------------------------------------------
# Caption-set diversity (Wang & Chan 2019): the figures of the paper
# --------------------------------------------------------------------------------------------


def _png(fig, fmt: str = "png") -> bytes:
    fig.tight_layout()
    return save(fig, fmt)


def diversity_accuracy_png(points, diversity_name: str = "Self-CIDEr diversity", accuracy_name: str = "accuracy (CIDEr-D)", fmt: str = "png") -> bytes:
    """PNG scatter of diversity (x) against accuracy (y), one labelled point per system
    (Wang & Chan 2019, Fig. 4).

    points : sequence of (system name, diversity in [0, 1], accuracy >= 0); NaN points are skipped.
    """
    fig, ax = pyplot().subplots(figsize=(5.0, 3.8), dpi=100)
    for i, (name, div, acc) in enumerate(points):
        if div is None or acc is None or not (np.isfinite(div) and np.isfinite(acc)):
            continue
        ax.scatter([div], [acc], s=50, color=_COLOURS[i % 10], zorder=3)
        ax.annotate(name, (div, acc), textcoords="offset points", xytext=(5, 4), fontsize=8)
    ax.set_xlabel(diversity_name)
    ax.set_ylabel(accuracy_name)
    ax.set_title("diversity vs accuracy per system", fontsize=10)
    ax.grid(alpha=0.3)
    return _png(fig, fmt)


def f_score_bars_png(names, values, beta2: float, fmt: str = "png") -> bytes:
    """PNG bars of the F-score per system (Wang & Chan 2019, Sec. 5; beta^2 weights diversity).

    names : system names; values : F-scores (NaN drawn as 0 with no label).
    """
    vals = [0.0 if v is None or not np.isfinite(v) else float(v) for v in values]
    fig, ax = pyplot().subplots(figsize=(max(3.5, 0.8 * len(names) + 1.5), 3.4), dpi=100)
    bars = ax.bar(list(names), vals, color=[_COLOURS[i % 10] for i in range(len(vals))])
    for bar, v in zip(bars, values):
        if v is not None and np.isfinite(v):
            ax.annotate(f"{v:.3f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
    ax.set_ylabel(f"F-score (beta^2 = {beta2:g})")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig, fmt)


def _plain_log_ticks(ax) -> None:
    """Log-axis tick labels as plain numbers (1, 10, 100, 1,000): matplotlib's default log labels are
    mathtext (``$10^{3}$``), which this module turns off for user text (see the module docstring)."""
    import matplotlib.ticker as ticker  # loaded with pyplot()

    plain = ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(ticker.NullFormatter())


def vocabulary_png(curves) -> bytes:
    """PNG with two panels, one above the other (each readable at a phone's width): vocabulary size
    per system (bars) and word-frequency curves (frequency of the r-th most frequent word against r,
    log-log, plain-number ticks; Wang & Chan 2019, Figs. 2-3).

    curves : {system name: (vocabulary size, sorted word counts, most frequent first)}; the curve may
    be cut (the vocabulary run keeps 2,000 ranks), so the bars show the size, not the curve's length.
    """
    fig, (left, right) = pyplot().subplots(2, 1, figsize=(4.8, 6.6), dpi=100)
    names = list(curves)
    left.bar(names, [size for size, _ in curves.values()], color=[_COLOURS[i % 10] for i in range(len(names))])
    left.set_ylabel("vocabulary size (distinct words)")
    left.tick_params(axis="x", labelrotation=30, labelsize=8)
    for i, (name, (_, counts)) in enumerate(curves.items()):
        if len(counts):
            right.loglog(np.arange(1, len(counts) + 1), counts, label=name, color=_COLOURS[i % 10], lw=1.5)
    right.set_xlabel("word rank")
    right.set_ylabel("frequency")
    _plain_log_ticks(right)
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
    fig = pyplot().figure(figsize=(4.6, 4.0), dpi=100)
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
    pyplot().close(fig)
    return buf.getvalue()


def mds_png(coordinates, groups, title: str = "") -> bytes:
    """PNG map of captions in 2-D (multidimensional scaling of caption similarities; Wang & Chan
    2019, Fig. 9), coloured by system.

    coordinates : array (n captions, 2); groups : n system names.
    """
    xy = np.asarray(coordinates, float)
    fig, ax = pyplot().subplots(figsize=(5.0, 4.0), dpi=100)
    for i, name in enumerate(dict.fromkeys(groups)):
        idx = [j for j, g in enumerate(groups) if g == name]
        ax.scatter(xy[idx, 0], xy[idx, 1], s=30, color=_COLOURS[i % 10], label=name, alpha=0.8)
    ax.legend(fontsize=7, frameon=False)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)
    return _png(fig)


def benchmark_bars_png(entries: list[dict], statistic_label: str, ceiling: dict | None, title: str = "",
                       ceiling_note: str = "", chance: float | None = None, fmt: str = "png") -> bytes:
    """Bar chart of one benchmark: a metric per bar with its 95% bootstrap interval, bars labelled
    with their significance-cluster rank, the human ceiling as a red line with its interval as a
    band, and the chance level as a grey dashed line (50 on accuracy charts). The legend sits
    below the plot; ``ceiling_note`` (why there is no ceiling, or where it is drawn) below the title.

    entries : [{"name": str, "value": float | None, "ci95": [lo, hi], "rank": int | None}], in the
        unit of the chart (the caller passes x100 values: :func:`analysis.charts.bar_entries`).
    ceiling : {"value": float, "ci95": [lo, hi]} or None: pass it only for the chart of the
        ceiling's own statistic. chance : the chance level or None. fmt : "png", "svg" or "pdf".
    """
    names = [e["name"] for e in entries]
    values = [e["value"] if e["value"] is not None else 0.0 for e in entries]
    lo = [max(0.0, v - (e["ci95"][0] if e["ci95"][0] is not None else v)) for v, e in zip(values, entries)]
    hi = [max(0.0, (e["ci95"][1] if e["ci95"][1] is not None else v) - v) for v, e in zip(values, entries)]
    fig, ax = pyplot().subplots(figsize=(max(4.0, 0.75 * len(names) + 2.0), 4.0), dpi=100)
    if names:
        bars = ax.bar(names, values, yerr=[lo, hi], color="#2a7ae2", capsize=3)
        for bar, e in zip(bars, entries):
            if e.get("rank"):
                ax.annotate(f"#{e['rank']}", (bar.get_x() + bar.get_width() / 2, 0), xytext=(0, 3),
                            textcoords="offset points", ha="center", fontsize=7, color="white")
    if ceiling and ceiling.get("value") is not None:
        level = ceiling["value"]
        ax.axhline(level, color="#d62728", lw=2, label=ceiling.get("label") or f"human ceiling {level:.1f}")
        ci = ceiling.get("ci95") or [None, None]
        if None not in ci:
            ax.axhspan(ci[0], ci[1], color="#d62728", alpha=0.12)
    if chance is not None:
        ax.axhline(chance, color="#555", lw=1.5, ls="--", label=f"chance ({chance:g}%)")
    _legend_below(ax)
    ax.set_ylabel(statistic_label)
    ax.axhline(0, color="#444", lw=0.8)
    if title:
        ax.set_title(title, fontsize=9, pad=12 if ceiling_note else 6)
    if ceiling_note:
        # Said below the title, never over the bars: why there is no ceiling line, or where it is.
        ax.annotate(ceiling_note, (0.5, 1.0), xycoords="axes fraction", xytext=(0, 2),
                    textcoords="offset points", ha="center", va="bottom", fontsize=6.5, color="#d62728")
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    return save(fig, fmt)


def p_value_heatmap_png(names: list[str], p_values: list[list], alpha: float, title: str = "", fmt: str = "png") -> bytes:
    """PNG heat map of the pairwise significance matrix (row metric better than column metric):
    cells with p < alpha are dark; numbers printed in each cell. names in rank order."""
    n = len(names)
    p = np.array([[np.nan if v is None else float(v) for v in row] for row in p_values], dtype=float).reshape(n, n)
    fig, ax = pyplot().subplots(figsize=(max(3.5, 0.6 * n + 2), max(3.0, 0.5 * n + 1.5)), dpi=100)
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
    return save(fig, fmt)
