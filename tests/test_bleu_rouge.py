"""Our BLEU-1..4 (captioneval.kernels.bleu) and ROUGE-L (captioneval.kernels.rouge) against pycocoevalcap 1.2 itself.

Every bundled dataset, PTB-tokenised once (captioneval.text.tokenizer.ptb_tokenize), read the way the
platform imports it (the importers' ``parse``): per caption |ours - pycocoevalcap| <= 1e-12 and the corpus
BLEU equal to pycocoevalcap's (``Bleu(4).compute_score``'s first value); on the 47,830 CrowdFlower pairs
pycocoevalcap scores every 8th caption (``SAMPLED``) and ours, run on all of them, gives those captions the
same scores. Then the edge cases of
pycocoevalcap's code (empty and one-word candidates, ties of the closest reference length, repeated
n-grams, Unicode and whitespace, references longer than a 64-bit word), the built-in metrics, the
CAPTIONEVAL_COCO_METRICS switch in a fresh interpreter and the benchmark script's quick mode.
"""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pycocoevalcap.rouge.rouge import my_lcs

from captioneval.metrics import base
from captioneval.kernels.bleu import BleuResult, bleu, bleu_scores
from captioneval.metrics.builtin import _versions
from captioneval.metrics.builtin.bleu import Bleu
from captioneval.metrics.builtin.rouge_l import RougeL
from captioneval.kernels.coco import PYCOCOEVALCAP_VERSION
from captioneval.kernels.rouge import lcs_length, rouge_l
from captioneval.text.tokenizer import ptb_tokenize

from . import references as pycoco
from .coco_sets import MERGE, thumb_refs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
TOL = 1e-12
SCRIPT = ROOT / "benchmarks" / "coco_metrics_speed.py"


# --------------------------------------------------------------------------------------------
# pycocoevalcap itself
# --------------------------------------------------------------------------------------------
def reference_bleu(candidates, references, n=4):
    """(corpus list of n, per-caption array (n, m)) from pycocoevalcap's Bleu(n).compute_score (computed once
    per session for the same captions: tests.references)."""
    return pycoco.bleu(candidates, references, n)


def reference_rouge(candidates, references):
    """Per-caption ROUGE-L from pycocoevalcap's Rouge().compute_score (tests.references)."""
    return pycoco.rouge_l(candidates, references)


def assert_same_as_pycocoevalcap(candidates, references, n=4):
    corpus, per_caption = reference_bleu(candidates, references, n)
    ours = bleu_scores(candidates, references, n)
    assert ours.per_caption.shape == (n, len(candidates)) and ours.corpus.shape == (n,)
    assert np.max(np.abs(ours.per_caption - per_caption), initial=0.0) <= TOL
    assert ours.corpus.tolist() == corpus
    rouge = rouge_l(candidates, references)
    assert rouge.shape == (len(candidates),)
    assert np.max(np.abs(rouge - reference_rouge(candidates, references)), initial=0.0) <= TOL
    return ours, rouge


# --------------------------------------------------------------------------------------------
# the bundled datasets, as the importers read them, PTB-tokenised once per dataset
# --------------------------------------------------------------------------------------------
def _from_parsed(parsed):
    """Candidates and, for each, its image's reference list (one shared list per image, as the pipeline)."""
    refs = {}
    for spec in parsed.references:
        refs.setdefault(spec.image, []).append(spec.text)
    return [c.text for c in parsed.captions], [refs[c.image] for c in parsed.captions]


def _crowdflower():
    from crowd.importers.flickr8k import CROWDFLOWER_FILE, TOKEN_FILE, Flickr8kCrowdFlowerImporter

    d = DATA / "flickr8k"
    return _from_parsed(Flickr8kCrowdFlowerImporter().parse({CROWDFLOWER_FILE: d / CROWDFLOWER_FILE,
                                                             TOKEN_FILE: d / TOKEN_FILE}))


def _expert():
    from crowd.importers.flickr8k import EXPERT_FILE, TOKEN_FILE, Flickr8kExpertImporter

    d = DATA / "flickr8k"
    return _from_parsed(Flickr8kExpertImporter().parse({EXPERT_FILE: d / EXPERT_FILE, TOKEN_FILE: d / TOKEN_FILE}))


