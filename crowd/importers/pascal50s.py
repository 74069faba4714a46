"""PASCAL-50S (Vedantam, Zitnick & Parikh 2015, "CIDEr: Consensus-based Image Description
Evaluation", CVPR): 1,000 PASCAL VOC 2008 images with 50 human reference sentences each, and 4,000
pairs of candidate captions with human forced-choice votes.

Files (MATLAB, read with :func:`scipy.io.loadmat`; provenance in ``data/pascal50s/SOURCE.txt``):

``pascal50S.mat``
    ``refs`` (1 x 1000 struct): ``image`` (e.g. ``'2008_006488.jpg'``) and ``sent`` (1 x 50 cell of
    sentences).
``pair_pascal.mat``
    ``new_input`` (1 x 4000 struct: ``name`` = image, ``sent1``, ``sent2``), ``new_data`` (4000 x 2:
    the system of sent1 and of sent2; 6 = a human caption of the image, 7 = a human caption of
    another image, 1-5 = five machine systems), ``category`` (1 = HC, 2 = HI, 3 = HM, 4 = MM) and
    ``result`` (per pair 11 votes, 10 for 6 pairs, each +1 or -1; 43,994 in all).

Reading of the files, checked on the data:

* ``new_data`` column 1 is the system of sent1: in HI pairs, the 11 sentences that also occur among
  their image's 50 references are all on the system-6 (correct human) side.
* A ``result`` vote of +1 prefers sent1: read so, the majority prefers the correct human caption in
  998 of the 1,000 HI pairs (a vote -1 prefers sent2). No pair has tied votes.
* Sides: caption **B is sent2 and C is sent1**, as in the candidate files of the authors' Python
  release (``pascal_candsB.json`` holds the sent2 sentences, ``pascal_candsC.json`` the sent1 ones).
  Caption keys are ``pair-0001-b`` / ``pair-0001-c`` (pair number = position in the file, from 1).
* Systems: ``human-correct`` (6), ``human-other`` (7), ``machine-1`` .. ``machine-5``; the category
  of a pair follows from its two systems (:func:`pascal50s_category`) and is checked against
  ``category`` on import.

Protocol (Vedantam et al. 2015, Sec. 5; as evaluated by Hessel et al. 2021 CLIPScore and Sarto et
al. 2023 PAC-S): a metric is right on a pair when it scores higher the caption most humans
preferred; accuracy is reported per category HC, HI, HM, MM (and their mean). Those works score
each pair against 5 references sampled at random from the 48 reference sentences that the
consensus file ``consensus_pascal.mat`` lists for the pair, and they take the human label from
that file's 48 judgments. That file is not available, so this importer follows the protocol as
closely as these files allow (:func:`sample_references`): per image, ``references`` sentences
(default 5) are drawn with Python's ``random.Random(seed).sample`` from the image's 50 sentences
minus any sentence equal to one of the image's candidates (compared case- and
whitespace-insensitively), the images taken in ``pascal50S.mat`` order; all pairs of an image share
its sample; the human label is the majority of the ~11 ``result`` votes.
"""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
from django.db.models import Count, Q

from ..models import Dataset, PairwiseJudgment, System
from .base import (
    MAX_KEY_CHARS,
    CaptionCounter,
    CaptionSpec,
    DatasetFormatError,
    ImportSummary,
    Importer,
    ImporterOption,
    PairwiseSpec,
    ParsedDataset,
    SystemSpec,
    check_file_size,
    check_text,
    shorten,
)

REFS_FILE = "pascal50S.mat"
PAIRS_FILE = "pair_pascal.mat"
KIND = "pascal50s"
REFERENCE_SYSTEM = "pascal50s-references"
DEFAULT_REFERENCES = 5
DEFAULT_SEED = 0
CATEGORIES = ("HC", "HI", "HM", "MM")
SYSTEM_NAMES = {6: "human-correct", 7: "human-other", **{k: f"machine-{k}" for k in range(1, 6)}}
SOURCE = "pascal50s"
CITATION = (
    "R. Vedantam, C. L. Zitnick and D. Parikh (2015). \"CIDEr: Consensus-based Image Description Evaluation\". "
    "Proc. of CVPR, pages 4566-4575."
)


