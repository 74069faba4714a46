"""PAC-S (Sarto et al. 2023, "Positive-Augmented Contrastive Learning for Image and Video Captioning
Evaluation", CVPR), reference aimagelab/pacscore ``evaluation/pac_score/pac_score.py`` (``PACScore``):
the CLIP-S recipe with w = 2.0, always fp32 (the reference calls ``model.float()``), on the PAC-S
checkpoint, which is not on any hub: give its file (``clip_ViT-B-32.pth``, a ``{"state_dict": ...}``
checkpoint of OpenAI's CLIP ViT-B/32) as ``model``, or put it in ``$CAPTIONEVAL_MODELS_DIR``."""
from __future__ import annotations

from captioneval.metrics import base
from captioneval.metrics.learned._clip import ClipFamily

#: the file name of the PAC-S ViT-B/32 checkpoint in the reference repository (checkpoints/)
PAC_S_FILE = "clip_ViT-B-32.pth"


class PacS(ClipFamily):
    """PAC-S per caption, range [0, 2]; ``raw`` the clipped cosine."""

    key = "pac_s"
    name = "PAC-S"
    needs = frozenset({base.TEXTS, base.IMAGES})
    fp16_on_cuda = False
    description = "PAC-S (Sarto et al. 2023): 2 * max(cos, 0) on the PAC-S fine-tuned CLIP ViT-B/32, fp32."

    def __init__(self, model: str = PAC_S_FILE, w: float = 2.0, **options):
        super().__init__(model=model, w=w, **options)