def _thumb():
    from crowd.importers.thumb import JUDGMENTS_FILE, REFERENCES_FILE, ThumbImporter

    d = DATA / "thumb"
    parsed = ThumbImporter().parse({JUDGMENTS_FILE: d / JUDGMENTS_FILE, REFERENCES_FILE: d / REFERENCES_FILE})
    return _from_parsed(parsed)


def _pascal50s():
    """The import protocol: 5 references sampled per image, both captions of each of the 4,000 pairs."""
    from crowd.importers.pascal50s import PAIRS_FILE, REFS_FILE, Pascal50sImporter

    d = DATA / "pascal50s"
    return _from_parsed(Pascal50sImporter().parse({REFS_FILE: d / REFS_FILE, PAIRS_FILE: d / PAIRS_FILE}))


def _pascal50s_all_sentences():
    """The pairs of the first 60 images against all ~50 sentences of their image (long reference lists:
    many ties of the closest reference length)."""
    from crowd.importers.pascal50s import PAIRS_FILE, REFS_FILE, read_pairs, read_references

    d = DATA / "pascal50s"
    sentences = read_references(d / REFS_FILE)
    pairs = read_pairs(d / PAIRS_FILE, sentences, d / REFS_FILE)
    images = list(dict.fromkeys(p["image"] for p in pairs))[:60]
    keep = [p for p in pairs if p["image"] in set(images)]
    return ([s for p in keep for s in (p["sent1"], p["sent2"])],
            [sentences[p["image"]] for p in keep for _ in range(2)])


def _selfcider_thumb():
    """The Self-CIDEr example's 10 model captions of the 30 images it shares with THumB, against
    THumB's 4 COCO references (tests.coco_sets)."""
    refs = thumb_refs()
    merge = [e for e in json.loads(MERGE.read_text()) if e["image_id"] in refs]
    return [c for e in merge for c in e["captions"]], [refs[e["image_id"]] for e in merge for _ in e["captions"]]


def _selfcider_leave_one_out():
    """The Self-CIDEr example's first 600 images: each caption against the other 9 of its set (mBLEU's
    protocol, Wang & Chan 2019)."""
    merge = json.loads(MERGE.read_text())[:600]
    cands, refs = [], []
    for e in merge:
        for i, c in enumerate(e["captions"]):
            cands.append(c)
            refs.append(e["captions"][:i] + e["captions"][i + 1:])
    return cands, refs


DATASETS = {
    "flickr8k-crowdflower": _crowdflower,
    "flickr8k-expert": _expert,
    "thumb": _thumb,
    "pascal50s": _pascal50s,
    "pascal50s-all-sentences": _pascal50s_all_sentences,
    "selfcider-example-thumb-refs": _selfcider_thumb,
    "selfcider-example-leave-one-out": _selfcider_leave_one_out,
}
_TOKENIZED: dict = {}
#: datasets compared with pycocoevalcap on every n-th caption only: its pure-Python BLEU and ROUGE-L take
#: about a minute per 47,830 captions; the published CrowdFlower correlations are checked in full by
#: tests/test_benchmark_importers.py
SAMPLED = {"flickr8k-crowdflower": 8}


def tokenized(name):
    """(candidates, references) of dataset ``name``, PTB-tokenised (Java) once per test session."""
    if name not in _TOKENIZED:
        cands, refs = DATASETS[name]()
        texts = list(dict.fromkeys([*cands, *(r for rs in refs for r in rs)]))
        tok = dict(zip(texts, ptb_tokenize(texts)))
        shared = {}
        for rs in refs:
            if id(rs) not in shared:
                shared[id(rs)] = [tok[r] for r in rs]
        _TOKENIZED[name] = ([tok[c] for c in cands], [shared[id(rs)] for rs in refs])
    return _TOKENIZED[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DATASETS))