def pascal50s_category(system_b_name: str, system_c_name: str) -> str:
    """The PASCAL-50S category of a pair from the names of its two systems (order does not matter).

    ``"HC"``: two correct human captions (``human-correct`` twice); ``"HI"``: ``human-correct`` vs
    ``human-other`` (a human caption of another image); ``"HM"``: ``human-correct`` vs a machine
    (``machine-1`` .. ``machine-5``); ``"MM"``: two machines (Vedantam et al. 2015, Sec. 5).
    Raises ValueError for any other pair of names.
    """
    names = (system_b_name, system_c_name)
    machines = sum(1 for n in names if n in _MACHINES)
    correct = sum(1 for n in names if n == "human-correct")
    other = sum(1 for n in names if n == "human-other")
    if correct == 2:
        return "HC"
    if correct == 1 and other == 1:
        return "HI"
    if correct == 1 and machines == 1:
        return "HM"
    if machines == 2:
        return "MM"
    raise ValueError(f"systems {shorten(system_b_name)} and {shorten(system_c_name)} do not form a PASCAL-50S category")


_MACHINES = frozenset(f"machine-{k}" for k in range(1, 6))


def forced_choice_rows(dataset: Dataset) -> list[tuple[int, int, str, int, int]]:
    """One row per judged pair of a PASCAL-50S dataset: ``(caption_b_id, caption_c_id, category,
    votes_b, votes_total)``, ordered by caption B's id (= pair order of the file).

    Only the imported votes count (PairwiseJudgment rows without a reference). ``category`` is
    derived from the two captions' systems with :func:`pascal50s_category`; ``votes_b`` is the
    number of votes for B. Returns [] for a dataset without such votes; raises ValueError if a pair's
    systems are not PASCAL-50S systems.
    """
    qs = (
        PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset, reference__isnull=True)
        .values("caption_b_id", "caption_c_id", "caption_b__system__name", "caption_c__system__name")
        .annotate(votes_b=Count("id", filter=Q(choice=PairwiseJudgment.B)), votes_total=Count("id"))
        .order_by("caption_b_id", "caption_c_id")
    )
    return [
        (
            row["caption_b_id"], row["caption_c_id"],
            pascal50s_category(row["caption_b__system__name"], row["caption_c__system__name"]),
            row["votes_b"], row["votes_total"],
        )
        for row in qs
    ]


# --------------------------------------------------------------------------------------------
# Reading the .mat files
# --------------------------------------------------------------------------------------------


def _try_loadmat(path: str) -> None:
    """Run ``scipy.io.loadmat(path)`` ignoring Python exceptions (the target of the probe process;
    a crash there is expected on some corrupt files, so no faulthandler traceback is printed)."""
    import faulthandler

    import scipy.io

    faulthandler.disable()

    try:
        scipy.io.loadmat(path)
    except BaseException:  # the caller's own loadmat reports it; only a crash matters here
        pass


def _loadmat(path: Path) -> dict:
    """``scipy.io.loadmat(path)``; DatasetFormatError naming ``path`` for a missing, unreadable or
    corrupt file, or one larger than ``IMPORT_MAX_FILE_BYTES`` (refused from its size on disk).

    On some corrupt files scipy's compiled reader crashes the process (a segmentation fault, seen
    with scipy 1.17 on a truncated file with an invalid element type), which a ``try`` cannot
    catch. So, where ``fork`` exists, the file is first read in a forked probe process: if that
    process dies, the file is refused; otherwise it is read here (the probe costs one more read,
    about 0.4 s for the 1 MB ``pascal50S.mat``).
    """
    if not path.is_file():
        raise DatasetFormatError(path, "file not found")
    check_file_size(path)  # before scipy reads any of it
    import multiprocessing

    import scipy.io

    if "fork" in multiprocessing.get_all_start_methods():
        probe = multiprocessing.get_context("fork").Process(target=_try_loadmat, args=(str(path),), daemon=True)
        probe.start()
        probe.join()
        if probe.exitcode != 0:
            raise DatasetFormatError(
                path, f"not a readable MATLAB .mat file (corrupt: scipy.io.loadmat crashed on it, exit code {probe.exitcode})"
            )
    try:
        return scipy.io.loadmat(str(path))
    except MemoryError:  # a corrupt header can declare an array of billions of elements
        raise DatasetFormatError(
            path, "not a readable MATLAB .mat file (corrupt: it declares an array too large to load)"
        ) from None
    except Exception as exc:  # scipy raises MatReadError, ValueError, OSError, IndexError... on bad files
        raise DatasetFormatError(
            path, f"not a readable MATLAB .mat file (truncated or corrupt: {type(exc).__name__}: {exc})"
        ) from None


