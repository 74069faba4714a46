"""``captioneval.evaluate``: per-caption and corpus scores of captions against references.

The metrics are the platform's own metric objects (:mod:`captioneval.metrics.registry`; BLEU-1..4,
ROUGE-L and CIDEr-D vectorised and equal to pycocoevalcap per caption, METEOR 1.5 through
pycocoevalcap's jar), the captions PTB-tokenised as the COCO caption evaluation does
(:func:`captioneval.text.tokenizer.ptb_tokenize`, pure Python by default). Corpus scores are the ones
pycocoevalcap's ``COCOEvalCap`` reports for the same captions (:mod:`captioneval.kernels.corpus`):

* BLEU-n: ``BleuScorer.compute_score`` on statistics summed over the captions (not the mean of
  sentence BLEU);
* METEOR: the jar's aggregate of the summed statistics (not the mean of per-caption METEOR), from the
  same single pass over the jar as the per-caption scores (statistics, then one ``EVAL``);
* ROUGE-L, CIDEr-D and every other caption-level metric: the mean of the per-caption scores
  (CIDEr-D's document frequencies are those of the evaluated references, one document per caption).

The learned metrics (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S, BERTScore; :mod:`captioneval.metrics.learned`,
the ``learned`` extra) take the raw captions and references; the CLIP family also one image per
caption (``images=``: a folder, a mapping or a list; :func:`image_sources`) and its weights as a
parameter (``options={"clip_s": {"model": "ViT-B-32.pt"}}``). Their corpus score is the mean of the
per-caption scores (NaN left out), as their reference scripts report it. An image that is missing or
cannot be read is an :class:`InputError` naming every such caption and file; no caption is scored
without its image.

The LLM judges (CLAIR, FLEUR, RefFLEUR; :mod:`captioneval.metrics.judges`) call a model behind an
OpenAI-compatible endpoint given in ``options`` (or configured by the environment); their corpus
score is the mean of the per-caption scores, the captions whose answer could not be scored (NaN)
left out.
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from . import _metrics
from .errors import InputError, MetricError
from .utils.numbers import finite_or_none

#: the COCO caption metrics, in pycocoevalcap's order (``captioneval evaluate``'s default)
COCO_METRICS = ("bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "cider_d")


@dataclass(kw_only=True)
class ScoredItems:
    """What :class:`Evaluation` and :class:`captioneval.DiversityResult` have in common: n scored
    items (captions, caption sets) and the metrics computed on them.

    Attributes
    ----------
    ids : n item ids.
    metrics : metric keys computed, in the order asked.
    scores : key -> float64 ndarray (n,), one value per item (NaN where undefined); only the metrics
        with a value per item.
    corpus : key -> the score over all items (float; how, depends on the metric).
    signatures : key -> the metric's signature (name, key, version, level, parameters), as
        :meth:`captioneval.metrics.base.Metric.signature`; ``signature_strings`` the sacrebleu-style form.
    names : key -> the field's name of the metric (``BLEU-4``, ``CIDEr-D``).
    tokenizer : name and version of the tokenizer (``ptb/<version>``, or ``pre-tokenised``).
    """

    ids: list
    metrics: list[str]
    scores: dict[str, np.ndarray]
    corpus: dict[str, float]
    signatures: dict[str, dict]
    signature_strings: dict[str, str]
    names: dict[str, str]
    tokenizer: str = ""
    #: (column of :meth:`rows`, attribute holding one value per item): what a row shows between its
    #: ``id`` and its scores
    item_columns: ClassVar[tuple[tuple[str, str], ...]] = ()

    def rows(self) -> list[dict[str, Any]]:
        """One dict per item: ``{"id", <:attr:`item_columns`>, <key of :attr:`scores`>: value or
        None}`` (None where the value is NaN or infinite), keys in :attr:`metrics` order."""
        keys = [k for k in self.metrics if k in self.scores]
        columns = [(name, getattr(self, attribute)) for name, attribute in self.item_columns]
        return [{"id": ident, **{name: values[i] for name, values in columns},
                 **{k: finite_or_none(float(self.scores[k][i])) for k in keys}} for i, ident in enumerate(self.ids)]

    def _corpus_entry(self, key: str, **more) -> dict[str, Any]:
        """``{"name", <more>, "score" (None if not finite), "signature", "signature_string"}`` of ``key``."""
        return {"name": self.names[key], **more, "score": finite_or_none(self.corpus[key]),
                "signature": self.signatures[key], "signature_string": self.signature_strings[key]}


@dataclass(kw_only=True)
class Evaluation(ScoredItems):
    """What :func:`evaluate` returns: the attributes of :class:`ScoredItems` for n captions (``ids``:
    the keys of a mapping given to :func:`evaluate`, ``ids``, or 0..n-1; ``scores`` one value per
    caption of every metric computed; ``corpus`` as the module docstring says), and

    Attributes
    ----------
    candidates : the n raw candidate captions.
    tokens : the n PTB-tokenised candidates the metrics scored.
    corpus_methods : key -> one sentence saying how the corpus score is computed.
    skipped : key -> why a default metric was not computed (METEOR without Java).
    """

    candidates: list[str]
    tokens: list[str]
    corpus_methods: dict[str, str]
    skipped: dict[str, str] = field(default_factory=dict)
    item_columns: ClassVar = (("caption", "candidates"),)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: ``{"corpus": {key: {"name", "score", "method", "signature",
        "signature_string"}}, "skipped": {...}, "tokenizer": str, "n_captions": n,
        "captions": rows()}`` (NaN becomes None)."""
        return {
            "corpus": {key: self._corpus_entry(key, method=self.corpus_methods[key]) for key in self.metrics},
            "skipped": dict(self.skipped),
            "tokenizer": self.tokenizer,
            "n_captions": len(self.ids),
            "captions": self.rows(),
        }

    def table(self) -> str:
        """The corpus scores as a plain-text table: metric, score (4 decimals), signature."""
        lines = [f"{'metric':<10} {'corpus':>8}  signature"]
        for key in self.metrics:
            value = self.corpus[key]
            shown = f"{value:8.4f}" if math.isfinite(value) else f"{'n/a':>8}"
            lines.append(f"{self.names[key]:<10} {shown}  {self.signature_strings[key]}")
        for key, reason in self.skipped.items():
            lines.append(f"{key:<10} {'skipped':>8}  {reason}")
        lines.append(f"{len(self.ids)} captions, tokenizer {self.tokenizer}")
        return "\n".join(lines)


