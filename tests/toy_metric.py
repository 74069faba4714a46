"""A toy caption metric, written exactly like a file of ``captioneval/metrics/builtin/`` (the worked example
of docs/architecture.md, "Adding a metric"): word precision, the fraction of a candidate's words
that occur in at least one of its references (the unigram precision of BLEU-1 without clipping or
brevity penalty, Papineni et al. 2002, Sec. 2.1).

To ship it with the platform this file would go to ``captioneval/metrics/builtin/word_precision.py``
unchanged (discovered automatically); a project keeping it in its own code calls
``captioneval.metrics.registry.register_module("tests.toy_metric")``; another distribution would declare
the entry point ``word_precision = "its_module:WORD_PRECISION"`` in the group ``captioneval.metrics``.
tests/test_metric_plugin_point.py does all three.
"""
from __future__ import annotations

import numpy as np

from captioneval.metrics import base

#: place among the other metric files (after the built-ins, whose ORDER goes up to 110)
ORDER = 500


class WordPrecision(base.Metric):
    """Per candidate: (number of its words found in any reference) / (number of its words), in [0, 1];
    0 for an empty candidate."""

    key = "word_precision"
    name = "Word precision"
    version = "toy-word-precision/1"
    level = "caption"
    range = (0.0, 1.0)
    higher = "better"
    needs = frozenset({base.REFERENCES})
    description = "Fraction of the caption's words that occur in a reference (unigram precision, no clipping)."

    def score(self, batch: base.Batch) -> base.Scores:
        """Word precision of each of ``batch.candidates`` against its ``batch.references``
        (PTB-tokenised, space-separated): float64 (n,)."""
        out = np.zeros(len(batch.candidates))
        for i, (candidate, references) in enumerate(zip(batch.candidates, batch.references)):
            words = candidate.split()
            vocabulary = {w for r in references for w in r.split()}
            if words:
                out[i] = sum(w in vocabulary for w in words) / len(words)
        return base.Scores(out)


WORD_PRECISION = WordPrecision()
METRICS = [WORD_PRECISION]
