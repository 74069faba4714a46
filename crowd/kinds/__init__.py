"""The task kinds of rating campaigns, one module each, and their registry:

=====================  ======================================  =========  ==========  ============
kind                   what the rater does                     scale      agreement   aggregate
=====================  ======================================  =========  ==========  ============
``diversity``          scores each caption set's diversity     0-1        interval    mean
``rating``             relevance and thoroughness of caption   1-5 (x2)   ordinal     mean
``forced_choice``      which of B or C is closer to A          B/C        nominal     majority
``visual_atom``        is this word visual?                    yes/no     nominal     majority
``description``        describes the image (free text)         text       --          new captions
=====================  ======================================  =========  ==========  ============

Adding a kind is one new module in this package: a :class:`TaskKind` subclass and a call to
:func:`register` with an instance of it at the end of the module. Importing this package imports
the built-in kinds above first (they keep this listing order in forms and ``create_campaign``),
then every other module of the package in name order (:func:`pkgutil.iter_modules`). A kind kept
outside the package (a plugin distribution, a test) calls :func:`register` the same way and is
available once its module has been imported. Look kinds up with :func:`get_kind`.
"""
import importlib
import pkgutil

from .base import (
    KINDS,
    AnswerError,
    CampaignSpecError,
    ItemSpec,
    Judgments,
    PairVotes,
    RaterProfile,
    Scale,
    Shown,
    TaskKind,
    Unit,
    get_kind,
    kind_of,
    register,
    report_sections,
    unregister,
)

BUILTIN = ("diversity", "rating", "forced_choice", "visual_atom", "description")
for _module in (*BUILTIN, *sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in BUILTIN)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "KINDS", "AnswerError", "CampaignSpecError", "ItemSpec", "Judgments", "PairVotes", "RaterProfile", "Scale",
    "Shown", "TaskKind", "Unit", "get_kind", "kind_of", "register", "report_sections", "unregister",
]
