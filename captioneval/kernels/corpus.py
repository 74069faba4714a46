"""Corpus (system-level) scores of caption metrics from per-caption sufficient statistics.

A system leaderboard reports, for each system, the corpus score of a metric *as the metric's
reference implementation computes it for that system's outputs alone* (the way ``COCOEvalCap``
scores one model's results file), with a bootstrap interval that resamples images. Both need the
corpus score written as a function of **sums of per-caption statistics**: a resample is then a
weighted sum of rows and one call of :meth:`CorpusStatistic.score`, vectorised over the resamples.

* **BLEU-1..4** (Papineni et al. 2002, ACL, Sec. 2.2-2.3; pycocoevalcap 1.2 ``bleu_scorer.py``,
  https://github.com/tylin/coco-caption). Per caption, exactly as ``precook`` / ``cook_refs`` /
  ``cook_test`` with ``n = 4``: the candidate length ``testlen`` (tokens), the effective reference
  length of option ``"closest"`` (the reference length nearest to ``testlen``, the shorter one on a
  tie: ``min((abs(l - testlen), l))``; ``Bleu.compute_score`` calls
  ``BleuScorer.compute_score(option='closest')``), ``guess_k = max(0, testlen - k + 1)`` and
  ``correct_k`` = clipped matches ``sum_g min(count_h(g), max_j count_{r_j}(g))`` over the
  candidate's k-grams, for k = 1..4. The corpus score is ``BleuScorer.compute_score``'s::

      BLEU-n = (prod_{k=1..n} (C_k + tiny) / (G_k + small)) ** (1/n) * BP
      BP = exp(1 - 1/ratio) if ratio < 1 else 1,   ratio = (T + tiny) / (R + small)

  with ``C_k, G_k, T, R`` the sums over the captions, ``tiny = 1e-15`` and ``small = 1e-9``. It is
  *not* the mean of sentence BLEU. The same formula on one caption's row gives pycocoevalcap's
  sentence BLEU (its per-image ``bleu_list``).

* **CIDEr-D** (Vedantam, Zitnick & Parikh 2015, CVPR; pycocoevalcap ``cider_scorer.py``). The
  corpus score of ``Cider().compute_score`` is the mean of the per-caption scores, but each score
  depends on the document frequencies of the *evaluated set*: ``df(g)`` = number of the set's
  images whose reference captions contain ``g`` and ``ref_len = log(N)``, N = number of images (one
  document per scored caption, as pycocoevalcap keys them). :meth:`CiderDCorpus.statistics`
  therefore computes per-caption CIDEr-D with the df of the references passed to it (one system's
  captions), using our vectorised kernel :func:`captioneval.kernels.cider.cider_d` (equal to
  pycocoevalcap per caption); the columns are ``[score, 1]`` and the corpus score is their ratio.
  Scored with its own df, a system's CIDEr-D differs from the mean of its captions' scores in a run
  that pools several systems (a pooled run has N = all captions and other df counts). In a
  bootstrap resample the per-caption scores keep the df of the whole set (the df are not recomputed
  per resample): the interval reflects the sampling of images given the idf weights.

* **ROUGE-L** (Lin 2004): pycocoevalcap's ``Rouge().compute_score`` corpus score is the mean of the
  per-caption scores, so no statistic is needed here (:func:`corpus_statistic` returns None and the
  leaderboard uses the stored per-caption scores with columns ``[score, 1]``).

* **METEOR 1.5** (Denkowski & Lavie 2014, WMT; ``meteor-1.5.jar -l en -norm`` as pycocoevalcap runs
  it). pycocoevalcap's ``Meteor().compute_score`` corpus score is **not** the mean of the per-caption
  scores: the jar adds up the sufficient statistics of all segments (``MeteorStats.addStats``: lengths,
  function-word counts, weighted matches of the four stages, chunks) and scores the totals
  (``MeteorScorer.computeMetrics``). On THumB 1.0 the mean of per-caption METEOR exceeds the corpus
  METEOR by 0.007-0.032 per system and the two rank the systems differently (the Human system is
  first by the mean, third by the corpus score). :func:`corpus_statistic` returns None for
  ``"meteor"`` by default: the leaderboard then reports the **mean of per-caption METEOR** from the
  stored scores (no JVM at report time) and says so (:data:`METEOR_CORPUS_NOTE`).
  ``corpus_statistic("meteor", jvm=True)`` gives :class:`MeteorCorpus`, which asks the jar for each
  caption's 23 statistics and reproduces pycocoevalcap's corpus METEOR from their sums.

Everything here is Django-free and works on PTB-tokenised, lower-cased strings (tokens separated by
whitespace, as stored in ``CaptionTokens``; :func:`captioneval.text.tokenizer.ptb_tokenize`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from captioneval.kernels.bleu import bleu_statistics as _bleu_kernel_statistics
from captioneval.kernels.cider import cider_d

__all__ = [
    "CorpusStatistic", "BleuCorpus", "CiderDCorpus", "CORPUS_STATISTICS", "corpus_statistic",
    "corpus_description", "bleu_statistics", "BLEU_COLUMNS", "BLEU_TINY", "BLEU_SMALL", "METEOR_CORPUS_NOTE",
    "MeteorCorpus", "METEOR_CORPUS", "METEOR_COLUMNS", "METEOR_PARAMETERS", "METEOR_MODULE_WEIGHTS",
]

#: pycocoevalcap ``BleuScorer.compute_score``: added to the clipped matches and the test length
BLEU_TINY = 1e-15
#: pycocoevalcap ``BleuScorer.compute_score``: added to the n-gram counts and the reference length
BLEU_SMALL = 1e-9
_BLEU_N = 4
#: columns of :func:`bleu_statistics` (shared by BLEU-1..4)
BLEU_COLUMNS: tuple[str, ...] = (
    ("testlen", "reflen") + tuple(f"guess_{k}" for k in range(1, _BLEU_N + 1))
    + tuple(f"correct_{k}" for k in range(1, _BLEU_N + 1))
)

#: how the leaderboard's METEOR differs from pycocoevalcap's corpus METEOR (shown as its description)
METEOR_CORPUS_NOTE = (
    "Mean of per-caption METEOR 1.5 scores. pycocoevalcap's corpus METEOR is computed by the METEOR jar "
    "from the statistics summed over all captions, not as this mean: it is lower (by 0.007-0.032 per "
    "system on THumB 1.0) and can rank systems differently."
)


# ---------------------------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------------------------
def _check_inputs(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> None:
    if isinstance(candidates, (str, bytes)):
        raise TypeError("candidates must be a sequence of strings, got a single string")
    if isinstance(references, (str, bytes)):
        raise TypeError("references must be a sequence of lists of strings, got a single string")
    if len(candidates) != len(references):
        raise ValueError(
            f"got {len(candidates)} candidates but {len(references)} reference lists; "
            "references[i] must hold the references of candidates[i]"
        )
    for i, (cand, refs) in enumerate(zip(candidates, references)):
        if not isinstance(cand, str):
            raise TypeError(f"candidates[{i}] must be a string (tokenised caption), got {type(cand).__name__}")
        if isinstance(refs, (str, bytes)):
            raise TypeError(f"references[{i}] must be a list of reference strings, got a single string")
        if len(refs) == 0:
            raise ValueError(f"references[{i}] is empty: every caption needs at least one reference")
        for j, ref in enumerate(refs):
            if not isinstance(ref, str):
                raise TypeError(f"references[{i}][{j}] must be a string (tokenised caption), got {type(ref).__name__}")


def _check_sums(sums, k: int, key: str) -> np.ndarray:
    arr = np.asarray(sums, dtype=np.float64)
    if arr.ndim < 1 or arr.shape[-1] != k:
        raise ValueError(f"{key}: summed statistics must have shape (..., {k}), got {arr.shape}")
    return arr


# ---------------------------------------------------------------------------------------------
# BLEU
# ---------------------------------------------------------------------------------------------
def bleu_statistics(candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
    """Per-caption BLEU sufficient statistics, as pycocoevalcap's ``cook_refs`` / ``cook_test``
    (computed by the vectorised kernel, :func:`captioneval.kernels.bleu.bleu_statistics`).

    Parameters
    ----------
    candidates : sequence of str, length n
        tokenised candidates (tokens = ``str.split()``).
    references : sequence of length n of non-empty sequences of str
        tokenised references of each candidate.

    Returns
    -------
    numpy.ndarray of float64, shape (n, 10)
        columns :data:`BLEU_COLUMNS`: ``testlen`` (candidate tokens), ``reflen`` (the reference
        length closest to ``testlen``, the shorter on a tie: pycocoevalcap option ``"closest"``),
        ``guess_1..4`` (``max(0, testlen - k + 1)``) and ``correct_1..4`` (clipped k-gram matches
        against the maximum count over the references). All values are non-negative integers.

    Raises
    ------
    ValueError
        length mismatch or a candidate without references.
    TypeError
        a caption that is not a string, or an item's references given as a bare string.
    """
    _check_inputs(candidates, references)
    return _bleu_kernel_statistics(candidates, references, _BLEU_N)


class CorpusStatistic:
    """A metric whose corpus score is a function of summed per-caption statistics.

    Attributes
    ----------
    key : str
        the metric key of :data:`captioneval.metrics.registry.METRICS` (``"bleu_4"``, ``"cider_d"``).
    name : str
        the field's name of the metric (``"BLEU-4"``, ``"CIDEr-D"``).
    columns : tuple of str
        names of the k statistics (columns of :meth:`statistics`).
    description : str
        how the corpus score is computed (shown on the leaderboard).
    """

    key: str
    name: str
    columns: tuple[str, ...]
    description: str

    def statistics(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """Per-caption statistics, float64 of shape (n, k) (rows in the order of ``candidates``).
        ``candidates`` / ``references``: PTB-tokenised, lower-cased text, one system's captions."""
        raise NotImplementedError

    def score(self, sums) -> np.ndarray:
        """Corpus score from statistics summed over captions: shape (..., k) -> (...), float64."""
        raise NotImplementedError

    def corpus_score(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> float:
        """The corpus score of one set of captions: ``score(statistics(...).sum(axis=0))``."""
        return float(self.score(self.statistics(candidates, references).sum(axis=0)))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.key}: {', '.join(self.columns)}>"