def _in_key_order(items: Mapping, references, what: str, required: bool) -> tuple[list, list, list | None]:
    """``(keys, values, references)`` of the mapping id -> item ``items`` (``what`` names an item in
    errors: ``candidate``, ``set``), with ``references`` (a mapping id -> reference captions with every
    id of ``items``; None for none unless ``required``) as a list in the same order. Raises
    :class:`InputError` when ``references`` is not a mapping (None included when ``required``) or misses ids."""
    keys = list(items)
    if references is not None or required:
        if not isinstance(references, Mapping):
            raise InputError("references", f"must be a mapping id -> reference captions when the {what}s are a mapping")
        missing = [k for k in keys if k not in references]
        if missing:
            raise InputError("references", f"no references for {len(missing)} {what} id(s), e.g. "
                             + ", ".join(repr(k) for k in missing[:5]))
        references = [references[k] for k in keys]
    return keys, [items[k] for k in keys], references


def _inputs(candidates, references, ids) -> tuple[list, list[str], list[list[str]]]:
    if isinstance(candidates, Mapping):
        keys, candidates, references = _in_key_order(candidates, references, "candidate", required=True)
        ids = keys if ids is None else ids
    if isinstance(candidates, (str, bytes)) or isinstance(references, (str, bytes)):
        raise InputError("candidates", "must be a sequence of captions, not a single string")
    candidates, references = list(candidates), list(references)
    if len(candidates) != len(references):
        raise InputError("references", f"{len(references)} reference lists for {len(candidates)} candidates; "
                         "references[i] must hold the references of candidates[i]")
    ids = list(range(len(candidates))) if ids is None else list(ids)
    if len(ids) != len(candidates):
        raise InputError("ids", f"{len(ids)} ids for {len(candidates)} candidates")
    for i, caption in enumerate(candidates):
        if not isinstance(caption, str):
            raise InputError("candidates", f"candidate {ids[i]!r} is not a string ({type(caption).__name__})")
    refs_out = []
    for i, refs in enumerate(references):
        if isinstance(refs, str) or not isinstance(refs, Sequence):
            raise InputError("references", f"the references of {ids[i]!r} must be a list of strings")
        if not refs:
            raise InputError("references", f"candidate {ids[i]!r} has no reference caption")
        if not all(isinstance(r, str) for r in refs):
            raise InputError("references", f"a reference of {ids[i]!r} is not a string")
        refs_out.append(list(refs))
    return ids, candidates, refs_out


