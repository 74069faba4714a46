"""RefCLIP-S (Hessel et al. 2021, EMNLP, Eq. 2), reference jmhessel/clipscore ``clipscore.py``: the
harmonic mean ``2 s t / (s + t)`` of CLIP-S s and the largest cosine t between the caption and one of
its references (both texts with the prefix). Where the code and the paper differ we follow the code:
the paper clips t at 0 (``max(max_r cos, 0)``), the code does not, so a score can be negative or NaN
(s + t = 0); the candidate features are normalised twice, as the code does."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.metrics.learned._clip import ClipFamily


class RefClipS(ClipFamily):
    """RefCLIP-S per caption (range [-w, w] as the code computes it); ``raw`` the best reference cosine."""

    key = "ref_clip_s"
    name = "RefCLIP-S"
    needs = frozenset({base.TEXTS, base.IMAGES, base.REFERENCE_TEXTS})
    reference_based = True
    description = "RefCLIP-S (Hessel et al. 2021): harmonic mean of CLIP-S and the best reference cosine, as clipscore.py."
