"""The learned metrics (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S, BERTScore) in the registry:

* without the ``learned`` extra (torch, transformers: ``pip install 'captioneval[learned]'``) all five
  are listed as unavailable, the reason naming the missing packages and the extra; nothing here imports
  them (a spec lookup only), so the rest of the platform works without them;
* with it, all five (:data:`PIPELINE`) are in :data:`METRICS`: the objects here carry the defaults
  (OpenAI's ViT-B/32, the PAC-S file name, roberta-large layer 17); the platform builds each run's own
  object from the run's stored parameters (``metrics.learned``: model from ``LEARNED_MODELS``, device,
  batch sizes), the library from ``options`` (``captioneval.evaluate``).

Django-free.
"""
from __future__ import annotations

import importlib.util

ORDER = 1000

#: key -> (display name, the library class that computes it)
LEARNED = {
    "clip_s": ("CLIP-S", "captioneval.metrics.learned.clip_s.ClipS"),
    "ref_clip_s": ("RefCLIP-S", "captioneval.metrics.learned.ref_clip_s.RefClipS"),
    "pac_s": ("PAC-S", "captioneval.metrics.learned.pac_s.PacS"),
    "ref_pac_s": ("RefPAC-S", "captioneval.metrics.learned.ref_pac_s.RefPacS"),
    "bert_score": ("BERTScore", "captioneval.metrics.learned.bert_score.BertScore"),
}
#: the learned metrics the platform's pipeline computes (the CLIP family's images come from the dataset's
#: image source; BERTScore reads the captions and references only)
PIPELINE = ("clip_s", "ref_clip_s", "pac_s", "ref_pac_s", "bert_score")
#: the packages of the ``learned`` extra the metrics cannot run without
REQUIRED = ("torch", "transformers")
EXTRA = "captioneval[learned]"


def missing_packages() -> list[str]:
    """The packages of :data:`REQUIRED` that cannot be found in this environment (``find_spec``, which
    imports nothing; a finder that refuses the import counts as missing)."""
    missing = []
    for name in REQUIRED:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing


def reasons(missing: list[str] | None = None) -> dict[str, str]:
    """key -> why it is unavailable here (see the module docstring): every learned metric when packages
    are ``missing`` (default :func:`missing_packages`), else those not in :data:`PIPELINE`."""
    missing = missing_packages() if missing is None else missing
    out = {}
    for key, (name, cls) in LEARNED.items():
        if missing:
            out[key] = (f"{name} needs the learned extra, and {' and '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} not installed: pip install '{EXTRA}' "
                        "(with the CPU build of torch; see docs/metrics.md) and the model weights")
        elif key not in PIPELINE:  # none today: a learned metric the library computes and the pipeline not yet
            out[key] = (f"{name} is computed by the library ({cls}; captioneval evaluate --metric {key}) but not yet "
                        "by the platform's pipeline")
    return out


def pipeline_metrics(missing: list[str] | None = None) -> list:
    """The default objects of the :data:`PIPELINE` metrics, or [] when packages are ``missing``."""
    import importlib

    if missing_packages() if missing is None else missing:
        return []
    out = []
    for key in PIPELINE:
        module, _, cls = LEARNED[key][1].rpartition(".")
        out.append(getattr(importlib.import_module(module), cls)())
    return out


METRICS: list = pipeline_metrics()
UNAVAILABLE = reasons()
