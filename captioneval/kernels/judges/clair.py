"""CLAIR (Chan, Petryk, Gonzalez, Darrell, Canny 2023, "CLAIR: Evaluating Image Captions with Large
Language Models", EMNLP): a language model is asked how likely it is, on a scale from 0 to 100, that
a candidate set of captions describes the same image as a reference set, and answers in JSON.

The prompt and the parse rules follow the reference implementation, ``clair/clair.py`` of
github.com/davidmchan/clair (function ``clair``). That repository could not be fetched where this
was written: the rules were read from a copy of its ``clair.py`` (the same ``clair`` function, with
an OpenAI client in place of its ``grazier`` engine) and are transcribed here rule by rule, with the
prompt text that defines the metric; its licence terms (those of davidmchan/clair, not verified here)
apply to this transcription:

1. the prompt lists the candidates and the references one per line, each as ``"- " + caption``;
2. the answer's first ``{...}``: the text after the first ``{`` up to the next ``}``, between
   braces, read as JSON; its ``"score"`` as a float, its ``"reason"`` (default ``"Unknown"``);
3. when that fails (no brace, not JSON, no ``score``), the first number of the answer (regular
   expression ``\\d*\\.?\\d+``), multiplied by 100 when below 1 (the reference: "some models
   auto-normalize the score"), and the text after the word ``reason``;
4. when no number is found, the model is asked again (3 tries in all, temperature 0);
5. after the last failure the reference returns a score of 0 (logging an error): :data:`FAILURE`
   below. The score is the parsed number / 100, NOT clipped: an answer of 250 gives 2.5.

Departures, each recorded per caption by the metric: a ``"score"`` that is not a number (``"high"``,
``null``) raises in the reference (``float()`` outside the caught exceptions) and crashes the run;
here it falls to rule 3. A reply with no text (empty ``choices``, a body that is not JSON, one cut
at the size limit) crashes the reference (``None.split``); here it is a failed try (rule 4).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Sequence

#: the reference's prompt (``_CLAIR_PROMPT``), with its two fields
PROMPT = (
    "You are trying to tell if a candidate set of captions is describing the same image as a reference set of "
    "captions.\n"
    "Candidate set:\n{candidate_statements}\n"
    "Reference set:\n{target_statements}\n"
    "On a precise scale from 0 to 100, how likely is it that the candidate set is describing the same image as the "
    "reference set? (JSON format, with a key \"score\", value between 0 and 100, and a key \"reason\" with a string "
    "value.)\n"
)
#: tries per caption (the reference's ``range(3)``)
TRIES = 3
#: the score the reference gives after the last failed try (before the division by 100)
FAILURE = 0.0
#: identifies these parse rules in a run's signature
PARSER_VERSION = "clair-reference-parse/1"
NUMBER = re.compile(r"\d*\.?\d+")
REASON = re.compile(r"(?i)reason.*")


def prompt(candidates: Sequence[str], references: Sequence[str], template: str = PROMPT) -> str:
    """The CLAIR prompt for ``candidates`` (usually one caption) and ``references`` (rule 1).
    ``template`` may be a user's own, with the fields ``{candidate_statements}`` and
    ``{target_statements}``."""
    return template.format(candidate_statements="".join(f"- {c}\n" for c in candidates),
                           target_statements="".join(f"- {t}\n" for t in references))


@dataclass(frozen=True)
class Parsed:
    """One answer read by :func:`parse`: ``score`` on the model's 0-100 scale (None: nothing found,
    ask again), ``reason`` the model's reason (None when nothing found), ``path`` ``"json"``,
    ``"number"`` or None."""

    score: float | None
    reason: str | None
    path: str | None


def parse_json_only(text: str | None) -> Parsed:
    """The stricter parser a user-defined judge may choose (``parser="json"``): rule 2 only, a numeric
    ``score`` in the answer's first ``{...}``; anything else is a failed try (no number fallback, so
    "my score is 100" in a reply that broke the format does not count)."""
    if not isinstance(text, str):
        return Parsed(None, None, None)
    try:
        data = json.loads("{" + text.split("{")[1].split("}")[0] + "}")
        score = data["score"]
    except (ValueError, KeyError, IndexError):
        return Parsed(None, None, None)
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        return Parsed(None, None, None)
    reason = data.get("reason", "Unknown")
    return Parsed(float(score), reason if isinstance(reason, str) else json.dumps(reason), "json")


#: parser name -> (function, version), for :class:`captioneval.metrics.judges.clair.Clair`'s ``parser``
PARSERS = {"clair": None, "json": None}


def parse(text: str | None) -> Parsed:
    """Rules 2 and 3 of the module docstring on one answer (None: no text, a failed try)."""
    if not isinstance(text, str):
        return Parsed(None, None, None)
    try:
        inner = text.split("{")[1]
        data = json.loads("{" + inner.split("}")[0] + "}")
        score = float(data["score"])
        reason = data.get("reason", "Unknown")
        return Parsed(score, reason if isinstance(reason, str) else json.dumps(reason), "json")
    except (ValueError, KeyError, IndexError, TypeError):  # JSONDecodeError is a ValueError
        pass
    numbers = NUMBER.findall(text)
    if not numbers:
        return Parsed(None, None, None)
    score = float(numbers[0])
    if score < 1:
        score *= 100
    found = REASON.findall(text)
    reason = found[0].strip()[len("reason"):].replace(":", "").strip() if found else "Unknown"
    return Parsed(score, reason, "number")


PARSERS.update({"clair": (parse, PARSER_VERSION), "json": (parse_json_only, "json-score-only/1")})
