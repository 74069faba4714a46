"""Tests of the vectorised CIDEr-D (captioneval.kernels.cider); plain pytest, no Django.

The Flickr8k-Expert tests need data/flickr8k and Java (PTB tokeniser); they are skipped otherwise.
"""
from __future__ import annotations

import functools
import json
import math
import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from captioneval.kernels.cider import DocumentFrequency, cider_d
from tests import references
from tests.flickr8k_data import N_EXPERT_PAIRS, load_flickr8k_expert_tokenized

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------
# Flickr8k-Expert against pycocoevalcap
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _expert_inputs():
    pairs = load_flickr8k_expert_tokenized()
    return [p.candidate for p in pairs], [list(p.references) for p in pairs]


def _pycoco_scores() -> np.ndarray:
    """pycocoevalcap's Cider on all Flickr8k-Expert pairs (computed once per session: tests.references)."""
    return references.cider_d(*_expert_inputs())[1]


def test_expert_pairs_protocol():
    pairs = load_flickr8k_expert_tokenized()
    assert len(pairs) == N_EXPERT_PAIRS == 5664
    assert all(len(p.references) == 5 and len(p.ratings) == 3 for p in pairs)
    assert all(not p.candidate.endswith(".") and p.candidate == p.candidate.lower() for p in pairs[:50])


def test_equals_pycocoevalcap_on_flickr8k_expert():
    cands, refs = _expert_inputs()
    ours = cider_d(cands, refs)
    theirs = _pycoco_scores()
    assert ours.shape == (len(cands),) == theirs.shape
    assert ours.dtype == np.float64
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6)
    assert abs(ours.mean() - theirs.mean()) < 1e-9


@pytest.mark.parametrize("chunk", [7, 500])
def test_large_batches_are_scored_in_chunks_with_the_whole_batchs_document_frequencies(monkeypatch, chunk):
    """A batch of more than CHUNK_ITEMS items gets its document frequencies counted chunk by chunk into
    one table (the same table as one batch: every n-gram and count), then is scored a chunk at a time:
    the same scores as one batch (to the last few ulps: the n-grams are numbered per chunk, so a
    vector's norm is summed in another order) and as pycocoevalcap, on the shared references of
    Flickr8k-Expert and on distinct COCO-style captions."""
    import captioneval.kernels.cider as kernel

    cands, refs = _expert_inputs()
    whole = cider_d(cands, refs)
    lists = list(Counter(map(tuple, refs)))
    weights = np.fromiter(Counter(map(tuple, refs)).values(), dtype=np.int64)
    table = kernel._document_frequency_in_chunks(lists, weights, 4, chunk)
    expected = DocumentFrequency.from_references(lists, weights=weights.tolist())
    assert table.n_documents == expected.n_documents == len(refs)
    assert table._ngram_index.to_dict() == dict(expected.counts) and len(table.counts) > 10000
    monkeypatch.setattr(kernel, "CHUNK_ITEMS", chunk)
    chunked = cider_d(cands, refs)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-12)
    np.testing.assert_allclose(chunked, _pycoco_scores(), rtol=0, atol=1e-6)
    rows = json.loads((ROOT / "data" / "coco_multicaption_selfcider_example" / "merge_results.json").read_text())[:1500]
    cands, refs = [r["captions"][0] for r in rows], [r["captions"][1:6] for r in rows]
    monkeypatch.setattr(kernel, "CHUNK_ITEMS", 10 ** 9)
    whole = cider_d(cands, refs)
    monkeypatch.setattr(kernel, "CHUNK_ITEMS", chunk)
    np.testing.assert_allclose(cider_d(cands, refs), whole, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cider_d(cands, refs), references.cider_d(cands, refs)[1], rtol=0, atol=1e-12)
    # too many words for one int64 key per n-gram (V ** n >= 2 ** 63): one batch, as before
    assert kernel._document_frequency_in_chunks(lists[:50], weights[:50], 16, chunk) is None
    monkeypatch.setattr(kernel, "CHUNK_ITEMS", 10 ** 9)
    one_batch = cider_d(cands[:60], refs[:60], n=16)
    monkeypatch.setattr(kernel, "CHUNK_ITEMS", 7)
    assert np.array_equal(cider_d(cands[:60], refs[:60], n=16), one_batch)


