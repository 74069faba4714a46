"""METEOR 1.5 in pure Python, equal to pycocoevalcap's ``meteor-1.5.jar -l en -norm`` bit for bit.

This module follows the algorithm of METEOR 1.5 (Denkowski & Lavie 2014, "Meteor Universal: Language
Specific Translation Evaluation for Any Target Language", WMT; source: https://github.com/cmu-mtlab/meteor,
files ``src/edu/cmu/meteor/util/Normalizer.java``, ``aligner/{Aligner,Stage,PartialAlignment,ExactMatcher,
StemMatcher,SynonymMatcher,SynonymDictionary,ParaphraseMatcher,ParaphraseTransducer}.java``,
``scorer/{MeteorScorer,MeteorStats}.java`` and ``src/Meteor.java`` (stdio mode)). It is a derivative
work of METEOR and is therefore distributed under the GNU Lesser General Public License, version 2.1
or (at your option) any later version (LICENSES/LGPL-2.1-or-later.txt):

    Copyright (c) 2004-2014 Carnegie Mellon University (METEOR); Python port, the captioneval authors.
    This library is free software; you can redistribute it and/or modify it under the terms of the
    GNU Lesser General Public License as published by the Free Software Foundation; either version
    2.1 of the License, or (at your option) any later version. This library is distributed in the
    hope that it will be useful, but WITHOUT ANY WARRANTY; without even the implied warranty of
    MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE. See the GNU Lesser General Public License
    for more details.

No METEOR data is redistributed: the function words, WordNet synsets and exceptions (WordNet 3.0
licence, ``synonym/COPYING.WORDNET`` in the jar), nonbreaking prefixes and the English paraphrase
table are read at run time from the installed pycocoevalcap (the jar is a zip file; the table is
``data/paraphrase-en.gz`` beside it). The paraphrase table (62 MB, 5.3 M entries) is turned once into
a compact array index cached under :func:`cache_dir` keyed by the table's sha256, and filtered for
each batch to the batch's vocabulary (the index's arrays are read only while filtering).

Speed and memory (``benchmarks/meteor_speed.py``): each distinct text is normalised and indexed once
per batch; the beam runs only where some word has more than one candidate match, ranks paths by one
integer ordered as the jar's tuple and stops after the last match; each shortcut is argued where it
is made (:func:`_align`, :func:`_resolve`, :func:`_shared_synsets`) and checked by the goldens.

Configuration (``-l en -norm``, task "rank"): alpha 0.85, beta 0.20, gamma 0.60, delta 0.75; modules
exact, stem (Snowball English), synonym (WordNet), paraphrase with scoring weights 1.0, 0.6, 0.8, 0.6;
beam 40; punctuation kept, lower-cased.

Facts about the jar that exactness depends on (each reproduced here):

* words (and stems) are compared by Java ``String.hashCode`` (:func:`java_hash`), so two words with
  equal hashes match exactly;
* the aligner scores a match with ``int += length * weight`` using weights 1, 0.5, 0.5, 0.5, so a
  one-word stem, synonym or paraphrase match adds 0 to the beam's match count;
* when a path is extended by a match, the match's distance is added to the *parent* path
  (``Aligner.resolve``), so later siblings inherit it;
* sorts are stable (``Collections.sort``) over lists built in a fixed order;
* the stemmer is Snowball English as in ``snowballstemmer`` 2.2.0;
* ``Math.pow(frag, 0.2)`` is HotSpot's, which differs from C's ``pow`` for some arguments: per-segment
  fragmentations ``chunks / (matches / 2)`` were checked exhaustively for chunks <= 256, matches <= 1024
  (every caption pair of up to 512 words a side) and the 184 that differ are corrected from
  :data:`_POW_FIXES`; the corpus aggregate's fragmentation
  is arbitrary, so it equals the jar's or differs by at most the one-ulp difference of ``pow``.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import math
import operator
import os
import re
import threading

try:  # POSIX: one process builds the paraphrase index while the others wait
    import fcntl
except ImportError:  # Windows: each process may build it (the file is still replaced atomically)
    fcntl = None
import zipfile
from typing import Sequence

import numpy as np

from captioneval.utils.gcpause import paused_gc

__all__ = ["MeteorPython", "get_scorer", "score", "statistics", "score_and_corpus", "evaluate",
           "normalize", "java_hash", "cache_dir", "METEOR_PY_VERSION", "MeteorDataError"]

#: version of this implementation (named in the metric's version string)
METEOR_PY_VERSION = "meteor-1.5-py1"

ALPHA, BETA, GAMMA, DELTA = 0.85, 0.20, 0.60, 0.75
#: scoring weights of the four modules (MeteorConfiguration, English rank task)
MODULE_WEIGHTS = (1.0, 0.6, 0.8, 0.6)
#: the aligner's weights (MeteorScorer.loadConfiguration: updateModuleWeights(1.0, 0.5, 0.5, 0.5))
_ALIGN_WEIGHTS = (1.0, 0.5, 0.5, 0.5)
BEAM_SIZE = 40
_N_MODULES = 4

_PARA_CACHE_VERSION = "3"


class MeteorDataError(RuntimeError):
    """pycocoevalcap's METEOR data (jar, paraphrase table) is missing or unreadable."""


# --------------------------------------------------------------------------------------------------
# Java string semantics
# --------------------------------------------------------------------------------------------------
def java_hash(word: str) -> int:
    """Java ``String.hashCode`` of ``word`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = word.encode("utf-16-le", "surrogatepass")
    for k in range(0, len(data), 2):
        h = (31 * h + (data[k] | (data[k + 1] << 8))) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


_TOKEN_SPLIT = re.compile(r"[ \t\n\r\f]+")


def java_tokens(text: str) -> list[str]:
    """``java.util.StringTokenizer`` with its default delimiters (space, tab, LF, CR, FF)."""
    return [t for t in _TOKEN_SPLIT.split(text) if t]


def java_trim(text: str) -> str:
    """``String.trim``: strips every character <= U+0020 from both ends."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _jdiv(a: float, b: float) -> float:
    """IEEE 754 division as in Java (x/0 gives +-inf or NaN instead of raising)."""
    if b != 0.0:
        return a / b
    if a != a or a == 0.0:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


