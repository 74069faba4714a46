"""The LLM judges (CLAIR, FLEUR, RefFLEUR; :mod:`captioneval.metrics.judges`) in the registry: listed
as unavailable, with the reason, until an endpoint is configured by the environment variables
``CAPTIONEVAL_JUDGE_URL`` and ``CAPTIONEVAL_JUDGE_MODEL`` (and, for a key,
``CAPTIONEVAL_JUDGE_API_KEY_ENV`` naming the variable that holds it); then all three are in
:data:`METRICS` with that endpoint. The library also takes an endpoint per call
(``captioneval.evaluate(..., options={"clair": {"endpoint": URL, "model": NAME}})``).
Nothing here sends a request. Django-free."""
from __future__ import annotations

import importlib
import os

ORDER = 1100

#: key -> (display name, the class that computes it)
JUDGES = {
    "clair": ("CLAIR", "captioneval.metrics.judges.clair.Clair"),
    "fleur": ("FLEUR", "captioneval.metrics.judges.fleur.Fleur"),
    "ref_fleur": ("RefFLEUR", "captioneval.metrics.judges.ref_fleur.RefFleur"),
}
URL_ENV, MODEL_ENV = "CAPTIONEVAL_JUDGE_URL", "CAPTIONEVAL_JUDGE_MODEL"


def configured() -> bool:
    """True when both environment variables name an endpoint and a model."""
    return bool(os.environ.get(URL_ENV) and os.environ.get(MODEL_ENV))


def judge_class(key: str):
    """The class of judge ``key`` (KeyError for another key)."""
    module, _, name = JUDGES[key][1].rpartition(".")
    return getattr(importlib.import_module(module), name)


def reasons() -> dict[str, str]:
    """key -> why it is unavailable: every judge while no endpoint is configured, else none."""
    if configured():
        return {}
    return {key: (f"{name}: an LLM judge, and no endpoint is configured: set {URL_ENV} (an OpenAI-compatible "
                  f"API base, e.g. a local vLLM or Ollama server's http://127.0.0.1:8000/v1) and {MODEL_ENV} "
                  "(see docs/metrics.md), or pass endpoint and model to captioneval.evaluate's options")
            for key, (name, _) in JUDGES.items()}


METRICS: list = [judge_class(key)() for key in JUDGES] if configured() else []
UNAVAILABLE = reasons()
