"""FLEUR (Lee, Park, Lee, Kim 2024, "FLEUR: An Explainable Reference-Free Evaluation Metric for Image
Captioning Using a Large Multimodal Model", ACL): a multimodal model (LLaVA-1.5 in the paper) is shown
the image and asked for a score from 0.0 to 1.0; the score is then *smoothed* with the probabilities
of the digit tokens at the positions of the answer's digits (paper, Sec. 3.2, "score smoothing").
RefFLEUR adds the reference captions to the prompt.

Prompts and rules follow the reference implementation, ``fleur.py`` and ``reffleur.py`` of
github.com/Yebin46/FLEUR (function ``compute_human_correlation``; the repository states no licence,
so nothing of it is copied here beyond the prompts that define the metric and a description of its
rules):

1. the candidate's whitespace runs become single spaces; RefFLEUR's references are joined by
   newlines; the image is sent first, then the prompt (:data:`PROMPT`, :data:`REF_PROMPT`);
2. the answer's text keeps only digits and dots, leading and trailing dots removed, read as a float
   ``s``; outside [0, 1] the reference skips the caption (no score);
3. for ``s < 1``: d1 = the first decimal digit of ``str(s)``; its position is the first generated
   token equal to d1, or the second when d1 is 0 and it occurs more than once (the "0" before the
   dot); the score is ``0.1 * sum_r r p1(r)`` over the digits r = 0..9 with p1 the probabilities
   there; when ``str(s)`` has a second decimal, d2 likewise (the second occurrence when repeated)
   adds ``0.01 * sum_r r p2(r)``;
4. for ``s == 1``: at the first token "1", ``0.9 p(0) + p(1)``.

Departures (documented in docs/metrics.md and recorded per caption):

* probabilities come from the server's ``top_logprobs`` (at most 20 per position in the OpenAI
  protocol) instead of the full softmax: a digit missing from them is given probability 0, a lower
  bound (its true probability is below the smallest one listed), and the digits' listed mass is
  recorded (``mass``) so a reader can see how much is missing;
* the reference decodes with greedy search (``do_sample=False``; its ``temperature=0.2`` is then
  unused): the request asks for temperature 0;
* the reference cuts the last 4 characters of the decoded answer (LLaVA's ``</s>``); the server's
  answer has no such token, so nothing is cut;
* a token matches a digit when its text is exactly the digit (the reference compares token ids with
  ``tokenizer.encode(str(d))[-1]``): a tokenizer that merges digits ("85") gives no position, and
  the caption is a failure (``no_digit_token``). Llama, LLaVA, Mistral and Qwen split digits;
* where the reference crashes or reuses the previous caption's score (an answer without a number,
  several "1" tokens), the caption is a failure; where it skips the caption (``s`` outside [0, 1])
  the caption is ``out_of_range``.
"""
from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

