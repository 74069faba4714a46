"""The learned metrics (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S, BERTScore) are known to the platform and
listed as unavailable with the reason, so that ``--metric clip_s``, the compute form and the dataset
page explain why instead of calling them unknown:

* without the ``learned`` extra (torch, transformers: ``pip install 'captioneval[learned]'``) the
  reason names the missing packages and the extra; nothing here imports them (a spec lookup only), so
  the rest of the platform works without them;
* with it, the metrics run from the library (:mod:`captioneval.metrics.learned`, e.g.
  ``ClipS(model=...).score(Batch(texts=..., images=...))``) but the platform's pipeline does not give
  them their inputs yet (images, raw references, weights settings; issue 32): the reason says so.

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
    """key -> why it is unavailable here (see the module docstring); ``missing`` defaults to
    :func:`missing_packages`."""
    missing = missing_packages() if missing is None else missing
    out = {}
    for key, (name, cls) in LEARNED.items():
        if missing:
            out[key] = (f"{name} needs the learned extra, and {' and '.join(missing)} "
                        f"{'is' if len(missing) == 1 else 'are'} not installed: pip install '{EXTRA}' "
                        "(with the CPU build of torch; see docs/metrics.md) and the model weights")
        else:
            out[key] = (f"{name} is computed by the library ({cls}) but not yet by the platform's pipeline, "
                        "which does not give learned metrics their images, raw references and weights yet")
    return out


METRICS: list = []
UNAVAILABLE = reasons()
