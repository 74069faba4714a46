"""``captioneval.diversity``: diversity measures of caption sets (several captions of one image).

The measures are the platform's metric objects (:mod:`captioneval.metrics.registry`): at the *set*
level Self-CIDEr, LSA, 1 - mBLEU-1..4 / mix (Wang & Chan 2019, CVPR) and, with references, set
accuracy (mean CIDEr-D of the set's captions); at the *system* level the vocabulary size and, with
``lexicalrichness`` installed (``captioneval[metrics]``), TTR, Root TTR, Log TTR, HD-D and MTLD
(Kershaw & Bober 2019) over all captions. Captions are PTB-tokenised as one batch.

Document frequencies of the CIDEr-D kernel (Self-CIDEr, set accuracy) are those the platform uses
for a dataset (:meth:`metrics.pipeline.SetLevel.build_document_frequency`): one document per
image, its reference captions when references are given, else its own caption set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from . import _metrics
from .errors import InputError, MetricError
from .evaluate import ScoredItems, _in_key_order, _progress, tokenize


def default_metrics(with_references: bool) -> list[str]:
    """The diversity group of the registry (``set_accuracy`` only when references are given)."""
    keys = list(_metrics.catalogue().groups.get("diversity", ()))
    return [k for k in keys if with_references or k != "set_accuracy"]


@dataclass(kw_only=True)
class DiversityResult(ScoredItems):
    """What :func:`diversity` returns: the attributes of :class:`captioneval.evaluate.ScoredItems`
    for n caption sets (``ids`` the set ids; ``scores`` set-level key -> float64 ndarray (n,), NaN for
    a set of fewer than 2 captions: diversity is undefined for one caption; ``corpus`` key -> the
    summary over all sets: the mean over the sets with a value (set level), or the value of the whole
    corpus of captions (system level: vocabulary, lexical measures)), and

    Attributes
    ----------
    sizes : the number of captions of each set.
    details : system-level key -> the metric's details (vocabulary: ``{"n_tokens", "frequencies",
        "top"}``; lexical measures: ``{"reference", "ldr", "lexical_gap"}``).
    levels : key -> the metric's level (``set`` or ``system``).
    """

    sizes: list[int]
    details: dict[str, Any]
    levels: dict[str, str] = field(default_factory=dict)
    item_columns: ClassVar = (("n_captions", "sizes"),)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: ``{"corpus": {key: {"name", "level", "score", "signature",
        "signature_string"}}, "details": {...}, "n_sets": n, "sets": rows()}``."""
        return {
            "corpus": {k: self._corpus_entry(k, level=self.levels[k]) for k in self.metrics},
            "details": self.details,
            "n_sets": len(self.ids),
            "tokenizer": self.tokenizer,
            "sets": self.rows(),
        }

    def table(self) -> str:
        """Plain-text table: measure, level, value over the corpus (mean over sets at set level)."""
        lines = [f"{'measure':<20} {'level':<6} {'value':>10}  signature"]
        for key in self.metrics:
            value = self.corpus[key]
            shown = (f"{value:10.4f}" if abs(value) < 1e6 else f"{value:10.4g}") if math.isfinite(value) else f"{'n/a':>10}"
            lines.append(f"{self.names[key]:<20} {self.levels[key]:<6} {shown}  {self.signature_strings[key]}")
        multi = sum(1 for s in self.sizes if s >= 2)
        lines.append(f"{len(self.ids)} sets ({multi} with 2 or more captions), {sum(self.sizes)} captions")
        return "\n".join(lines)


def _as_lists(sets, references, ids):
    if isinstance(sets, Mapping):
        keys, sets, references = _in_key_order(sets, references, "set", required=False)
        ids = keys if ids is None else ids
    sets = [list(s) if not isinstance(s, str) else None for s in sets]
    ids = list(range(len(sets))) if ids is None else list(ids)
    if len(ids) != len(sets):
        raise InputError("ids", f"{len(ids)} ids for {len(sets)} sets")
    for ident, s in zip(ids, sets):
        if s is None or not s or not all(isinstance(c, str) for c in s):
            raise InputError("sets", f"set {ident!r} must be a non-empty list of caption strings")
    if references is not None:
        references = [list(r) for r in references]
        if len(references) != len(sets):
            raise InputError("references", f"{len(references)} reference lists for {len(sets)} sets")
        for ident, r in zip(ids, references):
            if not r or not all(isinstance(c, str) for c in r):
                raise InputError("references", f"the references of set {ident!r} must be a non-empty list of strings")
    return ids, sets, references


def _split(flat: list[str], lengths: list[int]) -> list[list[str]]:
    out, at = [], 0
    for n in lengths:
        out.append(flat[at:at + n])
        at += n
    return out


