"""mBLEU diversity of a caption set (Shetty et al. 2017, ICCV; Wang & Chan 2019, CVPR),
:func:`captioneval.kernels.diversity.mbleu`: 1 - (1/m) sum_i BLEU-n(c_i, C minus c_i), each caption scored
against the others with pycocoevalcap's BLEU (Papineni et al. 2002); mBLEU-mix is 1 - the mean of
mBLEU-1..4."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.kernels.diversity import mbleu
from captioneval.metrics.builtin._versions import DIVERSITY_VERSION

ORDER = 70


class MBleu(base.Metric):
    """1 - mBLEU-``n`` (n = 1..4) or 1 - mBLEU-mix (``n = None``) of each caption set (fewer than 2
    captions: NaN); range [0, 1]."""

    version = DIVERSITY_VERSION
    level = "set"
    range = (0.0, 1.0)
    higher = "more diverse"
    needs = frozenset({base.CAPTION_SETS})
    family = "mbleu"
    groups = ("diversity",)

    def __init__(self, n: int | None):
        self.n = n
        if n is None:
            super().__init__(key="mbleu_mix", name="1 - mBLEU-mix", description="1 - mean of mBLEU-1..4 (Wang & Chan 2019).")
        else:
            super().__init__(
                key=f"mbleu_{n}", name=f"1 - mBLEU-{n}",
                description=f"mBLEU-{n} diversity 1 - (1/m) sum_i BLEU-{n}(c_i, C minus c_i) (Shetty et al. 2017; "
                "Wang & Chan 2019).",
            )

    def parameters(self) -> dict:
        return {"n": "mix" if self.n is None else self.n}

    def score(self, batch: base.Batch) -> base.Scores:
        """The diversity of ``batch.sets`` (first ``batch.m`` captions): float64 (n_sets,)."""
        column = 4 if self.n is None else self.n - 1
        return base.Scores(base.score_sets_of_two(self.sets_of(batch), lambda sets: mbleu(sets)[:, column]))


METRICS = [MBleu(n) for n in (1, 2, 3, 4, None)]