def _variable(mat: dict, name: str, path: Path):
    if name not in mat:
        known = ", ".join(k for k in mat if not k.startswith("__")) or "none"
        raise DatasetFormatError(path, f"missing variable {shorten(name)} (variables: {shorten(known, quote=False)})")
    return mat[name]


def _string(value, path: Path, where: str, allow_empty: bool = False) -> str:
    """A MATLAB char array as loadmat returns it (1-element str array, or an empty array) -> str,
    whitespace-normalised; DatasetFormatError for anything else, an empty text, a NUL character or
    more than :data:`~crowd.importers.base.MAX_CAPTION_CHARS` characters."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, np.ndarray) and value.dtype.kind == "U" and value.size <= 1:
        text = str(value.ravel()[0]) if value.size else ""
    else:
        raise DatasetFormatError(path, f"{where}: expected a string, got {type(value).__name__} {getattr(value, 'shape', '')}")
    text = " ".join(text.split())
    if not text and not allow_empty:
        raise DatasetFormatError(path, f"{where}: empty sentence")
    return check_text(text, path, where)


def _struct_field(entry, field: str, path: Path, where: str):
    names = getattr(getattr(entry, "dtype", None), "names", None) or ()
    if field not in names:
        raise DatasetFormatError(path, f"{where}: struct has no field {shorten(field)} (fields: {shorten(', '.join(names) or 'none', quote=False)})")
    return entry[field]


def read_references(path: Path) -> dict[str, list[str]]:
    """Read ``pascal50S.mat`` into {image: [sentence, ...]} in file order (sentences whitespace-normalised).

    Raises DatasetFormatError for an unreadable (e.g. truncated) file, a missing ``refs`` variable or
    field, an image without sentences, an empty sentence, an image listed twice, or a file over the
    import caps (``IMPORT_MAX_FILE_BYTES``, ``IMPORT_MAX_CAPTIONS`` sentences).
    """
    mat = _loadmat(path)
    refs = _variable(mat, "refs", path)
    if not isinstance(refs, np.ndarray) or refs.dtype.names is None or refs.size == 0:
        raise DatasetFormatError(path, "refs must be a non-empty struct array with fields image and sent")
    out: dict[str, list[str]] = {}
    counter = CaptionCounter(path)
    for i, entry in enumerate(refs.ravel(), start=1):
        where = f"refs({i})"
        image = check_text(_string(_struct_field(entry, "image", path, where), path, f"{where}.image"), path,
                           f"{where}.image", max_chars=MAX_KEY_CHARS)
        sents = _struct_field(entry, "sent", path, where)
        if not isinstance(sents, np.ndarray) or sents.dtype != object or sents.size == 0:
            raise DatasetFormatError(path, f"{where}.sent: expected a non-empty cell array of sentences")
        counter.add(sents.size)
        sentences = [_string(s, path, f"{where}.sent{{{k}}}") for k, s in enumerate(sents.ravel(), start=1)]
        if image in out:
            raise DatasetFormatError(path, f"{where}: image {shorten(image)} listed twice")
        out[image] = sentences
    return out


def read_pairs(path: Path, references: dict[str, list[str]], refs_path: Path) -> list[dict]:
    """Read ``pair_pascal.mat`` into one dict per pair, in file order:
    ``{"index": 1-based, "image", "sent1", "sent2", "system1", "system2", "category": "HC".."MM",
    "votes": [+1 / -1, ...]}`` (system names as in :data:`SYSTEM_NAMES`).

    Raises DatasetFormatError for an unreadable file, a missing variable, arrays of different
    lengths, a system id outside 1-7, a category outside 1-4 or one that disagrees with the pair's
    systems, a vote other than +1/-1, a pair without votes, an empty sentence, an image missing
    from ``refs_path``, or a file over the import caps (``IMPORT_MAX_FILE_BYTES``,
    ``IMPORT_MAX_CAPTIONS`` captions: two per pair).
    """
    mat = _loadmat(path)
    inputs, systems = _variable(mat, "new_input", path), _variable(mat, "new_data", path)
    categories, results = _variable(mat, "category", path), _variable(mat, "result", path)
    if not isinstance(inputs, np.ndarray) or inputs.dtype.names is None or inputs.size == 0:
        raise DatasetFormatError(path, "new_input must be a non-empty struct array with fields name, sent1, sent2")
    n = inputs.size
    if not isinstance(systems, np.ndarray) or systems.shape != (n, 2) or systems.dtype.kind not in "iuf":
        raise DatasetFormatError(path, f"new_data must be a {n} x 2 numeric array, got shape {getattr(systems, 'shape', None)}")
    if not isinstance(categories, np.ndarray) or categories.size != n or categories.dtype.kind not in "iuf":
        raise DatasetFormatError(path, f"category must hold {n} numbers, got {getattr(categories, 'size', None)}")
    if not isinstance(results, np.ndarray) or results.size != n:
        raise DatasetFormatError(path, f"result must hold {n} vote lists, got {getattr(results, 'size', None)}")
    CaptionCounter(path).add(2 * n)  # two candidate captions per pair
    pairs = []
    categories = categories.ravel()
    for i, (entry, sys_row, cat, res) in enumerate(zip(inputs.ravel(), systems, categories, results.ravel()), start=1):
        where = f"pair {i}"
        image = _string(_struct_field(entry, "name", path, where), path, f"{where} name")
        if image not in references:
            raise DatasetFormatError(path, f"{where}: image {shorten(image)} is not in {refs_path.name}")
        sent1 = _string(_struct_field(entry, "sent1", path, where), path, f"{where} sent1")
        sent2 = _string(_struct_field(entry, "sent2", path, where), path, f"{where} sent2")
        names = []
        for col, value in enumerate(sys_row, start=1):
            if not np.isfinite(value) or value != int(value) or int(value) not in SYSTEM_NAMES:
                raise DatasetFormatError(path, f"{where}: new_data system id {float(value):g} (column {col}) is not in 1-7")
            names.append(SYSTEM_NAMES[int(value)])
        if not np.isfinite(cat) or cat != int(cat) or not 1 <= int(cat) <= 4:
            raise DatasetFormatError(path, f"{where}: category {float(cat):g} is not in 1-4 (HC, HI, HM, MM)")
        stated = CATEGORIES[int(cat) - 1]
        try:
            derived = pascal50s_category(names[0], names[1])
        except ValueError:
            derived = None
        if derived != stated:
            raise DatasetFormatError(
                path, f"{where}: category {int(cat)} ({stated}) disagrees with its systems {names[0]} / {names[1]} "
                f"({derived or 'no category'})"
            )
        if isinstance(res, np.void) and res.dtype.names:
            res = res[res.dtype.names[0]]
        votes = np.asarray(res).ravel()
        if votes.size == 0 or votes.dtype.kind not in "iuf":
            raise DatasetFormatError(path, f"{where}: result must be a non-empty list of +1/-1 votes")
        values = votes.astype(np.float64)
        if not np.all((values == 1) | (values == -1)):
            bad = values[(values != 1) & (values != -1)][0]
            raise DatasetFormatError(path, f"{where}: vote {bad:g} is not +1 (sent1 preferred) or -1 (sent2 preferred)")
        pairs.append({
            "index": i, "image": image, "sent1": sent1, "sent2": sent2, "system1": names[0], "system2": names[1],
            "category": stated, "votes": [int(v) for v in values],
        })
    return pairs


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def sample_references(
    references: dict[str, list[str]], candidates: dict[str, set[str]], n: int = DEFAULT_REFERENCES,
    seed: int = DEFAULT_SEED, path: Path | str = REFS_FILE,
) -> tuple[dict[str, list[tuple[int, str]]], dict[str, int]]:
    """Draw ``n`` references per image, reproducibly.

    ``references``: {image: [sentence, ...]} (file order, as :func:`read_references` returns);
    ``candidates``: {image: {candidate sentence, ...}}. The pool of an image is its sentences minus
    those equal to one of its candidates (case- and whitespace-insensitive), numbered from 1 in file
    order; one ``random.Random(seed)`` draws ``rng.sample(pool, n)`` for each image in the order of
    ``references``. Returns ``(samples, excluded)``: {image: [(sentence number, sentence), ...]
    sorted by number} and {image: number of pool sentences excluded} for images that lost some.
    Raises ValueError if ``n`` < 1 and DatasetFormatError (naming ``path``) if an image's pool has
    fewer than ``n`` sentences.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of references must be a positive integer, got {shorten(n)}")
    rng = random.Random(seed)
    samples: dict[str, list[tuple[int, str]]] = {}
    excluded: dict[str, int] = {}
    for image, sentences in references.items():
        banned = {_norm(c) for c in candidates.get(image, ())}
        pool = [(k, s) for k, s in enumerate(sentences, start=1) if _norm(s) not in banned]
        if len(pool) < len(sentences):
            excluded[image] = len(sentences) - len(pool)
        if len(pool) < n:
            raise DatasetFormatError(
                path, f"image {shorten(image)} has {len(pool)} reference sentences besides its candidates, fewer than the "
                f"{n} references to sample"
            )
        samples[image] = sorted(rng.sample(pool, n))
    return samples, excluded