def diversity(
    sets: Sequence[Sequence[str]] | Mapping[Any, Sequence[str]],
    metrics: Sequence[str] | None = None,
    *,
    references: Sequence[Sequence[str]] | Mapping[Any, Sequence[str]] | None = None,
    ids: Sequence | None = None,
    m: int | None = None,
    tokenized: bool = False,
    progress: bool = False,
) -> DiversityResult:
    """Diversity of each caption set and of the whole corpus of captions.

    Parameters
    ----------
    sets : n non-empty lists of raw captions (e.g. a model's sampled captions of each image), or a
        mapping id -> list.
    metrics : keys or group names of set- or system-level metrics; default the registry's
        ``diversity`` group (Self-CIDEr, LSA, 1 - mBLEU-1..4 and mix, vocabulary; set accuracy too
        when ``references`` are given).
    references : optional n lists of reference captions of each set's image (needed by
        ``set_accuracy`` and the lexical measures' reference values; used for CIDEr-D document
        frequencies).
    ids : n set ids (default the mapping's keys, else 0..n-1).
    m : use the first ``m`` captions of each set (Wang & Chan 2019 report m = 5 and 10); None = all.
    tokenized : the captions are already PTB-tokenised.
    progress : tqdm progress bar on stderr.

    Returns :class:`DiversityResult`. Raises :class:`InputError` (empty sets, non-strings, lengths)
    and :class:`MetricError` (unknown metric, caption-level metric, a metric that needs references
    without them, a missing optional package).
    """
    from captioneval.metrics import base
    from captioneval.kernels.cider import DocumentFrequency
    from captioneval.text.tokenizer import TOKENIZER_NAME, TOKENIZER_VERSION

    ids, sets, references = _as_lists(sets, references, ids)
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise InputError("m", f"must be a positive integer, got {m!r}")
    keys = default_metrics(references is not None) if metrics is None else (
        [metrics] if isinstance(metrics, str) else list(metrics))
    chosen, _ = _metrics.resolve(keys, ("set", "system"), "captioneval.evaluate (captioneval evaluate)", False)
    for metric in chosen:
        if base.REFERENCES in metric.needs and references is None:
            raise MetricError(f"{metric.key} needs the references of each set (captioneval diversity --annotations)")
        if metric.needs & {base.OBJECTS, base.TEXTS, base.WORD_VECTORS}:
            raise MetricError(f"{metric.key} is not a diversity measure of caption sets")
    lengths = [len(s) for s in sets]
    if tokenized:
        tok_sets, tok_refs = sets, references
    else:
        tok_sets = _split(tokenize([c for s in sets for c in s]), lengths)
        tok_refs = None if references is None else _split(
            tokenize([r for refs in references for r in refs]), [len(r) for r in references])
    df = None
    if any(base.DOCUMENT_FREQUENCY in mt.needs for mt in chosen):
        docs = tok_refs if tok_refs is not None else tok_sets
        if len(docs) < 2:
            raise InputError("sets", "CIDEr-D document frequencies need at least 2 images (sets)")
        df = DocumentFrequency.from_references(docs)
    scores, corpus, details = {}, {}, {}
    for metric in _progress(chosen, progress, "diversity", len(chosen)):
        if metric.level == "set":
            batch = base.Batch(sets=tok_sets, references=tok_refs, document_frequency=df, m=m,
                               is_reference=[False] * len(tok_sets))
            values = np.asarray(_metrics.run(metric, batch).values, dtype=np.float64)
            scores[metric.key] = values
            finite = values[np.isfinite(values)]
            corpus[metric.key] = float(finite.mean()) if len(finite) else math.nan
        else:
            cut = [s[:m] if m else s for s in tok_sets]
            width = max(len(s) for s in cut)
            corpus_order = [s[k] for k in range(width) for s in cut if k < len(s)]
            ref_corpora = None
            if tok_refs is not None:
                r_width = max(len(r) for r in tok_refs)
                ref_corpora = [[r[k] for r in tok_refs if k < len(r)] for k in range(r_width)]
            result = _metrics.run(metric, base.Batch(corpora=[corpus_order], reference_corpora=ref_corpora))
            corpus[metric.key] = float(result.values[0])
            details[metric.key] = result.details[0] if result.details else None
    return DiversityResult(
        ids=ids, sizes=lengths, metrics=[mt.key for mt in chosen], scores=scores, corpus=corpus, details=details,
        signatures={mt.key: mt.signature() for mt in chosen},
        signature_strings={mt.key: mt.signature_string() for mt in chosen},
        names={mt.key: mt.name for mt in chosen}, levels={mt.key: mt.level for mt in chosen},
        tokenizer="pre-tokenised" if tokenized else f"{TOKENIZER_NAME}/{TOKENIZER_VERSION}",
    )