def test_supplied_df_on_a_subset_equals_full_corpus_scores():
    cands, refs = _expert_inputs()
    full_df = DocumentFrequency.from_references(refs)
    assert full_df.n_documents == len(refs)
    idx = np.random.default_rng(0).choice(len(cands), size=500, replace=False)
    sub = cider_d([cands[i] for i in idx], [refs[i] for i in idx], df=full_df)
    np.testing.assert_allclose(sub, _pycoco_scores()[idx], rtol=0, atol=1e-6)
    # chunked scoring reproduces the full run
    chunks = [cider_d(cands[a:a + 1000], refs[a:a + 1000], df=full_df) for a in range(0, len(cands), 1000)]
    np.testing.assert_allclose(np.concatenate(chunks), _pycoco_scores(), rtol=0, atol=1e-6)
    # a subset scored with its own df (df=None) is a different (smaller-N) computation
    own = cider_d([cands[i] for i in idx], [refs[i] for i in idx])
    assert not np.allclose(own, sub)


def test_df_json_round_trip_gives_identical_scores():
    cands, refs = _expert_inputs()
    df = DocumentFrequency.from_references(refs)
    data = json.loads(json.dumps(df.to_json()))
    back = DocumentFrequency.from_json(data)
    assert back.n_documents == df.n_documents
    assert dict(back.counts) == dict(df.counts)
    np.testing.assert_array_equal(cider_d(cands[:700], refs[:700], df=back), cider_d(cands[:700], refs[:700], df=df))


# ------------------------------------------------------------------------------------------------
# Independent checks on small inputs
# ------------------------------------------------------------------------------------------------
def test_hand_computed_identical_caption():
    # candidate == the only reference "a b"; df: every n-gram in 1 of N = 10 documents, so every
    # idf is log(10) and each vector is proportional to the count vector.
    df = DocumentFrequency(counts={("a",): 1.0, ("b",): 1.0, ("a", "b"): 1.0}, n_documents=10)
    # unigrams and bigram: cosine 1; no 3-/4-grams: 0; delta = 0 -> penalty 1
    expected = 10.0 * (1.0 + 1.0 + 0.0 + 0.0) / 4.0
    assert cider_d(["a b"], [["a b"]], df=df)[0] == pytest.approx(expected, abs=1e-12)
    assert expected == 5.0


def test_hand_computed_clipping_and_length_penalty():
    # candidate "a a b" against references ["a b", "c"], N = 4 documents,
    # df(a) = 1, df(b) = 2, df(c) = 3, df(a b) = 1, df(a a) = df(a a b) = 0.
    df = DocumentFrequency(
        counts={("a",): 1.0, ("b",): 2.0, ("c",): 3.0, ("a", "b"): 1.0}, n_documents=4
    )
    la, lb = math.log(4) - math.log(1), math.log(4) - math.log(2)
    lab, laa = math.log(4), math.log(4)
    # reference "a b": unigrams v_h = (a: 2 la, b: lb), v_r = (a: la, b: lb)
    s1 = (min(2 * la, la) * la + min(lb, lb) * lb) / (math.sqrt(4 * la**2 + lb**2) * math.sqrt(la**2 + lb**2))
    # bigrams v_h = (a a: laa, a b: lab), v_r = (a b: lab)
    s2 = (lab * lab) / (math.sqrt(laa**2 + lab**2) * lab)
    # candidate has 2 bigrams, reference 1: delta = 1
    sim_ref1 = (s1 + s2 + 0 + 0) * math.exp(-1 / (2 * 6.0**2))
    # reference "c": nothing shared -> 0 (its bigram length is 0: delta = 2, irrelevant)
    sim_ref2 = 0.0
    expected = 10.0 * ((sim_ref1 + sim_ref2) / 2) / 4
    got = cider_d(["a a b"], [["a b", "c"]], df=df)
    assert got.shape == (1,)
    assert got[0] == pytest.approx(expected, rel=1e-12)


