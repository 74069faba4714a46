"""PTB tokenisation as in the COCO caption evaluation.

Two implementations of the same tokeniser, which give identical output:

``"java"``
    :func:`ptb_tokenize_java` wraps :class:`pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer`
    (Stanford PTBTokenizer 3.4.1 run with ``-preserveLines -lowerCase``, then punctuation tokens
    dropped), which is what published BLEU / METEOR / ROUGE-L / CIDEr-D numbers on COCO, Flickr8k and
    PASCAL-50S are computed on. Needs a Java runtime (``java`` on PATH); see README, "Java".
``"python"``
    :func:`captioneval.text.ptb.tokenize`, a pure-Python re-implementation checked equal to the Java
    path on every bundled dataset and a hostile corpus (tests/test_ptb_tokenizer.py); no Java needed,
    and much faster (benchmarks/tokenizer_equality.py).

:func:`ptb_tokenize` uses :data:`DEFAULT_IMPLEMENTATION`, read at import from the environment variable
``CAPTIONEVAL_TOKENIZER`` (``"java"`` or ``"python"``; default ``"python"``, equal to the Java path on every
bundled caption and the hostile corpus, so that Java is needed only for METEOR). :data:`TOKENIZER_VERSION` is
the version of the default implementation (stored with every tokenised caption, so switching
implementations re-tokenises rather than mixing).
"""
from __future__ import annotations

import shutil
from typing import Sequence

from captioneval.text import ptb
from captioneval.utils.envchoice import env_choice

TOKENIZER_NAME = "ptb"
JAVA_VERSION = "pycocoevalcap-1.2/stanford-corenlp-3.4.1"
IMPLEMENTATIONS = ("python", "java")
_VERSIONS = {"java": JAVA_VERSION, "python": ptb.PTB_PYTHON_VERSION}
_ENV = "CAPTIONEVAL_TOKENIZER"


def _default_implementation() -> str:
    return env_choice(_ENV, IMPLEMENTATIONS, "python", "tokenizer implementation")


#: Implementation used by :func:`ptb_tokenize` when none is given (env ``CAPTIONEVAL_TOKENIZER``).
DEFAULT_IMPLEMENTATION: str = _default_implementation()
#: Version string of :data:`DEFAULT_IMPLEMENTATION` (``JAVA_VERSION`` or ``ptb.PTB_PYTHON_VERSION``).
TOKENIZER_VERSION: str = _VERSIONS[DEFAULT_IMPLEMENTATION]
#: Characters that end a line for the Java tokeniser or for Python (``str.splitlines``): inside a
#: caption they would split it over two output lines and shift every later caption by one.
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})
#: A last caption appended to every batch; its tokens coming back last proves the alignment.
_SENTINEL = "captioneval end of batch"


class JavaMissingError(RuntimeError):
    """Raised when a scorer that needs Java (PTB tokeniser, METEOR) is used without ``java`` on PATH."""


def require_java() -> None:
    """Raise :class:`JavaMissingError` with install instructions when ``java`` is not on PATH."""
    if shutil.which("java") is None:
        raise JavaMissingError(
            "Java is required for METEOR 1.5 and the Java PTB tokeniser (pycocoevalcap). Install a JRE, "
            "e.g. `apt-get install default-jre-headless` on Debian/Ubuntu or `brew install openjdk`."
        )


def java_available() -> bool:
    """Whether ``java`` is on PATH (needed by the ``"java"`` implementation and METEOR)."""
    return shutil.which("java") is not None


def ptb_tokenize(texts: Sequence[str], implementation: str | None = None) -> list[str]:
    """Tokenise captions exactly as the COCO caption evaluation does (see :func:`ptb_tokenize_java`).

    Parameters
    ----------
    texts : sequence of str, length n
        Raw captions.
    implementation : {"python", "java"} or None
        None uses :data:`DEFAULT_IMPLEMENTATION`. Both give the same output.

    Returns
    -------
    list of str, length n (see :func:`ptb_tokenize_java`).

    Raises
    ------
    ValueError
        for an unknown implementation.
    JavaMissingError
        with ``"java"`` when ``java`` is not on PATH.
    """
    impl = DEFAULT_IMPLEMENTATION if implementation is None else implementation
    if impl == "python":
        return ptb.tokenize(texts)
    if impl == "java":
        return ptb_tokenize_java(texts)
    raise ValueError(f"unknown tokenizer implementation {impl!r}; allowed: {', '.join(repr(v) for v in IMPLEMENTATIONS)}")


def ptb_tokenize_java(texts: Sequence[str]) -> list[str]:
    """Tokenise captions exactly as the COCO caption evaluation does, with pycocoevalcap's Java tokeniser.

    Parameters
    ----------
    texts : sequence of str, length n
        Raw captions, any Unicode. Line breaks inside a caption (``\\n``, ``\\r``, vertical tab,
        form feed, U+001C-U+001E, U+0085, U+2028, U+2029) are replaced by spaces (one caption per
        line is what the Java tokeniser preserves). The tokeniser keeps letters of every script
        (accents, combining marks, Arabic, CJK) and drops characters outside the Basic
        Multilingual Plane (emoji, U+1D400 mathematical letters...), which it cannot tokenise.

    Returns
    -------
    list of str, length n
        Lower-cased tokens joined by single spaces, punctuation removed; ``""`` for a caption with
        no word tokens.

    Raises
    ------
    JavaMissingError
        if ``java`` is not on PATH.
    RuntimeError
        if the tokeniser's output is not one line per caption (checked with a sentinel caption
        appended to the batch).
    """
    if not texts:
        return []
    require_java()
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    # The Java tokeniser keeps one output line per input line; an empty input line would still
    # produce one, but a caption made only of whitespace is normalised to a single dot so that the
    # line is not lost, and comes back as "" once punctuation is removed.
    payload = {i: [{"caption": (t.translate(_LINE_BREAKS).strip() or ".")}] for i, t in enumerate(texts)}
    payload[len(texts)] = [{"caption": _SENTINEL}]
    out = PTBTokenizer().tokenize(payload)
    if len(out) != len(texts) + 1 or out[len(texts)] != [_SENTINEL]:
        raise RuntimeError(f"PTB tokeniser output is misaligned: not one line per caption for {len(texts)} inputs")
    return [out[i][0] for i in range(len(texts))]