def tokenize(texts: Sequence[str], implementation: str | None = None) -> list[str]:
    """PTB-tokenise ``texts`` as one batch, exactly as pycocoevalcap's ``PTBTokenizer`` (lower case,
    punctuation removed): :func:`captioneval.text.tokenizer.ptb_tokenize`. ``implementation``:
    ``"python"`` (default, no Java) or ``"java"`` (pycocoevalcap's Stanford jar)."""
    from captioneval.text.tokenizer import ptb_tokenize

    return ptb_tokenize(list(texts), implementation)


#: the file extensions tried, in this order, for an image named by its id in an image folder
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp", ".tif", ".tiff")


def image_sources(images, ids: Sequence, image_files: Mapping | None = None) -> list:
    """One image per caption for the learned image-text metrics, in caption order.

    ``images`` is one of
      * a folder (str or PathLike): the image of caption ``ids[i]`` is ``folder / image_files[id]``
        when ``image_files`` (id -> file name, e.g. a COCO file's ``file_name``) names it, else the
        file ``str(id)`` or ``str(id)`` + one of :data:`IMAGE_EXTENSIONS`, the first that exists;
      * a mapping id -> file path or the file's bytes;
      * a sequence of n file paths or bytes (``images[i]`` for caption i).

    Returns n paths (str) or bytes. A caption whose image cannot be found is NOT dropped: its path is
    the one looked for, and scoring reports it (:class:`InputError` from :func:`evaluate`). Raises
    :class:`InputError` for a folder that does not exist, a mapping without an id, or a sequence of
    another length."""
    if isinstance(images, (str, os.PathLike)):
        folder = Path(images)
        if not folder.is_dir():
            raise InputError("images", f"{folder} is not a folder")
        names = {} if image_files is None else image_files
        out = []
        for ident in ids:
            if ident in names:
                out.append(str(folder / str(names[ident])))
                continue
            found = next((folder / f"{ident}{ext}" for ext in ("", *IMAGE_EXTENSIONS)
                          if (folder / f"{ident}{ext}").is_file()), None)
            out.append(str(found if found is not None else folder / f"{ident}.jpg"))
        return out
    if isinstance(images, Mapping):
        missing = [i for i in ids if i not in images]
        if missing:
            raise InputError("images", f"no image for {len(missing)} caption id(s), e.g. "
                             + ", ".join(repr(i) for i in missing[:5]))
        return [images[i] if isinstance(images[i], (bytes, bytearray)) else os.fspath(images[i]) for i in ids]
    images = list(images)
    if len(images) != len(ids):
        raise InputError("images", f"{len(images)} images for {len(ids)} candidates; images[i] is the image of candidates[i]")
    return [i if isinstance(i, (bytes, bytearray)) else os.fspath(i) for i in images]


def _score_learned(metric, batch, ids: Sequence):
    """``metric.score(batch)`` with the per-image errors of the CLIP family
    (:class:`captioneval.kernels.learned.clip_image.ImageErrors`) turned into one :class:`InputError`
    naming each failing caption id, file and cause."""
    from captioneval.kernels.learned.clip_image import ImageErrors

    try:
        return _metrics.run(metric, batch)
    except ImageErrors as exc:
        shown = "; ".join(f"caption {ids[e.index]!r}: {e.source}: {e.reason}" for e in exc.errors[:20])
        more = f"; and {len(exc.errors) - 20} more" if len(exc.errors) > 20 else ""
        raise InputError("images", f"{len(exc.errors)} image(s) cannot be scored by {metric.name} (no caption is "
                         f"scored without its image): {shown}{more}") from None


def _progress(iterable, enabled: bool, desc: str, total: int | None = None):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, unit="metric", leave=False, file=sys.stderr, disable=None)  # None: off when stderr is not a terminal


