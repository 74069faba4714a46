"""An example captioneval metric plugin: word-overlap F1 (used by tests/test_user_metrics.py).

The distribution registers :data:`WORD_F1` under the entry-point group ``captioneval.metrics`` (see
``captioneval_example_metric-0.1.dist-info/entry_points.txt``; a real package declares it in its
``pyproject.toml``: ``[project.entry-points."captioneval.metrics"] word_f1 =
"captioneval_example_metric:WORD_F1"``).
"""
from collections import Counter

from captioneval.metrics.plugins import PluginMetric


def unigram_f1(candidate: str, reference: str) -> float:
    """F1 of clipped unigram matches between two tokenised captions, in [0, 1]; 0 when either is empty."""
    c, r = Counter(candidate.split()), Counter(reference.split())
    overlap = sum((c & r).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / sum(c.values()), overlap / sum(r.values())
    return 2 * precision * recall / (precision + recall)


def word_f1(candidates, references):
    """Per candidate, the best unigram F1 against any of its references: list of n floats in [0, 1].

    ``candidates``: n PTB-tokenised lower-cased captions; ``references``: n non-empty lists of them.
    """
    return [max(unigram_f1(c, r) for r in refs) for c, refs in zip(candidates, references)]


WORD_F1 = PluginMetric(
    "word_f1", "Word F1", "example-word-f1/1", word_f1, range=(0.0, 1.0), higher="better",
    description="Best unigram F1 between the caption and one of its references (example plugin).",
)