# --------------------------------------------------------------------------------------------
# Import
# --------------------------------------------------------------------------------------------


def protocol(n_references: int, seed: int) -> dict:
    """The ``Dataset.protocol`` of a PASCAL-50S import with these sampling options."""
    return {
        "task": "forced_choice",
        "headline": "accuracy",
        "categories": list(CATEGORIES),
        "references": n_references,
        "seed": seed,
        "reference_sampling": (
            f"per image, random.Random({seed}).sample(pool, {n_references}) in pascal50S.mat image order; pool = the "
            "image's 50 sentences minus those equal (case- and whitespace-insensitively) to one of its candidates"
        ),
        "sides": {"b": "sent2", "c": "sent1"},
        "votes": "pair_pascal.mat result: +1 = sent1 (C) preferred, -1 = sent2 (B) preferred",
        "summary": (
            "PASCAL-50S (Vedantam et al. 2015): 4,000 pairs of candidate captions of 1,000 PASCAL VOC images, "
            "1,000 per category: HC (two human captions of the image), HI (a human caption of the image vs one "
            "of another image), HM (human vs machine) and MM (two machines), with ~11 human forced-choice votes "
            f"each. A metric is right on a pair when it scores higher the caption the majority preferred; "
            "accuracy is reported per category and as their mean. Published evaluations (CLIPScore, PAC-S) "
            "compare each candidate with 5 references sampled at random from the pair's 48 consensus "
            "references and take the label from the 48 judgments of consensus_pascal.mat, which is not "
            f"available: here {n_references} references per image are sampled (seed {seed}) from its 50 "
            "sentences minus the image's own candidates, shared by all pairs of the image, and the label is the "
            "majority of the pair_pascal.mat votes, so accuracies are close to, not identical with, published ones."
        ),
        "source": "Vedantam et al. 2015 (CIDEr, CVPR), Sec. 5; Hessel et al. 2021 (CLIPScore, EMNLP), PASCAL-50S",
    }