def evaluate(
    candidates: Sequence[str] | Mapping[Any, str],
    references: Sequence[Sequence[str]] | Mapping[Any, Sequence[str]],
    metrics: Sequence[str] | None = None,
    *,
    ids: Sequence | None = None,
    tokenized: bool = False,
    tokenizer: str | None = None,
    skip_unavailable: bool | None = None,
    progress: bool = False,
    images=None,
    image_files: Mapping | None = None,
    options: Mapping[str, Mapping] | None = None,
) -> Evaluation:
    """Score each candidate caption against its references with caption-level metrics.

    Parameters
    ----------
    candidates : n raw captions, or a mapping id -> caption (then ``references`` is a mapping with
        the same ids).
    references : n non-empty lists of raw reference captions (``references[i]`` for
        ``candidates[i]``), or a mapping id -> list.
    metrics : metric keys or group names (``"coco"``); default :data:`COCO_METRICS`. Caption level
        only (set-level diversity measures: :func:`captioneval.diversity`).
    ids : n ids reported with the scores (default the mapping's keys, else 0..n-1).
    tokenized : True when the texts are already PTB-tokenised (lower case, tokens separated by
        spaces); default False: both sides are tokenised here, each as one batch as pycocoevalcap does.
    tokenizer : ``"python"`` (default) or ``"java"``.
    skip_unavailable : skip, with the reason in :attr:`Evaluation.skipped`, metrics that cannot run
        here (METEOR without Java or pycocoevalcap); default: True when ``metrics`` is None, False
        when metrics are named (then such a metric raises).
    progress : show a progress bar (tqdm, on stderr) over the metrics.
    images : the image of each caption, for the CLIP-family learned metrics (``clip_s``,
        ``ref_clip_s``, ``pac_s``, ``ref_pac_s``): a folder, a mapping id -> path or bytes, or n paths
        or bytes (:func:`image_sources`; ``image_files`` id -> file name inside the folder).
    options : metric key -> the learned metric's parameters, e.g. ``{"clip_s": {"model":
        "/models/ViT-B-32.pt", "device": "cpu"}}`` (:mod:`captioneval.metrics.learned`; they are in its
        signature), or an LLM judge's (``clair``, ``fleur``, ``ref_fleur``): ``{"clair": {"endpoint":
        "http://127.0.0.1:8000/v1", "model": NAME, "api_key_env": VARIABLE, "max_requests": N}}``
        (:mod:`captioneval.metrics.judges`; FLEUR also needs ``images``).

    Returns
    -------
    :class:`Evaluation` (per-caption scores, corpus scores, signatures).

    Raises
    ------
    InputError
        lengths that differ, a candidate without references, non-string captions.
    MetricError
        an unknown metric, one of another level, or one that cannot run here (the reason says why:
        e.g. METEOR without Java, a learned metric without the ``learned`` extra), options for a
        metric not asked for, or a CLIP-family metric without ``images``.
    WeightsMissing
        (a FileNotFoundError) a learned metric's weights that are absent and cannot be fetched: one
        line says which file to put where (:mod:`captioneval.kernels.learned.models`).
    """
    from captioneval.metrics import base
    from captioneval.text.tokenizer import JAVA_VERSION, TOKENIZER_NAME, TOKENIZER_VERSION, ptb

    ids, raw_candidates, raw_references = _inputs(candidates, references, ids)
    keys = list(COCO_METRICS) if metrics is None else ([metrics] if isinstance(metrics, str) else list(metrics))
    if not keys:
        raise MetricError("no metric asked for")
    skip = metrics is None if skip_unavailable is None else skip_unavailable
    options = dict(options or {})
    chosen, skipped = _metrics.resolve(keys, ("caption",), "captioneval.diversity (captioneval diversity)", skip,
                                       options)
    unused = sorted(set(options) - {m.key for m in chosen})
    if unused:
        raise MetricError(f"options given for {', '.join(unused)}, which {'is' if len(unused) == 1 else 'are'} not "
                          "among the metrics asked for")
    learned_needs = {base.TEXTS, base.IMAGES, base.REFERENCE_TEXTS}
    sources = None
    for metric in chosen:
        if base.IMAGES in metric.needs and sources is None:
            if images is None:
                raise MetricError(f"{metric.key} needs the image of each caption: pass images=FOLDER "
                                  "(captioneval evaluate --images DIR)")
            sources = image_sources(images, ids, image_files)
        extra = metric.needs - {base.REFERENCES, base.DOCUMENT_FREQUENCY, base.JVM, base.WHOLE_CORPUS, *learned_needs}
        if extra:
            raise MetricError(f"{metric.key} needs {', '.join(sorted(extra))}, which captioneval.evaluate does not "
                              "provide; compute it on the platform (manage.py compute_metrics)")
    if any(base.JVM in m.needs for m in chosen):  # start METEOR's JVM now: it loads while the rest runs
        from captioneval.kernels.meteor import prestart

        prestart()
    if tokenized:
        cand_tokens, ref_tokens = raw_candidates, raw_references
        version = "pre-tokenised"
    else:
        cand_tokens = tokenize(raw_candidates, tokenizer)
        flat = tokenize([r for refs in raw_references for r in refs], tokenizer)
        ref_tokens, at = [], 0
        for refs in raw_references:
            ref_tokens.append(flat[at:at + len(refs)])
            at += len(refs)
        version = f"{TOKENIZER_NAME}/" + {None: TOKENIZER_VERSION, "java": JAVA_VERSION}.get(tokenizer, ptb.PTB_PYTHON_VERSION)

    scores, corpus, methods, cache = {}, {}, {}, {}
    batch = base.Batch(candidates=cand_tokens, references=ref_tokens, texts=raw_candidates,
                       reference_texts=raw_references, images=sources)
    jvm_last = sorted(chosen, key=lambda m: base.JVM in m.needs)  # results keep the order asked
    for metric in _progress(jvm_last, progress, "scoring", len(chosen)):
        if metric.key == "meteor":  # the built-in METEOR (built-in keys are never shadowed)
            scores[metric.key], corpus[metric.key], methods[metric.key] = _meteor(cand_tokens, ref_tokens)
            continue
        if metric.family == "judge":  # an LLM judge: its pictures are sent as they are (FLEUR)
            values = np.asarray(_metrics.run(metric, batch).values, dtype=np.float64)
        elif metric.needs & learned_needs:
            values = np.asarray(_score_learned(metric, batch, ids).values, dtype=np.float64)
        else:
            values = np.asarray(_metrics.run(metric, batch).values, dtype=np.float64)
        scores[metric.key] = values
        corpus[metric.key], methods[metric.key] = _corpus(metric, values, cand_tokens, ref_tokens, cache)
    keys_done = [m.key for m in chosen]
    return Evaluation(
        ids=ids, candidates=raw_candidates, tokens=cand_tokens, metrics=keys_done, scores=scores, corpus=corpus,
        corpus_methods=methods, signatures={m.key: m.signature() for m in chosen},
        signature_strings={m.key: m.signature_string() for m in chosen}, names={m.key: m.name for m in chosen},
        skipped=skipped, tokenizer=version,
    )


