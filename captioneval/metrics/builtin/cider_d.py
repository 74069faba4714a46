"""CIDEr-D per caption (Vedantam, Zitnick & Parikh 2015, CVPR, Eq. 2-5), our vectorised implementation
(:func:`captioneval.kernels.cider.cider_d`), equal per caption to pycocoevalcap's ``Cider``
(https://github.com/tylin/coco-caption): TF-IDF n-gram vectors (n = 1..4), Gaussian length penalty
sigma = 6, clipping of candidate counts, x10. The document frequencies are a corpus statistic: the
pipeline passes the dataset-wide table (or a supplied one) so that chunks agree."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels.cider import cider_d
from captioneval.metrics.builtin._versions import CIDER_D_VERSION

ORDER = 40


class CiderD(base.Metric):
    """CIDEr-D of each candidate against its references; range [0, 10]."""

    key = "cider_d"
    name = "CIDEr-D"
    version = CIDER_D_VERSION
    level = "caption"
    range = (0.0, 10.0)
    needs = frozenset({base.REFERENCES, base.DOCUMENT_FREQUENCY})
    family = "cider"
    groups = ("coco",)
    description = ("CIDEr-D (Vedantam et al. 2015), our vectorised implementation, equal to pycocoevalcap's Cider "
                   "per caption.")

    def parameters(self) -> dict:
        return {"n": 4, "sigma": 6.0, "clipped": True, "scale": 10}

    def score(self, batch: base.Batch) -> base.Scores:
        """CIDEr-D of ``batch.candidates`` against ``batch.references`` with
        ``batch.document_frequency`` (None: computed from these references, the COCO default)."""
        return base.Scores(cider_d(batch.candidates, batch.references, df=batch.document_frequency))


METRICS = [CiderD()]
