"""Tests of captioneval.kernels.diversity (Wang & Chan, CVPR 2019); plain pytest, no Django, no database.

Data: the official Self-CIDEr example input (data/coco_multicaption_selfcider_example,
5,000 sets of 10 tokenised captions) and THumB's MSCOCO references and system captions
(data/thumb). The slow reference implementations built on pycocoevalcap live in
tests/reference_self_cider.py (independent of the module under test).
"""
from __future__ import annotations

import functools
import json
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from captioneval.kernels import diversity as dv
from captioneval.kernels.cider import DocumentFrequency, cider_d
from tests import reference_self_cider as ref

SHARED = Path(__file__).resolve().parents[1] / "data"  # bundled copies, see data/*/SOURCE.txt
MERGE = SHARED / "coco_multicaption_selfcider_example" / "merge_results.json"
THUMB_REFS = SHARED / "thumb" / "mscoco_references.json"
THUMB_HYPS = SHARED / "thumb" / "mscoco_THumB-1.0.jsonl"


C1 = ["zebras grazing grass", "grazing grass", "zebras grazing"]
C2 = ["zebras grazing", "zebras grazing", "zebras grazing"]


# ------------------------------------------------------------------------------------------------
# data
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def merge_sets() -> tuple[tuple[str, ...], ...]:
    data = json.loads(MERGE.read_text())
    return tuple(tuple(d["captions"]) for d in data)


@functools.lru_cache(maxsize=None)
def merge_df() -> DocumentFrequency:
    """Document frequencies with the 5,000 sets as documents (the COCO train2014 table of the
    official code is not available)."""
    return DocumentFrequency.from_references([list(s) for s in merge_sets()])


@functools.lru_cache(maxsize=None)
def merge_df_reference() -> tuple[defaultdict, int]:
    table, n_docs = ref.document_frequency_table([list(s) for s in merge_sets()])
    return defaultdict(float, table), n_docs