def test_equal_to_pycocoevalcap_on_every_bundled_dataset(name):
    cands, refs = tokenized(name)
    expected_sizes = {"flickr8k-crowdflower": 47830, "flickr8k-expert": 5664, "thumb": 2500, "pascal50s": 8000,
                      "selfcider-example-thumb-refs": 300, "selfcider-example-leave-one-out": 6000}
    assert len(cands) == expected_sizes.get(name, len(cands)) and len(cands) > 0
    step = SAMPLED.get(name, 1)
    if step > 1:  # ours on every caption; pycocoevalcap on every step-th (a caption's scores are its own)
        full, full_rouge = bleu_scores(cands, refs), rouge_l(cands, refs)
        cands, refs = cands[::step], refs[::step]
    ours, rouge = assert_same_as_pycocoevalcap(cands, refs)
    if step > 1:
        assert np.array_equal(full.per_caption[:, ::step], ours.per_caption) and np.array_equal(full_rouge[::step], rouge)
    # real scores, not a degenerate agreement: means inside (0, 1), corpus BLEU decreasing in n
    assert 0.05 < ours.per_caption[0].mean() < 1 and 0.05 < rouge.mean() < 1
    assert np.all(np.diff(ours.corpus) < 0) and 0 < ours.corpus[3] < ours.corpus[0] < 1
    assert np.ptp(ours.per_caption[3]) > 0.5 and np.ptp(rouge) > 0.5


@pytest.mark.slow
def test_pascal50s_all_sentences_has_ties_in_the_closest_reference_length():
    """The long reference lists do exercise the tie rule: two reference lengths t - d and t + d equally
    close to the candidate's t, where taking the shorter one (no brevity penalty) or the longer one (a
    penalty) changes the score."""
    cands, refs = tokenized("pascal50s-all-sentences")
    ties = 0
    for c, rs in zip(cands, refs):
        t = len(c.split())
        d = sorted({abs(len(r.split()) - t) for r in rs})[0]
        ties += len({len(r.split()) for r in rs if abs(len(r.split()) - t) == d}) == 2
    assert ties >= 5


