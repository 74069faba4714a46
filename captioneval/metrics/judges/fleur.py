"""FLEUR (Lee et al. 2024, ACL), reference Yebin46/FLEUR ``fleur.py``: a multimodal model shown the
image rates the caption from 0.0 to 1.0, and the rating is smoothed with the probabilities of the
digit tokens (:mod:`captioneval.kernels.judges.fleur`, with the departures it lists: probabilities
from the server's ``top_logprobs``, a digit missing from them counted as 0)."""
from __future__ import annotations

import math

from captioneval.kernels.judges import fleur as k
from captioneval.kernels.judges.client import token_logprobs
from captioneval.metrics import base
from captioneval.metrics.judges._judge import JudgeMetric


class Fleur(JudgeMetric):
    """FLEUR per caption, range [0, 1]; NaN (``failure="nan"``, default) where the answer cannot be
    smoothed; ``failure="reference"`` changes nothing here, since the reference has no score for such
    a caption (it skips it or reuses the previous caption's), and is refused. ``top_logprobs``: how
    many alternatives per token the server returns (20, the OpenAI protocol's maximum). ``details``
    per caption: ``status`` (``ok``, ``no_number``, ``out_of_range``, ``no_digit_token``,
    ``no_logprobs``), ``raw`` the number read, ``positions``, ``mass`` and ``missing`` of the
    smoothing, and the reply (cache key, status, text).

    ``template``: a user-defined FLEUR-style judge's own prompt (fields ``{candidate}`` and, for a
    reference-based one, ``{references}``; its hash is in the signature), scored with the same digit
    smoothing. A user-defined judge is this class (or :class:`~captioneval.metrics.judges.ref_fleur.RefFleur`)
    with its own ``key``, ``name``, ``version`` and ``template``, registered as any metric (docs/metrics.md)."""

    key = "fleur"
    name = "FLEUR"
    version = "captioneval-fleur/1"
    range = (0.0, 1.0)
    needs = frozenset({base.TEXTS, base.IMAGES})
    description = ("FLEUR (Lee et al. 2024): a multimodal model's 0.0-1.0 rating of the caption given the image, "
                   "smoothed with the digit tokens' probabilities as Yebin46/FLEUR's fleur.py.")
    reference_based = False
    template = k.PROMPT
    max_tokens_default = k.MAX_TOKENS
    parser_version = k.PARSER_VERSION

    def __init__(self, endpoint=None, model=None, api_key_env=None, *, top_logprobs: int = 20,
                 template: str | None = None, **options):
        if template is not None:  # a user-defined FLEUR-style judge: its own prompt, the same smoothing
            self.template = k.check_template(template, self.reference_based)
        if options.get("failure", "nan") != "nan":
            raise ValueError("FLEUR's reference has no score for a failed answer: failure must be 'nan'")
        self.top_logprobs = int(top_logprobs)
        if not 1 <= self.top_logprobs <= 20:
            raise ValueError("top_logprobs must be within 1..20")
        super().__init__(endpoint, model, api_key_env, **options)

    def sampling(self) -> dict:
        return {"logprobs": True, "top_logprobs": self.top_logprobs}

    def request_extra(self) -> dict:
        return {"logprobs": True, "top_logprobs": self.top_logprobs}

    def score(self, batch: base.Batch) -> base.Scores:
        """Score ``batch.texts`` (n raw captions) with ``batch.images`` (n paths or bytes) and, for
        RefFLEUR, ``batch.reference_texts``. ValueError for missing inputs or an image that is not
        PNG/JPEG/GIF/BMP/WebP, OSError for one that cannot be read; BudgetExhausted, JudgeError as CLAIR."""
        if batch.texts is None or batch.images is None or len(batch.texts) != len(batch.images):
            raise ValueError(f"{self.key} needs one image per caption (Batch.texts and Batch.images)")
        if self.reference_based and (batch.reference_texts is None or len(batch.reference_texts) != len(batch.texts)):
            raise ValueError(f"{self.key} needs the reference captions (Batch.reference_texts)")
        texts = list(batch.texts)
        urls: dict = {}
        bodies = []
        for i, text in enumerate(texts):
            image = batch.images[i]
            ident = image if isinstance(image, str) else id(image)
            if ident not in urls:
                urls[ident] = k.image_data_url(image)
            refs = list(batch.reference_texts[i]) if self.reference_based else None
            bodies.append(self.body([{"type": "image_url", "image_url": {"url": urls[ident]}},
                                     {"type": "text", "text": k.prompt(text, refs, self.template)}]))
        client = self.client()
        try:
            replies = client.complete_many([(b, 0) for b in bodies])
        finally:
            client.close()
        values, details = [], []
        for reply in replies:
            text = self.reply_text(reply)
            smoothed = k.smooth(text, token_logprobs(reply.response) if reply is not None and reply.status == "ok" else None)
            values.append(smoothed.score if smoothed.status == "ok" else math.nan)
            details.append({"status": smoothed.status, "raw": smoothed.raw, "positions": smoothed.positions,
                            "mass": smoothed.mass, "missing": smoothed.missing, "replies": [self.raw_of(reply)]})
        return self.finish(values, details, texts, client)