# --------------------------------------------------------------------------------------------------
# Normaliser (Normalizer.normalizeLine, English, punctuation kept)
# --------------------------------------------------------------------------------------------------
_ALPHA = ("A-Za-z\u0160\u017d\u0161\u017e\u0178\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u017e"
          "\u0400-\u04ff\u0500-\u0527\ua640-\ua66e\ua67e-\ua697\u1d00-\u1d7f")
_ALNUM = "0-9" + _ALPHA
_R_SEP_OTHER = re.compile("([^" + _ALNUM + " \t\n\x0b\f\r.'`,\\-\u2018\u2019])")
_R_MULTI_DOT = re.compile(r"\.([.]+)")
_R_MULTI_DOT2 = re.compile(r"DOTMULTI\.([^.])")
_R_COMMA = re.compile(r"([^0-9]),([^0-9])")
_R_COMMA2 = re.compile(r"([0-9]),([^0-9])")
_R_COMMA3 = re.compile(r"([^0-9]),([0-9])")
_R_QUOTE = re.compile("[`\u2018\u2019]")
_R_QUOTE2 = re.compile("([\u201c\u201d]|'')")
_R_RM_DASH = re.compile("([" + _ALNUM + ".])[\\-]([" + _ALNUM + "])")
_R_CONT1 = re.compile("([^" + _ALPHA + "])'([^" + _ALPHA + "])")
_R_CONT2 = re.compile("([^" + _ALPHA + "0-9])'([" + _ALPHA + "])")
_R_CONT3 = re.compile("([" + _ALPHA + "])'([^" + _ALPHA + "])")
_R_CONT4 = re.compile("([" + _ALPHA + "])'([" + _ALPHA + "])")
_R_CONT5 = re.compile("([0-9])'([s])")
_R_NBP1 = re.compile("[" + _ALPHA + "]")
_R_WHITE = re.compile("[ \u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f"
                      "\u205f\u3000]+")
_NBP_ANY, _NBP_NUM_ONLY = 1, 2


def _normalize(line: str, nbp: dict[str, int]) -> str:
    s = " " + line + " "
    s = _R_SEP_OTHER.sub(r" \1 ", s)
    s = _R_MULTI_DOT.sub(r" DOTMULTI\1", s)
    while "DOTMULTI." in s:
        s = _R_MULTI_DOT2.sub(r"DOTDOTMULTI \1", s)
        s = s.replace("DOTMULTI.", "DOTDOTMULTI")
    s = _R_COMMA.sub(r"\1 , \2", s)
    s = _R_COMMA2.sub(r"\1 , \2", s)
    s = _R_COMMA3.sub(r"\1 , \2", s)
    s = _R_QUOTE.sub("'", s)
    s = _R_QUOTE2.sub(' " ', s)
    s = s.replace("\u2013", "-")
    s = s.replace("--", "-")
    s = _R_RM_DASH.sub(r"\1 \2", s)
    s = _R_CONT1.sub(r"\1 ' \2", s)
    s = _R_CONT2.sub(r"\1 ' \2", s)
    s = _R_CONT3.sub(r"\1 ' \2", s)
    s = _R_CONT4.sub(r"\1 '\2", s)
    s = _R_CONT5.sub(r"\1 '\2", s)
    words = java_tokens(s)
    out = []
    n = len(words)
    for i, word in enumerate(words):
        if len(word) > 1 and word.endswith("."):
            pre = word[:-1]
            kind = nbp.get(pre)
            nxt = words[i + 1] if i < n - 1 else None
            if "." in pre and _R_NBP1.search(pre):
                out.append(word.replace(".", ""))
            elif kind == _NBP_ANY or (nxt is not None and "a" <= nxt[0] <= "z"):
                out.append(word)
            elif kind == _NBP_NUM_ONLY and nxt is not None and "0" <= nxt[0] <= "9":
                out.append(word)
            else:
                out.append(pre + " .")
        else:
            out.append(word)
        out.append(" ")
    s = "".join(out)
    while "DOTDOTMULTI" in s:
        s = s.replace("DOTDOTMULTI", "DOTMULTI.")
    s = s.replace("DOTMULTI", ".")
    return java_trim(_R_WHITE.sub(" ", s))