def test_sigma_changes_only_the_penalty():
    df = DocumentFrequency(counts={("x",): 1.0}, n_documents=3)
    a = cider_d(["x y z"], [["x"]], df=df, sigma=6.0)[0]
    b = cider_d(["x y z"], [["x"]], df=df, sigma=1e9)[0]
    assert a == pytest.approx(b * math.exp(-(2**2) / (2 * 36.0)), rel=1e-12)


def _naive_cider_d(cands, refs, df_counts=None, n_docs=None, n=4, sigma=6.0):
    """Straightforward per-pair implementation of the definition (test oracle)."""

    def grams(s):
        w = s.split()
        return Counter(tuple(w[i:i + k]) for k in range(1, n + 1) for i in range(len(w) - k + 1))

    if df_counts is None:
        df_counts = Counter()
        for rs in refs:
            df_counts.update(set().union(*(grams(r) for r in rs)))
        n_docs = len(refs)

    def vec(s):
        v = {g: c * (math.log(n_docs) - math.log(max(1.0, df_counts.get(g, 0.0)))) for g, c in grams(s).items()}
        norms = [math.sqrt(sum(x * x for g, x in v.items() if len(g) == k)) for k in range(1, n + 1)]
        return v, norms, max(len(s.split()) - 1, 0)

    out = []
    for h, rs in zip(cands, refs):
        vh, nh, lh = vec(h)
        total = 0.0
        for r in rs:
            vr, nr, lr = vec(r)
            pen = math.exp(-((lh - lr) ** 2) / (2 * sigma**2))
            for k in range(1, n + 1):
                s = sum(min(x, vr.get(g, 0.0)) * vr.get(g, 0.0) for g, x in vh.items() if len(g) == k)
                if nh[k - 1] and nr[k - 1]:
                    s /= nh[k - 1] * nr[k - 1]
                total += s * pen
        out.append(10.0 * total / n / len(rs))
    return np.array(out)


def _random_corpus(rng, n_items, vocab="abcdefg"):
    def sent():
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 9)))

    cands = [sent() for _ in range(n_items)]
    refs = [[sent() for _ in range(rng.randint(1, 4))] for _ in range(n_items)]
    # shared / duplicated sentences and references, as in real data
    refs[0] = refs[0] + [refs[0][0]]
    if n_items > 2:
        cands[1] = refs[2][0]
        refs[1] = refs[2]
    return cands, refs


@pytest.mark.parametrize("seed", range(6))
def test_matches_naive_definition_on_random_inputs(seed):
    rng = random.Random(seed)
    cands, refs = _random_corpus(rng, rng.randint(1, 25))
    for n in (1, 2, 4, 5):
        np.testing.assert_allclose(cider_d(cands, refs, n=n), _naive_cider_d(cands, refs, n=n), rtol=0, atol=1e-12)
    # supplied table with counts above n_documents (negative idf) and n-grams it does not know
    counts = {g: float(rng.randint(0, 6)) for g in DocumentFrequency.from_references(refs).counts}
    table = DocumentFrequency(counts=counts, n_documents=3)
    np.testing.assert_allclose(
        cider_d(cands, refs, df=table), _naive_cider_d(cands, refs, counts, 3), rtol=0, atol=1e-12
    )


def test_matches_pycocoevalcap_on_random_inputs():
    from pycocoevalcap.cider.cider import Cider

    rng = random.Random(42)
    cands, refs = _random_corpus(rng, 40)
    cands[3] = ""  # empty candidate
    refs[4] = [""]  # empty reference
    _, theirs = Cider().compute_score({i: refs[i] for i in range(40)}, {i: [cands[i]] for i in range(40)})
    np.testing.assert_allclose(cider_d(cands, refs), theirs, rtol=0, atol=1e-12)


def test_df_none_equals_df_from_same_references(monkeypatch):
    """Bit for bit on the general path; to 1e-15 on the numeric path for distinct texts (another summation
    order of the norms)."""
    import captioneval.kernels.cider as kernel

    rng = random.Random(7)
    cands, refs = _random_corpus(rng, 30)
    df = DocumentFrequency.from_references(refs)
    np.testing.assert_allclose(cider_d(cands, refs), cider_d(cands, refs, df=df), rtol=0, atol=1e-15)
    monkeypatch.setattr(kernel, "DISTINCT_SHARE", 2.0)
    np.testing.assert_array_equal(cider_d(cands, refs), cider_d(cands, refs, df=df))


