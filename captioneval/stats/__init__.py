"""Django-free statistics for comparing metric scores with human judgments.

Public API (see :mod:`captioneval.stats.correlation` and :mod:`captioneval.stats.agreement`
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

Meta-evaluation (:mod:`captioneval.stats.pairwise`, :mod:`captioneval.stats.significance`,
:mod:`captioneval.stats.ceiling`; definitions anchored on google-research/mt-metrics-eval):

* :data:`META_STATISTICS` -- STATISTICS plus ``"kendall_tau_23"`` and ``"pairwise_accuracy"``;
  :func:`statistic_value` -- any of them.
* :class:`Estimate` -- the one result type of an estimate with its interval (value, low, high,
  confidence_level, n, n_resamples, seed; ``to_json()``); every result with an interval exposes it
  as ``.estimate`` / ``.estimates``. Shared helpers: :func:`finite_or_none` (JSON-safe floats),
  :func:`percentile_interval`, :func:`bootstrap_mean`, :func:`forced_choice_credit`.
* :class:`AgreementReport` / :class:`MetricAgreement` / :func:`metric_agreement` -- the one
  structure (and ``to_json``) of a metric-human agreement report, shared by the dataset,
  benchmark and campaign reports.
* :data:`AVERAGE_BY` / :data:`AVERAGES` / :func:`average_statistic` -- any statistic at the level
  "none", "item" or "system" (mt-metrics-eval ``average_by``), groups averaged "macro", "micro"
  or "pooled_pairs".
* :func:`pair_counts` / :class:`PairCounts` -- C, D, Tx, Ty, Txy in O(n log n), optional
  within-group pairs and metric tie threshold epsilon.
* :func:`kendall_tau_23`, :func:`pairwise_accuracy` -- Deutsch et al. (2023) "Ties Matter".
* :func:`tie_calibrated_accuracy` / :class:`TieCalibration` -- acc_eq (tie calibration).
* :func:`forced_choice_accuracy` / :class:`ForcedChoiceResult` -- PASCAL-50S accuracy per category.
* :func:`permutation_test` / :class:`PermutationResult` -- paired permutation test (PERM-BOTH).
* :func:`williams_test` -- Williams (1959) test for dependent Pearson correlations.
* :func:`compare_metrics` / :class:`MetricComparison` / :func:`significance_clusters` -- pairwise
  tests among metrics and significance clusters (mt-metrics-eval AssignRanks).
* :func:`leave_one_rater_out`, :func:`split_half_ceiling`, :func:`forced_choice_ceiling` /
  :class:`CeilingResult` -- human ceilings with bootstrap intervals.
* :func:`system_level_correlation` / :class:`SystemLevelResult` -- per-system means correlated.
* :func:`per_group_correlation` / :class:`GroupMeanResult` -- mean within-group statistic + CI.

* :func:`compare_forced_choice` -- paired sign-flip permutation test between forced-choice
  accuracies on the same pairs, with significance clusters.

Systems (:mod:`captioneval.stats.systems`; sacrebleu 2.6.0 ``significance.py`` replicated):

* :class:`CorpusEstimate` / :func:`corpus_estimate` -- corpus score from per-unit sufficient
  statistics with a percentile bootstrap interval; :func:`mean_score_fn`.
* :class:`PairedTest` / :func:`paired_bootstrap` (Koehn 2004) / :func:`approximate_randomization`
  (Riezler & Maxwell 2005) / :func:`paired_test` -- paired significance between two systems.
* :func:`system_significance_clusters` (``systems.significance_clusters``) -- WMT-style clusters of
  systems; :func:`system_agreement` -- system-level Kendall tau-b and Pearson with a caveat.

This package must not import Django.
"""

from captioneval.stats.agreement import (
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
from captioneval.stats.correlation import (
    STATISTICS,
    CorrelationResult,
    RankAgreement,
    correlate,
    correlation,
    per_group_rank_agreement,
)
from captioneval.stats.ceiling import (
    CeilingResult,
    GroupMeanResult,
    SystemLevelResult,
    forced_choice_ceiling,
    leave_one_rater_out,
    per_group_correlation,
    split_half_ceiling,
    system_level_correlation,
)
from captioneval.stats.pairwise import (
    AVERAGE_BY,
    AVERAGES,
    META_STATISTICS,
    ForcedChoiceResult,
    PairCounts,
    TieCalibration,
    average_statistic,
    forced_choice_accuracy,
    kendall_tau_23,
    pair_counts,
    pairwise_accuracy,
    statistic_value,
    tie_calibrated_accuracy,
)
from captioneval.stats.report import AgreementReport, MetricAgreement, metric_agreement
from captioneval.stats.results import Estimate, bootstrap_mean, finite_or_none, forced_choice_credit, percentile_interval
from captioneval.stats.systems import (
    CorpusEstimate,
    PairedTest,
    approximate_randomization,
    corpus_estimate,
    mean_score_fn,
    paired_bootstrap,
    paired_test,
    system_agreement,
)
from captioneval.stats.systems import significance_clusters as system_significance_clusters
from captioneval.stats.significance import (
    MetricComparison,
    compare_forced_choice,
    PermutationResult,
    compare_metrics,
    permutation_test,
    significance_clusters,
    williams_test,
)

__all__ = [
    "AgreementReport",
    "MetricAgreement",
    "metric_agreement",
    "Estimate",
    "finite_or_none",
    "percentile_interval",
    "bootstrap_mean",
    "forced_choice_credit",
    "AVERAGE_BY",
    "AVERAGES",
    "average_statistic",
    "compare_forced_choice",
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
    "META_STATISTICS",
    "PairCounts",
    "pair_counts",
    "kendall_tau_23",
    "pairwise_accuracy",
    "statistic_value",
    "TieCalibration",
    "tie_calibrated_accuracy",
    "ForcedChoiceResult",
    "forced_choice_accuracy",
    "PermutationResult",
    "permutation_test",
    "williams_test",
    "MetricComparison",
    "compare_metrics",
    "significance_clusters",
    "CeilingResult",
    "leave_one_rater_out",
    "split_half_ceiling",
    "forced_choice_ceiling",
    "SystemLevelResult",
    "system_level_correlation",
    "GroupMeanResult",
    "per_group_correlation",
    "CorpusEstimate",
    "corpus_estimate",
    "mean_score_fn",
    "PairedTest",
    "paired_bootstrap",
    "approximate_randomization",
    "paired_test",
    "system_significance_clusters",
    "system_agreement",
]
