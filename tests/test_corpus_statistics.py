"""Corpus scores from per-caption sufficient statistics (captioneval.kernels.corpus) against pycocoevalcap.

Reference implementation: pycocoevalcap 1.2 (the COCO caption evaluation), each system scored on its
own as ``COCOEvalCap`` scores one model's results: captions PTB-tokenised with its ``PTBTokenizer``
(Java), then ``Bleu(4).compute_score`` and ``Cider().compute_score`` on that system's images alone.
Data: THumB 1.0 (data/thumb: 500 MSCOCO images, 5 systems, 4 references each; Kasai et al. 2022) and
Flickr8k-Expert (data/flickr8k, 5,664 judged candidates pooled). Plain pytest, no database.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from captioneval.metrics import registry
from captioneval.kernels.corpus import (
    BLEU_COLUMNS, CORPUS_STATISTICS, METEOR_COLUMNS, BleuCorpus, CiderDCorpus, CorpusStatistic, MeteorCorpus,
    bleu_statistics, corpus_description, corpus_statistic,
)
from tests import references as pycoco

THUMB = Path(__file__).resolve().parent.parent / "data" / "thumb"


def _read_json_records(path: Path) -> list[dict]:
    """A JSON list or JSON Lines file (mscoco_references.json is JSON Lines)."""
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return data if isinstance(data, list) else [data]


@pytest.fixture(scope="module")
def thumb():
    """THumB tokenised as COCOEvalCap does: references (gts) and results (res) through PTBTokenizer.

    Returns {"images": [seg_id...] (reference-file order), "refs": {seg_id: [tokenised refs]},
    "systems": {SYS: {seg_id: tokenised hypothesis}}}."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    ref_rows = _read_json_records(THUMB / "mscoco_references.json")
    hyp_rows = _read_json_records(THUMB / "mscoco_THumB-1.0.jsonl")
    images = [str(r["seg_id"]) for r in ref_rows]
    tokenizer = PTBTokenizer()
    gts = tokenizer.tokenize({str(r["seg_id"]): [{"caption": c} for c in r["refs"]] for r in ref_rows})
    res = tokenizer.tokenize({(r["SYS"], str(r["seg_id"])): [{"caption": r["hyp"]}] for r in hyp_rows})
    systems: dict[str, dict[str, str]] = {}
    for (system, seg), (hyp,) in res.items():
        systems.setdefault(system, {})[seg] = hyp
    return {"images": images, "refs": gts, "systems": systems}


def _system_inputs(thumb, system, images=None):
    images = thumb["images"] if images is None else images
    hyps = thumb["systems"][system]
    return [hyps[i] for i in images], [list(thumb["refs"][i]) for i in images]


def _pycoco(scorer, candidates, references):
    """pycocoevalcap's (corpus, per-caption) BLEU-1..4 (``scorer="bleu"``) or CIDEr-D (tests.references)."""
    return (pycoco.bleu if scorer == "bleu" else pycoco.cider_d)(candidates, references)


# ------------------------------------------------------------------------------------------------
# THumB 1.0: each system on its own
# ------------------------------------------------------------------------------------------------
def test_thumb_data_shape(thumb):
    assert len(thumb["images"]) == len(set(thumb["images"])) == 500
    assert len(thumb["systems"]) == 5
    for hyps in thumb["systems"].values():
        assert set(hyps) == set(thumb["images"])
    assert all(len(thumb["refs"][i]) == 4 for i in thumb["images"])


def test_thumb_corpus_bleu_equals_pycocoevalcap_per_system(thumb):
    for system in sorted(thumb["systems"]):
        cands, refs = _system_inputs(thumb, system)
        theirs, _ = _pycoco("bleu", cands, refs)
        sums = bleu_statistics(cands, refs).sum(axis=0)
        ours = np.array([corpus_statistic(f"bleu_{n}").score(sums) for n in range(1, 5)])
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)
        assert ours[3] == pytest.approx(corpus_statistic("bleu_4").corpus_score(cands, refs), abs=1e-15)
        # the corpus score is not the mean of sentence BLEU
        sentence = CORPUS_STATISTICS["bleu_4"].score(bleu_statistics(cands, refs))
        assert abs(sentence.mean() - ours[3]) > 1e-3