def test_from_references_counts_reference_sets():
    df = DocumentFrequency.from_references([["a b a", "a"], ["b c"]])
    assert df.n_documents == 2
    assert df.counts[("a",)] == 1.0  # in item 0 three times, counted once
    assert df.counts[("b",)] == 2.0
    assert df.counts[("a", "b")] == 1.0 and df.counts[("b", "a")] == 1.0
    assert df.counts[("a", "b", "a")] == 1.0
    assert set(df.counts) == {("a",), ("b",), ("c",), ("a", "b"), ("b", "a"), ("b", "c"), ("a", "b", "a")}
    assert DocumentFrequency.from_json(df.to_json()) == df
    assert df.to_json()["counts"]["a b a"] == 1.0


def test_single_document_is_degenerate_but_defined():
    out = cider_d(["a man rides a horse"], [["a man rides a horse", "a person on a horse"]])
    np.testing.assert_array_equal(out, [0.0])
    # with an external table the single item gets a meaningful score
    df = DocumentFrequency(counts={}, n_documents=100)
    assert cider_d(["a man rides a horse"], [["a man rides a horse"]], df=df)[0] == pytest.approx(10.0)


def test_scores_are_in_range_and_order_independent():
    rng = random.Random(3)
    cands, refs = _random_corpus(rng, 50)
    s = cider_d(cands, refs)
    assert np.all(s >= 0) and np.all(s <= 10 + 1e-12)
    perm = list(range(50))
    rng.shuffle(perm)
    s_perm = cider_d([cands[i] for i in perm], [refs[i] for i in perm])
    np.testing.assert_allclose(s_perm, s[perm], rtol=0, atol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="empty"):
        cider_d([], [])
    with pytest.raises(ValueError, match="2 candidates but 1"):
        cider_d(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match=r"references\[1\] is empty"):
        cider_d(["a", "b"], [["a"], []])
    with pytest.raises(ValueError):
        cider_d(["a"], [["a"]], n=0)
    with pytest.raises(ValueError):
        cider_d(["a"], [["a"]], sigma=0.0)
    with pytest.raises(TypeError):
        cider_d(["a"], ["a"])  # references[0] is a string, not a list
    with pytest.raises(TypeError):
        cider_d([3], [["a"]])
    with pytest.raises(ValueError, match="empty"):
        DocumentFrequency.from_references([])
    with pytest.raises(ValueError, match=r"references\[0\] is empty"):
        DocumentFrequency.from_references([[]])
    with pytest.raises(ValueError):
        DocumentFrequency(counts={}, n_documents=0)
    with pytest.raises(ValueError):
        DocumentFrequency.from_json({"counts": {}})
    with pytest.raises(ValueError):
        DocumentFrequency.from_json({"n_documents": 2, "counts": {"": 1.0}})


def test_empty_captions_are_defined():
    np.testing.assert_array_equal(cider_d(["", ""], [[""], [""]]), [0.0, 0.0])
    np.testing.assert_array_equal(cider_d(["a", ""], [[""], ["a"]]), [0.0, 0.0])
    assert DocumentFrequency.from_references([[""], [""]]).counts == {}


