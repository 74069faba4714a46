"""CLIP-S (Hessel et al. 2021, EMNLP), reference jmhessel/clipscore ``clipscore.py``: ``2.5 * max(cos, 0)``
between OpenAI CLIP ViT-B/32's image features and those of "A photo depicts " + caption; fp16 on
CUDA as the reference, fp32 on CPU (recorded in the signature). Any CLIP-family checkpoint, w and
prefix can be given (``ClipS(model=..., w=..., prefix=...)``)."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.metrics.learned._clip import ClipFamily


class ClipS(ClipFamily):
    """CLIP-S per caption, range [0, w] (w = 2.5); ``raw`` the clipped cosine."""

    key = "clip_s"
    name = "CLIP-S"
    needs = frozenset({base.TEXTS, base.IMAGES})
    description = "CLIP-S (Hessel et al. 2021): w * max(cos(image, 'A photo depicts ' + caption), 0) on CLIP ViT-B/32."
