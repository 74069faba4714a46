"""PTB tokenisation as in the COCO caption evaluation.

Wraps :class:`pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer` (Stanford PTBTokenizer 3.4.1 run
with ``-preserveLines -lowerCase``, then punctuation tokens dropped), which is what published
BLEU / METEOR / ROUGE-L / CIDEr-D numbers on COCO, Flickr8k and PASCAL-50S are computed on.
Needs a Java runtime (``java`` on PATH); see README, "Java".
"""
from __future__ import annotations

import shutil
from typing import Sequence

TOKENIZER_NAME = "ptb"
TOKENIZER_VERSION = "pycocoevalcap-1.2/stanford-corenlp-3.4.1"
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
            "Java is required for PTB tokenisation and METEOR 1.5 (pycocoevalcap). Install a JRE, "
            "e.g. `apt-get install default-jre-headless` on Debian/Ubuntu or `brew install openjdk`."
        )


def ptb_tokenize(texts: Sequence[str]) -> list[str]:
    """Tokenise captions exactly as the COCO caption evaluation does.

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