# --------------------------------------------------------------------------------------------------
# Data (from the installed pycocoevalcap)
# --------------------------------------------------------------------------------------------------
def meteor_dir() -> str:
    """Directory of pycocoevalcap's ``meteor-1.5.jar``. Raises MeteorDataError if not installed."""
    spec = importlib.util.find_spec("pycocoevalcap.meteor")
    if spec is None or not spec.submodule_search_locations:
        raise MeteorDataError("pycocoevalcap is not installed: METEOR 1.5 reads its data from meteor-1.5.jar")
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def cache_dir() -> str:
    """Cache directory for the paraphrase index: ``$CAPTIONEVAL_CACHE`` or ``~/.cache/captioneval``."""
    base = os.environ.get("CAPTIONEVAL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "captioneval")
    return os.path.join(base, "meteor")


def _lines(data: bytes) -> list[str]:
    """``BufferedReader.readLine`` over UTF-8 ``data`` (line ends: LF, CR, CRLF)."""
    text = data.decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")[: -1 if text.endswith(("\n", "\r")) else None]


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_paraphrase_index(table: str, target: str) -> None:
    """Parse METEOR's paraphrase table (gzip; per entry three lines: probability, reference phrase,
    paraphrase, as ``ParaphraseTransducer``'s constructor reads it) into ``target`` (an ``.npz``):
    ``vocab`` (UTF-8 words joined by ``\\n``, ids in first-seen order), ``ref_off``/``ref_words`` and
    ``par_off``/``par_words`` (CSR arrays in file order: int32 offsets, uint16 word ids while the
    vocabulary has fewer than 65,536 words, else int32). Written to a temporary file and renamed,
    so a reader never sees half an index. Raises MeteorDataError on a malformed table."""
    vocab: dict[str, int] = {}
    ref_words: list[int] = []
    par_words: list[int] = []
    ref_off = [0]
    par_off = [0]
    with gzip.open(table, "rb") as raw:
        reader = io.TextIOWrapper(raw, encoding="utf-8", errors="replace", newline=None)
        while True:
            prob = reader.readline()
            if not prob:
                break
            ref = reader.readline()
            par = reader.readline()
            if not par:
                raise MeteorDataError(f"{table}: truncated entry after line {prob!r}")
            for w in java_tokens(ref):
                i = vocab.get(w)
                if i is None:
                    i = vocab[w] = len(vocab)
                ref_words.append(i)
            ref_off.append(len(ref_words))
            for w in java_tokens(par):
                i = vocab.get(w)
                if i is None:
                    i = vocab[w] = len(vocab)
                par_words.append(i)
            par_off.append(len(par_words))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # 43,139 distinct words in METEOR 1.5's English table: word ids fit 16 bits
    word_type = np.uint16 if len(vocab) < (1 << 16) else np.int32
    tmp = f"{target}.{os.getpid()}.tmp.npz"
    np.savez(tmp, vocab=np.frombuffer("\n".join(vocab).encode("utf-8"), dtype=np.uint8),
             ref_off=np.asarray(ref_off, dtype=np.int32), ref_words=np.asarray(ref_words, dtype=word_type),
             par_off=np.asarray(par_off, dtype=np.int32), par_words=np.asarray(par_words, dtype=word_type))
    os.replace(tmp, target)


class _ParaphraseIndex:
    """The cached array index of the paraphrase table (see :func:`build_paraphrase_index`)."""

    def __init__(self, path: str):
        with np.load(path) as z:
            self.vocab_list = bytes(z["vocab"]).decode("utf-8").split("\n")
            self.ref_off = z["ref_off"]
            self.ref_words = z["ref_words"]
            self.par_off = z["par_off"]
            self.par_words = z["par_words"]
        self.vocab = {w: i for i, w in enumerate(self.vocab_list)}

    def select(self, words: set[str]) -> list:
        """The entries whose reference phrase and paraphrase use only ``words``, in file order, as
        compact CSR arrays [ref offsets (int64, k+1), ref word ids, paraphrase offsets, paraphrase
        word ids] (see :meth:`filtered`)."""
        ids = [self.vocab[w] for w in words if w in self.vocab]
        bad = np.ones(len(self.vocab_list) + 1, dtype=bool)
        bad[ids] = False
        ro, rw, po, pw = self.ref_off, self.ref_words, self.par_off, self.par_words
        # first words first (cheap), then the other words of the surviving entries, position by position
        keep = np.flatnonzero(~bad[rw[ro[:-1]]] & ~bad[pw[po[:-1]]])
        for off, words_ in ((ro, rw), (po, pw)):
            start = off[keep]
            length = off[keep + 1] - start
            k = 1
            while len(keep) and k < int(length.max()):
                longer = length > k
                ok = ~longer
                ok[longer] = ~bad[words_[start[longer] + k]]
                keep, start, length = keep[ok], start[ok], length[ok]
                k += 1
        # the kept entries' words, gathered into compact arrays (the full arrays can then be freed)
        selected = []
        for off, words_ in ((ro, rw), (po, pw)):
            start = off[keep].astype(np.int64)
            length = off[keep + 1].astype(np.int64) - start
            new_off = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(length, out=new_off[1:])
            picked = words_[np.repeat(start - new_off[:-1], length) + np.arange(int(new_off[-1]), dtype=np.int64)]
            selected += [new_off, picked]
        return selected

    def filtered(self, words: set[str]) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
        """Entries whose reference phrase and paraphrase use only ``words``: reference phrase (tuple
        of words, the index's own string objects, so equal words share one object) -> paraphrases
        (tuples of words) in file order. Every other entry can match nothing in a batch whose words
        are ``words``."""
        return _build_table(self.vocab_list, self.select(words))


def _build_table(vocab_list: list[str], selected: list) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """The dict of :meth:`_ParaphraseIndex.filtered` from the arrays of :meth:`_ParaphraseIndex.select`."""
    r_off, r_words, p_off, p_words = selected
    vl = vocab_list
    rw = [vl[x] for x in r_words.tolist()]
    pw = [vl[x] for x in p_words.tolist()]
    table: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    ro, po = r_off.tolist(), p_off.tolist()
    for e in range(len(ro) - 1):
        ref = tuple(rw[ro[e]:ro[e + 1]])
        par = tuple(pw[po[e]:po[e + 1]])
        lst = table.get(ref)
        if lst is None:
            table[ref] = [par]
        else:
            lst.append(par)
    return table


class _Resources:
    """Function words, synonym dictionary, nonbreaking prefixes, stemmer and paraphrase index."""

    def __init__(self):
        mdir = meteor_dir()
        jar = os.path.join(mdir, "meteor-1.5.jar")
        table = os.path.join(mdir, "data", "paraphrase-en.gz")
        for path in (jar, table):
            if not os.path.isfile(path):
                raise MeteorDataError(f"METEOR data file missing: {path}")
        try:
            with zipfile.ZipFile(jar) as z:
                function = z.read("function/english.words")
                synsets = z.read("synonym/english.synsets")
                exceptions = z.read("synonym/english.exceptions")
                prefixes = z.read("nonbreaking/english.prefixes")
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise MeteorDataError(f"cannot read METEOR data from {jar}: {exc}") from exc
        self.function_words = set(_lines(function))
        # SynonymDictionary: exceptions (base line, forms line), synsets (word line, ids line)
        self.word_to_bases: dict[str, list[str]] = {}
        lines = _lines(exceptions)
        for k in range(0, len(lines) - 1, 2):
            for form in java_tokens(lines[k + 1]):
                self.word_to_bases.setdefault(form, []).append(lines[k])
        # word -> its synset ids as the file's text, parsed on first use (keeps ~40 MB of sets unbuilt)
        self.word_to_synsets: dict[str, str] = {}
        lines = _lines(synsets)
        for k in range(0, len(lines) - 1, 2):
            self.word_to_synsets[lines[k]] = lines[k + 1]
        self.nbp: dict[str, int] = {}
        for line in _lines(prefixes):
            toks = java_tokens(line)
            if not toks or toks[0].startswith("#"):
                continue
            self.nbp[toks[0]] = _NBP_NUM_ONLY if len(toks) > 1 and toks[1] == "#NUMERIC_ONLY#" else _NBP_ANY
        import snowballstemmer

        self._stemmer = snowballstemmer.stemmer("english")
        digest = _sha256(table)
        index_path = os.path.join(cache_dir(), f"paraphrase-en-{digest[:32]}-v{_PARA_CACHE_VERSION}.npz")
        if not os.path.isfile(index_path):
            # one process builds (about a minute and 1 GB); the others (test workers, Celery worker
            # processes started together) wait on the lock and then read its file
            os.makedirs(os.path.dirname(index_path), exist_ok=True)
            with open(index_path + ".lock", "a+b") as lock_file:
                if fcntl is not None:
                    fcntl.flock(lock_file, fcntl.LOCK_EX)
                if not os.path.isfile(index_path):
                    build_paraphrase_index(table, index_path)
        # the index (about 100 MB of arrays) is read only while a batch's table is filtered from it
        self._index_path = index_path
        self.lock = threading.Lock()
        self._word_cache: dict[str, tuple] = {}
        self._para_vocab: frozenset[str] = frozenset()
        self._para: tuple[dict, set] = ({}, set())

    @property
    def paraphrase(self) -> _ParaphraseIndex:
        """The paraphrase index, read from its cache file (about 0.7 s; not kept)."""
        return _ParaphraseIndex(self._index_path)

    def paraphrase_for(self, vocab: set[str]) -> tuple[dict, set]:
        """(table, prefixes) of the paraphrase entries made only of words of ``vocab`` or of the
        previous batches' vocabulary (a superset filters nothing that could match: an entry with a
        word outside a batch never matches in it), so a batch within the words already seen reuses
        the last table. ``prefixes``: every prefix of every reference phrase (the transducer's states).
        A batch with new words reads the index again (about 0.7 s) and filters it (about 1 s)."""
        if not vocab <= self._para_vocab:
            words = self._para_vocab | vocab
            self._para = ({}, set())  # (the previous table is not kept while the next is built)
            index = self.paraphrase
            vocab_list, selected = index.vocab_list, index.select(words)
            del index  # frees the arrays before the table's Python objects are made
            table = _build_table(vocab_list, selected)
            del selected
            prefixes = set()
            for key in table:
                for k in range(1, len(key) + 1):
                    prefixes.add(key[:k])
            self._para_vocab, self._para = frozenset(words), (table, prefixes)
        return self._para

    # SynonymDictionary.morph (WordNet 3.0's morphology, as the jar has it)
    _SUFX = ("s", "ses", "xes", "zes", "ches", "shes", "men", "ies", "s", "ies", "es", "es", "ed", "ed",
             "ing", "ing", "er", "est", "er", "est")
    _ADDR = ("", "s", "x", "z", "ch", "sh", "man", "y", "", "y", "e", "", "e", "", "e", "", "", "", "e", "e")

    def _morph(self, word: str) -> str:
        end = "ful" if word.endswith("ful") else ""
        if word.endswith("ss") or len(word) <= 2:
            return word
        for suf, add in zip(self._SUFX, self._ADDR):
            if word.endswith(suf):
                cand = word[: len(word) - len(suf)] + add
                if cand in self.word_to_synsets:
                    return cand + end
        return ""

    def _synset_ids(self, word: str) -> frozenset[int]:
        text = self.word_to_synsets.get(word)
        return frozenset(int(t) for t in java_tokens(text)) if text else frozenset()

    def _synsets(self, word: str) -> frozenset[int]:
        own = self._synset_ids(word)
        bases = self.word_to_bases.get(word)
        if bases is not None:
            stem: set[int] = set()
            for base in bases:
                stem |= self._synset_ids(base)
        else:
            stem = self._synset_ids(self._morph(word))
        return own | stem

    def word(self, word: str) -> tuple[int, int, frozenset[int], bool]:
        """(hash, stem hash, synsets, is function word) of a normalised, lower-cased word (cached)."""
        info = self._word_cache.get(word)
        if info is None:
            info = (java_hash(word), java_hash(self._stemmer.stemWord(word)), self._synsets(word),
                    word.lower() in self.function_words)
            self._word_cache[word] = info
        return info


# --------------------------------------------------------------------------------------------------
# Aligner (Aligner.align / resolve)
# --------------------------------------------------------------------------------------------------
class _Match:
    """One candidate match (``Match`` in the jar): reference words ``start .. start+length-1``,
    test words ``mstart .. mstart+mlength-1``, module 0-3. Immutable; shared through :func:`_match`."""

    __slots__ = ("start", "length", "mstart", "mlength", "module", "mask1", "mask2", "gain", "dist")

    def __init__(self, start, length, mstart, mlength, module):
        self.start = start
        self.length = length
        self.mstart = mstart
        self.mlength = mlength
        self.module = module
        self.mask2 = ((1 << length) - 1) << start
        self.mask1 = ((1 << mlength) - 1) << mstart
        w = _ALIGN_WEIGHTS[module]
        # PartialAlignment.matches1/2 are ints: int += length * weight truncates (weights >= 0)
        self.gain = int(mlength * w) + int(length * w)
        self.dist = abs(start - mstart)


#: the matches made so far, by (start, length, mstart, mlength, module): a match is a value, so
#: captions share them (no allocation per pair); emptied when it grows past _MATCH_CACHE_MAX
_MATCH_CACHE: dict[tuple[int, int, int, int, int], _Match] = {}
_MATCH_CACHE_MAX = 200_000


def _match(start: int, length: int, mstart: int, mlength: int, module: int) -> _Match:
    key = (start, length, mstart, mlength, module)
    m = _MATCH_CACHE.get(key)
    if m is None:
        if len(_MATCH_CACHE) >= _MATCH_CACHE_MAX:
            _MATCH_CACHE.clear()
        m = _MATCH_CACHE[key] = _Match(start, length, mstart, mlength, module)
    return m


class _Sentence:
    """Per-sentence data the matchers need, computed once per batch for each distinct sentence
    (candidates and references alike): words, word hashes, stem hashes, synsets, function-word
    flags, position indexes (word hash / stem hash / synset / word -> ascending positions), the
    union of the words' synsets, and the paraphrase paths (``ParaphraseTransducer.getReferencePaths``)
    grouped by the paraphrase's first word: first word -> [(start, k, span length, paraphrase)],
    where k is the path's rank among the paths that start at ``start`` (the jar's order)."""

    __slots__ = ("words", "n", "h", "stem", "syn", "fw", "n_function", "by_hash", "by_stem", "by_syn",
                 "syn_all", "by_word", "para_first")

    def __init__(self, words: Sequence[str], res: _Resources, para: dict, prefixes: set,
                 syn_of: dict[str, frozenset[int]]):
        self.words = words = tuple(words)
        self.n = n = len(words)
        info = [res.word(w) for w in words]
        self.h = h = [x[0] for x in info]
        self.stem = stem = [x[1] for x in info]
        self.syn = syn = [syn_of[w] for w in words]
        self.fw = [x[3] for x in info]
        self.n_function = sum(self.fw)
        self.syn_all = frozenset().union(*syn)
        by_hash: dict[int, list[int]] = {}
        by_stem: dict[int, list[int]] = {}
        by_syn: dict[int, list[int]] = {}
        by_word: dict[str, list[int]] = {}
        for i in range(n):
            by_hash.setdefault(h[i], []).append(i)
            by_stem.setdefault(stem[i], []).append(i)
            for s in syn[i]:
                by_syn.setdefault(s, []).append(i)
            by_word.setdefault(words[i], []).append(i)
        self.by_hash, self.by_stem, self.by_syn, self.by_word = by_hash, by_stem, by_syn, by_word
        para_first: dict[str, list[tuple[int, int, int, tuple[str, ...]]]] = {}
        for start in range(n):
            k = 0
            for end in range(start + 1, n + 1):
                key = words[start:end]
                if key not in prefixes:
                    break
                pars = para.get(key)
                if pars:
                    length = end - start
                    for p in pars:
                        para_first.setdefault(p[0], []).append((start, k, length, p))
                        k += 1
        self.para_first = para_first


def _shared_synsets(res: _Resources, vocab: set[str]) -> dict[str, frozenset[int]]:
    """Each word of ``vocab`` -> its synsets that another word of ``vocab`` with a different Java
    hash also has. SynonymMatcher matches two words with different hashes that share a synset, and
    such a synset is in both words' sets here, so the matches are the same as with the full sets
    (which would cost about 10 kB per sentence in the position indexes)."""
    info = {w: res.word(w) for w in vocab}
    first: dict[int, int] = {}
    shared: set[int] = set()
    for h, _stem, syns, _fw in info.values():
        for sid in syns:
            if first.setdefault(sid, h) != h:
                shared.add(sid)
    empty: frozenset[int] = frozenset()
    return {w: (x[2] & shared) or empty for w, x in info.items()}


def _para_hits(src: _Sentence, dst: _Sentence) -> list[tuple[int, int, int, int, int]]:
    """Where the paraphrases of ``src``'s phrases occur in ``dst``: (start in src, path rank,
    position in dst, span length in src, paraphrase length), sorted (the jar's loop order: start,
    path, ascending position)."""
    hits = []
    words = dst.words
    by_word = dst.by_word
    for w in src.para_first.keys() & by_word.keys():
        positions = by_word[w]
        for start, k, length, p in src.para_first[w]:
            plen = len(p)
            for pos in positions:
                if plen == 1 or words[pos:pos + plen] == p:
                    hits.append((start, k, pos, length, plen))
    hits.sort()
    return hits


def _align(s1: _Sentence, s2: _Sentence) -> tuple:
    """Aligner.align of test ``s1`` to reference ``s2``. Returns (per-module counts: content1,
    content2, function1, function2 as 4 lists of 4 ints; chunks)."""
    n1, n2 = s1.n, s2.n
    h1, h2 = s1.h, s2.h
    matches: list[list[_Match]] = [[] for _ in range(n2)]
    cov1 = [0] * n1
    cov2 = [0] * n2
    mk = _match
    # exact
    by_hash = s1.by_hash
    for j in range(n2):
        pos = by_hash.get(h2[j])
        if pos:
            mj = matches[j]
            for i in pos:
                mj.append(mk(j, 1, i, 1, 0))
                cov1[i] += 1
            cov2[j] += len(pos)
    if not (n1 == n2 and h1 == h2):
        # stem (StemMatcher: stem hashes equal, word hashes differ)
        by_stem = s1.by_stem
        stem2 = s2.stem
        for j in range(n2):
            pos = by_stem.get(stem2[j])
            if pos:
                hj = h2[j]
                for i in pos:
                    if h1[i] != hj:
                        matches[j].append(mk(j, 1, i, 1, 1))
                        cov1[i] += 1
                        cov2[j] += 1
        # synonym (SynonymMatcher: a shared synset, word hashes differ)
        common = s1.syn_all & s2.syn_all
        if common:
            by_syn = s1.by_syn
            syn2 = s2.syn
            for j in range(n2):
                shared = syn2[j] & common
                if not shared:
                    continue
                found: set[int] = set()
                for s in shared:
                    found.update(by_syn[s])
                hj = h2[j]
                for i in sorted(found):
                    if h1[i] != hj:
                        matches[j].append(mk(j, 1, i, 1, 2))
                        cov1[i] += 1
                        cov2[j] += 1
        # paraphrase (ParaphraseMatcher: reference-side paths first, then test-side paths)
        if s2.para_first:
            for j, _k, i, length, plen in _para_hits(s2, s1):
                matches[j].append(mk(j, length, i, plen, 3))
                for k in range(i, i + plen):
                    cov1[k] += 1
                for k in range(j, j + length):
                    cov2[k] += 1
        if s1.para_first:
            for i, _k, j, length, plen in _para_hits(s1, s2):
                matches[j].append(mk(j, plen, i, length, 3))
                for k in range(i, i + length):
                    cov1[k] += 1
                for k in range(j, j + plen):
                    cov2[k] += 1
    # initial path: matches that are the only candidate for all their words
    fixed: list[_Match | None] = [None] * n2
    used1 = used2 = 0
    n_matches = n_fixed = 0
    for j in range(n2):
        mj = matches[j]
        if mj:
            n_matches += len(mj)
            if len(mj) == 1:
                m = mj[0]
                if all(cov2[j + k] == 1 for k in range(m.length)) and \
                        all(cov1[m.mstart + k] == 1 for k in range(m.mlength)):
                    fixed[j] = m
                    used2 |= m.mask2
                    used1 |= m.mask1
                    n_fixed += 1
    chosen: list[_Match | None] = list(fixed)
    if n_fixed != n_matches:
        # (where every match is fixed, the beam's one path takes each fixed match and nothing else)
        node = _resolve(matches, fixed, used1, used2, n2)
        while node is not None:
            chosen[node[0]] = node[1]
            node = node[2]
    counts = [[0] * _N_MODULES for _ in range(4)]  # content1, content2, function1, function2
    fw1, fw2 = s1.fw, s2.fw
    for m in chosen:
        if m is not None:
            for k in range(m.mlength):
                counts[2 if fw1[m.mstart + k] else 0][m.module] += 1
            for k in range(m.length):
                counts[3 if fw2[m.start + k] else 1][m.module] += 1
    # Aligner.getCountAndChunks
    chunks = 0
    idx = 0
    last = -1
    while idx < n2:
        m = chosen[idx]
        if m is None:
            if last != -1:
                chunks += 1
                last = -1
            idx += 1
        else:
            if last != -1 and m.mstart != last:
                chunks += 1
            idx = m.start + m.length
            last = m.mstart + m.mlength
    if last != -1:
        chunks += 1
    return counts, chunks


_key0 = operator.itemgetter(0)


def _resolve(matches, fixed, used1, used2, n2):
    """Aligner.resolve: beam search over the candidate matches of each reference position, the
    paths ranked by Constants.PARTIAL_COMPARE_TOTAL (more matches, fewer chunks, smaller distance)
    with a stable sort. Returns the best path's chosen matches as a linked list (pos, match, next).

    A path is a list [key, idx, lastMatchEnd, used1, used2, chosen]: used* are bit masks, chosen a
    linked list, and key = -score * S2 + chunks * S1 + distance, one int ordered as the tuple
    (-score, chunks, distance) because the distance stays below S1 and chunks * S1 + distance below
    S2 (score = matches1 + matches2, ints). A path's distance is at most the sum of every match's
    distance (each match adds its distance to a path at most once per step it is a candidate of,
    and it is a candidate of one step), so S1 = 2 ** (bit_length(that sum) + 1); chunks <= n2 + 1.

    Positions from the end of the last match on hold no candidates and no path's used bits: the
    first of them closes each path's open chunk and the later ones change no key, so the stable
    sorts after it reorder nothing; the search stops there (the result is the same path)."""
    total = 0
    end = 0
    for mj in matches:
        for m in mj:
            total += m.dist
            e = m.start + m.length
            if e > end:
                end = e
    for m in fixed:
        if m is not None:
            total += m.dist
    s1 = 1 << (total.bit_length() + 1)
    s2 = s1 << ((n2 + 2).bit_length() + 1)
    paths = [[0, 0, -1, used1, used2, None]]
    beam = BEAM_SIZE
    for current in range(end):
        if len(paths) > 1:
            paths.sort(key=_key0)
            if len(paths) > beam:
                del paths[beam:]
        bit = 1 << current
        cands = matches[current]
        nxt = []
        append = nxt.append
        for path in paths:
            key, idx, last, u1, u2, chain = path
            if u2 & bit:
                if current < idx:
                    append(path)
                else:
                    m = fixed[idx]
                    if m is not None:
                        key -= m.gain * s2
                        if last != -1 and m.mstart != last:
                            key += s1
                        path[0] = key + m.dist
                        path[1] = m.start + m.length
                        path[2] = m.mstart + m.mlength
                        append(path)
                continue
            for m in cands:
                if (u2 & m.mask2) or (u1 & m.mask1):
                    continue
                k = key - m.gain * s2
                if last != -1 and m.mstart != last:
                    k += s1
                append([k, m.start + m.length, m.mstart + m.mlength, u1 | m.mask1, u2 | m.mask2,
                        (current, m, chain)])
                # Aligner.resolve adds the distance to the parent path, not to the new one
                key += m.dist
            if last != -1:
                key += s1
                path[2] = -1
            path[0] = key
            path[1] = idx + 1
            append(path)
        paths = nxt if nxt else [paths[0]]
    # the last step (current == n2, or the first position after every match): close open chunks
    if len(paths) > 1:
        paths.sort(key=_key0)
        if len(paths) > beam:
            del paths[beam:]
    for path in paths:
        if path[2] != -1:
            path[0] += s1
    paths.sort(key=_key0)
    return paths[0][5]


# --------------------------------------------------------------------------------------------------
# Statistics and score (MeteorScorer.getMeteorStats / computeMetrics, MeteorStats)
# --------------------------------------------------------------------------------------------------
#: the floats 0.0 .. 1023.0, shared by every statistics vector (a vector then costs 240 bytes, not 800)
_FLOATS = [float(i) for i in range(1024)]


def _f(x: int) -> float:
    return _FLOATS[x] if x < 1024 else float(x)


def _stats_of(s1: _Sentence, s2: _Sentence) -> list[float]:
    counts, chunks = _align(s1, s2)
    c1, c2, fn1, fn2 = counts
    stats = [_f(s1.n), _f(s2.n), _f(s1.n_function), _f(s2.n_function)]
    for k in range(_N_MODULES):
        stats += [_f(c1[k]), _f(c2[k]), _f(fn1[k]), _f(fn2[k])]
    stats += [_f(chunks), _f(sum(c1) + sum(fn1)), _f(sum(c2) + sum(fn2))]
    return stats


POW_FIXES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "meteor_pow_fixes.txt")
#: HotSpot ``Math.pow(frag, 0.2)`` for the segment fragmentations ``chunks / (matches / 2.0)``
#: (chunks 1..256, matches 1..1024) where C's ``pow`` differs: 184 of 262,144 (HotSpot's intrinsic
#: gives the same bits interpreted and compiled, checked with ``-Xint``). Made by
#: ``scripts/meteor_goldens.py --pow``; float.hex pairs, one a line.
POW_BOUNDS = (256, 1024)


