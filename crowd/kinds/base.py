"""What every task kind provides -- everything kind-specific that the engine, quality control and
the reports need -- and the registry of kinds.

A kind declares its rated unit (:data:`UNITS`), a :class:`Scale` per criterion, which criteria are
numeric judgments to correlate with metrics, and implements: items, presentation order, form
validation, gold grading, agreement units, recording into the judgment tables and releasing them
again, the numeric judgments of a criterion, pair votes (caption-pair kinds), screen positions for
the position-bias report, a kind-specific report section, and a simulated rater.

A kind is stateless; the campaign, its items (``payload`` JSON, frozen at creation) and the
assignment (``order`` JSON, the presentation order shown) are passed in. Answers are stored in
*item order* (the order of ``payload``), never in screen order, so aggregation does not depend on
how the item was shown; the screen order is kept on the assignment for position-bias reports.

Registration: a kind module calls :func:`register` with an instance of its class at import time.
Every module of the package :mod:`crowd.kinds` is imported when the package is (so a new kind is
one new file in ``crowd/kinds/``); a kind defined elsewhere (a plugin package, a test) is
registered when its module is imported. Everything else looks kinds up with :func:`get_kind`.
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
from typing import Any, Callable, Mapping, Sequence
from urllib.parse import quote


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


#: the rated units a kind may declare: one caption, the caption set of one system for one image
#: (key ``"<image id>/<system id>"``), a pair of captions compared with a reference, a word, an image
UNITS = ("caption", "caption_set", "caption_pair", "word", "image")

#: metric levels whose scores can be compared with judgments of each rated unit: caption-level
#: scores with captions (and, averaged over the set's captions, with caption sets); set-level scores
#: (Self-CIDEr, LSA, mBLEU diversity, set accuracy) with caption sets only
METRIC_LEVELS = {"caption_set": ("caption", "set")}


@dataclass(frozen=True)
class Scale:
    """What one criterion's answers are: numbers in [``low``, ``high``] (e.g. 1-5 Likert, a 0-1
    slider), or one of ``labels`` (a vote: ``("b", "c")``, ``(0, 1)``). :meth:`TaskKind.units`
    yields values on this scale; ``span`` (high - low) normalises absolute differences in the
    per-worker agreement of :func:`crowd.quality.worker_stats`."""

    low: float | None = None
    high: float | None = None
    labels: tuple = ()

    def __post_init__(self):
        numeric = self.low is not None and self.high is not None
        if numeric == bool(self.labels) or (numeric and not self.low < self.high):
            raise ValueError("a scale is either numeric (low < high) or a tuple of labels")

    @property
    def numeric(self) -> bool:
        return not self.labels

    @property
    def span(self) -> float:
        """``high - low`` of a numeric scale; raises ValueError for labels."""
        if not self.numeric:
            raise ValueError("a label scale has no span")
        return float(self.high - self.low)


@dataclass
class Judgments:
    """The counted numeric judgments of one criterion, one row per (unit, rater), as parallel
    lists: ``units`` (caption ids, or ``"<image id>/<system id>"`` keys of caption sets),
    ``images`` (image ids: the bootstrap resamples images), ``raters`` (rater ids) and ``scores``
    (floats on the criterion's scale)."""

    units: list
    images: list
    raters: list
    scores: list

    def __len__(self) -> int:
        return len(self.scores)


@dataclass(frozen=True)
class PairVotes:
    """Votes on one caption pair: which of captions ``b`` and ``c`` (caption ids) is closer to the
    reference; ``for_b`` and ``for_c`` count the counted votes."""

    b: int
    c: int
    for_b: int
    for_c: int


@dataclass(frozen=True)
class Shown:
    """Where one answer's parts were on the screen (1-based positions), for the position-bias report:
    ``scores`` maps a position to the score given to the part shown there (e.g. a caption set), or
    ``chosen`` is the position picked among ``n_shown`` options (e.g. forced choice)."""

    scores: Mapping[int, float] | None = None
    chosen: int | None = None
    n_shown: int = 0


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
    """Base class of the task kinds (see :data:`KINDS`; register a subclass with :func:`register`).

    Class attributes a kind sets:

    * ``name``: the key stored on campaigns (``Campaign.kind``): ``[a-z][a-z0-9_]*``, at most 30
      characters; ``title`` and ``instructions``: shown to owners and raters;
    * ``unit``: what one judgment rates, one of :data:`UNITS`;
    * ``criteria`` and ``scales``: the criteria rated, each with its :class:`Scale`;
    * ``metric_criteria``: the criteria whose numeric judgments the campaign report correlates
      with the metrics (and gives a split-half ceiling for); empty for votes and free text;
    * ``agreement_level``: Krippendorff's distance for alpha ("interval", "ordinal", "nominal") or
      None (no agreement statistic); ``aggregation``: "mean" (scales) or "majority" (votes);
    * ``report_section``: the key of this kind's own section of the campaign report (filled by
      :meth:`pair_votes` or :meth:`summary`), or None;
    * ``template`` / ``template_version``: the task form and its version; ``default_k``: judgments
      per item;
    * ``shows_images``: the rater must see the picture to answer, so a campaign of this kind is
      published only with a picture URL for every item (:func:`crowd.images.campaign_image_problem`).
    """

    name: str = ""
    title: str = ""
    unit: str = "caption"
    criteria: tuple[str, ...] = ()
    scales: Mapping[str, Scale] = {}
    metric_criteria: tuple[str, ...] = ()
    agreement_level: str | None = None  # Krippendorff distance: "interval", "ordinal", "nominal" or None
    aggregation: str = "mean"
    report_section: str | None = None
    template: str = ""
    template_version: str = "1"
    default_k: int = 3
    instructions: str = ""
    shows_images: bool = False

    def scale(self, criterion: str) -> Scale:
        """The :class:`Scale` of ``criterion``; KeyError for a criterion the kind does not rate."""
        return self.scales[criterion]

    @property
    def metric_levels(self) -> tuple[str, ...]:
        """Metric levels comparable with this kind's rated unit (see :data:`METRIC_LEVELS`)."""
        return METRIC_LEVELS.get(self.unit, ("caption",))

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

    def release(self, campaign, worker, assignment_ids: Sequence[int]) -> None:
        """Undo :meth:`record` for ``worker``'s counted assignments ``assignment_ids`` (a blocked
        worker's work, :func:`crowd.engine.release_counted_work`, inside its transaction). The
        default removes the worker's rows of the judgment tables (``HumanJudgment`` and
        ``PairwiseJudgment``) of the campaign; a kind that records elsewhere extends it."""
        from crowd.models import HumanJudgment, PairwiseJudgment

        HumanJudgment.objects.filter(campaign=campaign, rater=worker.rater_id).delete()
        PairwiseJudgment.objects.filter(campaign=campaign, rater=worker.rater_id).delete()

    # --- what the reports read ----------------------------------------------------------------
    def judgments(self, campaign, criterion: str) -> Judgments:
        """The campaign's counted numeric judgments on ``criterion`` (one of ``metric_criteria``),
        read from ``HumanJudgment`` in (image, system, caption, rater) order; a row's unit is its
        caption id, or ``"<image id>/<system id>"`` for a caption-set judgment (no caption)."""
        from crowd.models import HumanJudgment

        rows = list(
            HumanJudgment.objects.filter(campaign=campaign, criterion=criterion)
            .order_by("image_id", "system_id", "caption_id", "rater")
            .values_list("image_id", "system_id", "caption_id", "rater", "score")
        )
        return Judgments(
            units=[c if c is not None else f"{i}/{s}" for i, s, c, _, _ in rows],
            images=[r[0] for r in rows], raters=[r[3] for r in rows], scores=[r[4] for r in rows],
        )

    def unit_captions(self, campaign) -> dict[str, list[int]] | None:
        """For kinds whose unit groups several captions (caption sets): {unit key: caption ids}, so
        that a caption-level metric is compared through its mean over the unit's captions. None
        (the default) when every unit is one caption."""
        return None

    def pair_votes(self, campaign) -> list[PairVotes] | None:
        """Counted votes per caption pair (caption-pair kinds; the report gives each metric's
        agreement with the majority, in :attr:`report_section`); None (the default) otherwise."""
        return None

    def summary(self, campaign, aggregate: Callable[[], dict]) -> dict | None:
        """This kind's own section of the campaign report (in :attr:`report_section`), computed
        from the campaign and, if needed, ``aggregate()`` (the aggregated answer per unit,
        :func:`crowd.quality.aggregate`); None (the default) for none."""
        return None

    def shown(self, order: dict, answer: dict) -> Shown | None:
        """Where the parts of one counted ``answer`` were on the screen (``order`` is the
        assignment's presentation order), for the position-bias report; None (the default) when
        the kind shows one thing."""
        return None

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


#: A template starts with one of these (case-insensitive), then a host that ``{key}`` is not part of.
_HTTP_PREFIX = re.compile(r"https?://(?P<host>[^/?#\\]*)", re.IGNORECASE)


def check_url_template(url_template: str) -> str:
    """Return ``url_template`` if it is an image URL template this platform can fill: at most
    2,000 characters, starting with ``http://`` or ``https://`` (any case) and a host in which
    ``{key}`` does not appear, no whitespace or control character (browsers drop some of them, which
    could turn another scheme into a working one), and no placeholder other than a plain ``{key}``
    (``{{``/``}}`` are literal braces). Raises CampaignSpecError saying what is wrong
    (``javascript:``, ``data:``, a relative URL, ``{0}``, ``{name}``, ``{key.attr}``, ``{key:>9}``,
    an unmatched brace). The key itself is percent-encoded when the URL is built
    (:func:`image_url`)."""
    if len(url_template) > MAX_URL_TEMPLATE or "\x00" in url_template:
        raise CampaignSpecError(f"the image URL template must have at most {MAX_URL_TEMPLATE} characters and no NUL")
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(url_template) if f is not None]
    except ValueError as exc:
        raise CampaignSpecError(f"the image URL template is not valid ({exc}); use {{key}} for the image key") from None
    if any(f != ("key", "", None) for f in fields):
        raise CampaignSpecError("the image URL template may only use the placeholder {key} (write {{ and }} for braces)")
    if any(c.isspace() or unicodedata.category(c) == "Cc" for c in url_template):
        raise CampaignSpecError("the image URL template may not contain spaces or control characters "
                                "(percent-encode them, e.g. %20)")
    prefix = _HTTP_PREFIX.match(url_template)
    if prefix is None:
        raise CampaignSpecError(
            f"the image URL template must start with http:// or https://, got {url_template[:40]!r}: "
            "other schemes (javascript:, data:, file:, ...) and relative URLs are refused")
    if not prefix.group("host") or "{" in prefix.group("host"):
        raise CampaignSpecError("the image URL template needs a fixed host after http(s):// "
                                "({key} may only appear in the path or query, e.g. https://host/images/{key})")
    return url_template


