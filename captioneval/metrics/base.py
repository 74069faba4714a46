"""The metric interface: one class instance per metric, in the style of sacrebleu's metric classes.

A metric (sacrebleu's ``BLEU``, ``CHRF``... are the model: Post 2018, "A Call for Clarity in Reporting
BLEU Scores", https://github.com/mjpost/sacrebleu) is an object that

* declares what it is: :attr:`Metric.key` (command line, database, JSON), :attr:`Metric.name` (the
  field's standard name: BLEU-4, CIDEr-D, METEOR...), :attr:`Metric.version` (stored with every run;
  change it whenever the numbers could change), :attr:`Metric.level`, :attr:`Metric.range`,
  :attr:`Metric.higher` and :attr:`Metric.description` (cite the paper there);
* declares what it *needs* (:attr:`Metric.needs`, a frozenset of the constants below), so that the
  pipeline (:mod:`metrics.pipeline`) gathers exactly that and never tests a metric's name;
* implements ONE scoring method, :meth:`Metric.score`, over a :class:`Batch` carrying what it declared,
  returning :class:`Scores` (one float64 per unit, plus documented extras);
* gives a :meth:`Metric.signature`: name, version and every parameter that changes the numbers, as
  sacrebleu's signatures do (``BLEU-4|v:pycocoevalcap-1.2|n:4|bp:closest``).

Levels (Wang & Chan 2019 for sets; Kershaw & Bober 2019 for system corpora):

* ``"caption"`` -- one number per candidate caption; the batch has ``candidates`` (and what was asked);
* ``"set"`` -- one number per caption set (a system's captions of one image); the batch has ``sets``,
  ``is_reference`` and ``m``;
* ``"system"`` -- one number per system's caption corpus; the batch has ``corpora``.

Adding a metric: one file in :mod:`captioneval.metrics.builtin` exporting ``METRICS = [MyMetric()]`` (and
``ORDER``, its place in tables), or the same file registered with
:func:`captioneval.metrics.registry.register_module`, or an entry point of another distribution
(:mod:`captioneval.metrics.plugins`). Django-free: plain lists of PTB-tokenised strings and numpy.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from captioneval.utils.numbers import finite_or_none  # noqa: F401 - re-exported for the metric modules

# --- what a metric can need (declared in Metric.needs) -------------------------------------------
#: the tokenised reference captions of each unit's image (``Batch.references``); a dataset without
#: references cannot be scored
REFERENCES = "references"
#: a CIDEr-D document-frequency table (``Batch.document_frequency``): by default computed over the
#: dataset (run parameter ``document_frequency = "dataset"``), or a supplied table (``--cider-df``)
DOCUMENT_FREQUENCY = "document_frequency"
#: the object labels of each caption's image (``Batch.objects``); only captions of images with
#: labels are scored
OBJECTS = "objects"
#: the raw, untokenised caption texts (``Batch.texts``), for metrics with their own word processing
TEXTS = "texts"
#: word vectors (``Batch.vectors``: a file path or None for the default); their identity is stored
#: with the run (run parameter ``vectors``)
WORD_VECTORS = "word_vectors"
#: the caption sets of one image and system (set level; ``Batch.sets``)
CAPTION_SETS = "caption_sets"
#: the reference captions as R corpora of one reference per image (system level;
#: ``Batch.reference_corpora``, empty when the dataset has no references)
REFERENCE_CORPORA = "reference_corpora"
#: every unit of the dataset in one call, in unit order (the metric's scores depend on the others,
#: so chunks must not change them); the pipeline scores the whole run once and caches it
WHOLE_CORPUS = "whole_corpus"
#: a Java runtime (METEOR 1.5's jar)
JVM = "jvm"
#: the image of each caption (``Batch.images``: a file path or the file's bytes), for the learned
#: image-text metrics (captioneval.metrics.learned)
IMAGES = "images"
#: the raw, untokenised reference captions of each caption's image (``Batch.reference_texts``), for
#: metrics with their own tokenizer (RefCLIP-S, BERTScore)
REFERENCE_TEXTS = "reference_texts"

NEEDS = frozenset({REFERENCES, DOCUMENT_FREQUENCY, OBJECTS, TEXTS, WORD_VECTORS, CAPTION_SETS, REFERENCE_CORPORA,
                   WHOLE_CORPUS, JVM, IMAGES, REFERENCE_TEXTS})
LEVELS = ("caption", "set", "system")
#: what a higher score can mean; only "worse" makes a metric reversed (a distance)
DIRECTIONS = ("better", "worse", "more diverse", "more faithful", "more similar")


@dataclass
class Batch:
    """The inputs of one :meth:`Metric.score` call; only the fields for the metric's level and its
    declared :attr:`Metric.needs` are filled, the others are None. n = number of units.

    Caption level: ``candidates`` n PTB-tokenised captions; ``references`` n non-empty lists of
    tokenised references (REFERENCES); ``texts`` n raw captions (TEXTS); ``objects`` n mappings
    label -> instance count (OBJECTS); ``vectors`` word-vector file or None (WORD_VECTORS).

    Set level: ``sets`` n lists of tokenised captions (one system's captions of one image, in caption
    key order, NOT yet cut to ``m``); ``m`` captions to use per set (None = all); ``is_reference`` n
    flags, True when the set is the image's references; ``references`` n lists of the image's
    tokenised references, possibly empty (REFERENCES).

    System level: ``corpora`` n lists of tokenised captions (the first caption of every image, then
    the second...); ``reference_corpora`` the references as R corpora (REFERENCE_CORPORA).

    Caption level, learned metrics: ``images`` n image files (path or bytes, IMAGES);
    ``reference_texts`` n lists of raw reference captions (REFERENCE_TEXTS).

    Any level: ``document_frequency`` a :class:`captioneval.kernels.cider.DocumentFrequency`
    (DOCUMENT_FREQUENCY; None lets CIDEr-D compute it from the references, the COCO default).
    """

    candidates: Sequence[str] | None = None
    references: Sequence[Sequence[str]] | None = None
    texts: Sequence[str] | None = None
    objects: Sequence[dict] | None = None
    vectors: str | None = None
    sets: Sequence[Sequence[str]] | None = None
    m: int | None = None
    is_reference: Sequence[bool] | None = None
    corpora: Sequence[Sequence[str]] | None = None
    reference_corpora: Sequence[Sequence[str]] | None = None
    document_frequency: Any = None
    images: Sequence[Any] | None = None
    reference_texts: Sequence[Sequence[str]] | None = None

    def __len__(self) -> int:
        for units in (self.candidates, self.texts, self.sets, self.corpora):
            if units is not None:
                return len(units)
        return 0


@dataclass
class Scores:
    """What :meth:`Metric.score` returns.

    ``values`` : ndarray (n,), float64, one score per unit within the metric's range, NaN where
        undefined (a set of one caption, a corpus too short for HD-D, a caption without known words).
    ``raw`` : ndarray (n,) float64 or None: a second per-caption number stored with the score
        (VIFIDEL: the raw word mover's distance, of which ``values`` is exp(-distance)).
    ``details`` : list of n JSON-serialisable dicts or None (system level: vocabulary's word-frequency
        curve, the lexical measures' reference value, ratio l_d and Lexical Gap).
    """

    values: np.ndarray
    raw: np.ndarray | None = None
    details: list[dict] | None = None


class Metric:
    """Base class of every metric (built-in, registered or plugin); subclasses set the class
    attributes (or pass them to ``__init__``) and implement :meth:`score`.

    Attributes
    ----------
    key : ``[a-z][a-z0-9_]*``, at most 50 characters; unique.
    name : display name for tables and plots.
    version : implementation version stored with each run (at most 100 characters).
    level : "caption", "set" or "system".
    range : (low, high) of a score.
    higher : what a higher value means, one of :data:`DIRECTIONS`.
    description : one or two sentences citing the source.
    needs : frozenset of the need constants of this module.
    family : metrics computed by the same code (``"bleu"``; ``"plugin:<distribution>"`` for plugins).
    groups : command-line group names (``coco``, ``diversity``...) the metric belongs to.
    accelerator : True when the metric runs much faster on a GPU (the learned metrics): the platform
        sends its runs to the GPU Celery queue when one is configured (``CELERY_GPU_QUEUE``), else
        computes them on CPU on the default queue.
    """

    key: str = ""
    name: str = ""
    version: str = ""
    level: str = "caption"
    range: tuple[float, float] = (float("-inf"), float("inf"))
    higher: str = "better"
    description: str = ""
    needs: frozenset = frozenset()
    family: str = ""
    groups: tuple[str, ...] = ()
    accelerator: bool = False

    def __init__(self, **attributes):
        for attr, value in attributes.items():
            if not hasattr(type(self), attr) or callable(getattr(type(self), attr)):
                raise TypeError(f"{type(self).__name__} has no metric attribute {attr!r}")
            setattr(self, attr, value)
        self.needs = frozenset(self.needs)
        self.range = (float(self.range[0]), float(self.range[1]))
        self.groups = tuple(self.groups)
        if not self.family:
            self.family = self.key

    # --- compatibility with the former data records ---------------------------------------------
    @property
    def needs_corpus(self) -> bool:
        """True when a score depends on dataset-wide statistics (a document-frequency table, or every
        unit scored at once)."""
        return bool(self.needs & {DOCUMENT_FREQUENCY, WHOLE_CORPUS})

    @property
    def needs_objects(self) -> bool:
        """True for metrics that compare captions with the image's object labels (VIFIDEL)."""
        return OBJECTS in self.needs

    def needs_references(self, document_frequency_supplied: bool = False) -> bool:
        """True when the dataset must have reference captions: the metric reads them (tokenised, or raw as
        RefCLIP-S and BERTScore), or it needs a document-frequency table and none is supplied (the
        default table is built from them)."""
        return bool(self.needs & {REFERENCES, REFERENCE_TEXTS}) or (
            DOCUMENT_FREQUENCY in self.needs and not document_frequency_supplied)

    # --- the interface ----------------------------------------------------------------------------
    def score(self, batch: Batch) -> Scores:
        """Score every unit of ``batch`` (see :class:`Batch` for its fields by level and need).

        Returns :class:`Scores` with ``values`` of shape (len(batch),), float64. Raises ValueError for
        inputs the metric cannot score (missing references...), and whatever its scorer raises
        (JavaMissingError for METEOR, PluginError for a plugin)."""
        raise NotImplementedError

    def parameters(self) -> dict:
        """Parameters that change the numbers, beyond the version (n-gram order, sigma...); {} by
        default. Shown by :meth:`signature`; the pipeline's stored run parameters are separate."""
        return {}

    def signature(self) -> dict:
        """Name, key, version, level and every parameter that changes the numbers, as a dict (the
        sacrebleu idea: report it with the score so results can be compared and reproduced)."""
        return {"name": self.name, "key": self.key, "version": self.version, "level": self.level, **self.parameters()}

    def signature_string(self) -> str:
        """The signature in sacrebleu's ``name|v:version|param:value`` form."""
        sig = self.signature()
        rest = [f"{k}:{v}" for k, v in sig.items() if k not in ("name", "version", "key", "level")]
        return "|".join([sig["name"], f"v:{sig['version']}", f"level:{sig['level']}", *rest])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key!r} {self.name!r} {self.version!r} ({self.level})>"

    # --- helpers for subclasses -------------------------------------------------------------------
    @staticmethod
    def sets_of(batch: Batch) -> list[list[str]]:
        """``batch.sets`` cut to the first ``batch.m`` captions (all when m is None)."""
        return [list(s[: batch.m]) if batch.m else list(s) for s in batch.sets]


def validate(metric: Metric, reserved: Sequence[str] = ()) -> Metric:
    """Check a metric object's declarations; returns it. Raises ValueError saying what is wrong
    (the plugin loader wraps it in a PluginError)."""
    if not isinstance(metric, Metric):
        raise ValueError(f"not a captioneval.metrics.base.Metric: {type(metric).__name__}")
    if not isinstance(metric.key, str) or not re.fullmatch(r"[a-z][a-z0-9_]{0,49}", metric.key):
        raise ValueError(f"key {metric.key!r} is not a valid metric key (lower-case letters, digits and _, starting "
                         "with a letter, at most 50 characters)")
    if metric.key in set(reserved):
        raise ValueError(f"key {metric.key!r} clashes with a built-in metric or group of the platform")
    if not isinstance(metric.name, str) or not metric.name.strip():
        raise ValueError(f"{metric.key}: name must be a non-empty string")
    if not isinstance(metric.version, str) or not metric.version.strip() or len(metric.version) > 100:
        raise ValueError(f"{metric.key}: version must be a non-empty string of at most 100 characters")
    if metric.level not in LEVELS:
        raise ValueError(f"{metric.key}: level must be one of {', '.join(LEVELS)}, got {metric.level!r}")
    if metric.higher not in DIRECTIONS:
        raise ValueError(f"{metric.key}: higher must be one of {', '.join(DIRECTIONS)}, got {metric.higher!r}")
    lo, hi = metric.range
    if not lo < hi:
        raise ValueError(f"{metric.key}: range must satisfy low < high, got {metric.range!r}")
    unknown = set(metric.needs) - NEEDS
    if unknown:
        raise ValueError(f"{metric.key}: unknown needs {sorted(unknown)}; known: {sorted(NEEDS)}")
    if WHOLE_CORPUS in metric.needs and metric.level != "caption":
        raise ValueError(f"{metric.key}: whole_corpus is a caption-level need (a system's corpus is one unit already)")
    if type(metric).score is Metric.score:
        raise ValueError(f"{metric.key}: {type(metric).__name__} does not implement score(batch)")
    return metric


@dataclass
class Discovered:
    """Metric modules found by :func:`captioneval.metrics.builtin.discover`: ``metrics`` in table order,
    ``unavailable`` key -> reason, ``modules`` the module names in the order they were read."""

    metrics: list[Metric] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    modules: list[str] = field(default_factory=list)

    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """Group name -> keys of the metrics declaring it (:attr:`Metric.groups`), both in metric order."""
        out: dict[str, list[str]] = {}
        for metric in self.metrics:
            for group in metric.groups:
                out.setdefault(group, []).append(metric.key)
        return {g: tuple(keys) for g, keys in out.items()}

    @property
    def reserved(self) -> set[str]:
        """Keys a plugin may not take: these metrics' keys, their group names, the unavailable keys."""
        return {m.key for m in self.metrics} | set(self.groups) | set(self.unavailable)


def read_module(module) -> tuple[float, list[Metric], dict[str, str]]:
    """The ``(ORDER, METRICS, UNAVAILABLE)`` a metric module exports (ORDER default 1000, METRICS and
    UNAVAILABLE default empty). Raises ValueError for a METRICS entry that is not a valid Metric."""
    order = float(getattr(module, "ORDER", 1000))
    metrics = list(getattr(module, "METRICS", ()))
    for m in metrics:
        validate(m)
    return order, metrics, dict(getattr(module, "UNAVAILABLE", {}))


def score_sets_of_two(sets: Sequence[Sequence[str]], scorer) -> np.ndarray:
    """``scorer(chosen_sets) -> array`` applied to the sets of at least 2 captions; NaN for the
    others (diversity is undefined for one caption, Wang & Chan 2019). Returns float64 (len(sets),)."""
    out = np.full(len(sets), np.nan)
    ok = [i for i, s in enumerate(sets) if len(s) >= 2]
    if ok:
        out[ok] = scorer([sets[i] for i in ok])
    return out