# ------------------------------------------------------------------------------------------------
# supplied tables: the vectorised look-up index against plain dictionary look-ups
# ------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _crowdflower_inputs():
    """Flickr8k-CrowdFlower pairs (candidate = the Flickr8k caption named in the file, references = the 5
    captions of the judged image), PTB-tokenised with the project's tokeniser."""
    from pathlib import Path

    from captioneval.text.tokenizer import ptb_tokenize
    from tests.flickr8k_data import DATA_DIR, _read_captions, references_by_image

    root = Path(DATA_DIR)
    captions = _read_captions(root)
    refs_of = references_by_image(captions)
    pairs = []
    with open(root / "CrowdFlowerAnnotations.txt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                image, cand_id = line.split("\t")[:2]
                if not cand_id.startswith(image + "#"):
                    pairs.append((captions[cand_id], [t for _, t in sorted(refs_of[image])]))
    texts = list(dict.fromkeys(t for c, rs in pairs for t in (c, *rs)))
    tok = dict(zip(texts, ptb_tokenize(texts, implementation="python")))
    return [tok[c] for c, _ in pairs], [[tok[r] for r in rs] for _, rs in pairs]


def _column_ngrams(corpus):
    """The n-gram tuple of every column of a ``_Corpus``, rebuilt word by word (independent of the index)."""
    words = list(corpus._vocab)
    wid = corpus._wid.tolist()
    return [tuple(words[wid[p + j]] for j in range(k)) for k, rep in enumerate(corpus._rep, 1) for p in rep.tolist()]


class _DictLookup:
    """Stands in for a table's look-up index: ``dict.get(n-gram tuple, 0.0)`` per column (the original path)."""

    def __init__(self, counts):
        self.counts = counts

    def lookup(self, corpus):
        grams = _column_ngrams(corpus)
        return np.fromiter((self.counts.get(g, 0.0) for g in grams), dtype=np.float64, count=len(grams))


def _with_dict_lookup(table: DocumentFrequency) -> DocumentFrequency:
    ref = DocumentFrequency(counts=table.counts, n_documents=table.n_documents)
    object.__setattr__(ref, "_ngram_index", _DictLookup(table.counts))
    return ref


def _corpus_of(cands, refs, n=4):
    from captioneval.kernels.cider import _Corpus

    return _Corpus(list(dict.fromkeys([*cands, *(r for rs in refs for r in rs)])), n)


def _expert_table_with_extras() -> DocumentFrequency:
    """Flickr8k-Expert references' table plus n-grams of words absent from every corpus, n-grams whose
    prefixes are not in the table, keys the scorer never asks for (not tuples, empty, order 6)."""
    _, refs = _expert_inputs()
    counts = dict(DocumentFrequency.from_references(refs).counts)
    counts.update({("zqxj",): 7.0, ("a", "zqxj"): 2.0, ("zqxj", "dog", "runs"): 1.0, ("zorblax", "elephant"): 3.0,
                   ("a", "zorblax", "elephant", "sings"): 1.5, ("elephant", "sings"): 5.0,
                   ("a", "b", "c", "d", "e", "f"): 9.0, (): 4.0, "a dog": 11.0})
    assert ("zorblax",) not in counts and ("a", "zorblax", "elephant") not in counts
    return DocumentFrequency(counts=counts, n_documents=len(refs) + 3)


@pytest.mark.slow
def test_index_lookup_equals_dict_lookup_on_crowdflower_with_expert_table():
    cands, refs = _crowdflower_inputs()
    assert len(cands) > 40000
    chunks = [(cands[a:a + 4000], refs[a:a + 4000]) for a in range(0, len(cands), 4000)]
    # the whole Expert table (plus n-grams of words no caption has), and the table of a third of the Expert
    # references, which misses words and n-grams of every chunk
    _, expert_refs = _expert_inputs()
    for table, must_miss in ((_expert_table_with_extras(), False),
                             (DocumentFrequency.from_references(expert_refs[:1800]), True)):
        index = table._index()
        hits = 0
        for c, r in chunks:
            corpus = _corpus_of(c, r)
            got = index.lookup(corpus)
            want = _DictLookup(table.counts).lookup(corpus)
            assert got.dtype == np.float64 and got.tobytes() == want.tobytes()
            hits += int((want > 0).sum())
            if must_miss:
                assert (want == 0).sum() > 1000 and any(len(g) == 1 for g in _column_ngrams(corpus) if g not in table.counts)
        assert hits > 100000
        # whole scores, bit for bit, against the dictionary path
        for c, r in chunks[:3]:
            assert cider_d(c, r, df=table).tobytes() == cider_d(c, r, df=_with_dict_lookup(table)).tobytes()


def test_index_lookup_with_a_vocabulary_too_large_for_naive_keys():
    cands, refs = _expert_inputs()
    base = DocumentFrequency.from_references(refs)
    counts = {(f"w{i}",): float(i % 5) for i in range(70000)}  # 70,000 ** 4 > 2 ** 63
    counts.update(base.counts)
    counts[("w69999", "w3", "a", "dog")] = 2.0
    table = DocumentFrequency(counts=counts, n_documents=len(refs))
    index = table._index()
    assert index.size ** 4 >= 2 ** 63 and index.size ** 3 < 2 ** 63
    assert [len(index.levels[k]) for k in (1, 2, 3, 4)] == [1, 1, 1, 3]  # order 4 is encoded level by level
    extra = ["w69999 w3 a dog", "w12 w13 a man", "a dog w69998"]
    c, r = cands[:1500] + extra, refs[:1500] + [["a dog runs"]] * 3
    corpus = _corpus_of(c, r)
    assert index.lookup(corpus).tobytes() == _DictLookup(counts).lookup(corpus).tobytes()
    got = cider_d(c, r, df=table)
    assert got.tobytes() == cider_d(c, r, df=_with_dict_lookup(table)).tobytes()
    back = DocumentFrequency.from_packed(table.to_packed())
    assert back.counts == counts and cider_d(c, r, df=back).tobytes() == got.tobytes()
    # the unigrams added only to the vocabulary change nothing for captions without them
    assert got[:1500].tobytes() == cider_d(c[:1500], r[:1500], df=base).tobytes()


def test_references_own_table_equals_pycocoevalcap():
    cands, refs = _expert_inputs()
    table = DocumentFrequency.from_references(refs)
    got = cider_d(cands, refs, df=table)
    assert got.tobytes() == cider_d(cands, refs, df=_with_dict_lookup(table)).tobytes()
    np.testing.assert_allclose(got, _pycoco_scores(), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got, cider_d(cands, refs))


def test_packed_table_round_trip():
    cands, refs = _expert_inputs()
    table = _expert_table_with_extras()
    data = table.to_packed()
    assert isinstance(data, bytes) and len(data) < 30 * len(table.counts) + 200000
    back = DocumentFrequency.from_packed(data)
    assert back.n_documents == table.n_documents
    usable = {g: float(v) for g, v in table.counts.items() if isinstance(g, tuple) and g}
    assert len(back.counts) == len(usable) and dict(back.counts) == usable and back.counts == usable
    assert back.counts[("a", "zorblax", "elephant", "sings")] == 1.5 and ("zorblax",) not in back.counts
    assert cider_d(cands, refs, df=back).tobytes() == cider_d(cands, refs, df=table).tobytes()
    plain = DocumentFrequency.from_references(refs)
    again = DocumentFrequency.from_packed(plain.to_packed())
    assert again.to_json() == plain.to_json() and again.to_packed() == plain.to_packed()
    with pytest.raises(ValueError, match="not a packed"):
        DocumentFrequency.from_packed(b"{}" + data)
    with pytest.raises(ValueError, match="trailing or missing"):
        DocumentFrequency.from_packed(data[:-8])
    with pytest.raises(TypeError, match="tuples of str"):
        DocumentFrequency(counts={(1, 2): 1.0}, n_documents=2).to_packed()


def test_weighted_references_equal_repeated_reference_sets():
    _, refs = _expert_inputs()
    sets = refs[:600]
    weights = [1 + (i * 7) % 5 for i in range(len(sets))]
    weighted = DocumentFrequency.from_references(sets, weights=weights)
    repeated = DocumentFrequency.from_references([s for s, w in zip(sets, weights) for _ in range(w)])
    assert weighted.n_documents == repeated.n_documents == sum(weights)
    assert weighted.counts == repeated.counts and len(weighted.counts) == len(repeated.counts)
    assert weighted.to_packed() == repeated.to_packed()
    cands = [rs[0] for rs in refs[600:900]]
    assert cider_d(cands, refs[600:900], df=weighted).tobytes() == cider_d(
        cands, refs[600:900], df=_with_dict_lookup(repeated)).tobytes()
    for bad in ([1] * 599, [0] + [1] * 599, [1.5] * 600):
        with pytest.raises(ValueError, match="weights must be 600 positive integers"):
            DocumentFrequency.from_references(sets, weights=bad)


def _coco_distinct(n_items: int):
    """The first items of the bundled COCO example (caption 0 / captions 1-5), with hostile edits: long
    sentences over 64 tokens, an empty candidate and reference, tabs and runs of spaces, a token of
    over 8 bytes repeated across items (one dictionary for long tokens across chunks)."""
    rows = json.loads((ROOT / "data" / "coco_multicaption_selfcider_example" / "merge_results.json").read_text())
    cands, refs = [r["captions"][0] for r in rows[:n_items]], [list(r["captions"][1:6]) for r in rows[:n_items]]
    cands[5] = " ".join(refs[5] + refs[6])  # > 64 tokens
    refs[7][0] = " ".join(refs[7] * 2)
    cands[9], refs[10][2] = "", ""
    cands[11] = "a\tman  riding\n a  skateboard "
    for i in range(0, n_items, 97):
        refs[i][1] = refs[i][1] + " extraordinarily skateboarding"
        cands[i] = cands[i] + " extraordinarily"
    return cands, refs


@pytest.mark.parametrize("chunk", [300, 10 ** 6])
def test_distinct_captions_take_the_numeric_path_equal_to_pycocoevalcap(monkeypatch, chunk):
    """Distinct COCO captions (no shared texts) are scored by _cider_numeric (int64 word keys, n-gram keys
    in base V, document frequencies by sorting), chunked or in one piece: equal to pycocoevalcap and to
    the general path (DISTINCT_SHARE above 1) to 1e-12."""
    import captioneval.kernels.cider as kernel

    cands, refs = _coco_distinct(2000)
    calls = []
    real = kernel._cider_numeric
    monkeypatch.setattr(kernel, "_cider_numeric", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(kernel, "NUMERIC_CHUNK", chunk)
    monkeypatch.setattr(kernel, "ONE_PASS_ITEMS", min(chunk, 10 ** 6))
    ours = cider_d(cands, refs)
    assert calls == [1]
    theirs = references.cider_d(cands, refs)[1]
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
    assert ours[5] > 0 and ours.max() > 1.0
    monkeypatch.setattr(kernel, "DISTINCT_SHARE", 2.0)
    np.testing.assert_allclose(ours, cider_d(cands, refs), rtol=0, atol=1e-12)


def test_numeric_path_declines_non_ascii_text_and_the_general_path_scores_it():
    import captioneval.kernels.cider as kernel

    cands, refs = _coco_distinct(400)
    cands[3] = "a café with “quotes” and a dog"
    refs[250][0] = "un caf\u00e9 \u2014 and a\u00a0dog"  # non-breaking space: a separator for str.split()
    assert kernel._cider_numeric(cands, refs, np.array([len(r) for r in refs]), 4, 6.0, 100) is None
    np.testing.assert_allclose(cider_d(cands, refs), references.cider_d(cands, refs)[1], rtol=0, atol=1e-12)


def test_numeric_path_scores_do_not_depend_on_chunks_or_sort():
    """The numeric path adds every sum over n-grams in ascending order of their keys, whatever the
    chunking (one pass, or a document-frequency table first, pruned to counts >= 2) and whichever sort
    orders the k-gram positions (packed np.sort or the stable argsort for codes too wide to pack): bit
    for bit equal scores on COCO captions."""
    import captioneval.kernels.cider as kernel

    cands, refs = _coco_distinct(1500)
    n_refs = np.array([len(r) for r in refs])
    one = kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, 10 ** 6)
    assert one is not None and one.max() > 1.0
    for chunk in (1, 250, 1499):
        assert np.array_equal(kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, chunk), one), chunk
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernel, "_PACK_BITS", 0)
        assert np.array_equal(kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, 10 ** 6), one)
        assert np.array_equal(kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, 400), one)
    with pytest.MonkeyPatch.context() as mp:  # the tables merged after every few chunks, in many slices
        mp.setattr(kernel, "MERGE_MIN", 500)
        mp.setattr(kernel, "MERGE_SLICE", 300)
        assert np.array_equal(kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, 100), one)