@pytest.mark.slow
def test_benchmark_loader_reads_crowdflower_as_the_importer():
    """benchmarks/coco_metrics_speed.py times the CrowdFlower pairs the platform imports."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("coco_metrics_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.load_crowdflower() == _crowdflower()


def test_benchmark_distinct_captions_mode(tmp_path):
    """benchmarks/coco_metrics_speed.py --distinct: the real COCO example and synthetic distinct batches,
    equal to pycocoevalcap (exit 0), with a row per input and metric and the fitted exponents."""
    out = tmp_path / "distinct.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--distinct", "300", "900", "--repeats", "1", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = report["distinct"]
    assert [(r["input"], r["metric"]) for r in rows] == [
        (i, m) for i in ("coco-example 5000", "synthetic 300", "synthetic 900") for m in ("bleu", "rouge_l", "cider_d")]
    assert all(r["max_abs_diff"] <= TOL and r["ratio"] > 0 for r in rows)
    assert set(report["exponents"]) == {"bleu", "rouge_l", "cider_d"}
    assert "our time grows as N^" in proc.stdout


# --------------------------------------------------------------------------------------------
# edge cases of pycocoevalcap's code
# --------------------------------------------------------------------------------------------
def test_empty_candidate():
    cands = ["", "", "a dog runs"]
    refs = [["a dog runs on the grass", "a dog"], [""], ["", "a dog runs"]]
    ours, rouge = assert_same_as_pycocoevalcap(cands, refs)
    # 0 tokens: brevity penalty exp(1 - 1/ratio) with ratio ~1e-15 / reflen underflows to 0
    assert ours.per_caption[:, 0].tolist() == [0.0] * 4
    # ROUGE splits on " ": "" is one empty token, which an empty reference matches exactly
    assert rouge[0] == 0.0 and rouge[1] == pytest.approx(1.0)


def test_one_word_candidate_and_orders_without_ngrams():
    cands, refs = ["dog"], [["a dog", "the big dog runs"]]
    ours, _ = assert_same_as_pycocoevalcap(cands, refs)
    # closest length 2: penalty exp(1 - 2); BLEU-2 multiplies by (0 + 1e-15) / (0 + 1e-9) (guess = 0)
    bp = np.exp(1 - (2 + 1e-9) / (1 + 1e-15))
    p1 = (1 + 1e-15) / (1 + 1e-9)
    assert ours.per_caption[0, 0] == pytest.approx(p1 * bp, rel=1e-14)
    assert ours.per_caption[1, 0] == pytest.approx((p1 * 1e-6) ** 0.5 * bp, rel=1e-14)


def test_tie_of_closest_reference_length_goes_to_the_shorter():
    """5 tokens, references of 4 and 6 tokens: pycocoevalcap takes 4 (no brevity penalty), not 6."""
    cands = ["a b c d e", "a b c d e"]
    refs = [["x b c d", "a y c d e z"], ["a y c d e z", "x b c d"]]
    ours, _ = assert_same_as_pycocoevalcap(cands, refs)
    p1 = (5 + 1e-15) / (5 + 1e-9)  # a and e from the 6-token reference, b c d from either
    # the order of the references is irrelevant
    assert ours.per_caption[:, 0].tolist() == ours.per_caption[:, 1].tolist()
    assert ours.per_caption[0, 0] == p1  # penalty-free: the closest length taken is 4 < 5, not 6


def test_repeated_ngrams_are_clipped_by_the_maximum_reference_count():
    cands = ["the the the the the", "a a b a a b", "b"]
    refs = [["the cat", "the the dog the"], ["a a b", "a b a a b a b"], ["b b b"]]
    ours, _ = assert_same_as_pycocoevalcap(cands, refs)
    # 'the' appears at most 3 times in one reference: 3 of the 5 unigrams match
    assert ours.per_caption[0, 0] == pytest.approx((3 + 1e-15) / (5 + 1e-9), rel=1e-15)


def test_unicode_tokens_and_whitespace_rules():
    """BLEU splits with str.split() (any whitespace, also NBSP and U+3000), ROUGE with split(" ")."""
    cands = ["ein hund läuft", "日本 の 犬", "a\u00a0dog runs", "two  spaces here", " leading space", "tab\tsplit"]
    refs = [["ein hund läuft schnell"], ["日本 の 猫", "犬 が いる"], ["a dog runs"],
            ["two spaces here"], ["leading space"], ["tab split"]]
    ours, rouge = assert_same_as_pycocoevalcap(cands, refs)
    # for BLEU these candidates equal their reference; for ROUGE "a\u00a0dog" and "tab\tsplit" are one token
    # and "  " / a leading " " make empty tokens
    assert ours.per_caption[:2, [2, 3, 4, 5]] == pytest.approx(1.0, rel=1e-8)  # BLEU-1, BLEU-2
    assert rouge[5] == 0.0
    assert rouge[2] == pytest.approx(2.44 * 0.5 * (1 / 3) / (1 / 3 + 1.44 * 0.5))  # LCS 1 ('runs'): P 1/2, R 1/3
    assert 0 < rouge[3] < 1 and 0 < rouge[4] < 1


@pytest.mark.parametrize("ref_len", [63, 64, 65, 130])
def test_long_references_around_the_64_bit_word(ref_len):
    rng = random.Random(ref_len)
    words = "a b c d e f".split()
    cands = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 90))) for _ in range(12)]
    refs = [[" ".join(rng.choice(words) for _ in range(ref_len)), " ".join(rng.choice(words) for _ in range(7))]
            for _ in cands]
    assert_same_as_pycocoevalcap(cands, refs)


def test_lcs_length_equals_my_lcs():
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 150))]
        b = [rng.choice("abcd") for _ in range(rng.randint(0, 150))]
        assert lcs_length(a, b) == my_lcs(a, b)


def test_random_batches_equal_pycocoevalcap_bit_for_bit():
    """Shared and duplicated reference lists, different numbers of references, n = 1..4, lengths 0..80."""
    rng = random.Random(3)
    vocab = ["a", "b", "c", "dog", "é", "日本", "x\u00a0y", ""]

    def sentence():
        return " ".join(rng.choice(vocab) for _ in range(rng.choice([0, 1, 2, 3, rng.randint(0, 80)])))

    for _ in range(60):
        pool = [[sentence() for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 4))]
        cands = [sentence() for _ in range(rng.randint(1, 25))]
        refs = [rng.choice(pool) for _ in cands]
        n = rng.randint(1, 4)
        corpus, per_caption = reference_bleu(cands, refs, n)
        ours = bleu_scores(cands, refs, n)
        assert np.array_equal(ours.per_caption, per_caption) and ours.corpus.tolist() == corpus
        assert np.array_equal(rouge_l(cands, refs), reference_rouge(cands, refs))


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_chunked_batches_equal_pycocoevalcap_bit_for_bit(monkeypatch, chunk):
    """Large batches are scored CHUNK_PAIRS distinct pairs at a time (linear time and memory): with
    chunks of 1, 7 and 1,000 pairs, shared and repeated reference lists, repeated candidates and
    lengths 0..80 still give pycocoevalcap's BLEU (per caption and corpus) and ROUGE-L bit for bit,
    the per-caption statistics sum to the corpus score, and every chunk holds only its own texts."""
    import captioneval.kernels.bleu as kernel
    from captioneval.kernels.corpus import BleuCorpus, bleu_statistics

    rng = random.Random(11)
    words = ["a", "b", "c", "dog", "on", "the", "é", "日本", ""]

    def sentence():
        return " ".join(rng.choice(words) for _ in range(rng.choice([0, 1, 3, 6, rng.randint(0, 80)])))

    pool = [[sentence() for _ in range(rng.randint(1, 6))] for _ in range(40)]
    cands = [sentence() for _ in range(300)]
    cands += cands[:50]  # repeated (candidate, references) pairs
    refs = [rng.choice(pool) for _ in cands[:300]] + [None] * 50
    refs[300:] = refs[:50]
    corpus, per_caption = reference_bleu(cands, refs, 4)
    whole = bleu_scores(cands, refs, 4)
    monkeypatch.setattr(kernel, "CHUNK_PAIRS", chunk)
    index = kernel.index_captions(cands, refs)
    parts = list(kernel.chunks(index))
    assert len(parts) == -(-len(index.pair_sentence) // chunk) and parts[-1][1] == len(index.pair_sentence)
    for start, stop, sub in parts:  # a chunk's sentences are exactly those of its pairs
        used = {index.sentences[i] for i in index.pair_sentence[start:stop].tolist()}
        for g in set(index.pair_group[start:stop].tolist()):
            used.update(index.sentences[i] for i in index.group_refs[index.group_ptr[g]:index.group_ptr[g + 1]].tolist())
        assert set(sub.sentences) == used and len(sub.sentences) == len(used)
    chunked = bleu_scores(cands, refs, 4)
    assert np.array_equal(chunked.per_caption, per_caption) and chunked.corpus.tolist() == corpus
    assert np.array_equal(chunked.per_caption, whole.per_caption)
    assert np.array_equal(rouge_l(cands, refs), reference_rouge(cands, refs))
    stats = bleu_statistics(cands, refs)
    assert stats.shape == (350, 10) and BleuCorpus(4).score(stats.sum(axis=0)) == corpus[3]
    assert np.array_equal(stats[:, 0], [len(c.split()) for c in cands])
    with pytest.raises(ValueError, match="chunk size"):
        list(kernel.chunks(index, 0))


@pytest.mark.parametrize("block", [1, 7, 4096])
def test_distinct_captions_in_mask_blocks_equal_pycocoevalcap_bit_for_bit(monkeypatch, block):
    """Distinct captions (400 images of the real COCO example: caption 0 against captions 1-5, no
    text repeated) take the dictionary-free index and the dense match masks, built MASK_PAIRS pairs at
    a time: with blocks of 1, 7 and 4,096 pairs and chunks of 150 pairs, BLEU (per caption and corpus)
    and ROUGE-L equal pycocoevalcap bit for bit; the index numbers the texts in their order."""
    import captioneval.kernels.bleu as kernel
    import captioneval.kernels.rouge as rouge_kernel

    seen, cands, refs = set(), [], []
    for row in json.loads(MERGE.read_text()):  # the first 400 images whose 6 captions are new texts
        six = row["captions"][:6]
        if len(cands) < 400 and len(set(six)) == 6 and not seen.intersection(six):
            seen.update(six)
            cands.append(six[0])
            refs.append(six[1:])
    texts = [*cands, *(t for rs in refs for t in rs)]
    assert len(set(texts)) == len(texts) == 2400
    index = kernel.index_captions(cands, refs)
    assert index.sentences == texts and index.pair_of.tolist() == list(range(400))
    assert index.group_refs.tolist() == list(range(400, 2400))
    monkeypatch.setattr(kernel, "DENSE_CHUNK_PAIRS", 150)
    assert [stop for _, stop, _ in kernel.chunks(index)] == [150, 300, 400]
    monkeypatch.setattr(kernel, "MASK_PAIRS", block)
    monkeypatch.setattr(rouge_kernel, "MASK_PAIRS", block)
    corpus, per_caption = reference_bleu(cands, refs, 4)
    ours = bleu_scores(cands, refs, 4)
    assert np.array_equal(ours.per_caption, per_caption) and ours.corpus.tolist() == corpus
    assert np.array_equal(rouge_l(cands, refs), reference_rouge(cands, refs))
    assert 0.3 < ours.per_caption[0].mean() < 1


def test_tokenizer_bytes_path_equals_str_split(monkeypatch):
    """The byte-level tokenizer (ASCII text) gives the tokens of ``str.split()`` / ``split(" ")``: every
    ASCII whitespace byte and none of the other control bytes separates, tokens of 9 to 60 bytes
    sharing prefixes and ending around the 8-byte words are numbered in order of first occurrence as a
    dictionary would (and with the dictionary above ``_LONG_WORDS``), a NUL byte inside a sentence
    takes the dictionary path; BLEU and ROUGE-L on such text equal pycocoevalcap."""
    import captioneval.kernels.bleu as kernel

    rng = random.Random(5)
    stem = "abcdefgh" * 8
    pieces = ["a", "ab", "abcdefgh", *(stem[:k] for k in (9, 15, 16, 17, 24, 25, 33, 60)), "bbcdefghi",
              " ", "  ", "\t", "\n", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x01", "q\x0e", "\x1b", "\x7f"]

    def expected(sentences, single_space):
        split = [s.split(" ") if single_space else s.split() for s in sentences]
        flat = [w for ws in split for w in ws]
        return [len(ws) for ws in split], flat

    for trial in range(300):
        sentences = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 14))) for _ in range(rng.randint(1, 8))]
        if trial % 50 == 49:
            sentences[0] += "\0x"
        for single_space in (False, True):
            n_tokens, ptr, key = kernel._tokenize(sentences, single_space=single_space)
            lengths, flat = expected(sentences, single_space)
            assert n_tokens.tolist() == lengths and ptr[-1] == len(flat) == len(key)
            # equal keys exactly for equal tokens, first-seen numbering of the long ones
            first = {}
            assert [first.setdefault(w, k) for w, k in zip(flat, key.tolist())] == key.tolist()
            assert len(set(first.values())) == len(first)
            long_ids = [k - int(kernel._LONG_TOKEN) for k in dict.fromkeys(key.tolist()) if k < 0]
            assert long_ids == list(range(len(long_ids)))
    sentences = [stem[:k] + " x " + stem[:k + 1] for k in (9, 20, 40)] * 2
    numbered = kernel._tokenize(sentences)[2]
    assert np.array_equal(numbered[numbered < 0] - kernel._LONG_TOKEN, [0, 1, 2, 3, 4, 5] * 2)
    assert np.all(numbered[1::3] >= 0)  # "x"
    monkeypatch.setattr(kernel, "_LONG_WORDS", 1)  # the dictionary numbers them the same
    assert np.array_equal(kernel._tokenize(sentences)[2], numbered)
    cands = ["a\x1cdog  runs" + " " + stem[:17], "tab\tsplit " + stem[:9], stem[:25] + " x"]
    refs = [["a dog runs " + stem[:17], stem[:16]], ["tab split", stem[:9] + " tab"], [stem[:24] + " x", stem[:25]]]
    assert_same_as_pycocoevalcap(cands, refs)


def test_lower_orders_are_the_first_rows_and_bleu_is_per_caption():
    cands, refs = ["a dog runs on grass", "cat"], [["a dog runs", "dogs run on the grass"], ["a cat"]]
    four = bleu_scores(cands, refs, 4)
    assert isinstance(four, BleuResult)
    for n in (1, 2, 3):
        assert np.array_equal(bleu_scores(cands, refs, n).per_caption, four.per_caption[:n])
    assert np.array_equal(bleu(cands, refs), four.per_caption)


def test_errors_and_empty_batch():
    with pytest.raises(ValueError, match="2 candidates but 1 reference lists"):
        bleu_scores(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="candidate 1 has no reference"):
        rouge_l(["a", "b"], [["a"], []])
    with pytest.raises(TypeError, match="single string"):
        bleu_scores(["a"], ["a b"])
    with pytest.raises(TypeError, match="strings"):
        rouge_l([None], [["a"]])
    with pytest.raises(ValueError, match="positive integer"):
        bleu_scores(["a"], [["a"]], n=0)
    empty = bleu_scores([], [])
    assert empty.per_caption.shape == (4, 0) and empty.corpus.tolist() == reference_bleu([], [])[0] == [0.0] * 4
    assert rouge_l([], []).shape == (0,)


# --------------------------------------------------------------------------------------------
# the built-in metrics and the implementation switch
# --------------------------------------------------------------------------------------------
def test_builtin_metrics_both_implementations_and_the_batch_cache():
    cands = ["a dog runs on the grass", "a cat sleeps", "two dogs play"]
    refs = [["a dog running on grass", "the dog runs"], ["a cat is sleeping"], ["dogs playing", "two dogs"]]
    batch = base.Batch(candidates=list(cands), references=refs)
    expected = bleu(cands, refs)
    for impl, version in (("captioneval", _versions.BLEU_VERSION), ("pycocoevalcap", PYCOCOEVALCAP_VERSION)):
        for n in range(1, 5):
            metric = Bleu(n, implementation=impl)
            assert metric.version == version and metric.key == f"bleu_{n}"
            assert np.max(np.abs(metric.score(batch).values - expected[n - 1])) <= TOL
        rl = RougeL(implementation=impl)
        assert rl.version == (_versions.ROUGE_L_VERSION if impl == "captioneval" else PYCOCOEVALCAP_VERSION)
        assert np.max(np.abs(rl.score(batch).values - reference_rouge(cands, refs))) <= TOL
    # the last BLEU result is reused only for equal content: an edited batch is scored again
    batch.candidates[1] = "a cat is sleeping"
    assert Bleu(4).score(batch).values[1] == bleu([batch.candidates[1]], [refs[1]])[3, 0]
    assert Bleu(1).score(batch).values[1] > expected[0, 1]
    with pytest.raises(ValueError, match="allowed values: captioneval, pycocoevalcap"):
        Bleu(4, implementation="sacrebleu")


def _registry_in_fresh_interpreter(value):
    code = (
        "import json\n"
        "from captioneval.metrics import registry, base\n"
        "b = base.Batch(candidates=['a dog runs', 'a cat'], references=[['a dog running', 'dogs run'], ['the cat']])\n"
        "print(json.dumps({k: [registry.get_metric(k).version, registry.get_metric(k).score(b).values.tolist()]"
        " for k in ('bleu_4', 'rouge_l')}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != _versions.COCO_METRICS_ENV}
    if value is not None:
        env[_versions.COCO_METRICS_ENV] = value
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_environment_variable_selects_the_implementation():
    cands, refs = ["a dog runs", "a cat"], [["a dog running", "dogs run"], ["the cat"]]
    expected_bleu4 = reference_bleu(cands, refs)[1][3]
    expected_rouge = reference_rouge(cands, refs)
    for value, bleu_version, rouge_version in (
        ("pycocoevalcap", PYCOCOEVALCAP_VERSION, PYCOCOEVALCAP_VERSION),
        (None, _versions.BLEU_VERSION, _versions.ROUGE_L_VERSION),
        ("captioneval", _versions.BLEU_VERSION, _versions.ROUGE_L_VERSION),
    ):
        done = _registry_in_fresh_interpreter(value)
        assert done.returncode == 0, done.stderr[-2000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        assert out["bleu_4"][0] == bleu_version and out["rouge_l"][0] == rouge_version
        assert np.max(np.abs(np.array(out["bleu_4"][1]) - expected_bleu4)) <= TOL
        assert np.max(np.abs(np.array(out["rouge_l"][1]) - expected_rouge)) <= TOL


def test_bad_environment_value_fails_clearly():
    done = _registry_in_fresh_interpreter("fast")
    assert done.returncode != 0
    assert "CAPTIONEVAL_COCO_METRICS='fast'" in done.stderr
    assert "allowed values: captioneval, pycocoevalcap" in done.stderr


# --------------------------------------------------------------------------------------------
# the benchmark script
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_benchmark_quick_mode_writes_the_report(tmp_path):
    out = tmp_path / "coco_speed.json"
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--repeats", "1", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report) == {"dataset", "metrics"} and report["dataset"] == "flickr8k-crowdflower:5000"
    assert list(report["metrics"]) == ["bleu_1", "bleu_2", "bleu_3", "bleu_4", "rouge_l"]
    for entry in report["metrics"].values():
        assert set(entry) == {"reference_s", "ours_s", "ratio", "max_abs_diff"}
        assert entry["reference_s"] > 0 and entry["ours_s"] > 0
        assert entry["ratio"] == pytest.approx(entry["reference_s"] / entry["ours_s"])
        assert 0 <= entry["max_abs_diff"] <= TOL
    bleu_times = {(e["reference_s"], e["ours_s"]) for k, e in report["metrics"].items() if k.startswith("bleu")}
    assert len(bleu_times) == 1  # one call yields the four orders, in both implementations
    assert "its time is shown for each order" in done.stdout


def test_mostly_distinct_captions_with_repeats_take_the_hash_numbering():
    """A batch of mostly distinct texts with a few repeats (a candidate repeated, a reference shared
    by two images, a candidate equal to another image's reference) is numbered from the texts' hashes
    (bleu._first_occurrence, no dictionary over all texts): the same sentences in first-seen order as
    a dictionary, and BLEU and ROUGE-L equal to pycocoevalcap bit for bit."""
    import captioneval.kernels.bleu as kernel

    rows = json.loads(MERGE.read_text())[:300]
    cands = [row["captions"][0] for row in rows]
    refs = [list(row["captions"][1:6]) for row in rows]
    cands[7] = cands[3]
    refs[10][2] = refs[20][4]
    cands[30] = refs[40][0]
    calls = []
    real = kernel._first_occurrence
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel, "_first_occurrence",
                      lambda texts, hashes=None: calls.append(hashes is not None) or real(texts, hashes))
        index = kernel.index_captions(cands, refs)
    assert calls == [True], "the hash numbering was not taken, or hashed the texts again"
    texts = [*cands, *(t for rs in refs for t in rs)]
    assert index.sentences == list(dict.fromkeys(texts))
    corpus, per_caption = reference_bleu(cands, refs, 4)
    ours = bleu_scores(cands, refs, 4)
    assert np.array_equal(ours.per_caption, per_caption) and ours.corpus.tolist() == corpus
    assert np.array_equal(rouge_l(cands, refs), reference_rouge(cands, refs))
    # two images with equal reference lists (different list objects): the lists are numbered by a
    # dictionary, the texts hashed again over the distinct lists
    refs[50] = list(refs[60])
    calls.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernel, "_first_occurrence",
                      lambda texts, hashes=None: calls.append(hashes is not None) or real(texts, hashes))
        index = kernel.index_captions(cands, refs)
    assert calls == [False] and len(index.group_ptr) == len(refs)  # 299 distinct lists
    distinct_lists = list(dict.fromkeys(map(tuple, refs)))
    assert index.sentences == list(dict.fromkeys([*cands, *(t for rs in distinct_lists for t in rs)]))
    corpus, per_caption = reference_bleu(cands, refs, 4)
    ours = bleu_scores(cands, refs, 4)
    assert np.array_equal(ours.per_caption, per_caption) and ours.corpus.tolist() == corpus


def test_first_occurrence_compares_texts_within_equal_hashes():
    """Items whose hashes collide but which differ stay apart; equal ones point to the first."""
    from captioneval.kernels.bleu import _first_occurrence

    class Colliding(str):
        def __hash__(self):
            return 7

    items = [Colliding("a"), "x", Colliding("b"), Colliding("a"), "x", "y", Colliding("b")]
    assert _first_occurrence(items).tolist() == [0, 1, 2, 0, 1, 5, 2]
    hashes = np.array([hash(t) for t in items], dtype=np.int64)
    assert _first_occurrence(items, (hashes, np.sort(hashes))).tolist() == [0, 1, 2, 0, 1, 5, 2]
    assert _first_occurrence(["q", "r", "s"]).tolist() == [0, 1, 2]  # no shared hash: nothing compared
    with pytest.raises(TypeError):
        _first_occurrence(["a", ["unhashable"]])