def quote_key(key: str) -> str:
    """``key`` percent-encoded for an image URL (RFC 3986 section 2.1, :func:`urllib.parse.quote`):
    every character except ASCII letters, digits, ``-._~`` and ``/`` is encoded, so ``?``, ``#``,
    ``%``, ``&``, ``\\`` and spaces cannot end or change the path. ``/`` is kept so that keys naming
    files in sub-folders (``val2014/x.jpg``) keep working URLs. A key that could climb or change the
    template's path -- empty, starting with ``/``, or with an empty, ``.`` or ``..`` segment -- is
    refused with CampaignSpecError (browsers resolve ``..`` even percent-encoded, WHATWG URL
    standard, "double-dot path segment")."""
    segments = key.split("/")
    if not key or any(seg in ("", ".", "..") for seg in segments):
        raise CampaignSpecError(
            f"the image key {key[:100]!r} cannot be put into an image URL: keys may not be empty, start or end "
            "with '/', or contain '//', '.' or '..' segments (leave the template empty to show no image)")
    return quote(key, safe="/")


def image_url(url_template: str, key: str) -> str:
    """The URL of the image ``key`` by ``url_template`` (:func:`check_url_template`; ``{key}``
    replaced by :func:`quote_key`). Raises CampaignSpecError for a bad template or key."""
    return check_url_template(url_template).format(key=quote_key(key))