def _load_pow_fixes() -> dict[float, float]:
    fixes = {}
    with open(POW_FIXES_FILE, encoding="ascii") as fh:
        for line in fh:
            if line.strip() and not line.startswith("#"):
                frag, value = line.split()
                fixes[float.fromhex(frag)] = float.fromhex(value)
    return fixes


_POW_FIXES: dict[float, float] = _load_pow_fixes()


def _pow_beta(frag: float) -> float:
    fixed = _POW_FIXES.get(frag)
    return fixed if fixed is not None else math.pow(frag, BETA)


def compute_score(stats: Sequence[float]) -> float:
    """MeteorScorer.computeMetrics of one statistics vector (23 floats, the layout of
    ``MeteorStats.toString``): the METEOR score in [0, 1] (0 where it is NaN)."""
    tl, rl, tf, rf = stats[0], stats[1], stats[2], stats[3]
    chunks, twm, rwm = stats[20], stats[21], stats[22]
    ttm = rtm = 0.0
    for k in range(_N_MODULES):
        ttm += stats[4 + 4 * k]
        rtm += stats[5 + 4 * k]
        ttm += stats[6 + 4 * k]
        rtm += stats[7 + 4 * k]
    return _score(tl, rl, tf, rf, ttm, rtm, stats, chunks, twm, rwm)