def test_thumb_bleu_statistics_are_pycocoevalcaps_per_caption(thumb):
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer

    system = sorted(thumb["systems"])[0]
    cands, refs = _system_inputs(thumb, system)
    stats = bleu_statistics(cands, refs)
    assert stats.shape == (500, len(BLEU_COLUMNS)) == (500, 10)
    for i in range(len(cands)):
        one = BleuScorer(n=4)
        one += (cands[i], refs[i])
        one.compute_score(option="closest", verbose=0)
        cooked = one.ctest[0]
        expected = [one._testlen, one._reflen, *cooked["guess"], *cooked["correct"]]
        assert stats[i].tolist() == expected, i
    # one row of statistics scores as pycocoevalcap's sentence BLEU (its per-image bleu_list)
    _, per_caption = _pycoco("bleu", cands, refs)
    ours = np.stack([CORPUS_STATISTICS[f"bleu_{n}"].score(stats) for n in range(1, 5)])
    np.testing.assert_allclose(ours, per_caption, rtol=0, atol=1e-12)


def test_thumb_corpus_cider_d_equals_pycocoevalcap_per_system(thumb):
    stat = corpus_statistic("cider_d")
    pooled_cands, pooled_refs, owner = [], [], []
    for system in sorted(thumb["systems"]):
        cands, refs = _system_inputs(thumb, system)
        theirs, theirs_per_caption = _pycoco("cider", cands, refs)
        stats = stat.statistics(cands, refs)
        assert stats.shape == (500, 2)
        np.testing.assert_array_equal(stats[:, 1], 1.0)
        np.testing.assert_allclose(stats[:, 0], theirs_per_caption, rtol=0, atol=1e-6)
        ours = float(stat.score(stats.sum(axis=0)))
        assert abs(ours - float(theirs)) <= 1e-6
        pooled_cands += cands
        pooled_refs += refs
        owner += [system] * len(cands)
    # a run pooling the five systems (N = 2,500 documents) gives other per-system means
    pooled = stat.statistics(pooled_cands, pooled_refs)[:, 0]
    owner = np.asarray(owner)
    for system in sorted(thumb["systems"]):
        own = float(stat.corpus_score(*_system_inputs(thumb, system)))
        assert abs(pooled[owner == system].mean() - own) > 1e-3


def test_cider_d_statistics_depend_on_the_evaluated_set_bleu_statistics_do_not(thumb):
    system = sorted(thumb["systems"])[-1]
    subset = thumb["images"][::5]  # 100 images
    full_c, full_r = _system_inputs(thumb, system)
    sub_c, sub_r = _system_inputs(thumb, system, subset)
    rows = [thumb["images"].index(i) for i in subset]
    cider = CORPUS_STATISTICS["cider_d"]
    full, sub = cider.statistics(full_c, full_r), cider.statistics(sub_c, sub_r)
    # on the subset, df and N = 100 come from the subset: pycocoevalcap on the subset alone
    _, theirs = _pycoco("cider", sub_c, sub_r)
    np.testing.assert_allclose(sub[:, 0], theirs, rtol=0, atol=1e-6)
    assert np.abs(sub[:, 0] - full[rows, 0]).max() > 1e-2
    # BLEU's statistics are per caption only
    np.testing.assert_array_equal(bleu_statistics(sub_c, sub_r), bleu_statistics(full_c, full_r)[rows])


