"""Vocabulary size of a system's caption corpus with its word-frequency curve (Wang & Chan 2019,
CVPR, Figs. 2-3), :func:`captioneval.kernels.diversity.vocabulary`."""
from __future__ import annotations

import numpy as np

from captioneval.metrics import base
from captioneval.kernels.diversity import vocabulary
from captioneval.metrics.builtin._versions import DIVERSITY_VERSION

ORDER = 90
#: ranks of the word-frequency curve kept in the details
CURVE_RANKS = 2000
#: most frequent words kept in the details
TOP_WORDS = 20


class Vocabulary(base.Metric):
    """Distinct words of each system's corpus; range [0, inf).

    ``Scores.details`` per system: ``{"n_tokens": int, "frequencies": [word counts, most frequent first,
    at most 2,000 ranks], "top": [[word, count] x 20]}`` (ties broken alphabetically)."""

    key = "vocabulary"
    name = "Vocabulary size"
    version = DIVERSITY_VERSION
    level = "system"
    range = (0.0, float("inf"))
    higher = "more diverse"
    needs = frozenset()
    family = "vocabulary"
    groups = ("diversity",)
    description = "Distinct words in a system's captions, with its word-frequency curve (Wang & Chan 2019, Figs. 2-3)."

    def score(self, batch: base.Batch) -> base.Scores:
        """Vocabulary size of each of ``batch.corpora``, with the details above."""
        values, details = [], []
        for corpus in batch.corpora:
            size, counts = vocabulary(corpus)
            ranked = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
            values.append(float(size))
            details.append({
                "n_tokens": int(sum(counts.values())),
                "frequencies": [c for _, c in ranked[:CURVE_RANKS]],
                "top": [[w, c] for w, c in ranked[:TOP_WORDS]],
            })
        return base.Scores(np.asarray(values, dtype=np.float64), details=details)


METRICS = [Vocabulary()]