def _score(tl, rl, tf, rf, ttm, rtm, stats, chunks, twm, rwm) -> float:
    t_wlen = (DELTA * (tl - tf)) + ((1.0 - DELTA) * tf)
    r_wlen = (DELTA * (rl - rf)) + ((1.0 - DELTA) * rf)
    t_wm = 0.0
    r_wm = 0.0
    for k in range(_N_MODULES):
        t_wm += stats[4 + 4 * k] * MODULE_WEIGHTS[k] * DELTA
    for k in range(_N_MODULES):
        r_wm += stats[5 + 4 * k] * MODULE_WEIGHTS[k] * DELTA
    for k in range(_N_MODULES):
        t_wm += stats[6 + 4 * k] * MODULE_WEIGHTS[k] * (1.0 - DELTA)
    for k in range(_N_MODULES):
        r_wm += stats[7 + 4 * k] * MODULE_WEIGHTS[k] * (1.0 - DELTA)
    precision = _jdiv(t_wm, t_wlen)
    recall = _jdiv(r_wm, r_wlen)
    fmean = _jdiv(1.0, _jdiv(1.0 - ALPHA, precision) + _jdiv(ALPHA, recall))
    if ttm == tl and rtm == rl and chunks == 1:
        frag = 0.0
    else:
        frag = _jdiv(chunks, (twm + rwm) / 2)
    if frag != frag:
        penalty = math.nan
    elif frag == math.inf:
        penalty = math.inf
    else:
        penalty = GAMMA * _pow_beta(frag)
    score = fmean * (1.0 - penalty)
    if score != score:
        return 0.0
    return score if score > 0.0 else 0.0


