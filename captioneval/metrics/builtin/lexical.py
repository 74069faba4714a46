"""Lexical diversity of a system's caption corpus with the lexical diversity ratio and the Lexical Gap
(Kershaw & Bober 2019, "The Lexical Gap: An Improved Measure of Automated Image Description
Quality", IWCS, Eqs. 1-2), :mod:`captioneval.kernels.lexical` on lexicalrichness 0.5.1
(https://github.com/LSYS/LexicalRichness): TTR, Root TTR (Guiraud), Log TTR (Herdan), HD-D (McCarthy &
Jarvis 2007, 42 draws) and MTLD (McCarthy & Jarvis 2010, threshold 0.72)."""
from __future__ import annotations

import numpy as np

from captioneval.metrics import base
from captioneval.kernels import lexical
from captioneval.metrics.builtin._versions import LEXICAL_VERSION

ORDER = 100
#: the measures, in table order (also :data:`captioneval.metrics.registry.LEXICAL_MEASURES`)
LEXICAL_MEASURES = ("ttr", "root_ttr", "log_ttr", "hdd", "mtld")


class LexicalDiversity(base.Metric):
    """Measure L of each system's corpus (NaN when too short: HD-D needs 42 tokens).

    ``Scores.details`` per system: ``{"reference": L(c_r), "ldr": l_d = L(c_m) / L(c_r),
    "lexical_gap": L_g}`` (Kershaw & Bober 2019, Eqs. 1-2, mu = 0.81, alpha = 5), None where undefined.
    L(c_r) is the mean of L over the reference corpora of one reference per image, so that it is
    measured on a corpus of the size of a one-caption-per-image system (TTR-type measures fall with
    corpus size)."""

    version = LEXICAL_VERSION
    level = "system"
    higher = "more diverse"
    needs = frozenset({base.REFERENCE_CORPORA})
    family = "lexical"
    groups = ("lexical",)

    def __init__(self, key: str, name: str, range: tuple[float, float]):
        super().__init__(
            key=key, name=name, range=range,
            description=f"{name} of the system's caption corpus (lexicalrichness), with the lexical diversity ratio "
            "l_d against the references and the Lexical Gap L_g (Kershaw & Bober 2019).",
        )

    def parameters(self) -> dict:
        params = {"mu": lexical.MU, "alpha": lexical.ALPHA}
        if self.key == "hdd":
            params["draws"] = lexical.HDD_DRAWS
        if self.key == "mtld":
            params["threshold"] = lexical.MTLD_THRESHOLD
        return params

    def score(self, batch: base.Batch) -> base.Scores:
        """L of each of ``batch.corpora``, with the ratio and gap against ``batch.reference_corpora``
        (None or empty: no ratio)."""
        refs = [list(c) for c in (batch.reference_corpora or []) if c]
        ref_values = [lexical.corpus_diversity(c, self.key) for c in refs]
        ref_values = [v for v in ref_values if np.isfinite(v)]
        ref_value = float(np.mean(ref_values)) if ref_values else float("nan")
        values, details = [], []
        for corpus in batch.corpora:
            value = lexical.corpus_diversity(list(corpus), self.key) if corpus else float("nan")
            ratio = value / ref_value if ref_value and np.isfinite(ref_value) and np.isfinite(value) else float("nan")
            gap = float(lexical.lexical_gap(ratio)) if np.isfinite(ratio) else float("nan")
            values.append(float(value))
            details.append({"reference": base.finite_or_none(ref_value), "ldr": base.finite_or_none(ratio),
                            "lexical_gap": base.finite_or_none(gap)})
        return base.Scores(np.asarray(values, dtype=np.float64), details=details)


METRICS = [
    LexicalDiversity(key, name, rng)
    for key, name, rng in [
        ("ttr", "TTR", (0.0, 1.0)), ("root_ttr", "Root TTR", (0.0, float("inf"))), ("log_ttr", "Log TTR", (0.0, 1.0)),
        ("hdd", "HD-D", (0.0, 1.0)), ("mtld", "MTLD", (0.0, float("inf"))),
    ]
]
assert tuple(m.key for m in METRICS) == LEXICAL_MEASURES
