"""Self-CIDEr diversity of a caption set (Wang & Chan 2019, "Describing like Humans: on Diversity in
Image Captioning", CVPR, Eq. 5-7), :func:`captioneval.kernels.diversity.self_cider`.

The set's CIDEr-D kernel matrix K (Vedantam et al. 2015) is decomposed; with the singular values
r_1 >= ... >= r_m of K, the diversity is -log_m(r_1 / sum r_i), in [0, 1]. Checked against the
authors' code (https://github.com/qingzwang/DiversityMetrics). The document frequencies are a corpus
statistic: by default one document per image's reference set of the dataset.
"""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels.diversity import self_cider
from captioneval.metrics.builtin._versions import DIVERSITY_VERSION

ORDER = 50


class SelfCider(base.Metric):
    """Self-CIDEr of each caption set (sets of fewer than 2 captions: NaN); range [0, 1]."""

    key = "self_cider"
    name = "Self-CIDEr"
    version = DIVERSITY_VERSION
    level = "set"
    range = (0.0, 1.0)
    higher = "more diverse"
    needs = frozenset({base.CAPTION_SETS, base.DOCUMENT_FREQUENCY})
    family = "self_cider"
    groups = ("diversity",)
    description = ("Self-CIDEr diversity of a caption set (Wang & Chan, CVPR 2019, Eq. 5-7): kernelised LSA over the "
                   "CIDEr-D kernel, -log(r)/log(m).")

    def parameters(self) -> dict:
        return {"kernel": "cider-d", "n": 4, "sigma": 6.0}

    def score(self, batch: base.Batch) -> base.Scores:
        """Self-CIDEr of ``batch.sets`` (first ``batch.m`` captions) with ``batch.document_frequency``.
        Raises ValueError without a document-frequency table."""
        if batch.document_frequency is None:
            raise ValueError("Self-CIDEr needs a document-frequency table")
        df = batch.document_frequency
        return base.Scores(base.score_sets_of_two(self.sets_of(batch), lambda sets: self_cider(sets, df)))


METRICS = [SelfCider()]