def format_stats(stats: Sequence[float]) -> str:
    """``MeteorStats.toString``: the 23 numbers as Java's ``Double.toString`` prints them. Every
    statistic of a caption is a small non-negative integer (below 1e7), printed ``"6.0"``, which is
    also Python's ``repr``."""
    return " ".join(repr(float(x)) for x in stats)


def parse_stats(line: str) -> list[float]:
    """A statistics line (23 numbers) as floats. Raises ValueError on anything else."""
    values = [float(t) for t in line.split()]
    if len(values) != 23 or any(v != v for v in values):
        raise ValueError(f"a METEOR statistics line has 23 numbers, got {line!r}")
    return values


# --------------------------------------------------------------------------------------------------
# Scorer
# --------------------------------------------------------------------------------------------------
def _clean(text: str) -> str:
    """As the jar-based wrappers: '|||' -> ' ', whitespace runs -> ' ', stripped."""
    return " ".join(text.replace("|||", " ").split())


class MeteorPython:
    """METEOR 1.5 (``-l en -norm``) in Python; resources loaded on construction (about 2 s once the
    paraphrase index is cached; building the index the first time takes about a minute).

    Raises MeteorDataError (pycocoevalcap or its data missing), ImportError (snowballstemmer missing).
    """

    def __init__(self):
        self.res = _Resources()

    def _prepare(self, text: str) -> list[str]:
        return java_tokens(_normalize(java_trim(text), self.res.nbp).lower())

    def statistics_vectors(self, candidates: Sequence[str], references: Sequence[Sequence[str]],
                           clean: bool = True) -> list[list[float]]:
        """Per caption, the statistics (23 floats) of the best-scoring reference, as the jar's
        ``SCORE ||| ref_1 ||| ... ||| hypothesis`` request answers them. ``clean`` applies the
        wrappers' input cleaning ('|||' and whitespace runs -> one space). Raises ValueError on a
        length mismatch or a candidate without references."""
        if len(candidates) != len(references):
            raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
        for i, refs in enumerate(references):
            if len(refs) == 0:
                raise ValueError(f"candidate {i} has no reference captions")
        prep = self._prepare
        cl = _clean if clean else (lambda s: s)
        # every distinct text is normalised once and every distinct word sequence is one _Sentence
        # (Flickr8k-CrowdFlower: 286,259 texts, 4,992 distinct), kept for the batch
        words_of: dict[str, tuple[str, ...]] = {}
        for text in candidates:
            if text not in words_of:
                words_of[text] = tuple(prep(cl(text)))
        for refs in references:
            for text in refs:
                if text not in words_of:
                    words_of[text] = tuple(prep(cl(text)))
        vocab: set[str] = set()
        for words in words_of.values():
            vocab.update(words)
        res = self.res
        # the sentences, matches and beam paths form no reference cycle: the cyclic collector's
        # passes over them are pure overhead (captioneval.utils.gcpause)
        with res.lock, paused_gc():
            para, prefixes = res.paraphrase_for(vocab)
            syn_of = _shared_synsets(res, vocab)
            sentences: dict[tuple[str, ...], _Sentence] = {}
            sentence_of: dict[str, _Sentence] = {}
            for text, words in words_of.items():
                sent = sentences.get(words)
                if sent is None:
                    sent = sentences[words] = _Sentence(words, res, para, prefixes, syn_of)
                sentence_of[text] = sent
            del words_of, sentences
            out = []
            for cand, refs in zip(candidates, references):
                s1 = sentence_of[cand]
                best = None
                best_score = -1.0
                for ref in refs:
                    st = _stats_of(s1, sentence_of[ref])
                    sc = compute_score(st)
                    if sc > best_score:
                        best, best_score = st, sc
                out.append(best)
        return out

    def statistics(self, candidates, references) -> list[str]:
        """The jar's statistics lines (``MeteorStats.toString``), one per caption."""
        return [format_stats(s) for s in self.statistics_vectors(candidates, references)]

    def score(self, candidates, references) -> np.ndarray:
        """METEOR 1.5 per caption: float64 (m,) in [0, 1], equal to the jar's."""
        return np.asarray([compute_score(s) for s in self.statistics_vectors(candidates, references)],
                          dtype=float)

    def score_and_corpus(self, candidates, references) -> tuple[np.ndarray, float]:
        """Per-caption METEOR and pycocoevalcap's corpus METEOR (the jar's ``EVAL`` aggregate)."""
        vectors = self.statistics_vectors(candidates, references)
        if not vectors:
            return np.zeros(0), float("nan")
        scores, corpus = evaluate_vectors(vectors)
        return np.asarray(scores, dtype=float), corpus


