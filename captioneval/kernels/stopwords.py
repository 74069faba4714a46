"""The English stop list of VIFIDEL and LSA: scikit-learn's ``ENGLISH_STOP_WORDS`` (318 words), shipped
with captioneval so that neither needs scikit-learn, no Django.

The words are read from ``data/english_stop_words.txt`` beside this module, whose header names where
they come from (scikit-learn's ``sklearn/feature_extraction/_stop_words.py``, a list its authors took
from the Glasgow Information Retrieval Group) and carries scikit-learn's BSD-3-Clause notice;
tests/test_stopwords.py checks that the file still equals scikit-learn's list.
"""
from __future__ import annotations

from importlib import resources

__all__ = ["ENGLISH_STOP_WORDS", "read_stop_words"]


def read_stop_words(text: str) -> frozenset[str]:
    """The words of a stop-list file: one word a line; blank lines and lines starting with ``#`` are
    skipped. A word that appears twice, or a line holding more than one word, is a ``ValueError``
    (the file is meant to list each word once)."""
    words: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        word = line.strip()
        if not word or word.startswith("#"):
            continue
        if len(word.split()) != 1:
            raise ValueError(f"line {number}: one word a line expected, got {line!r}")
        words.append(word)
    found = frozenset(words)
    if len(found) != len(words):
        raise ValueError(f"{len(words) - len(found)} repeated word(s) in the stop list")
    return found


#: scikit-learn's English stop list (318 words), as VIFIDEL's reference code and our LSA use it.
ENGLISH_STOP_WORDS: frozenset[str] = read_stop_words(
    resources.files(__package__).joinpath("data", "english_stop_words.txt").read_text("utf-8"))
