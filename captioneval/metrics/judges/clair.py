"""CLAIR (Chan et al. 2023, EMNLP), reference davidmchan/clair ``clair/clair.py``: a language model
rates, 0-100 in JSON, how likely a caption describes the same image as its references; the score is
that number / 100. Prompt and parse rules (first JSON object, then the first number, 3 tries) are in
:mod:`captioneval.kernels.judges.clair`; after the last failed try the reference scores 0, which
``failure="reference"`` reproduces, and the default ``failure="nan"`` records the caption as failed
and leaves it out of means."""
from __future__ import annotations

import math

from captioneval.kernels.judges import clair as k
from captioneval.metrics import base
from captioneval.metrics.judges._judge import JudgeMetric


class Clair(JudgeMetric):
    """CLAIR per caption against its raw references; range [0, 1] (with ``failure="reference"`` an
    answer above 100 is kept, as the reference keeps it: 250 gives 2.5).

    ``template``: the prompt, the reference's by default; a user-defined judge passes its own (fields
    ``{candidate_statements}``, ``{target_statements}``: its hash is in the signature); ``parser``
    ``"clair"`` (the reference's rules) or ``"json"`` (only a numeric ``score`` in the first JSON
    object; :func:`~captioneval.kernels.judges.clair.parse_json_only`). A user-defined judge is this
    class with its own ``key``, ``name``, ``version``, ``template`` and ``parser``, registered as any
    metric (docs/metrics.md). ``tries``: how
    many times a caption is asked before it fails (3). ``details`` per caption: ``status`` (``json``,
    ``number``, ``failed``, ``out_of_range``), ``score`` the model's number, ``reason``, ``tries``
    and ``replies`` (each reply's cache key, status and text)."""

    key = "clair"
    name = "CLAIR"
    version = "captioneval-clair/1"
    range = (0.0, 1.0)
    needs = frozenset({base.TEXTS, base.REFERENCE_TEXTS})
    description = ("CLAIR (Chan et al. 2023): a language model's 0-100 JSON rating that the caption and the "
                   "references describe the same image, / 100, parsed as davidmchan/clair's clair.py.")
    max_tokens_default = 1024
    parser_version = k.PARSER_VERSION

    def __init__(self, endpoint=None, model=None, api_key_env=None, *, template: str = k.PROMPT, tries: int = k.TRIES,
                 parser: str = "clair", **options):
        if parser not in k.PARSERS:
            raise ValueError(f"parser must be one of {', '.join(k.PARSERS)}, got {parser!r}")
        self.template = template
        self.parse, self.parser_version = k.PARSERS[parser]
        self.tries = int(tries)
        if self.tries < 1:
            raise ValueError("tries must be at least 1")
        super().__init__(endpoint, model, api_key_env, **options)

    def parameters(self) -> dict:
        return {**super().parameters(), "tries": self.tries}

    def score(self, batch: base.Batch) -> base.Scores:
        """Score ``batch.texts`` (n raw captions) against ``batch.reference_texts`` (n lists). Raises
        ValueError for missing inputs, :class:`~captioneval.kernels.judges.client.BudgetExhausted` when
        the budget ends the run (answers so far are cached) and JudgeError for a failing endpoint."""
        if batch.texts is None or batch.reference_texts is None or len(batch.texts) != len(batch.reference_texts):
            raise ValueError("clair needs the raw captions and their references (Batch.texts, Batch.reference_texts)")
        texts = list(batch.texts)
        bodies = [self.body(k.prompt([c], list(r), self.template)) for c, r in zip(texts, batch.reference_texts)]
        details = [{"status": "failed", "score": None, "reason": None, "tries": 0, "replies": []} for _ in texts]
        client = self.client()
        pending = list(range(len(texts)))
        try:
            for attempt in range(self.tries):
                if not pending:
                    break
                replies = client.complete_many([(bodies[i], attempt) for i in pending])
                still = []
                for i, reply in zip(pending, replies):
                    parsed = self.parse(self.reply_text(reply))
                    details[i]["tries"] = attempt + 1
                    details[i]["replies"].append(self.raw_of(reply))
                    if parsed.path is None:
                        still.append(i)
                        continue
                    details[i].update(status=parsed.path, score=parsed.score, reason=parsed.reason)
                pending = still
        finally:
            client.close()
        values = []
        for d in details:
            if d["status"] == "failed":
                values.append(k.FAILURE / 100 if self.failure == "reference" else math.nan)
                continue
            value = d["score"] / 100
            if not 0.0 <= value <= 1.0:  # 250, -5, NaN from the JSON
                d["parsed_as"], d["status"] = d["status"], "out_of_range"
                if self.failure != "reference":
                    value = math.nan
            values.append(value)
        return self.finish(values, details, texts, client)


CLAIR = Clair
