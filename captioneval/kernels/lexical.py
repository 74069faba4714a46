"""Lexical diversity of caption corpora and the Lexical Gap (Kershaw & Bober 2019), no Django.

Sources
-------
- A. Kershaw and M. Bober, "The Lexical Gap: An Improved Measure of Automated Image Description
  Quality", IWCS 2019: lexical diversity ratio ``l_d = L(c_m) / L(c_r)`` (Eq. 1), Lexical Gap
  ``L_g = 1 / (1 + exp(-alpha (l_d - mu)))`` with ``mu = 0.81``, ``alpha = 5`` (Eq. 2, Sec. 4.1),
  gap-weighted scores ``m_gap = M(s_n) L_g`` (Eq. 3) and ``m_ldr = M(s_n) l_d`` (Eq. 4).
  The five measures of its Table 2 are TTR, Root-TTR, Log-TTR, HD-D and MTLD; the paper uses HD-D.
- The measures are computed by ``lexicalrichness`` 0.5.1 (``LexicalRichness``; properties ``ttr``,
  ``rttr``, ``Herdan``, methods ``hdd(draws)`` and ``mtld(threshold)``); HD-D and MTLD are due to
  McCarthy & Jarvis (2007, 2010).

Tokens
------
Every function takes already-tokenised text, e.g. PTB-tokenised captions
(:func:`captioneval.text.tokenizer.ptb_tokenize`) or :func:`simple_tokenize` output:

* a string is split on whitespace (``str.split()``) and lower-cased;
* a sequence of strings is treated as a sequence of such texts whose tokens are concatenated in
  order (a list of single tokens is therefore read unchanged, since a token contains no space);
* a sequence of token lists is flattened in order (each token lower-cased).

The tokens are handed to ``LexicalRichness(tokens, preprocessor=None, tokenizer=None)`` as a list,
so lexicalrichness does **not** re-tokenise them: its default pipeline would drop digits, delete
hyphens (``t-shirt`` -> ``tshirt``) and split on every punctuation mark (``man's`` -> ``man s``), which
changes the token and type counts. With ``tokenizer=None`` its ``preprocessor`` is not applied
either (checked in the 0.5.1 source); the word list is used exactly as given.

Definitions (lexicalrichness 0.5.1; ``N`` = number of tokens, ``V`` = number of distinct tokens)
-----------------------------------------------------------------------------------------------
* ``ttr`` = V / N.
* ``root_ttr`` = V / sqrt(N) (Guiraud's R; lexicalrichness ``rttr``).
* ``log_ttr`` = log V / log N (Herdan's C; lexicalrichness ``Herdan``; the base cancels).
* ``hdd`` = sum over types t of (1 - P[X_t = 0]) / n with X_t ~ Hypergeometric(population N,
  successes f_t = count of t, draws n = 42), i.e. the expected TTR of a random 42-token sample;
  lexicalrichness raises ``ValueError`` when N < n.
* ``mtld`` (threshold h = 0.72): one pass walks the tokens keeping the TTR of the current segment
  (types / tokens seen since the segment started). After adding a token, if that TTR is **<= h**
  (less than *or equal*) a full factor is counted and the segment restarts empty with the next
  token. At the end, if the last segment is non-empty, a partial factor ``(1 - TTR_last) / (1 - h)``
  is added (TTR_last = the TTR of that unfinished segment; 0 when it is 1). If the factor count is
  still 0 (only possible when every token of the text is distinct) it is set to 1. The pass gives
  ``N / factors``; MTLD is the mean of a forward pass and a backward pass (tokens reversed). There is
  no minimum segment length (a factor can be 2 tokens, e.g. ``a a``) and no minimum text length:
  a text of N distinct tokens has MTLD = N.

Short texts (policy)
--------------------
Minimum token counts: ``ttr``, ``root_ttr``, ``mtld``: 1; ``log_ttr``: 2 (log 1 = 0 in the
denominator); ``hdd``: ``draws`` (42). A text with no tokens at all is always an error
(``ValueError``). A non-empty text below a measure's minimum raises :class:`TextTooShortError` (a
``ValueError``) from the per-text functions, and gives NaN from the corpus-level functions
:func:`corpus_diversity` and :func:`ldr` (what :func:`captioneval.metrics.registry.score_systems` stores
as "undefined"); ``on_short="raise"|"nan"`` overrides either default. MTLD is computed for any
length, but McCarthy & Jarvis recommend at least ~100 tokens; a single caption (~10 tokens) gives
values dominated by the partial factor. All five values are therefore meant for corpora: a system's
captions, or the captions of one image set.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence, Union

import numpy as np

__all__ = [
    "MEASURES", "Measure", "TextTooShortError", "GapWeighted", "MU", "ALPHA", "HDD_DRAWS", "MTLD_THRESHOLD",
    "simple_tokenize", "tokens_of", "ttr", "root_ttr", "log_ttr", "hdd", "mtld", "lexical_diversity",
    "corpus_diversity", "ldr", "lexical_gap", "gap_weighted",
]

#: Kershaw & Bober 2019, Sec. 4.1: mu = 0.81 (Bayes minimum-error split of their l_d distributions), alpha = 5
MU = 0.81
ALPHA = 5.0
#: HD-D sample size (McCarthy & Jarvis 2007; lexicalrichness default)
HDD_DRAWS = 42
#: MTLD factor threshold (McCarthy & Jarvis 2010; lexicalrichness default)
MTLD_THRESHOLD = 0.72

TokensOrTexts = Union[str, Sequence[str], Sequence[Sequence[str]]]


class TextTooShortError(ValueError):
    """The text has fewer tokens than the measure needs (log TTR: 2, HD-D: ``draws``)."""


# ---------------------------------------------------------------------------------------------
# tokens
# ---------------------------------------------------------------------------------------------
_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*")


def simple_tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of a raw caption, without Java.

    A token is a run of letters/digits, possibly joined by inner apostrophes or hyphens
    (``man's``, ``t-shirt`` stay one token); every other character (punctuation, spaces) separates
    tokens and is dropped. This approximates PTB tokenisation with punctuation removed but differs on
    clitics (PTB: ``man 's``) and hyphens; use :func:`captioneval.text.tokenizer.ptb_tokenize` when
    numbers must be comparable with the COCO caption metrics.

    Parameters
    ----------
    text : str

    Returns
    -------
    list of str (possibly empty).

    Raises
    ------
    TypeError if ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, got {type(text).__name__}")
    return _WORD.findall(text.lower())


def tokens_of(tokens_or_texts: TokensOrTexts) -> list[str]:
    """Flatten the accepted input forms into one lower-cased token list (see the module docstring).

    Parameters
    ----------
    tokens_or_texts : str | sequence of str | sequence of sequences of str
        A whitespace-tokenised text, texts (concatenated in order) or token lists (flattened in order).

    Returns
    -------
    list of str, possibly empty (e.g. for ``[]`` or ``["", ""]``).

    Raises
    ------
    TypeError for anything else (numbers, None, bytes, deeper nesting).
    """
    if isinstance(tokens_or_texts, str):
        return tokens_or_texts.lower().split()
    if isinstance(tokens_or_texts, (bytes, bytearray)) or not isinstance(tokens_or_texts, Sequence) and not isinstance(
        tokens_or_texts, np.ndarray
    ):
        raise TypeError(f"expected a string, strings or token lists, got {type(tokens_or_texts).__name__}")
    out: list[str] = []
    for i, item in enumerate(tokens_or_texts):
        if isinstance(item, str):
            out.extend(item.lower().split())
        elif isinstance(item, (list, tuple)):
            for tok in item:
                if not isinstance(tok, str):
                    raise TypeError(f"item {i}: tokens must be strings, got {type(tok).__name__}")
                out.extend(tok.lower().split())
        else:
            raise TypeError(f"item {i}: expected a string or a list of token strings, got {type(item).__name__}")
    return out


def _check_on_short(on_short: str) -> str:
    if on_short not in ("raise", "nan"):
        raise ValueError(f"on_short must be 'raise' or 'nan', got {on_short!r}")
    return on_short


def _richness(tokens: list[str], minimum: int, what: str, on_short: str):
    """LexicalRichness over ``tokens`` (no re-tokenisation), or None when too short and on_short='nan'."""
    _check_on_short(on_short)
    if not tokens:
        raise ValueError(f"{what}: no tokens (empty input)")
    if len(tokens) < minimum:
        if on_short == "nan":
            return None
        raise TextTooShortError(f"{what} needs at least {minimum} tokens, got {len(tokens)}")
    from lexicalrichness import LexicalRichness  # imports pandas/matplotlib: keep it lazy

    return LexicalRichness(list(tokens), preprocessor=None, tokenizer=None)


# ---------------------------------------------------------------------------------------------
# the measures
# ---------------------------------------------------------------------------------------------
def ttr(tokens_or_texts: TokensOrTexts, *, on_short: str = "raise") -> float:
    """Type-token ratio V / N (lexicalrichness ``LexicalRichness.ttr``).

    Parameters: tokens_or_texts -- see :func:`tokens_of`; on_short -- unused except for validation
    (any non-empty text qualifies). Returns a float in (0, 1]. Raises ``ValueError`` on empty input.
    Source: Kershaw & Bober 2019, Table 2 ("TTR"); Templin 1957.
    """
    lr = _richness(tokens_of(tokens_or_texts), 1, "TTR", on_short)
    return float(lr.ttr)


def root_ttr(tokens_or_texts: TokensOrTexts, *, on_short: str = "raise") -> float:
    """Root TTR V / sqrt(N) (Guiraud's R; lexicalrichness ``rttr``).

    Returns a float in (0, sqrt(N)]. Raises ``ValueError`` on empty input.
    Source: Kershaw & Bober 2019, Table 2 ("Root-TTR"); Guiraud 1960.
    """
    lr = _richness(tokens_of(tokens_or_texts), 1, "root TTR", on_short)
    return float(lr.rttr)


def log_ttr(tokens_or_texts: TokensOrTexts, *, on_short: str = "raise") -> float:
    """Log TTR log V / log N (Herdan's C; lexicalrichness ``Herdan``).

    Returns a float in [0, 1]. Needs N >= 2: raises :class:`TextTooShortError` for one token
    (``on_short="nan"``: NaN) and ``ValueError`` on empty input.
    Source: Kershaw & Bober 2019, Table 2 ("Log-TTR"); Herdan 1960.
    """
    lr = _richness(tokens_of(tokens_or_texts), 2, "log TTR", on_short)
    return math.nan if lr is None else float(lr.Herdan)


def hdd(tokens_or_texts: TokensOrTexts, *, draws: int = HDD_DRAWS, on_short: str = "raise") -> float:
    """HD-D: sum_t (1 - P[X_t = 0]) / draws, X_t ~ Hypergeom(N, f_t, draws) (lexicalrichness ``hdd``).

    Parameters
    ----------
    draws : positive int, default 42 (the sample size of McCarthy & Jarvis 2007).

    Returns a float in (0, 1]: the expected TTR of a random sample of ``draws`` tokens drawn without
    replacement. Needs N >= draws: raises :class:`TextTooShortError` below that (``on_short="nan"``:
    NaN); ``ValueError`` on empty input or a non-positive / non-integer ``draws``.
    Source: Kershaw & Bober 2019, Sec. 2.2 and Table 2 ("HDD", the measure they use); McCarthy &
    Jarvis 2007, 2010.
    """
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    lr = _richness(tokens_of(tokens_or_texts), int(draws), "HD-D", on_short)
    return math.nan if lr is None else float(lr.hdd(draws=int(draws)))


def mtld(tokens_or_texts: TokensOrTexts, *, threshold: float = MTLD_THRESHOLD, on_short: str = "raise") -> float:
    """MTLD, mean of the forward and backward passes (lexicalrichness ``mtld``; rule in the module docstring).

    Parameters
    ----------
    threshold : float in (0, 1), default 0.72; a factor ends when the segment TTR is <= threshold.

    Returns a float > 0, order-dependent: N for a text of distinct tokens, and above N when the only
    factor is a small partial one (10 tokens of 9 types: 10 / ((1 - 0.9) / 0.28) = 28).
    Raises ``ValueError`` on empty input or a threshold outside (0, 1).
    Source: Kershaw & Bober 2019, Table 2 ("MTLD"); McCarthy & Jarvis 2010.
    """
    threshold = float(threshold)
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
    lr = _richness(tokens_of(tokens_or_texts), 1, "MTLD", on_short)
    return float(lr.mtld(threshold=threshold))


@dataclass(frozen=True)
class Measure:
    """A lexical diversity measure of the registry.

    name : key (``ttr``, ``root_ttr``, ``log_ttr``, ``hdd``, ``mtld``), as in
        :data:`captioneval.metrics.registry.LEXICAL_MEASURES`.
    label : display name as in Kershaw & Bober's Table 2.
    function : ``f(tokens_or_texts, *, on_short) -> float`` with the default parameters.
    min_tokens : smallest token count for which it is defined (the policy above).
    order_dependent : True when the value depends on the order of the tokens (MTLD only).
    range : (low, high) of the values (high may be inf).
    """

    name: str
    label: str
    function: Callable[..., float]
    min_tokens: int
    order_dependent: bool
    range: tuple[float, float]


MEASURES: dict[str, Measure] = {
    "ttr": Measure("ttr", "TTR", ttr, 1, False, (0.0, 1.0)),
    "root_ttr": Measure("root_ttr", "Root TTR", root_ttr, 1, False, (0.0, math.inf)),
    "log_ttr": Measure("log_ttr", "Log TTR", log_ttr, 2, False, (0.0, 1.0)),
    "hdd": Measure("hdd", "HD-D", hdd, HDD_DRAWS, False, (0.0, 1.0)),
    "mtld": Measure("mtld", "MTLD", mtld, 1, True, (0.0, math.inf)),
}


def _measure(measure: str) -> Measure:
    try:
        return MEASURES[measure]
    except (KeyError, TypeError):
        raise ValueError(f"unknown lexical diversity measure {measure!r}; known: {', '.join(MEASURES)}") from None


def lexical_diversity(tokens_or_texts: TokensOrTexts, measure: str = "mtld", *, on_short: str = "raise") -> float:
    """Lexical diversity ``L`` of one text with one of :data:`MEASURES` at its default parameters.

    Parameters
    ----------
    tokens_or_texts : see :func:`tokens_of` (texts/token lists are concatenated in order).
    measure : ``"ttr"``, ``"root_ttr"``, ``"log_ttr"``, ``"hdd"`` (42 draws) or ``"mtld"`` (0.72).
    on_short : ``"raise"`` (default: :class:`TextTooShortError`) or ``"nan"``.

    Returns
    -------
    float (ranges: :attr:`Measure.range`).

    Raises
    ------
    ValueError for an unknown measure or empty input; TextTooShortError (see the module docstring).
    """
    return _measure(measure).function(tokens_or_texts, on_short=on_short)


def _caption_tokens(captions, what: str) -> list[str]:
    if isinstance(captions, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of captions, got a single string (wrap it in a list)")
    if captions is None or len(captions) == 0:
        raise ValueError(f"{what}: no captions (empty input)")
    tokens = tokens_of(captions)
    if not tokens:
        raise ValueError(f"{what}: the captions contain no tokens")
    return tokens


def corpus_diversity(captions: Sequence[str] | Sequence[Sequence[str]], measure: str = "mtld", *,
                     on_short: str = "nan") -> float:
    """Lexical diversity ``L(c)`` of a caption corpus (e.g. one system's captions, or the references).

    The corpus is the concatenation of the captions' tokens **in the order given** (no separator).
    TTR, root/log TTR and HD-D only depend on the token counts, but MTLD depends on the order, and
    its segments run across caption boundaries: pass captions in a fixed order and the same order
    for every corpus being compared. Captions of the same image placed next to each other share
    many words and lower MTLD: on the THumB COCO references (500 images x 4 captions, simple
    tokens) MTLD is 26.6 image-major (the 4 captions of image 1, then of image 2, ...) but 54.9
    position-major (caption 1 of every image, then caption 2, ...; a random order gives ~55.5),
    while a system corpus has one caption per image. For a reference corpus with several captions
    per image, use the position-major order so that it is comparable with a system corpus.

    Parameters
    ----------
    captions : sequence (length n >= 1) of whitespace-tokenised strings or of token lists.
    measure : a key of :data:`MEASURES`.
    on_short : ``"nan"`` (default: NaN when the corpus has fewer tokens than the measure needs, as
        stored by :func:`captioneval.metrics.registry.score_systems`) or ``"raise"``.

    Returns
    -------
    float, or NaN (too short).

    Raises
    ------
    TypeError for a bare string; ValueError for no captions, captions with no tokens at all, or an
    unknown measure.
    """
    tokens = _caption_tokens(captions, "captions")
    return _measure(measure).function(tokens, on_short=on_short)


def ldr(machine_captions: Sequence[str] | Sequence[Sequence[str]],
        reference_captions: Sequence[str] | Sequence[Sequence[str]], measure: str = "hdd", *,
        on_short: str = "nan") -> float:
    """Lexical diversity ratio ``l_d = L(c_m) / L(c_r)`` (Kershaw & Bober 2019, Eq. 1).

    ``c_m`` is the machine (system) caption corpus, ``c_r`` the reference corpus, both as in
    :func:`corpus_diversity`. 1 means the system matches the references' diversity; lower means a
    lexical gap. The paper uses HD-D (the default here).

    Caution: TTR, root TTR and log TTR depend strongly on the number of tokens (TTR falls as a
    corpus grows), so their ratio is only meaningful between corpora of similar size, e.g. one
    reference per image against one system caption per image; HD-D and MTLD are far less
    length-sensitive.

    Returns
    -------
    float >= 0; NaN when either corpus is too short for the measure (``on_short="nan"``).

    Raises
    ------
    TypeError / ValueError as :func:`corpus_diversity`; ValueError when ``L(c_r) = 0`` (log TTR of a
    single-type reference corpus).
    """
    value_m = corpus_diversity(machine_captions, measure, on_short=on_short)
    value_r = corpus_diversity(reference_captions, measure, on_short=on_short)
    if math.isnan(value_m) or math.isnan(value_r):
        return math.nan
    if value_r == 0.0:
        raise ValueError(f"the reference corpus has zero {measure}: the ratio is undefined")
    return value_m / value_r


# ---------------------------------------------------------------------------------------------
# Lexical Gap
# ---------------------------------------------------------------------------------------------
def _check_constants(mu: float, alpha: float) -> tuple[float, float]:
    mu, alpha = float(mu), float(alpha)
    if not math.isfinite(mu):
        raise ValueError(f"mu must be finite, got {mu!r}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a finite positive number, got {alpha!r}")
    return mu, alpha


def lexical_gap(l_d, mu: float = MU, alpha: float = ALPHA):
    """Lexical Gap ``L_g = 1 / (1 + exp(-alpha (l_d - mu)))`` (Kershaw & Bober 2019, Eq. 2), vectorised.

    Parameters
    ----------
    l_d : float or array-like of any shape, values >= 0 (NaN allowed and propagated).
    mu : finite float, default 0.81 (Sec. 4.1: the Bayes minimum-error point between the l_d
        distributions of their rich and sparse descriptions); ``L_g(mu) = 0.5``.
    alpha : finite float > 0, default 5 (Sec. 4.1); the slope at mu is alpha / 4.

    Returns
    -------
    float for a scalar input, else an ndarray of the input's shape; values in (0, 1) (they may
    round to 0 or 1 in float64 for extreme ``alpha (l_d - mu)``), strictly increasing in ``l_d``.
    Computed with ``scipy.special.expit`` (no overflow).

    Raises
    ------
    ValueError for negative ``l_d``, non-finite ``mu`` or non-positive / non-finite ``alpha``;
    TypeError / ValueError for non-numeric input.

    Note: the paper's Table 3 L_g values are not Eq. 2 with alpha = 5, mu = 0.81 (e.g. l_d = 1.03 is
    listed with L_g = 0.98, whereas Eq. 2 gives 0.75); they fit alpha ~ 20, mu ~ 0.82 (see
    tests/test_lexical.py). We implement Eq. 2 with the constants stated in the text.
    """
    from scipy.special import expit

    mu, alpha = _check_constants(mu, alpha)
    arr = np.asarray(l_d, dtype=np.float64)
    if np.any(arr < 0):  # NaN compares False
        raise ValueError("l_d must be >= 0 (a ratio of lexical diversities)")
    out = expit(alpha * (arr - mu))
    return float(out) if out.ndim == 0 else out


class GapWeighted(NamedTuple):
    """Gap-weighted scores of Kershaw & Bober 2019: ``m_gap = M L_g`` (Eq. 3), ``m_ldr = M l_d`` (Eq. 4)."""

    m_gap: np.ndarray
    m_ldr: np.ndarray


def gap_weighted(scores, l_d, mu: float = MU, alpha: float = ALPHA) -> GapWeighted:
    """Weight per-caption metric scores by the system's Lexical Gap and by its LDR.

    Kershaw & Bober 2019, Sec. 4.1: for a metric M and each sentence s_n of a system,
    ``m_gap = M(s_n) L_g`` (Eq. 3) and ``m_ldr = M(s_n) l_d`` (Eq. 4), where ``l_d`` and ``L_g`` are
    those of the system's whole corpus (Eqs. 1-2).

    Parameters
    ----------
    scores : float or array-like, shape (n,) (or any shape): M(s_n) for the captions.
    l_d : float (one system) or array-like broadcastable to ``scores`` (e.g. shape (n,) giving each
        caption its system's l_d); >= 0, NaN propagates.
    mu, alpha : as in :func:`lexical_gap`.

    Returns
    -------
    GapWeighted(m_gap, m_ldr): two float64 ndarrays of the broadcast shape (0-d for scalars).

    Raises
    ------
    ValueError when the shapes do not broadcast, for negative l_d or invalid constants.
    """
    m = np.asarray(scores, dtype=np.float64)
    d = np.asarray(l_d, dtype=np.float64)
    try:
        m, d = np.broadcast_arrays(m, d)
    except ValueError:
        raise ValueError(f"scores of shape {m.shape} and l_d of shape {d.shape} do not broadcast") from None
    g = np.asarray(lexical_gap(d, mu=mu, alpha=alpha), dtype=np.float64)
    return GapWeighted(m_gap=m * g, m_ldr=m * d)