def image_fields(image, url_template: str | None) -> dict:
    """The payload fields that show an image: its id, key and URL (``url_template`` may use
    ``{key}``: :func:`image_url`, which raises CampaignSpecError for a template that is not
    http(s) or another placeholder, and for a key that could change the path; without a template,
    the image's own URL when it is http(s), else empty: the engine then fills in the URL from the
    dataset's image source, :func:`crowd.images.fill_urls`)."""
    if url_template:
        url = image_url(url_template, image.key)
    else:
        url = image.url if _HTTP_PREFIX.match(image.url or "") else ""
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


# --- the registry -----------------------------------------------------------------------------------
KIND_NAME = re.compile(r"^[a-z][a-z0-9_]{0,29}$")  # Campaign.kind is a CharField(max_length=30)
KINDS: dict[str, TaskKind] = {}


def register(kind: TaskKind) -> TaskKind:
    """Add ``kind`` (an instance) to :data:`KINDS` under ``kind.name`` and return it. Registering
    an instance of the same class again replaces it (a module imported twice). Raises ValueError
    for a name that is not ``[a-z][a-z0-9_]*`` of at most 30 characters, a name or report section
    already taken by another class, an unknown unit, criteria without a :class:`Scale`, metric
    criteria that are not numeric criteria of the kind, or an unknown agreement level."""
    name = kind.name
    if not isinstance(name, str) or not KIND_NAME.fullmatch(name):
        raise ValueError(f"task kind name {name!r}: need [a-z][a-z0-9_]*, at most 30 characters")
    other = KINDS.get(name)
    if other is not None and type(other).__qualname__ != type(kind).__qualname__:
        raise ValueError(f"task kind {name!r} is already registered by {type(other).__qualname__}")
    if kind.unit not in UNITS:
        raise ValueError(f"task kind {name!r}: unit {kind.unit!r} is not one of {', '.join(UNITS)}")
    if set(kind.scales) != set(kind.criteria):
        raise ValueError(f"task kind {name!r}: give one Scale per criterion ({', '.join(kind.criteria)})")
    bad = [c for c in kind.metric_criteria if c not in kind.scales or not kind.scales[c].numeric]
    if bad:
        raise ValueError(f"task kind {name!r}: metric criteria {', '.join(bad)} are not numeric criteria")
    if kind.agreement_level not in (None, "interval", "ordinal", "nominal", "ratio"):
        raise ValueError(f"task kind {name!r}: unknown agreement level {kind.agreement_level!r}")
    section = kind.report_section
    if section is not None and any(k.report_section == section for n, k in KINDS.items() if n != name):
        raise ValueError(f"task kind {name!r}: report section {section!r} is taken by another kind")
    KINDS[name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind called ``name`` (tests that register a kind temporarily); no error if absent."""
    KINDS.pop(name, None)


def get_kind(name: str) -> TaskKind:
    """The registered kind called ``name`` (e.g. a campaign's stored ``kind``); raises
    CampaignSpecError listing the known kinds."""
    try:
        return KINDS[name]
    except KeyError:
        raise CampaignSpecError(f"unknown campaign kind {name!r}; choose from: {', '.join(KINDS)}") from None


def kind_of(campaign) -> TaskKind:
    """The registered kind of ``campaign`` (its stored ``kind`` key); CampaignSpecError if that
    kind is not registered (e.g. its module is no longer installed)."""
    return get_kind(campaign.kind)


def report_sections() -> list[str]:
    """The report-section keys of the registered kinds, in registration order: every campaign
    report has each key (None unless it is the campaign's own kind's)."""
    return [k.report_section for k in KINDS.values() if k.report_section]