class Pascal50sImporter(Importer):
    """PASCAL-50S (``import_dataset pascal50s [--references N] [--seed S]``); the reading of the
    files and the protocol are in the module docstring, the stored protocol is :func:`protocol`.

    Parsed rows: one image per image with pairs (1,000, in pair order); the reference system
    ``pascal50s-references`` with ``references`` sentences per image drawn by
    :func:`sample_references` with ``seed`` (keys ``ref-NN``, NN = the sentence's number among the
    50); one system per candidate source (``human-correct``, ``human-other``, ``machine-1`` ..
    ``machine-5``); two captions per pair (``pair-NNNN-b`` = sent2, ``pair-NNNN-c`` = sent1); one
    pairwise judgment per vote (no reference, rater ``vote_k``, choice ``c`` for +1, ``b`` for -1).
    Both options are part of the fingerprint: the same files with other options under the same
    name are refused.
    """

    format = KIND
    files = (REFS_FILE, PAIRS_FILE)
    options = {
        "references": ImporterOption(DEFAULT_REFERENCES, "references sampled per image", minimum=1,
                                     absent_note="it does not sample references"),
        "seed": ImporterOption(DEFAULT_SEED, "seed of the reference sampling",
                               absent_note="it does not sample references"),
    }
    counts = {"images": "images", "reference captions": "references", "pairs": "pairs", "votes": "pairwise votes"}

    def check_options(self, **options):
        """As :meth:`Importer.check_options`, with the messages of :func:`import_pascal50s`."""
        seed = options.get("seed", DEFAULT_SEED)
        references = options.get("references", DEFAULT_REFERENCES)
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, got {shorten(seed)}")
        if isinstance(references, bool) or not isinstance(references, int) or references < 1:
            raise ValueError(f"the number of references must be a positive integer, got {shorten(references)}")
        return super().check_options(**options)

    def parse(self, paths, references: int = DEFAULT_REFERENCES, seed: int = DEFAULT_SEED) -> ParsedDataset:
        refs_path, pairs_path = paths[REFS_FILE], paths[PAIRS_FILE]
        sentences = read_references(refs_path)
        pairs = read_pairs(pairs_path, sentences, refs_path)
        candidates: dict[str, set[str]] = {}
        for pair in pairs:
            candidates.setdefault(pair["image"], set()).update((pair["sent1"], pair["sent2"]))
        samples, excluded = sample_references(sentences, candidates, references, seed, refs_path)
        images = list(dict.fromkeys(pair["image"] for pair in pairs))
        used = sorted({p["system1"] for p in pairs} | {p["system2"] for p in pairs}, key=_system_order)
        descriptions = {
            "human-correct": "a human caption of the image (new_data id 6)",
            "human-other": "a human caption of another image (new_data id 7)",
        }
        captions, votes = [], []
        for p in pairs:
            b = (p["system2"], p["image"], f"pair-{p['index']:04d}-b")
            c = (p["system1"], p["image"], f"pair-{p['index']:04d}-c")
            captions += [CaptionSpec(p["image"], b[0], b[2], p["sent2"]), CaptionSpec(p["image"], c[0], c[2], p["sent1"])]
            votes += [
                PairwiseSpec(b, c, f"vote_{k}", PairwiseJudgment.C if vote == 1 else PairwiseJudgment.B, SOURCE)
                for k, vote in enumerate(p["votes"], start=1)
            ]
        hi = [p for p in pairs if p["category"] == "HI"]
        hi_right = sum(1 for p in hi if _majority_prefers(p, "human-correct"))
        ties = sum(1 for p in pairs if sum(p["votes"]) == 0)
        return ParsedDataset(
            source=pairs_path,
            description="PASCAL-50S: human forced-choice votes between two candidate captions of PASCAL VOC images "
            "(Vedantam et al. 2015), categories HC, HI, HM, MM.",
            citation=CITATION, criterion="", protocol=protocol(references, seed),
            images=images,
            systems=[
                SystemSpec(REFERENCE_SYSTEM, System.HUMAN,
                           f"{references} of the image's 50 PASCAL-50S sentences, sampled with seed {seed} "
                           "(its own candidates excluded)."),
                *(
                    SystemSpec(
                        sys_name, System.MODEL if sys_name in _MACHINES else System.HUMAN,
                        descriptions.get(sys_name, f"machine captioning system {sys_name[-1]} (new_data id {sys_name[-1]})"),
                    )
                    for sys_name in used
                ),
            ],
            reference_system=REFERENCE_SYSTEM,
            references=[
                CaptionSpec(image, REFERENCE_SYSTEM, f"ref-{k:02d}", text) for image in images for k, text in samples[image]
            ],
            captions=captions,
            pairwise=votes,
            notes=[
                "pairs per category: "
                + ", ".join(f"{c} {sum(1 for p in pairs if p['category'] == c):,}" for c in CATEGORIES)
                + f"; {ties} pairs with tied votes; in {hi_right:,} of {len(hi):,} HI pairs the majority prefers the "
                "correct human caption (votes read as +1 = sent1)",
                f"references: {references} per image sampled with seed {seed} from the image's sentences; "
                f"{sum(excluded.values())} sentences of {len(excluded)} images were left out of the pools because they "
                "equal one of the image's candidates",
            ],
        )


def import_pascal50s(
    directory: Path | str, name: str, references: int = DEFAULT_REFERENCES, seed: int = DEFAULT_SEED,
) -> ImportSummary:
    """Import PASCAL-50S from ``directory`` (``pascal50S.mat`` and ``pair_pascal.mat``) as dataset
    ``name``, all or nothing (:class:`Pascal50sImporter`). The dataset's protocol
    (:func:`protocol`) records ``references`` and ``seed``; importing the same files with other
    options under the same name raises DatasetExistsError.

    Raises
    ------
    ValueError
        ``references`` is not a positive integer or ``seed`` is not an integer.
    DatasetFormatError
        missing, truncated or malformed file (message: file, pair or entry, problem).
    DatasetExistsError
        ``name`` is taken by a dataset with other contents.
    """
    return Pascal50sImporter()(directory, name, references=references, seed=seed)


def _majority_prefers(pair: dict, system: str) -> bool:
    total = sum(pair["votes"])  # > 0: sent1 preferred
    if total == 0:
        return False
    return (pair["system1"] if total > 0 else pair["system2"]) == system


def _system_order(sys_name: str):
    return (sys_name in _MACHINES, sys_name)
