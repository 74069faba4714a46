"""Django-free statistics for comparing metric scores with human judgments.

Public API (see :mod:`analysis.statistics.correlation` and :mod:`analysis.statistics.agreement`
for definitions and sources):

* :data:`STATISTICS` -- ``("pearson", "spearman", "kendall_tau_b", "kendall_tau_c")``
* :func:`correlation` -- one scipy.stats point estimate.
* :func:`correlate` / :class:`CorrelationResult` -- point estimates plus group (cluster)
  bootstrap percentile intervals.
* :func:`per_group_rank_agreement` / :class:`RankAgreement` -- average within-group Spearman and
  Kendall tau-b (Wang & Chan 2019, Table 2 "per-image").
* :data:`ALPHA_LEVELS` -- ``("nominal", "ordinal", "interval", "ratio")``
* :func:`krippendorff_alpha` / :func:`krippendorff_alpha_from_triples` -- Krippendorff's alpha
  (coincidence-matrix formulation, Krippendorff 2011) from a (coders x units) matrix or from
  (unit, coder, value) triples, with missing values.
* :func:`split_half_reliability` / :class:`SplitHalfResult` -- per-item random split-half
  correlation of mean human scores with Spearman-Brown correction: the human ceiling.
* :func:`majority_vote` / :func:`majority_vote_shares` -- plurality label and vote shares per item.
* :func:`dawid_skene` / :class:`DawidSkeneResult` -- Dawid & Skene (1979) EM label aggregation
  with per-worker confusion matrices.

This package must not import Django.
"""

from .agreement import (
    ALPHA_LEVELS,
    DawidSkeneResult,
    SplitHalfResult,
    dawid_skene,
    krippendorff_alpha,
    krippendorff_alpha_from_triples,
    majority_vote,
    majority_vote_shares,
    split_half_reliability,
)
from .correlation import (
    STATISTICS,
    CorrelationResult,
    RankAgreement,
    correlate,
    correlation,
    per_group_rank_agreement,
)

__all__ = [
    "ALPHA_LEVELS",
    "DawidSkeneResult",
    "SplitHalfResult",
    "dawid_skene",
    "krippendorff_alpha",
    "krippendorff_alpha_from_triples",
    "majority_vote",
    "majority_vote_shares",
    "split_half_reliability",
    "STATISTICS",
    "CorrelationResult",
    "RankAgreement",
    "correlate",
    "correlation",
    "per_group_rank_agreement",
]