PROMPT = (
    "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0 based on the given Grading Criteria. "
    "(Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at all.\n"
    "1.0: The caption accurately and clearly describes the image.\n\nCaption: {candidate}\n\n"
    "Score(Choose a rating from 0.0 to 1.0):"
)
REF_PROMPT = (
    "Your task is to evaluate and rate the candidate caption on a scale of 0.0 to 1.0 based on the given Grading "
    "Criteria. (Print Real Number Score ONLY)\n\nGrading Criteria:\n\n0.0: The caption does not describe the image at "
    "all.\n1.0: The caption accurately and clearly describes the image.\n\nReference Captions: {references}\n\n"
    "Candidate Caption: {candidate}\n\nScore(Choose a rating from 0.0 to 1.0):"
)
#: the reference's ``max_new_tokens``
MAX_TOKENS = 512
#: identifies these rules in a run's signature
PARSER_VERSION = "fleur-reference-smoothing/1"
DIGITS = tuple(str(d) for d in range(10))
MIME = ((b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF87a", "image/gif"),
        (b"GIF89a", "image/gif"), (b"BM", "image/bmp"))


def prompt(candidate: str, references: Sequence[str] | None = None, template: str | None = None) -> str:
    """FLEUR's prompt (RefFLEUR's when ``references`` are given), rule 1; ``template`` replaces
    :data:`PROMPT` / :data:`REF_PROMPT` (a user-defined FLEUR-style judge: fields ``{candidate}`` and,
    with references, ``{references}``; :func:`check_template`)."""
    candidate = " ".join(candidate.split())
    if references is None:
        return (template or PROMPT).format(candidate=candidate)
    return (template or REF_PROMPT).format(candidate=candidate, references="\n".join(references))


def check_template(template: str, references: bool) -> str:
    """``template`` if it is a usable prompt template: a string with the field ``{candidate}`` (and
    ``{references}`` when ``references``) and no other field (literal braces doubled, ``{{``), else
    ValueError saying what is wrong."""
    if not isinstance(template, str) or not template.strip():
        raise ValueError("a judge's prompt template must be a non-empty string")
    wanted = {"candidate", "references"} if references else {"candidate"}
    try:
        import string

        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ValueError(f"the prompt template is not a format string: {exc} (double literal braces: {{{{ }}}})") from None
    if fields != wanted:
        raise ValueError(f"the prompt template must have exactly the fields {', '.join('{' + f + '}' for f in sorted(wanted))}"
                         f", it has {', '.join('{' + f + '}' for f in sorted(fields)) or 'none'}")
    return template


def image_data_url(image: str | Path | bytes) -> str:
    """``data:<type>;base64,<bytes>`` of an image file (a path or its bytes), the type read from the
    file's first bytes (PNG, JPEG, GIF, BMP, WebP). Raises ValueError for anything else, OSError for
    a file that cannot be read."""
    data = bytes(image) if isinstance(image, (bytes, bytearray)) else Path(image).read_bytes()
    kind = next((m for magic, m in MIME if data.startswith(magic)), None)
    if kind is None and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        kind = "image/webp"
    if kind is None:
        raise ValueError("not a PNG, JPEG, GIF, BMP or WebP image")
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def read_score(text: str | None) -> float | None:
    """Rule 2: the number of the answer, or None when there is none."""
    if not isinstance(text, str):
        return None
    kept = re.sub(r"\.+$", "", re.sub(r"^\.+", "", re.sub(r"[^\d.]", "", text)))
    try:
        return float(kept)
    except ValueError:
        return None


@dataclass
class Smoothed:
    """FLEUR of one answer: ``score`` (NaN on failure), ``status`` ``"ok"``, ``"no_number"``,
    ``"out_of_range"``, ``"no_digit_token"`` or ``"no_logprobs"``; ``raw`` the number read (rule 2);
    ``positions`` the token positions used; ``mass`` the digits' listed probability at each; ``missing``
    the digits absent from ``top_logprobs`` at each position."""

    score: float
    status: str
    raw: float | None = None
    positions: list = field(default_factory=list)
    mass: list = field(default_factory=list)
    missing: list = field(default_factory=list)


def _position(tokens: list[str], digit: int, repeated: int) -> int | None:
    found = [i for i, t in enumerate(tokens) if t == str(digit)]
    if not found:
        return None
    return found[repeated] if len(found) > 1 else found[0]


def smooth(text: str | None, logprobs: list[tuple[str, dict[str, float]]] | None) -> Smoothed:
    """Rules 2-4 with the departures of the module docstring. ``logprobs``: ``[(token, {token:
    logprob})]`` (:func:`captioneval.kernels.judges.client.token_logprobs`)."""
    s = read_score(text)
    if s is None:
        return Smoothed(math.nan, "no_number")
    if not 0 <= s <= 1:
        return Smoothed(math.nan, "out_of_range", s)
    if not logprobs:
        return Smoothed(math.nan, "no_logprobs", s)
    tokens = [t for t, _ in logprobs]
    digits = str(s)
    if "e" in digits:  # 1e-05: no decimal digit to find (the reference fails on it too)
        return Smoothed(math.nan, "no_digit_token", s)
    if s < 1.0:
        d1 = int(digits[digits.index(".") + 1])
        wanted = [(_position(tokens, d1, 1 if d1 == 0 else 0), 0.1)]
        if len(digits) > 3:
            wanted.append((_position(tokens, int(digits[digits.index(".") + 2]), 1), 0.01))
    else:
        wanted = [(_position(tokens, 1, 0), None)]
    out = Smoothed(0.0, "ok", s)
    for pos, weight in wanted:
        if pos is None:
            return Smoothed(math.nan, "no_digit_token", s)
        top = logprobs[pos][1]
        p = [math.exp(top[d]) if d in top else 0.0 for d in DIGITS]
        out.positions.append(pos)
        out.mass.append(sum(p))
        out.missing.append([d for d in DIGITS if d not in top])
        out.score += 0.9 * p[0] + p[1] if weight is None else weight * sum(r * p[r] for r in range(10))
    return out
