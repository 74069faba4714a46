"""RefFLEUR (Lee et al. 2024, ACL), reference Yebin46/FLEUR ``reffleur.py``: FLEUR with the reference
captions (joined by newlines) in the prompt; the same smoothing and departures
(:mod:`captioneval.kernels.judges.fleur`)."""
from __future__ import annotations

from captioneval.kernels.judges import fleur as k
from captioneval.metrics import base
from captioneval.metrics.judges.fleur import Fleur


class RefFleur(Fleur):
    """RefFLEUR per caption, range [0, 1]; as :class:`~captioneval.metrics.judges.fleur.Fleur`."""

    key = "ref_fleur"
    name = "RefFLEUR"
    version = "captioneval-ref-fleur/1"
    needs = frozenset({base.TEXTS, base.IMAGES, base.REFERENCE_TEXTS})
    description = ("RefFLEUR (Lee et al. 2024): FLEUR with the reference captions in the prompt, as "
                   "Yebin46/FLEUR's reffleur.py.")
    reference_based = True
    template = k.REF_PROMPT