def test_count_tables_merge_into_their_sum():
    """_merge_counts adds the counts of equal keys over any number of sorted tables, in one slice or
    many (the slices cut at quantiles of the largest table; empty tables and slices included): equal
    to a Counter of the same (key, count) pairs, keys sorted."""
    from collections import Counter

    from captioneval.kernels.cider import _merge_counts

    rng = np.random.default_rng(7)
    parts, expected = [], Counter()
    for size in (0, 1, 40, 3000, 2500, 0, 700):
        keys = np.unique(rng.integers(-2 ** 62, 2 ** 62, size=size) // 2 ** 50)  # few distinct: many repeats
        counts = rng.integers(1, 1000, size=len(keys)).astype(np.int32)
        parts.append((keys, counts))
        expected.update(dict(zip(keys.tolist(), counts.tolist())))
    keys_sorted = sorted(expected)
    for slice_size in (10 ** 9, 500, 7):
        todo = list(parts)
        keys, counts = _merge_counts(todo, slice_size)
        assert todo == [] and keys.dtype == np.int64 and counts.dtype == np.int32
        assert keys.tolist() == keys_sorted and counts.tolist() == [expected[k] for k in keys_sorted]
    assert len(keys_sorted) < sum(len(p[0]) for p in parts)  # tables shared keys
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32))
    keys, counts = _merge_counts([empty, empty, empty], 7)
    assert keys.dtype == np.int64 and counts.dtype == np.int32 and len(keys) == len(counts) == 0