def evaluate_vectors(vectors: Sequence[Sequence[float]]) -> tuple[list[float], float]:
    """The jar's ``EVAL ||| s_1 ||| ... ||| s_m`` answer: each segment's score and the score of the
    aggregate (``MeteorStats.addStats``: sums, except the chunks of a segment that matched entirely
    in one chunk)."""
    scores = [compute_score(v) for v in vectors]
    agg = [0.0] * 23
    for v in vectors:
        ttm = rtm = 0.0
        for k in range(_N_MODULES):
            ttm += v[4 + 4 * k]
            rtm += v[5 + 4 * k]
            ttm += v[6 + 4 * k]
            rtm += v[7 + 4 * k]
        for k in range(20):
            agg[k] += v[k]
        if not (ttm == v[0] and rtm == v[1] and v[20] == 1.0):
            agg[20] += v[20]
        agg[21] += v[21]
        agg[22] += v[22]
    # the aggregate's total matches are summed per segment (addStats), in segment order
    ttm_a = rtm_a = 0.0
    for v in vectors:
        t = r = 0.0
        for k in range(_N_MODULES):
            t += v[4 + 4 * k]
            r += v[5 + 4 * k]
            t += v[6 + 4 * k]
            r += v[7 + 4 * k]
        ttm_a += t
        rtm_a += r
    corpus = _score(agg[0], agg[1], agg[2], agg[3], ttm_a, rtm_a, agg, agg[20], agg[21], agg[22])
    return scores, corpus


def evaluate(stats_lines: Sequence[str]) -> tuple[list[float], float]:
    """:func:`evaluate_vectors` of statistics lines. Raises ValueError on a malformed line."""
    return evaluate_vectors([parse_stats(s) for s in stats_lines])


_scorer: MeteorPython | None = None
_scorer_lock = threading.Lock()


def get_scorer() -> MeteorPython:
    """This process's :class:`MeteorPython` (created on first use)."""
    global _scorer
    with _scorer_lock:
        if _scorer is None:
            _scorer = MeteorPython()
        return _scorer


def normalize(text: str) -> list[str]:
    """The words METEOR scores for ``text``: normalised (``-norm``), lower-cased, tokenised."""
    return get_scorer()._prepare(text)


def statistics(candidates, references) -> list[str]:
    """:meth:`MeteorPython.statistics` with this process's scorer."""
    return get_scorer().statistics(candidates, references)


def score(candidates, references) -> np.ndarray:
    """:meth:`MeteorPython.score` with this process's scorer."""
    return get_scorer().score(candidates, references)


def score_and_corpus(candidates, references) -> tuple[np.ndarray, float]:
    """:meth:`MeteorPython.score_and_corpus` with this process's scorer."""
    return get_scorer().score_and_corpus(candidates, references)
