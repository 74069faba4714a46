"""Django-free statistics for comparing metric scores with human judgments.

Public API (see :mod:`analysis.statistics.correlation` for definitions and sources):

* :data:`STATISTICS` -- ``("pearson", "spearman", "kendall_tau_b", "kendall_tau_c")``
* :func:`correlation` -- one scipy.stats point estimate.
* :func:`correlate` / :class:`CorrelationResult` -- point estimates plus group (cluster)
  bootstrap percentile intervals.
* :func:`per_group_rank_agreement` / :class:`RankAgreement` -- average within-group Spearman and
  Kendall tau-b (Wang & Chan 2019, Table 2 "per-image").

This package must not import Django.
"""

from .correlation import (
    STATISTICS,
    CorrelationResult,
    RankAgreement,
    correlate,
    correlation,
    per_group_rank_agreement,
)

__all__ = [
    "STATISTICS",
    "CorrelationResult",
    "RankAgreement",
    "correlate",
    "correlation",
    "per_group_rank_agreement",
]
