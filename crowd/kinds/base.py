"""What every task kind provides: items, presentation order, form validation, gold checks,
agreement units, recording into the judgment tables, and a simulated rater.

A kind is stateless; the campaign, its items (``payload`` JSON, frozen at creation) and the
assignment (``order`` JSON, the presentation order shown) are passed in. Answers are stored in
*item order* (the order of ``payload``), never in screen order, so aggregation does not depend on
how the item was shown; the screen order is kept on the assignment for position-bias reports.
"""
from __future__ import annotations

import random
import re
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


WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, apostrophes) used by duplicate checks and simulation."""
    return WORD.findall(text.lower())


def parse_number(data: Mapping[str, str], name: str, lo: float, hi: float, errors: dict, integer: bool = False):
    """Read field ``name`` as a number in [lo, hi]; on failure record a message in ``errors``."""
    raw = (data.get(name) or "").strip()
    if raw == "":
        errors[name] = "required"
        return None
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        errors[name] = f"{'a whole number' if integer else 'a number'} between {lo:g} and {hi:g} is required"
        return None
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


def image_fields(image, url_template: str | None) -> dict:
    """The payload fields that show an image: its id, key and URL (``url_template`` may use
    ``{key}``; without it, the image's own URL, which may be empty)."""
    url = url_template.format(key=image.key) if url_template else image.url
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