def test_resampled_corpus_bleu_equals_pycocoevalcap_on_the_resampled_captions(thumb):
    """A bootstrap resample (images drawn with replacement) summed from rows = pycocoevalcap's corpus
    BLEU of the resampled caption list."""
    system = sorted(thumb["systems"])[1]
    cands, refs = _system_inputs(thumb, system)
    stats = bleu_statistics(cands, refs)
    rng = np.random.default_rng(7)
    for _ in range(3):
        idx = rng.integers(0, len(cands), size=len(cands))
        theirs, _ = _pycoco("bleu", [cands[i] for i in idx], [refs[i] for i in idx])
        ours = [CORPUS_STATISTICS[f"bleu_{n}"].score(stats[idx].sum(axis=0)) for n in range(1, 5)]
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def test_thumb_corpus_rouge_l_is_the_mean_of_per_caption_scores(thumb):
    """Why ROUGE-L has no corpus statistic: pycocoevalcap's corpus ROUGE-L is the plain mean."""
    from pycocoevalcap.rouge.rouge import Rouge

    assert corpus_statistic("rouge_l") is None
    for system in sorted(thumb["systems"])[:2]:
        cands, refs = _system_inputs(thumb, system)
        score, per_caption = Rouge().compute_score({i: r for i, r in enumerate(refs)},
                                                   {i: [c] for i, c in enumerate(cands)})
        assert float(score) == pytest.approx(float(np.mean(per_caption)), abs=1e-15)
        assert np.std(per_caption) > 0.05


# ------------------------------------------------------------------------------------------------
# METEOR 1.5: the jar's corpus score (opt-in statistic) vs the leaderboard's default mean
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_thumb_corpus_meteor_equals_pycocoevalcap_and_differs_from_the_mean(thumb):
    assert corpus_statistic("meteor") is None  # the leaderboard's default: mean of stored scores
    stat = corpus_statistic("meteor", jvm=True)
    assert isinstance(stat, MeteorCorpus) and stat.key == "meteor" == registry.METRICS["meteor"].key
    means, corpus = {}, {}
    for system in sorted(thumb["systems"]):
        cands, refs = _system_inputs(thumb, system)
        theirs, theirs_per_caption = pycoco.meteor(cands, refs)
        stats = stat.statistics(cands, refs)
        assert stats.shape == (500, len(METEOR_COLUMNS)) == (500, 23)
        np.testing.assert_allclose(stat.score(stats), theirs_per_caption, rtol=0, atol=1e-12)
        corpus[system] = float(stat.score(stats.sum(axis=0)))
        assert abs(corpus[system] - theirs) <= 1e-12
        means[system] = float(theirs_per_caption.mean())
        assert means[system] - corpus[system] > 1e-3  # the mean is not pycocoevalcap's corpus METEOR
    # ... and the two rank the systems differently on THumB
    assert sorted(means, key=means.get) != sorted(corpus, key=corpus.get)


def test_meteor_aggregate_skips_the_chunks_of_perfect_matches():
    """MeteorStats.addStats does not add the chunk of a segment that matches perfectly in one chunk."""
    cands = ["a dog runs on the grass", "a man is riding a brown horse", "two cats sleep"]
    refs = [["a dog runs on the grass", "a brown dog on grass"], ["a man rides a horse"],
            ["two cats are sleeping on a bed", "cats asleep"]]
    stat = corpus_statistic("meteor", jvm=True)
    stats = stat.statistics(cands, refs)
    assert stats[0, METEOR_COLUMNS.index("chunks")] == 0 and stats[1, METEOR_COLUMNS.index("chunks")] > 0
    theirs, theirs_per_caption = pycoco.meteor(cands, refs)
    np.testing.assert_allclose(stat.score(stats), theirs_per_caption, rtol=0, atol=1e-12)
    assert abs(float(stat.score(stats.sum(axis=0))) - theirs) <= 1e-12
    assert theirs_per_caption[0] > 0.99


# ------------------------------------------------------------------------------------------------
# Flickr8k-Expert, all candidates pooled (one document per judged candidate)
# ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_flickr8k_expert_pooled_equals_pycocoevalcap():
    cands, refs = pycoco.expert_inputs()  # pycocoevalcap's scores of them: once per session
    theirs_bleu, _ = pycoco.bleu(cands, refs)
    sums = bleu_statistics(cands, refs).sum(axis=0)
    ours_bleu = [CORPUS_STATISTICS[f"bleu_{n}"].score(sums) for n in range(1, 5)]
    np.testing.assert_allclose(ours_bleu, theirs_bleu, rtol=0, atol=1e-12)
    theirs_cider, _ = pycoco.cider_d(cands, refs)
    assert abs(CORPUS_STATISTICS["cider_d"].corpus_score(cands, refs) - float(theirs_cider)) <= 1e-6


