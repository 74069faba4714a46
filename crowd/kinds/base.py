"""What every task kind provides: items, presentation order, form validation, gold checks,
agreement units, recording into the judgment tables, and a simulated rater.

A kind is stateless; the campaign, its items (``payload`` JSON, frozen at creation) and the
assignment (``order`` JSON, the presentation order shown) are passed in. Answers are stored in
*item order* (the order of ``payload``), never in screen order, so aggregation does not depend on
how the item was shown; the screen order is kept on the assignment for position-bias reports.
"""
from __future__ import annotations

import functools
import random
import re
import string
import sys
import unicodedata
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Mapping


class AnswerError(ValueError):
    """A submitted answer is invalid. ``errors`` maps form field names to messages."""

    def __init__(self, errors: Mapping[str, str]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()))


class CampaignSpecError(ValueError):
    """The options given to build a campaign's items are invalid (unknown system, no images...)."""


@dataclass
class ItemSpec:
    """An item to create: stable ``key``, frozen ``payload``, and the expected answer for gold items."""

    key: str
    payload: dict
    gold: dict | None = None


@dataclass
class Unit:
    """One agreement unit of an answer: ``key`` identifies what was rated (e.g. ``"item 7/set 2"``),
    ``criterion`` the scale (a kind may rate several), ``value`` the rating (number or label)."""

    key: str
    criterion: str
    value: Any


@dataclass
class RaterProfile:
    """How a simulated rater behaves: ``noise`` is the standard deviation added to the latent truth
    (in units of the scale's range), ``spammer`` answers uniformly at random."""

    noise: float = 0.1
    spammer: bool = False
    extra: dict = field(default_factory=dict)


INTEGER = re.compile(r"[+-]?[0-9]{1,15}")
DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15})(?:[eE][+-]?[0-9]{1,3})?")