def test_chunked_numeric_path_with_orders_no_reference_reaches():
    """Captions of one or two words: the 3- and 4-gram tables of every chunk are empty, and the
    chunked numeric path still equals one pass and pycocoevalcap."""
    import captioneval.kernels.cider as kernel

    cands = ["dog", "a cat", "cat", "red", "a dog", "blue sky", "sky"]
    refs = [["dog x", "cat"], ["a cat", "cat"], ["cat"], ["red red"], ["a dog", "dog"], ["sky"], ["blue sky"]]
    n_refs = np.array([len(r) for r in refs])
    one = kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, 100)
    assert np.array_equal(kernel._cider_numeric(cands, refs, n_refs, 4, 6.0, 2), one)
    np.testing.assert_allclose(one, references.cider_d(cands, refs)[1], rtol=0, atol=1e-12)
    assert one.max() > 0


def test_byte_tokens_equal_the_bleu_tokenizer_and_str_split():
    """cider._ascii_tokens gives bleu._tokenize's keys (long_vocab shared over calls, ascii_only) on COCO
    captions with tabs, runs of spaces, the separators 0x1c-0x1f, control bytes that are not separators,
    empty captions and tokens over 8 bytes; the tokens are those of str.split()."""
    from captioneval.kernels.bleu import _tokenize
    from captioneval.kernels.cider import _ascii_tokens

    cands, refs = _coco_distinct(600)
    sents = cands + [r for rs in refs for r in rs]
    sents[1] = "a\x1cman\x1d\x1eon\x1f a\x0bbike\x0c\r"
    sents[2] = "odd\x01bytes\x0e stay\x1b inside\x7f tokens"
    sents[3] = "   "
    ours_vocab, theirs_vocab = {}, {}
    for part in (sents[:1700], sents[1700:]):
        n_tokens, key = _ascii_tokens(part, ours_vocab)
        t_tokens, _, t_key = _tokenize(part, long_vocab=theirs_vocab, ascii_only=True)
        assert np.array_equal(n_tokens, t_tokens) and np.array_equal(key, t_key)
        assert n_tokens.tolist() == [len(s.split()) for s in part]
    assert ours_vocab == theirs_vocab and "extraordinarily" in ours_vocab
    assert _ascii_tokens(["caf\u00e9"], {}) is None and _ascii_tokens(["a\0b"], {}) is None


def test_hashed_word_ids_equal_a_sorted_search():
    """cider._dense_ids numbers every token key by its position in the sorted vocabulary, as
    np.searchsorted does, on the COCO example's tokens (4,877 words, short and long tokens)."""
    from captioneval.kernels.cider import _ascii_tokens, _dense_ids, _sorted_distinct

    cands, refs = _coco_distinct(5000)
    _, key = _ascii_tokens(cands + [r for rs in refs for r in rs], {})
    vocab = _sorted_distinct(key)
    assert len(vocab) > 4000 and vocab[0] < 0 < vocab[-1]
    ids = _dense_ids(vocab, key)
    assert ids.dtype == np.int32 and np.array_equal(ids, np.searchsorted(vocab, key))
    assert np.array_equal(_dense_ids(vocab[:1], key[key == vocab[0]]), np.zeros(int((key == vocab[0]).sum())))
