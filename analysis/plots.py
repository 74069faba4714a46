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