@functools.cache
def _word_pattern() -> re.Pattern:
    """Runs of letters and digits of any script (``[^\\W_]``), combining marks (Unicode category M,
    e.g. accents, Devanagari vowel signs, Arabic harakat) and apostrophes; on ASCII text exactly the
    runs of ``[a-z0-9']`` of lower-cased text. Built on first use (scanning the code points takes
    0.2 s)."""
    marks, start = [], None
    for cp in range(sys.maxunicode + 2):
        is_mark = cp <= sys.maxunicode and unicodedata.category(chr(cp)).startswith("M")
        if is_mark and start is None:
            start = cp
        elif not is_mark and start is not None:
            marks.append(f"{chr(start)}-{chr(cp - 1)}")
            start = None
    return re.compile(r"(?:[^\W_]|['" + "".join(marks) + "])+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens used by duplicate checks and simulation: runs of letters and digits
    of any script (with their combining marks) and apostrophes, e.g. ``"Ein Mädchen's Rad"`` ->
    ``["ein", "mädchen's", "rad"]``; ASCII text gives the runs of ``[a-z0-9']``."""
    return _word_pattern().findall(text.lower())


def parse_number(data: Mapping[str, str], name: str, lo: float, hi: float, errors: dict, integer: bool = False):
    """Read field ``name`` (the last value if posted several times) as a number in [lo, hi]: ASCII
    digits with an optional sign (and, unless ``integer``, a decimal point and exponent), at most 15
    digits, surrounding whitespace ignored. On failure record a message in ``errors`` and return
    None."""
    raw = str(data.get(name) or "").strip()
    if raw == "":
        errors[name] = "required"
        return None
    if not (INTEGER if integer else DECIMAL).fullmatch(raw):
        errors[name] = f"{'a whole number' if integer else 'a number'} between {lo:g} and {hi:g} is required"
        return None
    value = int(raw) if integer else float(raw)
    if not (lo <= value <= hi) or value != value:
        errors[name] = f"must be between {lo:g} and {hi:g}"
        return None
    return value


class TaskKind(ABC):
    """Base class of the five task kinds (see :data:`crowd.kinds.KINDS`)."""

    name: str = ""
    title: str = ""
    criteria: tuple[str, ...] = ()
    agreement_level: str | None = None  # Krippendorff distance: "interval", "ordinal", "nominal" or None
    aggregation: str = "mean"
    template: str = ""
    template_version: str = "1"
    default_k: int = 3
    instructions: str = ""

    # --- building -----------------------------------------------------------------------------
    @abstractmethod
    def build_items(self, dataset, options: dict, rng: random.Random) -> list[ItemSpec]:
        """Items (gold included) for a campaign over ``dataset``; raises CampaignSpecError."""

    def prepare(self, campaign) -> None:
        """Hook run once when the campaign is created (e.g. create the system of collected captions)."""

    # --- serving ------------------------------------------------------------------------------
    def presentation_order(self, payload: dict, rng: random.Random) -> dict:
        """The order in which this assignment shows the item's parts (stored on the assignment)."""
        return {}

    def context(self, payload: dict, order: dict) -> dict:
        """Template context for the task page, in screen order."""
        return {"payload": payload}

    # --- answers ------------------------------------------------------------------------------
    @abstractmethod
    def clean(self, payload: dict, order: dict, data: Mapping[str, str], *, item=None) -> dict:
        """Validate the POSTed form ``data`` (screen-order field names) and return the answer in
        item order; raises :class:`AnswerError` naming each bad field."""

    def check_gold(self, answer: dict, gold: dict) -> bool:
        """Whether a gold item's answer is right. Kinds without gold items (free-text description)
        keep this default, which refuses: they never create gold items to check."""
        raise ValueError(f"campaigns of kind {self.name!r} have no gold items")

    def units(self, item_key: str, payload: dict, answer: dict) -> list[Unit]:
        """The answer's ratings as agreement units (empty for free text)."""
        return []

    def record(self, assignment, answer: dict) -> None:
        """Write a counted answer into the judgment tables the analysis reads."""

    # --- simulation ---------------------------------------------------------------------------
    @abstractmethod
    def simulate(self, payload: dict, order: dict, rng: random.Random, profile: RaterProfile, hints: dict) -> dict:
        """Form data (screen-order field names) a simulated rater would post."""

    def simulation_hints(self, campaign) -> dict:
        """Ground truth the simulator may peek at (e.g. imported expert scores); kind-specific."""
        return {}


def default_gold(n_items: int) -> int:
    """Default number of gold items: 5 % of the items, at least 5 (so that a worker can answer the
    3 gold items the default blocking threshold needs, and more)."""
    return max(5, n_items // 20)


MAX_URL_TEMPLATE = 2000


def check_url_template(url_template: str) -> str:
    """Return ``url_template`` if it is an image URL template this platform can fill: at most
    2,000 characters, no NUL, and no placeholder other than a plain ``{key}`` (``{{``/``}}`` are
    literal braces). Raises CampaignSpecError saying what is wrong (``{0}``, ``{name}``,
    ``{key.attr}``, ``{key:>9}``, an unmatched brace)."""
    if len(url_template) > MAX_URL_TEMPLATE or "\x00" in url_template:
        raise CampaignSpecError(f"the image URL template must have at most {MAX_URL_TEMPLATE} characters and no NUL")
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(url_template) if f is not None]
    except ValueError as exc:
        raise CampaignSpecError(f"the image URL template is not valid ({exc}); use {{key}} for the image key") from None
    if any(f != ("key", "", None) for f in fields):
        raise CampaignSpecError("the image URL template may only use the placeholder {key} (write {{ and }} for braces)")
    return url_template


def image_fields(image, url_template: str | None) -> dict:
    """The payload fields that show an image: its id, key and URL (``url_template`` may use
    ``{key}``, see :func:`check_url_template`, which raises CampaignSpecError for another
    placeholder; without it, the image's own URL, which may be empty)."""
    url = check_url_template(url_template).format(key=image.key) if url_template else image.url
    return {"image": image.pk, "image_key": image.key, "image_url": url}


def pick_images(dataset, options: dict, rng: random.Random):
    """The dataset's images, or a seeded sample of ``options["images"]`` of them, in key order."""
    images = list(dataset.images.order_by("key"))
    n = options.get("images")
    if not images:
        raise CampaignSpecError(f"dataset {dataset.name!r} has no images")
    if n is not None:
        if n < 1:
            raise CampaignSpecError("the number of images must be at least 1")
        if n > len(images):
            raise CampaignSpecError(f"dataset {dataset.name!r} has only {len(images)} images, {n} were asked for")
        images = sorted(rng.sample(images, n), key=lambda im: im.key)
    return images
