"""The task kinds of rating campaigns, one module each:

=====================  ======================================  =========  ==========  ============
kind                   what the rater does                     scale      agreement   aggregate
=====================  ======================================  =========  ==========  ============
``diversity``          scores each caption set's diversity     0-1        interval    mean
``rating``             relevance and thoroughness of caption   1-5 (x2)   ordinal     mean
``forced_choice``      which of B or C is closer to A          B/C        nominal     majority
``visual_atom``        is this word visual?                    yes/no     nominal     majority
``description``        describes the image (free text)         text       --          new captions
=====================  ======================================  =========  ==========  ============
"""
from .base import AnswerError, CampaignSpecError, ItemSpec, RaterProfile, TaskKind, Unit
from .description import Description
from .diversity import Diversity
from .forced_choice import ForcedChoice
from .rating import Rating
from .visual_atom import VisualAtom

KINDS: dict[str, TaskKind] = {k.name: k for k in (Diversity(), Rating(), ForcedChoice(), VisualAtom(), Description())}


def get_kind(name: str) -> TaskKind:
    """The kind called ``name``; raises CampaignSpecError listing the known kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise CampaignSpecError(f"unknown campaign kind {name!r}; choose from: {', '.join(KINDS)}") from None


__all__ = ["KINDS", "AnswerError", "CampaignSpecError", "ItemSpec", "RaterProfile", "TaskKind", "Unit", "get_kind"]