# ------------------------------------------------------------------------------------------------
# vectorised score(), registry, errors
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(CORPUS_STATISTICS))
def test_score_is_vectorised_over_resamples(thumb, key):
    stat = CORPUS_STATISTICS[key]
    cands, refs = _system_inputs(thumb, sorted(thumb["systems"])[2])
    stats = stat.statistics(cands, refs)
    rng = np.random.default_rng(0)
    weights = rng.multinomial(len(cands), np.full(len(cands), 1 / len(cands)), size=200)  # (R, n)
    sums = weights @ stats  # (R, k)
    out = stat.score(sums)
    assert out.shape == (200,) and out.dtype == np.float64
    loop = np.array([float(stat.score(row)) for row in sums])
    np.testing.assert_array_equal(out, loop)
    assert np.std(out) > 0
    stacked = stat.score(np.stack([sums, sums[::-1]]))  # (2, R, k) -> (2, R)
    assert stacked.shape == (2, 200)
    np.testing.assert_array_equal(stacked[1], out[::-1])
    assert np.ndim(stat.score(sums[0])) == 0


def test_meteor_score_is_vectorised(thumb):
    stat = corpus_statistic("meteor", jvm=True)
    cands, refs = _system_inputs(thumb, sorted(thumb["systems"])[0], thumb["images"][:100])
    stats = stat.statistics(cands, refs)
    weights = np.random.default_rng(1).multinomial(100, np.full(100, 0.01), size=50)
    sums = weights @ stats
    out = stat.score(sums)
    assert out.shape == (50,)
    np.testing.assert_array_equal(out, [float(stat.score(row)) for row in sums])
    assert stat.score(np.stack([sums, sums])).shape == (2, 50)


def test_registry_keys_and_descriptions():
    assert set(CORPUS_STATISTICS) == {"bleu_1", "bleu_2", "bleu_3", "bleu_4", "cider_d"}
    for key, stat in CORPUS_STATISTICS.items():
        assert isinstance(stat, CorpusStatistic) and stat.key == key
        assert key in registry.METRICS and registry.METRICS[key].name == stat.name
        assert stat.description and corpus_description(key) == stat.description
        assert corpus_statistic(key) is stat
    assert isinstance(corpus_statistic("cider_d"), CiderDCorpus)
    assert isinstance(corpus_statistic("bleu_2"), BleuCorpus) and corpus_statistic("bleu_2").n == 2
    for key in ("rouge_l", "meteor", "self_cider", "no_such_metric"):
        assert corpus_statistic(key) is None
    assert "pycocoevalcap" in corpus_description("meteor") and "Mean of per-caption" in corpus_description("meteor")
    assert corpus_description("rouge_l", "ROUGE-L").startswith("Mean of per-caption ROUGE-L")
    stats = CORPUS_STATISTICS["cider_d"].statistics(["a dog runs", "a cat"], [["a dog runs fast"], ["the cat"]])
    assert stats.shape == (2, len(CORPUS_STATISTICS["cider_d"].columns))


def test_malformed_input_raises_one_clear_error():
    stat = CORPUS_STATISTICS["bleu_4"]
    with pytest.raises(ValueError, match="2 candidates but 1 reference"):
        stat.statistics(["a b", "c d"], [["a b"]])
    with pytest.raises(ValueError, match=r"references\[1\] is empty"):
        CORPUS_STATISTICS["cider_d"].statistics(["a b", "c d"], [["a b"], []])
    with pytest.raises(TypeError, match=r"references\[0\] must be a list"):
        stat.statistics(["a b"], ["a b"])
    with pytest.raises(TypeError, match=r"candidates\[0\] must be a string"):
        stat.statistics([None], [["a b"]])
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 10\)"):
        stat.score(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 2\)"):
        CORPUS_STATISTICS["cider_d"].score(np.zeros(10))
    assert stat.statistics([], []).shape == (0, 10)
    assert CORPUS_STATISTICS["cider_d"].statistics([], []).shape == (0, 2)