def simple_tokenize(text: str) -> str:
    """Lower-case, punctuation to spaces, single-space join (stand-in for the PTB tokeniser)."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


@functools.lru_cache(maxsize=None)
def thumb() -> tuple[list[str], list[list[str]], list[list[str]]]:
    """(image ids, references (4 each), caption sets: the 5 THumB systems' captions per image)."""
    refs = {}
    for line in THUMB_REFS.read_text().splitlines():
        row = json.loads(line)
        refs[row["seg_id"]] = [simple_tokenize(r) for r in row["refs"]]
    hyps = defaultdict(list)
    for line in THUMB_HYPS.read_text().splitlines():
        row = json.loads(line)
        hyps[row["seg_id"]].append((row["SYS"], simple_tokenize(row["hyp"])))
    ids = sorted(refs)
    sets = [[h for _, h in sorted(hyps[i])] for i in ids]
    return ids, [refs[i] for i in ids], sets


@functools.lru_cache(maxsize=None)
def thumb_df() -> DocumentFrequency:
    return DocumentFrequency.from_references(thumb()[1])


# ------------------------------------------------------------------------------------------------
# Self-CIDEr against the pycocoevalcap-based reference
# ------------------------------------------------------------------------------------------------
def test_document_frequency_table_matches_pycocoevalcap():
    sets = [list(s) for s in merge_sets()[:400]]
    ours = DocumentFrequency.from_references(sets)
    theirs, n_docs = ref.document_frequency_table(sets)
    assert ours.n_documents == n_docs == 400
    assert dict(ours.counts) == theirs


@pytest.mark.parametrize("m", [5, None], ids=["first5_official_driver", "all10"])
def test_self_cider_equals_pycocoevalcap_reference(m):
    sets = [list(s) for s in merge_sets()[:150]]
    table, n_docs = merge_df_reference()
    theirs = ref.self_cider_reference(sets, table, n_docs, m=m)
    ours = dv.self_cider(sets, merge_df(), m=m)
    assert ours.shape == (150,) and ours.dtype == np.float64
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    # in fact equal to round-off except for rank-deficient kernels (see self_cider's docstring)
    assert np.median(np.abs(ours - theirs)) < 1e-12
    assert ((ours >= 0) & (ours <= 1)).all()


def test_self_cider_kernel_equals_pycocoevalcap_reference():
    table, n_docs = merge_df_reference()
    sets = [list(s) for s in merge_sets()[1000:1100]]
    ours = dv.self_cider_kernels(sets, merge_df())
    for caps, k in zip(sets, ours):
        theirs = ref.self_cider_kernel_reference(caps, table, n_docs)
        assert k.shape == (10, 10)
        np.testing.assert_allclose(k, theirs, rtol=0, atol=1e-12)
        np.testing.assert_array_equal(k, k.T)
    single = dv.self_cider_kernel(sets[0], merge_df())
    np.testing.assert_array_equal(single, ours[0])


def test_self_cider_with_a_reference_corpus_table_and_unknown_words():
    """df from THumB's 500 reference sets: many n-grams of the system captions are unseen."""
    _, refs, sets = thumb()
    df = thumb_df()
    table = defaultdict(float, ref.document_frequency_table(refs)[0])
    ours = dv.self_cider(sets, df)
    theirs = ref.self_cider_reference(sets[:200], table, df.n_documents)
    np.testing.assert_allclose(ours[:200], theirs, rtol=0, atol=1e-6)
    kernels = dv.self_cider_kernels(sets[:60], df)
    for caps, k in zip(sets[:60], kernels):
        np.testing.assert_allclose(k, ref.self_cider_kernel_reference(caps, table, df.n_documents), rtol=0, atol=1e-12)


def _synthetic_sets(seed: int, n_sets: int = 60) -> list[list[str]]:
    """Captions with repeated n-grams inside a caption (tf > 1), repeated captions, empty captions,
    words absent from the table, and sets of different sizes."""
    rng = random.Random(seed)
    words = "a the man dog on in red blue ball grass zebra zebras grazing park frisbee".split()
    sets = []
    for _ in range(n_sets):
        m = rng.randint(2, 7)
        caps = []
        for _ in range(m):
            r = rng.random()
            if caps and r < 0.15:
                caps.append(rng.choice(caps))
            elif r < 0.2:
                caps.append("")
            else:
                toks = [rng.choice(words) for _ in range(rng.randint(1, 9))]
                if rng.random() < 0.3:
                    toks += toks[:3]  # a repeated n-gram
                if rng.random() < 0.2:
                    toks.append(f"unseen{rng.randint(0, 3)}")
                caps.append(" ".join(toks))
        sets.append(caps)
    return sets


def test_fast_and_dictionary_paths_agree_with_the_reference():
    sets = _synthetic_sets(0)
    df = DocumentFrequency.from_references(_synthetic_sets(1, 40))
    table = defaultdict(float, df.counts)
    fast = dv._kernels_by_size(sets, df, 4, 6.0, fast=True)
    slow = dv._kernels_by_size(sets, df, 4, 6.0, fast=False)
    assert fast.keys() == slow.keys()
    for m in fast:
        np.testing.assert_array_equal(fast[m][0], slow[m][0])
        np.testing.assert_allclose(fast[m][1], slow[m][1], rtol=0, atol=1e-12)
        for i, k in zip(fast[m][0], fast[m][1]):
            theirs = ref.self_cider_kernel_reference(sets[i], table, df.n_documents)
            np.testing.assert_allclose(k, theirs, rtol=0, atol=1e-12)
    # variable set sizes: each set scored with its own m, as if alone
    together = dv.self_cider(sets, df)
    alone = np.array([dv.self_cider([s], df)[0] for s in sets])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_other_ngram_orders_fast_and_dictionary_paths_agree(n):
    """n = 8 with a 300-word table does not fit int64 keys: the dictionary path is used."""
    rng = random.Random(n)
    vocab = [f"w{i}" for i in range(300)]
    docs = [[" ".join(rng.choice(vocab) for _ in range(rng.randint(3, 12))) for _ in range(3)] for _ in range(80)]
    df = DocumentFrequency.from_references(docs, n=n)
    assert (dv._EncodedTable.get(df, n) is None) == (n == 8)
    sets = [[" ".join(rng.choice(vocab[:40]) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(2, 6))]
            for _ in range(40)]
    fast = dv._kernels_by_size(sets, df, n, 6.0, fast=True)
    slow = dv._kernels_by_size(sets, df, n, 6.0, fast=False)
    for m in slow:
        np.testing.assert_allclose(fast[m][1], slow[m][1], rtol=0, atol=1e-12)
    if n == 1:  # unigram CIDEr-D by hand: clipped tf-idf cosine times the length penalty, x 10
        a, b = sets[0][0].split(), sets[0][1].split()
        idf = {w: math.log(df.n_documents) - math.log(max(1.0, df.counts.get((w,), 0.0))) for w in a + b}
        va = {w: a.count(w) * idf[w] for w in a}
        vb = {w: b.count(w) * idf[w] for w in b}
        na, nb = math.sqrt(sum(x * x for x in va.values())), math.sqrt(sum(x * x for x in vb.values()))
        dot = sum(min(va[w], vb.get(w, 0.0)) * vb.get(w, 0.0) for w in va)
        expected = 10 * dot / (na * nb) * math.exp(-((len(a) - len(b)) ** 2) / 72)
        k = dv.self_cider_kernel(sets[0][:2], df, n=1)
        assert k[0, 1] == pytest.approx(expected, abs=1e-12) and k[1, 0] == k[0, 1]


def test_truncated_hash_collisions_fall_back_to_the_dictionary_path(monkeypatch):
    sets = _synthetic_sets(6, 30)
    df = DocumentFrequency.from_references(_synthetic_sets(7, 30))
    expected = dv.self_cider(sets, df)  # also builds and caches the encoded table
    real_hash = dv._hash
    # keep only the low 8 bits: the sort key's top bits are all 0, every n-gram collides
    monkeypatch.setattr(dv, "_hash", lambda keys: real_hash(keys) & np.uint64(0xFF))
    flat = [c for s in sets for c in s]
    assert dv._self_cider_numerators_fast(flat, dv._Layout(sets), df, 4) is None
    np.testing.assert_allclose(dv.self_cider(sets, df), expected, rtol=0, atol=1e-12)


def test_table_containing_the_separator_word():
    df = DocumentFrequency.from_references([["a dog \x00 runs", "a cat"], ["two cats"], ["a dog"]])
    assert dv._EncodedTable.get(df, 4).lookup_words is None
    sets = [["a dog \x00 runs", "a dog runs"], ["a cat", "two cats", ""]]
    table = defaultdict(float, df.counts)
    for caps, k in zip(sets, dv.self_cider_kernels(sets, df)):
        np.testing.assert_allclose(k, ref.self_cider_kernel_reference(caps, table, df.n_documents), rtol=0, atol=1e-12)


def test_separator_token_inside_a_caption_falls_back_correctly():
    df = DocumentFrequency.from_references([["a dog runs", "a cat"], ["a dog sleeps"], ["two cats"]])
    sets = [["a dog \x00 runs", "a dog runs"], ["a cat", "two cats"]]
    table = defaultdict(float, df.counts)
    for caps, k in zip(sets, dv.self_cider_kernels(sets, df)):
        np.testing.assert_allclose(k, ref.self_cider_kernel_reference(caps, table, df.n_documents), rtol=0, atol=1e-12)


def test_encoded_table_lookup():
    df = DocumentFrequency.from_references(_synthetic_sets(2, 50))
    enc = dv._EncodedTable.get(df, 4)
    assert enc is dv._EncodedTable.get(df, 4)  # cached per table object
    keys = list(df.counts)
    ids = [[enc.words[w] for w in g] for g in keys]
    codes = np.array([functools.reduce(lambda a, b: a * enc.base + b, g) for g in ids], dtype=np.int64)
    np.testing.assert_array_equal(enc.lookup(codes), np.array([df.counts[g] for g in keys]))
    unseen = codes * 0 + (len(enc.words) + 1)  # an id given to an unknown word
    np.testing.assert_array_equal(enc.lookup(unseen), 0.0)


def test_self_cider_df_none_uses_the_sets_as_documents():
    sets = _synthetic_sets(3, 30)
    np.testing.assert_allclose(
        dv.self_cider(sets), dv.self_cider(sets, DocumentFrequency.from_references(sets)), rtol=0, atol=0
    )


def test_m_takes_the_first_captions():
    sets = [list(s) for s in merge_sets()[:50]]
    df = merge_df()
    np.testing.assert_array_equal(dv.self_cider(sets, df, m=5), dv.self_cider([s[:5] for s in sets], df))
    np.testing.assert_array_equal(dv.lsa_diversity(sets, m=3), dv.lsa_diversity([s[:3] for s in sets]))
    np.testing.assert_array_equal(dv.mbleu(sets, m=4), dv.mbleu([s[:4] for s in sets]))
    np.testing.assert_array_equal(dv.self_cider(sets, df, m=10), dv.self_cider(sets, df))


def test_negative_eigenvalue_modes_agree_on_real_kernels():
    sets = [list(s) for s in merge_sets()[:300]]
    df = merge_df()
    np.testing.assert_allclose(dv.self_cider(sets, df), dv.self_cider(sets, df, negative="clip"), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# the paper's facts
# ------------------------------------------------------------------------------------------------
def test_identical_captions_have_zero_diversity():
    df = merge_df()
    sets = [["a zebra standing in the grass"] * 5, ["a man riding a wave on top of a surfboard"] * 10, ["two dogs"] * 2]
    np.testing.assert_array_equal(dv.self_cider(sets, df), 0.0)
    np.testing.assert_array_equal(dv.lsa_diversity(sets), 0.0)
    assert np.all(np.abs(dv.mbleu(sets)[:, :2]) < 1e-8)  # 1 - mBLEU, up to BLEU's 1e-9 smoothing


def test_captions_sharing_no_ngram_have_diversity_one():
    df = merge_df()
    disjoint = [
        "zebra grazing near tall trees",
        "two cats sleeping on sofa",
        "red bus parked beside station",
        "pizza topped with fresh tomatoes",
    ]
    k = dv.self_cider_kernel(disjoint, df)
    np.testing.assert_allclose(k, 10.0 * np.eye(4), rtol=0, atol=1e-12)  # K = 10 I: r = 1/m
    assert abs(dv.self_cider([disjoint], df)[0] - 1.0) < 1e-12
    # LSA: disjoint words and equal count-vector norms (4 distinct words each)
    assert abs(dv.lsa_diversity([disjoint])[0] - 1.0) < 1e-12
    # different diagonal values (a 2-word caption has no 3-, 4-grams: K_ii = 5) give less than 1
    assert dv.self_cider([disjoint[:3] + ["green kite"]], df)[0] < 1.0


def test_paper_zebra_example():
    """Wang & Chan 2019, Sec. 1: C1 and C2 'obtain the same mBLEU of 1.0', yet C1 is more diverse."""
    df = merge_df()
    sc = dv.self_cider([C1, C2], df)
    lsa = dv.lsa_diversity([C1, C2])
    raw = dv.mbleu([C1, C2], diversity=False)
    assert sc[1] == 0.0 and sc[0] > 0.3
    assert lsa[1] == 0.0 and lsa[0] > 0.3
    np.testing.assert_allclose(raw[:, :2], 1.0, rtol=0, atol=1e-8)  # mBLEU-1 = mBLEU-2 = 1 for both
    np.testing.assert_allclose(raw[:, :4], ref.mbleu_reference([C1, C2]), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# LSA and mBLEU
# ------------------------------------------------------------------------------------------------
def plain_lsa(captions: list[str]) -> float:
    vocab = sorted({w for c in captions for w in c.split()})
    col = {w: i for i, w in enumerate(vocab)}
    mat = np.zeros((len(vocab), len(captions)))
    for j, c in enumerate(captions):
        for w in c.split():
            mat[col[w], j] += 1
    s = np.linalg.svd(mat, compute_uv=False)
    return -math.log(s.max() / s.sum()) / math.log(len(captions))


@pytest.mark.parametrize("m", [5, None])
def test_lsa_against_plain_numpy_svd(m):
    sets = [list(s) for s in merge_sets()[:300]]
    ours = dv.lsa_diversity(sets, m=m)
    theirs = np.array([plain_lsa(s[:m] if m else s) for s in sets])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
    official = np.array([ref.lsa_reference(s[:m] if m else s) for s in sets[:50]])
    np.testing.assert_allclose(ours[:50], official, rtol=0, atol=1e-12)


def test_lsa_variable_sizes_and_empty_captions():
    sets = _synthetic_sets(4, 40)
    ours = dv.lsa_diversity(sets)
    for s, d in zip(sets, ours):
        if not any(c.split() for c in s):
            assert np.isnan(d)  # no word at all: r = 0/0
        else:
            assert abs(d - plain_lsa(s)) < 1e-12


@pytest.mark.parametrize("m", [5, None])
def test_mbleu_against_pycocoevalcap_bleu(m):
    sets = [list(s) for s in merge_sets()[200:310]]
    theirs = ref.mbleu_reference(sets, m=m)
    raw = dv.mbleu(sets, m=m, diversity=False)
    assert raw.shape == (110, 5)
    np.testing.assert_allclose(raw[:, :4], theirs, rtol=0, atol=1e-12)
    np.testing.assert_allclose(raw[:, 4], theirs.mean(axis=1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(dv.mbleu(sets, m=m), 1.0 - raw, rtol=0, atol=0)


def test_mbleu_synthetic_against_pycocoevalcap():
    sets = _synthetic_sets(5, 60)
    np.testing.assert_allclose(dv.mbleu(sets, diversity=False)[:, :4], ref.mbleu_reference(sets), rtol=0, atol=1e-12)


# ------------------------------------------------------------------------------------------------
# accuracy
# ------------------------------------------------------------------------------------------------
def test_accuracy_equals_pycocoevalcap_cider():
    from pycocoevalcap.cider.cider import Cider

    ids, refs, sets = thumb()
    ours = dv.accuracy(sets, refs)
    per_caption = []
    for i in range(5):
        gts = {k: refs[k] for k in range(len(ids))}
        res = {k: [sets[k][i]] for k in range(len(ids))}
        per_caption.append(Cider().compute_score(gts, res)[1])
    theirs = np.mean(per_caption, axis=0)
    assert ours.shape == (500,)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
    # a supplied table (here: the merge-results captions as documents) instead of the references
    if MERGE.exists():
        table, n_docs = merge_df_reference()
        fixed = np.mean(
            [ref.cider_reference([s[i] for s in sets], refs, table, n_docs) for i in range(5)], axis=0
        )
        np.testing.assert_allclose(dv.accuracy(sets, refs, df=merge_df()), fixed, rtol=0, atol=1e-9)
    # m: first captions only
    np.testing.assert_allclose(dv.accuracy(sets, refs, m=2), np.mean(per_caption[:2], axis=0), rtol=0, atol=1e-9)


def test_leave_one_out_accuracy_equals_pycocoevalcap():
    _, refs, _ = thumb()
    ours = dv.leave_one_out_accuracy(refs)
    table, n_docs = ref.document_frequency_table(refs)  # complete reference sets, as documented
    table = defaultdict(float, table)
    cands = [r[i] for r in refs for i in range(len(r))]
    others = [r[:i] + r[i + 1:] for r in refs for i in range(len(r))]
    theirs = ref.cider_reference(cands, others, table, n_docs).reshape(len(refs), 4).mean(axis=1)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
    # same as cider_d by hand
    by_hand = cider_d(cands, others, df=DocumentFrequency.from_references(refs)).reshape(-1, 4).mean(axis=1)
    np.testing.assert_allclose(ours, by_hand, rtol=0, atol=1e-12)
    assert np.isfinite(ours).all() and (ours >= 0).all()


# ------------------------------------------------------------------------------------------------
# F-score
# ------------------------------------------------------------------------------------------------
def test_f_score_hand_computed():
    assert dv.f_score(0.5, 1.0) == pytest.approx(6 * 0.5 * 1.0 / (5 * 0.5 + 1.0))  # 0.857142...
    assert dv.f_score(0.5, 1.0, beta2=1.0) == pytest.approx(2 * 0.5 / 1.5)
    assert dv.f_score(0.8, 2.0, beta2=0.0) == pytest.approx(0.8)  # beta = 0: diversity
    assert dv.f_score(0.0, 0.0) == 0.0
    assert dv.f_score(0.0, 3.0) == 0.0 and dv.f_score(0.7, 0.0) == 0.0
    out = dv.f_score(np.array([0.0, 0.9, 0.3]), np.array([0.0, 1.2, 0.0]), beta2=5.0)
    np.testing.assert_allclose(out, [0.0, 6 * 0.9 * 1.2 / (4.5 + 1.2), 0.0])
    np.testing.assert_allclose(dv.f_score([0.2, 0.4], 1.0), [1.2 / 2.0, 2.4 / 3.0])  # broadcast
    assert np.isnan(dv.f_score(float("nan"), 1.0))
    # large beta tends to accuracy
    assert dv.f_score(0.5, 1.0, beta2=1e9) == pytest.approx(1.0, rel=1e-6)


def test_f_score_errors():
    with pytest.raises(ValueError, match=">= 0"):
        dv.f_score(-0.1, 1.0)
    with pytest.raises(ValueError, match="beta2"):
        dv.f_score(0.5, 1.0, beta2=-1)
    with pytest.raises(ValueError, match="broadcast"):
        dv.f_score([0.1, 0.2], [1.0, 2.0, 3.0])


# ------------------------------------------------------------------------------------------------
# vocabulary
# ------------------------------------------------------------------------------------------------
def test_vocabulary_and_frequency_curve():
    caps = ["a dog on a mat", "a cat", "", "dog dog"]
    size, counts = dv.vocabulary(caps)
    assert size == 5 and counts == Counter({"a": 3, "dog": 3, "on": 1, "mat": 1, "cat": 1})
    curve = dv.word_frequency_curve(caps)
    assert curve.dtype == np.int64 and curve.tolist() == [3, 3, 1, 1, 1]
    assert dv.word_frequency_curve(caps, top=2).tolist() == [3, 3]
    assert dv.word_frequency_curve([]).shape == (0,)
    with pytest.raises(ValueError):
        dv.word_frequency_curve(caps, top=0)
    with pytest.raises(ValueError):
        dv.vocabulary("a dog")
    with pytest.raises(ValueError):
        dv.vocabulary(["a dog", 3])


# ------------------------------------------------------------------------------------------------
# latent coordinates and MDS
# ------------------------------------------------------------------------------------------------
def test_latent_coordinates_lsa():
    caps = ["a little girl eating a chocolate donut", "the girl is eating", "a donut on the table",
            "a little girl talking", "chocolate donut and chocolate cake"]
    x = dv.latent_coordinates(caps, "lsa", k=5)
    assert x.shape == (5, 5)
    # plain SVD of the word-caption matrix without scikit-learn's stop words
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    vocab = sorted({w for c in caps for w in c.split() if w not in ENGLISH_STOP_WORDS})
    mat = np.array([[c.split().count(w) for c in caps] for w in vocab], dtype=float)
    _, s, vt = np.linalg.svd(mat, full_matrices=False)
    for i in range(5):
        assert min(np.abs(x[:, i] - vt[i]).max(), np.abs(x[:, i] + vt[i]).max()) < 1e-10
        assert x[:, i].sum() >= -1e-12  # orientation convention
    scaled = dv.latent_coordinates(caps, "lsa", k=5, scale=True)
    np.testing.assert_allclose(scaled @ scaled.T, mat.T @ mat, atol=1e-10)
    # stop words are ignored; custom list; more components than the rank are zeros
    x2 = dv.latent_coordinates([c + " the of" for c in caps], "lsa", k=5)
    np.testing.assert_allclose(x2, x, atol=1e-12)
    wide = dv.latent_coordinates(["dog", "cat", "dog dog"], "lsa", k=4, stop_words=())
    assert wide.shape == (3, 4) and np.all(wide[:, 2:] == 0)
    with pytest.raises(ValueError, match="single string"):
        dv.latent_coordinates(caps, "lsa", stop_words="the")


def test_latent_coordinates_self_cider():
    caps = list(merge_sets()[7])
    df = merge_df()
    k = dv.self_cider_kernel(caps, df)
    x = dv.latent_coordinates(caps, "self_cider", k=10, df=df, scale=True)
    np.testing.assert_allclose(x @ x.T, k, atol=1e-9)  # K is PSD here: X X^T = K
    v = dv.latent_coordinates(caps, "self_cider", k=5, df=df)
    assert v.shape == (10, 5)
    np.testing.assert_allclose(v.T @ v, np.eye(5), atol=1e-10)  # unit eigenvectors, as the paper
    assert (v[:, 0] > 0).all()  # Perron vector of a positive kernel
    rep = dv.latent_coordinates(["a dog runs"] * 4, "self_cider", k=3, df=df)
    assert np.all(rep[:, 1:] == 0) and np.allclose(rep[:, 0], 0.5)
    with pytest.raises(ValueError, match="DocumentFrequency"):
        dv.latent_coordinates(caps, "self_cider")
    with pytest.raises(ValueError, match="method"):
        dv.latent_coordinates(caps, "pca")
    with pytest.raises(ValueError, match="k must"):
        dv.latent_coordinates(caps, "lsa", k=0)


def test_mds_coordinates_recover_distances():
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(8, 2))
    dist = np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))
    y = dv.mds_coordinates(dist, kind="distance")
    assert y.shape == (8, 2)
    np.testing.assert_allclose(np.sqrt(((y[:, None] - y[None]) ** 2).sum(-1)), dist, atol=1e-10)
    gram = pts @ pts.T
    z = dv.mds_coordinates(gram, kind="similarity")
    np.testing.assert_allclose(np.sqrt(((z[:, None] - z[None]) ** 2).sum(-1)), dist, atol=1e-10)
    same = dv.mds_coordinates(np.full((4, 4), 3.0))  # identical captions: one point
    np.testing.assert_array_equal(same, 0.0)
    np.testing.assert_allclose(dv.mds_coordinates(dist, kind="distance", n_components=10)[:, 2:], 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="square"):
        dv.mds_coordinates(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="kind"):
        dv.mds_coordinates(dist, kind="cosine")
    with pytest.raises(ValueError, match=">= 0"):
        dv.mds_coordinates(-dist, kind="distance")
    with pytest.raises(ValueError, match="finite"):
        dv.mds_coordinates(np.array([[0.0, np.nan], [np.nan, 0.0]]))


# ------------------------------------------------------------------------------------------------
# input validation
# ------------------------------------------------------------------------------------------------
def test_input_errors():
    df = DocumentFrequency.from_references([["a dog", "a cat"], ["two birds"]])
    good = [["a dog", "a cat"], ["a bird", "two birds"]]
    for fn in (lambda s, **kw: dv.self_cider(s, df, **kw), dv.lsa_diversity, dv.mbleu):
        with pytest.raises(ValueError, match="empty"):
            fn([])
        with pytest.raises(ValueError, match=r"fewer than 2 caption\(s\) \(indices: 1, 3\)"):
            fn([["a", "b"], ["only one"], ["c", "d"], []])
        too_few = r"2 caption set\(s\) of sets have fewer than m = 3 captions \(indices: 0, 1\)"
        with pytest.raises(ValueError, match=too_few):
            fn(good, m=3)
        for bad_m in (1, 0, True, 2.5):
            with pytest.raises(ValueError, match="m \\(captions per set\\)"):
                fn(good, m=bad_m)
        with pytest.raises(ValueError, match=r"sets\[1\]\[0\] must be a string"):
            fn([["a dog", "a cat"], [["a"], "b"]])
        with pytest.raises(ValueError, match="single string"):
            fn(["a dog", "a cat"])
        with pytest.raises(ValueError, match="got a string"):
            fn("a dog")
    with pytest.raises(ValueError, match="DocumentFrequency"):
        dv.self_cider(good, df={"a": 1})
    with pytest.raises(ValueError, match="at least 2 sets"):
        dv.self_cider([["a dog", "a cat"]])
    with pytest.raises(ValueError, match="negative"):
        dv.self_cider(good, df, negative="drop")
    with pytest.raises(ValueError, match="sigma"):
        dv.self_cider(good, df, sigma=0)
    with pytest.raises(ValueError, match="DocumentFrequency table is required"):
        dv.self_cider_kernel(["a dog", "a cat"], None)
    with pytest.raises(ValueError, match="empty"):
        dv.self_cider_kernel([], df)
    with pytest.raises(ValueError, match="must be a string"):
        dv.self_cider_kernel(["a dog", None], df)
    with pytest.raises(ValueError, match="2 caption sets but 1 reference"):
        dv.accuracy(good, [["a dog"]])
    with pytest.raises(ValueError, match=r"references.*indices: 0"):
        dv.accuracy(good, [[], ["a bird"]])
    with pytest.raises(ValueError, match=r"fewer than 2 caption\(s\) \(indices: 1\)"):
        dv.leave_one_out_accuracy([["a dog", "a cat"], ["a bird"]])
    with pytest.raises(ValueError, match="DocumentFrequency"):
        dv.leave_one_out_accuracy([["a dog", "a cat"]], df="table")


def test_kernel_of_one_caption_and_all_empty_sets():
    df = DocumentFrequency.from_references([["a dog runs", "a cat"], ["two birds fly"]])
    assert dv.self_cider_kernel(["a dog runs"], df).shape == (1, 1)
    out = dv.self_cider([["", ""], ["a dog runs", "two birds fly"]], df)
    assert np.isnan(out[0]) and out[1] == pytest.approx(1.0, abs=1e-12)
    assert np.isnan(dv.self_cider([["", ""], ["", " "]], df)).all()
    np.testing.assert_array_equal(dv.self_cider_kernel(["", "  "], df), 0.0)
