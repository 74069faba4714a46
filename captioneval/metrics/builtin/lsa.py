"""LSA diversity of a caption set (Wang & Chan 2019, CVPR, Sec. 3.1),
:func:`captioneval.kernels.diversity.lsa_diversity`: the singular values of the set's word-count matrix
(stop words removed) give -log_m(r_1 / sum r_i), as in the authors' code
(https://github.com/qingzwang/DiversityMetrics)."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels.diversity import lsa_diversity
from captioneval.metrics.builtin._versions import DIVERSITY_VERSION

ORDER = 60


class LsaDiversity(base.Metric):
    """LSA diversity of each caption set (sets of fewer than 2 captions: NaN); range [0, 1]."""

    key = "lsa"
    name = "LSA diversity"
    version = DIVERSITY_VERSION
    level = "set"
    range = (0.0, 1.0)
    higher = "more diverse"
    needs = frozenset({base.CAPTION_SETS})
    family = "lsa"
    groups = ("diversity",)
    description = "LSA diversity (Wang & Chan 2019, Sec. 3.1): singular values of the word-count matrix."

    def score(self, batch: base.Batch) -> base.Scores:
        """LSA diversity of ``batch.sets`` (first ``batch.m`` captions): float64 (n_sets,)."""
        return base.Scores(base.score_sets_of_two(self.sets_of(batch), lsa_diversity))


METRICS = [LsaDiversity()]