class BleuCorpus(CorpusStatistic):
    """Corpus BLEU-``n`` (n = 1..4) exactly as pycocoevalcap's ``Bleu(4).compute_score``.

    :meth:`statistics` is :func:`bleu_statistics` (10 columns, the same for every n);
    :meth:`score` is ``BleuScorer.compute_score`` on summed statistics (module docstring):
    ``(prod_{k<=n} (C_k + 1e-15) / (G_k + 1e-9)) ** (1/n)`` times the brevity penalty
    ``exp(1 - 1/ratio)`` when ``ratio = (T + 1e-15) / (R + 1e-9) < 1``. Range [0, 1].
    """

    columns = BLEU_COLUMNS

    def __init__(self, n: int):
        if n not in range(1, _BLEU_N + 1):
            raise ValueError(f"BLEU order must be 1..{_BLEU_N}, got {n!r}")
        self.n = n
        self.key = f"bleu_{n}"
        self.name = f"BLEU-{n}"
        self.description = (
            f"Corpus BLEU-{n} as pycocoevalcap computes it (Bleu(4).compute_score, closest reference length): "
            f"clipped n-gram matches, n-gram counts, candidate and closest-reference lengths summed over the "
            f"system's captions, then the geometric mean of the 1..{n}-gram precisions times the brevity "
            f"penalty; not the mean of sentence BLEU."
        )

    def statistics(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """:func:`bleu_statistics`: float64 (n_captions, 10). Raises ValueError / TypeError as it."""
        return bleu_statistics(candidates, references)

    def score(self, sums) -> np.ndarray:
        """Corpus BLEU-n from summed statistics.

        Parameters
        ----------
        sums : array_like, shape (..., 10)
            :data:`BLEU_COLUMNS` summed over captions (e.g. shape (R, 10) for R bootstrap resamples).

        Returns
        -------
        numpy.ndarray of float64, shape (...), in [0, 1]. A 0-d array for a single row of sums.

        Raises
        ------
        ValueError
            if the last axis is not of length 10.
        """
        s = _check_sums(sums, len(BLEU_COLUMNS), self.key)
        n = self.n
        testlen, reflen = s[..., 0], s[..., 1]
        guess = s[..., 2:2 + n]
        correct = s[..., 2 + _BLEU_N:2 + _BLEU_N + n]
        # sequential product over k = 1..n, in pycocoevalcap's order of operations
        precision = np.cumprod((correct + BLEU_TINY) / (guess + BLEU_SMALL), axis=-1)[..., n - 1]
        bleu = precision ** (1.0 / n)
        ratio = (testlen + BLEU_TINY) / (reflen + BLEU_SMALL)
        short = ratio < 1
        penalty = np.ones_like(ratio)
        penalty[short] = np.exp(1.0 - 1.0 / ratio[short])
        return bleu * penalty


class CiderDCorpus(CorpusStatistic):
    """Corpus CIDEr-D as pycocoevalcap's ``Cider().compute_score`` on one system's outputs alone.

    :meth:`statistics`: columns ``("score", "count")`` = (per-caption CIDEr-D with the document
    frequencies of the references passed in, N = number of captions passed in; 1).
    :meth:`score`: ``sums[..., 0] / sums[..., 1]``, the mean. Range [0, 10] (pycocoevalcap's
    scale: x10 included).
    """

    key = "cider_d"
    name = "CIDEr-D"
    columns = ("score", "count")
    description = (
        "Mean of per-caption CIDEr-D with the document frequencies (idf) of this system's evaluated images "
        "alone, as pycocoevalcap's Cider().compute_score scores one model's results; bootstrap resamples "
        "keep these idf weights."
    )

    def statistics(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """Per-caption CIDEr-D (:func:`captioneval.kernels.cider.cider_d`, ``df`` computed from these
        ``references``, one document per caption) and a column of ones: float64 (n_captions, 2).
        A set of one caption has N = 1, every idf 0 and scores 0 (pycocoevalcap's degenerate case).
        Raises ValueError / TypeError on malformed input (as :func:`bleu_statistics`)."""
        _check_inputs(candidates, references)
        out = np.ones((len(candidates), 2), dtype=np.float64)
        if len(candidates):
            out[:, 0] = cider_d(list(candidates), [list(r) for r in references])
        return out

    def score(self, sums) -> np.ndarray:
        """Mean per-caption CIDEr-D: ``sums[..., 0] / sums[..., 1]``, shape (..., 2) -> (...).
        NaN where the count is 0. Raises ValueError if the last axis is not of length 2."""
        s = _check_sums(sums, 2, self.key)
        with np.errstate(invalid="ignore", divide="ignore"):
            return s[..., 0] / s[..., 1]


#: METEOR 1.5 English defaults (task "rank", as ``-l en -norm`` prints them): alpha, beta, gamma, delta
METEOR_PARAMETERS = (0.85, 0.2, 0.6, 0.75)
#: weights of the modules exact, stem, synonym, paraphrase (METEOR 1.5 English defaults)
METEOR_MODULE_WEIGHTS = (1.0, 0.6, 0.8, 0.6)
#: columns of the jar's sufficient statistics (``MeteorStats.toString``), in its order
METEOR_COLUMNS: tuple[str, ...] = (
    ("test_length", "reference_length", "test_function_words", "reference_function_words")
    + tuple(f"stage{i}_{what}" for i in range(1, 5)
            for what in ("test_content", "reference_content", "test_function", "reference_function"))
    + ("chunks", "test_word_matches", "reference_word_matches")
)


class MeteorCorpus(CorpusStatistic):
    """Corpus METEOR 1.5 exactly as pycocoevalcap's ``Meteor().compute_score`` (the jar's aggregate).

    :meth:`statistics` asks the METEOR 1.5 jar (this process's pool of persistent JVMs,
    :func:`captioneval.kernels.meteor.statistics`: the Python scorer, or the pool of JVMs shared with the per-caption METEOR) for each caption's sufficient statistics against
    its best reference (``SCORE`` requests, as pycocoevalcap's ``_stat``): 23 columns
    :data:`METEOR_COLUMNS`, except that ``chunks`` is 0 for a caption matching its reference perfectly
    in one chunk (``MeteorStats.addStats`` does not add the chunks of such a segment to the total). :meth:`score` is ``MeteorScorer.computeMetrics`` (METEOR 1.5 source,
    https://github.com/cmu-mtlab/meteor) on the summed statistics: with ``delta`` the content-word
    weight and ``w_i`` the module weights,

        P = sum_i w_i (delta tc_i + (1 - delta) tf_i) / (delta (T - Tf) + (1 - delta) Tf)
        R = sum_i w_i (delta rc_i + (1 - delta) rf_i) / (delta (L - Lf) + (1 - delta) Lf)
        Fmean = 1 / ((1 - alpha) / P + alpha / R)
        frag = chunks / ((test_word_matches + reference_word_matches) / 2)   (0 when everything
               matches in one chunk)
        METEOR = max(0, Fmean (1 - gamma frag^beta)),  0 when undefined (NaN)

    One caption's row gives its METEOR; summed rows give the corpus METEOR. Range [0, 1].
    """

    key = "meteor"
    name = "METEOR"
    columns = METEOR_COLUMNS
    description = (
        "Corpus METEOR 1.5 as pycocoevalcap computes it: the METEOR jar's sufficient statistics (matches per "
        "stage, lengths, chunks) summed over the system's captions and scored once; not the mean of "
        "per-caption METEOR."
    )

    def statistics(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """The jar's statistics of each caption: float64 (n_captions, 23). ``|||`` (the jar's field
        separator) is removed from the captions as :func:`captioneval.kernels.coco.meteor` does.
        Raises JavaMissingError without Java (Java implementation only), ValueError / TypeError on malformed input."""
        _check_inputs(candidates, references)
        out = np.zeros((len(candidates), len(METEOR_COLUMNS)), dtype=np.float64)
        if not len(candidates):
            return out
        from captioneval.kernels.meteor import statistics

        # pycocoevalcap's Meteor._stat requests, answered by the Python scorer or this process's
        # persistent METEOR JVM (captioneval.kernels.meteor.DEFAULT_IMPLEMENTATION): the same lines
        for i, line in enumerate(statistics(candidates, references)):
            values = line.split()
            if len(values) != len(METEOR_COLUMNS):
                raise RuntimeError(f"METEOR jar returned {len(values)} statistics for caption {i}, "
                                   f"expected {len(METEOR_COLUMNS)}: {line[:200]!r}")
            out[i] = [float(v) for v in values]
        # MeteorStats.addStats adds a segment's chunks only when it is not a perfect match (all words of
        # both sides matched, in one chunk): such a segment's summable chunk count is 0. Its own score
        # is unchanged (frag = 0 either way).
        stage = out[:, 4:20].reshape(-1, 4, 4)
        perfect = ((stage[:, :, 0] + stage[:, :, 2]).sum(axis=1) == out[:, 0]) \
            & ((stage[:, :, 1] + stage[:, :, 3]).sum(axis=1) == out[:, 1]) & (out[:, 20] == 1)
        out[perfect, 20] = 0.0
        return out

    def score(self, sums) -> np.ndarray:
        """METEOR from summed statistics, shape (..., 23) -> (...), float64 in [0, 1] (see the class
        docstring). Raises ValueError if the last axis is not of length 23."""
        s = _check_sums(sums, len(METEOR_COLUMNS), self.key)
        alpha, beta, gamma, delta = METEOR_PARAMETERS
        test_len, ref_len, test_fw, ref_fw = s[..., 0], s[..., 1], s[..., 2], s[..., 3]
        stage = s[..., 4:20].reshape(s.shape[:-1] + (4, 4))  # (..., stage, [tc, rc, tf, rf])
        chunks, test_wm, ref_wm = s[..., 20], s[..., 21], s[..., 22]
        # the jar's order of operations (MeteorScorer.computeMetrics)
        test_weighted_len = delta * (test_len - test_fw) + (1.0 - delta) * test_fw
        ref_weighted_len = delta * (ref_len - ref_fw) + (1.0 - delta) * ref_fw
        test_matches = np.zeros_like(test_len)
        ref_matches = np.zeros_like(ref_len)
        for i, w in enumerate(METEOR_MODULE_WEIGHTS):
            test_matches = test_matches + stage[..., i, 0] * w * delta
        for i, w in enumerate(METEOR_MODULE_WEIGHTS):
            ref_matches = ref_matches + stage[..., i, 1] * w * delta
        for i, w in enumerate(METEOR_MODULE_WEIGHTS):
            test_matches = test_matches + stage[..., i, 2] * w * (1.0 - delta)
        for i, w in enumerate(METEOR_MODULE_WEIGHTS):
            ref_matches = ref_matches + stage[..., i, 3] * w * (1.0 - delta)
        test_total = np.zeros_like(test_len)
        ref_total = np.zeros_like(ref_len)
        for i in range(4):
            test_total = test_total + stage[..., i, 0] + stage[..., i, 2]
            ref_total = ref_total + stage[..., i, 1] + stage[..., i, 3]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            precision = test_matches / test_weighted_len
            recall = ref_matches / ref_weighted_len
            fmean = 1.0 / (((1.0 - alpha) / precision) + (alpha / recall))
            exact = (test_total == test_len) & (ref_total == ref_len) & (chunks == 1)
            frag = np.where(exact, 0.0, chunks / ((test_wm + ref_wm) / 2))
            penalty = gamma * np.power(frag, beta)
            score = fmean * (1.0 - penalty)
        return np.where(np.isnan(score), 0.0, np.maximum(score, 0.0))


#: metric key -> its corpus statistic (metrics whose corpus score is not the mean of per-caption scores
#: as stored, or whose per-caption scores depend on the evaluated set)
CORPUS_STATISTICS: dict[str, CorpusStatistic] = {
    **{f"bleu_{n}": BleuCorpus(n) for n in range(1, _BLEU_N + 1)},
    "cider_d": CiderDCorpus(),
}


#: the corpus METEOR of the jar (opt-in: its statistics need the JVM at report time)
METEOR_CORPUS = MeteorCorpus()


def corpus_statistic(metric_key: str, *, jvm: bool = False) -> CorpusStatistic | None:
    """The :class:`CorpusStatistic` of a metric key, or None when the corpus score is the mean of the
    stored per-caption scores (ROUGE-L, as pycocoevalcap), is reported as that mean although the
    reference implementation differs (METEOR without ``jvm``: see :data:`METEOR_CORPUS_NOTE`), or the
    key has no corpus statistic (any other key, including unknown ones).

    ``jvm=True`` also returns :data:`METEOR_CORPUS` for ``"meteor"`` (pycocoevalcap's corpus METEOR;
    its :meth:`~MeteorCorpus.statistics` runs METEOR: Python by default, the jar with ``CAPTIONEVAL_METEOR=java``)."""
    if jvm and metric_key == METEOR_CORPUS.key:
        return METEOR_CORPUS
    return CORPUS_STATISTICS.get(metric_key)


def corpus_description(metric_key: str, name: str | None = None) -> str:
    """How the leaderboard's corpus score of ``metric_key`` is computed (one sentence or two).

    The statistic's :attr:`~CorpusStatistic.description` when there is one; for METEOR
    :data:`METEOR_CORPUS_NOTE`; otherwise "Mean of per-caption <name> scores." (``name`` defaults to
    the key), with a remark for ROUGE-L that this equals pycocoevalcap's corpus score."""
    stat = CORPUS_STATISTICS.get(metric_key)
    if stat is not None:
        return stat.description
    if metric_key == "meteor":
        return METEOR_CORPUS_NOTE
    label = name or metric_key
    if metric_key == "rouge_l":
        return f"Mean of per-caption {label} scores (pycocoevalcap's corpus ROUGE-L is the same mean)."
    return f"Mean of per-caption {label} scores."