def _meteor(candidates: list[str], references: list[list[str]]) -> tuple[np.ndarray, float, str]:
    """(per-caption scores, corpus score, how it is computed) of METEOR 1.5 from ONE pass over the jar
    (:func:`captioneval.kernels.meteor.meteor_and_corpus`: the pure-Python port by default, or this
    process's persistent JVM pool with ``CAPTIONEVAL_METEOR=java``): each caption's statistics, then
    the ``EVAL`` aggregate giving every caption's score and the corpus value, as pycocoevalcap's
    ``Meteor.compute_score``. Raises MeteorDataError (Python), JavaMissingError, MeteorError (Java)."""
    from captioneval.kernels.corpus import METEOR_CORPUS
    from captioneval.kernels.meteor import meteor_and_corpus

    if not candidates:
        return np.zeros(0), math.nan, "no caption"
    values, corpus = meteor_and_corpus(candidates, references)
    return values, float(corpus), METEOR_CORPUS.description


def _corpus(metric, values: np.ndarray, candidates: list[str], references: list[list[str]],
            cache: dict) -> tuple[float, str]:
    """(corpus score, how it is computed) of one metric, as pycocoevalcap computes it; ``cache`` keeps
    the summed BLEU statistics (shared by BLEU-1..4) for one call of :func:`evaluate`."""
    from captioneval.kernels import corpus as corpus_stats

    if not len(values):
        return math.nan, "no caption"
    stat = corpus_stats.corpus_statistic(metric.key, jvm=True)
    if isinstance(stat, corpus_stats.BleuCorpus):
        from captioneval.metrics.builtin.bleu import last_corpus

        computed = last_corpus(candidates, references)  # the corpus values of the batch BLEU just scored
        if computed is not None:
            return float(computed[int(metric.key[-1]) - 1]), stat.description
        if "bleu" not in cache:
            cache["bleu"] = corpus_stats.bleu_statistics(candidates, references).sum(axis=0)
        sums = cache["bleu"]
        return float(stat.score(sums)), stat.description
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if len(finite) else math.nan
    if metric.key in ("rouge_l", "cider_d"):
        return mean, (f"Mean of per-caption {metric.name} scores, as pycocoevalcap's corpus {metric.name}"
                      + (" (document frequencies of the evaluated references)" if metric.key == "cider_d" else ""))
    return mean, f"Mean of per-caption {metric.name} scores (NaN left out)."
