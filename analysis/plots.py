"""Server-side plots (matplotlib, Agg backend): no JavaScript library or CDN is needed to view them."""
from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


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
    lo = [v - (m["ci95"].get(statistic, [v, v])[0] or v) for v, m in zip(values, correlations.values())]
    hi = [(m["ci95"].get(statistic, [v, v])[1] or v) - v for v, m in zip(values, correlations.values())]
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
