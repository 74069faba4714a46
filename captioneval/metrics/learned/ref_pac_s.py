"""RefPAC-S (Sarto et al. 2023, CVPR), reference aimagelab/pacscore (``RefPACScore`` and the harmonic
mean in ``compute_metrics.py``): as RefCLIP-S with w = 2.0, fp32, on the PAC-S checkpoint (a file the
user gives). The reference side is not clipped at 0 (as in clipscore.py)."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.metrics.learned._clip import ClipFamily
from captioneval.metrics.learned.pac_s import PAC_S_FILE


class RefPacS(ClipFamily):
    """RefPAC-S per caption (range [-2, 2] as the code computes it); ``raw`` the best reference cosine."""

    key = "ref_pac_s"
    name = "RefPAC-S"
    needs = frozenset({base.TEXTS, base.IMAGES, base.REFERENCE_TEXTS})
    reference_based = True
    fp16_on_cuda = False
    description = "RefPAC-S (Sarto et al. 2023): harmonic mean of PAC-S and the best reference cosine."

    def __init__(self, model: str = PAC_S_FILE, w: float = 2.0, **options):
        super().__init__(model=model, w=w, **options)
