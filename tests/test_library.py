"""The library (captioneval/) and the ``captioneval`` command against pycocoevalcap, on real data.

Reference: what pycocoevalcap 1.2's own ``COCOEvalCap`` computes (Java PTB tokenizer, its Bleu, Meteor,
Rouge and Cider), fed with pycocotools' ``COCO`` / ``loadRes`` exactly as its README shows, on
Flickr8k-Expert written as COCO files (data/flickr8k_expert_coco, 5,664 pairs; SPICE left out because its
jar downloads Stanford CoreNLP at start-up): its scorers' answers are shared with the other files through
tests.references (see the ``reference`` fixture). ``captioneval evaluate`` and ``captioneval.COCOEvalCap``
must give the same corpus and per-image numbers (the command run with no ``java`` on PATH); ``captioneval correlate`` on the expert ratings must
give the published Kendall tau-c values (tests/published.py). No database.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.published import TAU_C_X100, TOLERANCE

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "flickr8k_expert_coco"
ANN = DATA / "captions_flickr8k_expert.json"
RES = DATA / "results_flickr8k_expert.json"
HUMAN = DATA / "human_flickr8k_expert.csv"
KEYS = {"bleu_1": "Bleu_1", "bleu_2": "Bleu_2", "bleu_3": "Bleu_3", "bleu_4": "Bleu_4", "meteor": "METEOR",
        "rouge_l": "ROUGE_L", "cider_d": "CIDEr"}
TOL = 1e-12  # BLEU and ROUGE-L are bit for bit; CIDEr-D's vectorised sums differ in the last bits


def cli(*args, cwd=ROOT, env=None):
    """Run ``python -m captioneval ARGS`` in a fresh interpreter; CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "captioneval", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=900)


@pytest.fixture(scope="module")
def reference():
    """pycocoevalcap's COCOEvalCap result on the bundled files: (eval, imgToEval).

    ``COCOEvalCap.evaluate`` tokenises the annotations and results (loaded with pycocotools, as its
    README shows) with its PTBTokenizer, calls ``Bleu(4)``, ``Meteor()``, ``Rouge()`` and ``Cider()``
    (``compute_score(gts, res)``, images in ``res.getImgIds()`` order) and stores each scorer's corpus
    value in ``eval`` and its per-caption values in ``imgToEval``. The same is built here from
    tests.references, which calls those very classes and keeps their answers for the session (the
    other files that compare with pycocoevalcap on Flickr8k-Expert ask for the same scores): first,
    pycocoevalcap's PTBTokenizer is run on the files loaded by pycocotools, and its tokens must be,
    image by image in ``res.getImgIds()`` order, exactly the inputs those scores were computed on.
    SPICE is left out (its jar downloads Stanford CoreNLP at start-up).
    """
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
    from pycocotools.coco import COCO

    from tests import references as pycoco

    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(ANN))
        res = coco.loadRes(str(RES))
    ids = res.getImgIds()
    # what COCOEvalCap.evaluate gives its scorers (one tokeniser run for both sides)
    both = {**{("gts", i): coco.imgToAnns[i] for i in ids}, **{("res", i): res.imgToAnns[i] for i in ids}}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        tokens = PTBTokenizer().tokenize(both)
    candidates, references = pycoco.expert_inputs()
    assert [tokens[("res", i)] for i in ids] == [[c] for c in candidates]
    assert [tokens[("gts", i)] for i in ids] == references
    bleu_corpus, bleu = pycoco.bleu(candidates, references, 4)
    meteor_corpus, meteor = pycoco.meteor(candidates, references)
    rouge = pycoco.rouge_l(candidates, references)
    cider_corpus, cider = pycoco.cider_d(candidates, references)
    per_caption = {**{f"Bleu_{n}": bleu[n - 1] for n in range(1, 5)}, "METEOR": meteor, "ROUGE_L": rouge,
                   "CIDEr": cider}
    corpus = {**{f"Bleu_{n}": bleu_corpus[n - 1] for n in range(1, 5)}, "METEOR": meteor_corpus,
              "ROUGE_L": np.mean(rouge), "CIDEr": cider_corpus}  # Rouge.compute_score: np.mean of the scores
    images = {i: {"image_id": i, **{name: float(values[k]) for name, values in per_caption.items()}}
              for k, i in enumerate(ids)}
    return corpus, images


def _same(ours: float, theirs: float) -> bool:
    return abs(float(ours) - float(theirs)) <= TOL


def test_bundled_coco_files_are_what_the_script_writes():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import flickr8k_expert_as_coco as script
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    built = script.build()
    for name, text in built.items():
        assert (DATA / name).read_text("utf-8") == text, name
    ann = json.loads(built[script.ANNOTATIONS])
    assert len(ann["images"]) == 5664 and len(ann["annotations"]) == 5 * 5664
    assert len(built[script.HUMAN].splitlines()) == 1 + 3 * 5664


@pytest.mark.slow
def test_cli_evaluate_equals_pycocoevalcap(reference, tmp_path):
    their_eval, their_images = reference
    out = tmp_path / "scores.json"
    # all seven metrics without Java: METEOR and the PTB tokenizer default to their Python ports (issue 33)
    no_java = tmp_path / "bin-without-java"
    no_java.mkdir()
    env = {**os.environ, "PATH": str(no_java)}
    env.pop("CAPTIONEVAL_METEOR", None)
    env.pop("CAPTIONEVAL_TOKENIZER", None)
    proc = cli("evaluate", "--annotations", ANN, "--results", RES, "--json", "--out", out, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "java" not in proc.stderr.lower()
    report = json.loads(out.read_text())
    assert set(report["corpus"]) == set(KEYS)
    for key, name in KEYS.items():
        assert _same(report["corpus"][key]["score"], their_eval[name]), (key, report["corpus"][key], their_eval[name])
        assert report["corpus"][key]["signature"]["key"] == key and report["corpus"][key]["signature"]["version"]
        assert f"{report['corpus'][key]['score']:.4f}" in proc.stdout  # the printed table
    rows = report["captions"]
    assert [r["image_id"] for r in rows] == list(their_images)
    bad = [(r["image_id"], key) for r in rows for key, name in KEYS.items()
           if not _same(r[key], their_images[r["image_id"]][name])]
    assert not bad, f"{len(bad)} per-caption scores differ from pycocoevalcap, e.g. {bad[:5]}"
    # the CSV form carries the same numbers, and correlates to the published tau-c (Hessel et al. 2021)
    csv_out = tmp_path / "scores.csv"
    report_out = tmp_path / "correlation.json"
    assert cli("evaluate", "--annotations", ANN, "--results", RES, "--metric", "bleu_1", "--csv",
               "--out", csv_out).returncode == 0
    lines = csv_out.read_text().splitlines()
    assert lines[0] == "image_id,caption,bleu_1" and len(lines) == 5665
    first = lines[1].rsplit(",", 1)
    assert float(first[1]) == report["captions"][0]["bleu_1"]
    # correlate the full per-caption table (all 7 metrics) written as CSV by hand from the JSON
    table = tmp_path / "all.csv"
    table.write_text("image_id," + ",".join(KEYS) + "\n" + "".join(
        f"{r['image_id']}," + ",".join(repr(r[k]) for k in KEYS) + "\n" for r in rows))
    proc = cli("correlate", "--scores", table, "--human", HUMAN, "--resamples", 100, "--out", report_out)
    assert proc.returncode == 0, proc.stderr
    corr = json.loads(report_out.read_text())
    for key, published in TAU_C_X100.items():
        got = 100 * corr["metrics"][key]["kendall_tau_c"]
        assert abs(got - published) <= TOLERANCE + 1e-9, (key, got, published)
        assert corr["metrics"][key]["n_rows"] == 16992 and corr["metrics"][key]["n_groups"] == 1000
        low, high = corr["metrics"][key]["ci95"]["kendall_tau_c"]
        assert low < got / 100 < high
    assert "kendall_tau_c" in proc.stdout and "1000 groups" in proc.stdout


@pytest.mark.slow
def test_cocoevalcap_drop_in_equals_pycocoevalcap(reference):
    from pycocotools.coco import COCO as PyCOCO

    import captioneval

    their_eval, their_images = reference
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        coco = PyCOCO(str(ANN))
        res = coco.loadRes(str(RES))
        ours = captioneval.COCOEvalCap(coco, res)  # pycocotools objects, as with pycocoevalcap
        ours.params["image_id"] = res.getImgIds()
        ours.evaluate()
    assert set(ours.eval) == set(their_eval)
    assert all(_same(ours.eval[k], their_eval[k]) for k in their_eval), (ours.eval, their_eval)
    assert list(ours.imgToEval) == list(their_images)
    assert [e["image_id"] for e in ours.evalImgs] == list(their_images)
    for img_id, theirs in their_images.items():
        mine = ours.imgToEval[img_id]
        assert mine["image_id"] == img_id and set(mine) == set(theirs) - {"SPICE"}
        assert all(_same(mine[k], theirs[k]) for k in mine if k != "image_id"), img_id
    assert "SPICE" in ours.unavailable and "CoreNLP" in ours.unavailable["SPICE"]
    assert "CIDEr: %0.3f" % their_eval["CIDEr"] in printed.getvalue()
    # plain paths, no pycocotools: the same numbers (only BLEU-4 and CIDEr-D asked, to stay quick)
    quick = captioneval.COCOEvalCap(str(ANN), str(RES), metrics=["bleu_4", "cider_d"], verbose=False)
    quick.evaluate()
    assert set(quick.eval) == {"Bleu_4", "CIDEr"}
    assert _same(quick.eval["Bleu_4"], their_eval["Bleu_4"]) and _same(quick.eval["CIDEr"], their_eval["CIDEr"])


@pytest.mark.slow
def test_meteor_is_one_pass_over_the_jar_with_pycocoevalcaps_numbers(monkeypatch):
    """captioneval asks the METEOR jar for each caption's statistics once and sends them back in one
    EVAL (as pycocoevalcap's Meteor.compute_score): the per-caption scores and the corpus METEOR come
    from that single pass and equal pycocoevalcap's Meteor on the same tokens, to the bit."""
    from pycocoevalcap.meteor.meteor import Meteor

    import captioneval
    from captioneval.evaluate import tokenize
    from captioneval.kernels import meteor

    ann = json.loads(ANN.read_text("utf-8"))
    res = json.loads(RES.read_text("utf-8"))[:300]
    refs: dict = {}
    for a in ann["annotations"]:
        refs.setdefault(a["image_id"], []).append(a["caption"])
    monkeypatch.setattr(meteor, "DEFAULT_IMPLEMENTATION", "java")  # the jar's path (the default is the Python port)
    calls = []
    for name in ("statistics", "score", "score_and_corpus"):
        real = getattr(meteor.MeteorPool, name)
        monkeypatch.setattr(meteor.MeteorPool, name,
                            lambda self, *a, _real=real, _name=name: calls.append(_name) or _real(self, *a))
    ours = captioneval.evaluate({r["image_id"]: r["caption"] for r in res}, refs, metrics=["meteor", "bleu_4"])
    assert calls == ["score_and_corpus", "statistics"]  # no second request for the same captions
    ref_tokens = tokenize([c for r in res for c in refs[r["image_id"]]])
    gts, at = {}, 0
    for i, r in enumerate(res):
        gts[i], at = ref_tokens[at:at + len(refs[r["image_id"]])], at + len(refs[r["image_id"]])
    corpus, per_caption = Meteor().compute_score(gts, {i: [t] for i, t in enumerate(ours.tokens)})
    assert ours.scores["meteor"].tolist() == [float(v) for v in per_caption]
    assert ours.corpus["meteor"] == corpus and 0 < corpus < float(np.mean(per_caption))
    assert "summed" in ours.corpus_methods["meteor"]


def test_evaluate_counts_bleu_once_and_its_corpus_values_are_pycocoevalcaps(monkeypatch):
    """Corpus BLEU comes from the vectorised computation that gave the per-caption scores (no second
    pass of BLEU statistics, issue 33), and equals Bleu.compute_score bit for bit, also on a subset
    of Flickr8k-Expert where summing the per-caption statistics again gives BLEU-4 one ulp away."""
    import random

    import captioneval
    from captioneval.kernels import corpus as corpus_stats
    from pycocoevalcap.bleu.bleu import Bleu
    from tests.flickr8k_data import load_flickr8k_expert_tokenized

    pairs = load_flickr8k_expert_tokenized()
    rng = random.Random(0)
    for _ in range(27):
        rows = rng.sample(range(len(pairs)), rng.randint(1, 50))
    cands = [pairs[i].candidate for i in rows]
    refs = [list(pairs[i].references) for i in rows]
    with contextlib.redirect_stdout(io.StringIO()):
        theirs, _ = Bleu(4).compute_score({i: r for i, r in enumerate(refs)}, {i: [c] for i, c in enumerate(cands)})
    summed = corpus_stats.bleu_statistics(cands, refs).sum(axis=0)
    assert float(corpus_stats.corpus_statistic("bleu_4", jvm=True).score(summed)) != theirs[3]  # the ulp
    calls = []
    original = corpus_stats.bleu_statistics
    monkeypatch.setattr(corpus_stats, "bleu_statistics", lambda *a: calls.append(1) or original(*a))
    result = captioneval.evaluate(cands, refs, metrics=["bleu_1", "bleu_2", "bleu_3", "bleu_4"], tokenized=True)
    assert calls == []
    assert [result.corpus[f"bleu_{n}"] for n in range(1, 5)] == list(theirs)


def test_evaluate_facade_inputs_and_signatures():
    import captioneval

    refs = {"a": ["A dog runs on the grass.", "a brown dog running"], "b": ["Two people ride bikes.", "cyclists"]}
    cands = {"a": "A dog is running on grass!", "b": "Two men riding bicycles."}
    result = captioneval.evaluate(cands, refs, metrics=["coco"], skip_unavailable=True)
    assert result.ids == ["a", "b"] and result.tokens == ["a dog is running on grass", "two men riding bicycles"]
    assert set(result.metrics) | set(result.skipped) == set(KEYS)
    listed = captioneval.evaluate(list(cands.values()), list(refs.values()), metrics=["bleu_4", "cider_d"])
    assert listed.ids == [0, 1]
    for key in ("bleu_4", "cider_d"):
        np.testing.assert_array_equal(listed.scores[key], result.scores[key])
        assert listed.signatures[key]["key"] == key and listed.signature_strings[key].startswith(listed.names[key])
    # pre-tokenised input gives the same numbers
    again = captioneval.evaluate(result.tokens, [[t.lower().strip(".!").replace(".", "") for t in r] for r in
                                                 [["a dog runs on the grass", "a brown dog running"],
                                                  ["two people ride bikes", "cyclists"]]],
                                 metrics=["bleu_4", "cider_d"], tokenized=True)
    np.testing.assert_array_equal(again.scores["bleu_4"], result.scores["bleu_4"])
    with pytest.raises(captioneval.InputError, match="no reference caption"):
        captioneval.evaluate(["a cat"], [[]], metrics=["bleu_4"])
    with pytest.raises(captioneval.InputError, match="2 reference lists for 1 candidates"):
        captioneval.evaluate(["a cat"], [["a"], ["b"]], metrics=["bleu_4"])
    with pytest.raises(captioneval.MetricError, match="set-level"):
        captioneval.evaluate(["a cat"], [["a cat"]], metrics=["self_cider"])
    with pytest.raises(captioneval.MetricError, match="SPICE is unavailable"):
        captioneval.evaluate(["a cat"], [["a cat"]], metrics=["spice"])
    with pytest.raises(captioneval.MetricError, match="unknown metric 'bleu5'"):
        captioneval.evaluate(["a cat"], [["a cat"]], metrics=["bleu5"])


def test_diversity_facade_and_cli_agree_with_the_core(tmp_path):
    import captioneval
    from captioneval.metrics import registry
    from captioneval.kernels.cider import DocumentFrequency
    from captioneval.text.tokenizer import ptb_tokenize
    from tests.coco_sets import write_coco_files

    write_coco_files(tmp_path)
    results = tmp_path / "merge_as_results.json"
    entries = json.loads(results.read_text())
    sets: dict = {}
    for e in entries:
        sets.setdefault(e["image_id"], []).append(e["caption"])
    out = tmp_path / "div.csv"
    proc = cli("diversity", "--results", results, "--csv", "--out", out)
    assert proc.returncode == 0, proc.stderr
    header, *rows = out.read_text().splitlines()
    keys = header.split(",")[2:]
    assert keys == ["self_cider", "lsa", "mbleu_1", "mbleu_2", "mbleu_3", "mbleu_4", "mbleu_mix"]
    assert [int(r.split(",")[0]) for r in rows] == list(sets)
    # the same numbers straight from the core: one batch of tokens, df over the sets (one document per set)
    flat = ptb_tokenize([c for s in sets.values() for c in s])
    tok, at = [], 0
    for s in sets.values():
        tok.append(flat[at:at + len(s)])
        at += len(s)
    df = DocumentFrequency.from_references(tok)
    for k, key in enumerate(keys):
        expected = registry.score_sets(key, tok, document_frequency=df)
        got = np.array([float(r.split(",")[2 + k]) for r in rows])
        np.testing.assert_array_equal(got, expected)
    assert "Self-CIDEr" in proc.stdout and "30 sets" in proc.stdout
    # the facade with references adds set accuracy; a set of one caption has no diversity
    refs = {i: [a["caption"] for a in json.loads((tmp_path / "captions.json").read_text())["annotations"]
                if a["image_id"] == i] for i in sets}
    one = dict(sets)
    first = next(iter(one))
    one[first] = one[first][:1]
    res = captioneval.diversity(one, references=refs, m=5)
    assert "set_accuracy" in res.metrics and math.isnan(res.scores["self_cider"][0])
    assert np.isfinite(res.scores["set_accuracy"]).all() and res.sizes[0] == 1
    words = {w for s in one.values() for c in ptb_tokenize(s[:5]) for w in c.split()}
    assert res.corpus["vocabulary"] == len(words)
    same = captioneval.diversity({"x": ["A brown dog runs on the green grass."] * 3,
                                  "y": ["a cat sleeps on a red sofa", "two dogs play with a ball", "birds fly"]},
                                 metrics=["mbleu_4", "self_cider"])
    assert same.scores["mbleu_4"][0] == pytest.approx(0.0, abs=1e-9) and same.scores["mbleu_4"][1] > 0.5
    assert abs(same.scores["self_cider"][0]) < 1e-9 and same.scores["self_cider"][1] > 0.1


def test_correlate_facade_shapes():
    import captioneval

    rng = np.random.default_rng(0)
    human = rng.normal(size=60)
    metric = human + rng.normal(scale=0.5, size=60)
    seq = captioneval.correlate(metric, human, n_resamples=50)
    by_id = captioneval.correlate({i: m for i, m in enumerate(metric)}, {i: [h] for i, h in enumerate(human)},
                                  n_resamples=50)
    for stat in ("pearson", "spearman", "kendall_tau_b", "kendall_tau_c"):
        assert seq.results["metric"].estimates[stat].value == by_id.results["metric"].estimates[stat].value
    two = captioneval.correlate({"good": dict(enumerate(metric)), "noise": dict(enumerate(rng.normal(size=60)))},
                                {i: float(h) for i, h in enumerate(human)}, groups={i: i // 3 for i in range(60)},
                                n_resamples=50)
    assert two.results["good"].values["pearson"] > two.results["noise"].values["pearson"]
    assert two.results["good"].n_groups == 20 and set(two.rank_agreement) == {"good", "noise"}
    assert json.dumps(two.to_dict(), allow_nan=False)
    with pytest.raises(captioneval.InputError, match="no item has both"):
        captioneval.correlate({"x": 1.0, "y": 2.0}, {"z": 1.0})
    with pytest.raises(captioneval.InputError, match="not a finite number"):
        captioneval.correlate([1.0, float("nan")], [1.0, 2.0])


# --- errors of the command line: one line, the file and the problem, exit code 2 -----------------

def _write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


ANN_OK = {"images": [{"id": 1}, {"id": 2}],
          "annotations": [{"id": 1, "image_id": 1, "caption": "a dog"}, {"id": 2, "image_id": 2, "caption": "a cat"}]}


@pytest.mark.parametrize("case, files, args, expected", [
    ("missing annotations", {}, ["evaluate", "--annotations", "{d}/nope.json", "--results", "{d}/res.json"],
     "{d}/nope.json: no such file"),
    ("bad JSON", {"ann.json": "{\"images\": [", "res.json": []},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"],
     "{d}/ann.json: is not valid JSON: Expecting value at line 1 column 13"),
    ("no annotations key", {"ann.json": {"images": []}, "res.json": []},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"], "{d}/ann.json: has no \"annotations\" list"),
    ("results as annotations", {"ann.json": [{"image_id": 1, "caption": "x"}], "res.json": []},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"], "{d}/ann.json: is a results list"),
    ("result without caption", {"ann.json": ANN_OK, "res.json": [{"image_id": 1}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"], "{d}/res.json: entry 0 has no \"caption\""),
    ("unknown image id", {"ann.json": ANN_OK, "res.json": [{"image_id": 1, "caption": "a"}, {"image_id": 7, "caption": "b"}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"],
     "{d}/res.json: 1 result(s) for image ids the annotations do not have, e.g. 7"),
    ("two results", {"ann.json": ANN_OK, "res.json": [{"image_id": 1, "caption": "a"}, {"image_id": 1, "caption": "b"}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"], "{d}/res.json: image_id 1 has 2 results"),
    ("caption not a string", {"ann.json": ANN_OK, "res.json": [{"image_id": 1, "caption": 5}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json"],
     "{d}/res.json: entry 0: caption must be a string, got int"),
    ("unknown metric", {"ann.json": ANN_OK, "res.json": [{"image_id": 1, "caption": "a dog"}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json", "--metric", "blue_4"],
     "--metric: unknown metric 'blue_4'"),
    ("spice", {"ann.json": ANN_OK, "res.json": [{"image_id": 1, "caption": "a dog"}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json", "--metric", "spice"],
     "--metric: SPICE is unavailable"),
    ("no output folder", {"ann.json": ANN_OK, "res.json": [{"image_id": 1, "caption": "a dog"}]},
     ["evaluate", "--annotations", "{d}/ann.json", "--results", "{d}/res.json", "--metric", "bleu_1", "--out",
      "{d}/no/dir/x.csv"], "{d}/no/dir/x.csv: cannot write: folder {d}/no/dir does not exist"),
    ("diversity not a list", {"multi.json": {"a": 1}}, ["diversity", "--results", "{d}/multi.json"],
     "{d}/multi.json: must be a JSON list"),
    ("diversity unknown ids", {"multi.json": [{"image_id": 9, "caption": "a"}], "ann.json": ANN_OK},
     ["diversity", "--results", "{d}/multi.json", "--annotations", "{d}/ann.json"],
     "{d}/multi.json: 1 image id(s) the annotations do not have, e.g. 9"),
    ("correlate missing column", {"s.csv": "id,bleu_4\n1,0.5\n", "h.csv": "id,rating\n1,3\n"},
     ["correlate", "--scores", "{d}/s.csv", "--human", "{d}/h.csv"], "{d}/h.csv: has no 'score' column"),
    ("correlate not a number", {"s.csv": "id,bleu_4\n1,0.5\n2,high\n", "h.csv": "id,score\n1,3\n"},
     ["correlate", "--scores", "{d}/s.csv", "--human", "{d}/h.csv"],
     "{d}/s.csv: line 3: column bleu_4: 'high' is not a number"),
    ("correlate duplicate id", {"s.csv": "id,bleu_4\n1,0.5\n1,0.6\n", "h.csv": "id,score\n1,3\n"},
     ["correlate", "--scores", "{d}/s.csv", "--human", "{d}/h.csv"], "{d}/s.csv: line 3: id '1' appears twice"),
    ("correlate no key", {"s.csv": "name,bleu_4\nx,0.5\n", "h.csv": "id,score\n1,3\n"},
     ["correlate", "--scores", "{d}/s.csv", "--human", "{d}/h.csv"], "{d}/s.csv: has no id or image_id column"),
    ("correlate keys disjoint", {"s.csv": "id,bleu_4\n1,0.5\n2,0.6\n", "h.csv": "id,score\n3,3\n4,2\n"},
     ["correlate", "--scores", "{d}/s.csv", "--human", "{d}/h.csv"], "{d}/h.csv: no id of it has a score in {d}/s.csv"),
    ("correlate not UTF-8", {"s.csv": "id,bleu_4\n1,0.5\n", "h.csv": b"id,score\n\xff,3\n"},
     ["correlate", "--scores", "{d}/s.csv", "--human", "{d}/h.csv"], "{d}/h.csv: is not UTF-8 text (byte 9)"),
])
def test_cli_errors_are_one_line(tmp_path, case, files, args, expected):
    for name, content in files.items():
        if isinstance(content, bytes):
            (tmp_path / name).write_bytes(content)
        else:
            _write(tmp_path / name, content)
    proc = cli(*[a.format(d=tmp_path) for a in args])
    assert proc.returncode == 2, (case, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, (case, proc.stderr)
    assert lines[0].startswith("captioneval: error: " + expected.format(d=tmp_path)), (case, lines[0])
    assert not list(tmp_path.glob("**/*.tmp")) and not (tmp_path / "no").exists()


def test_manage_and_serve_without_the_platform_are_one_line(tmp_path):
    import os

    # the library alone on the path (no evalsite, no checkout above the current folder)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "captioneval").symlink_to(ROOT / "captioneval")
    (tmp_path / "work").mkdir()
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "lib"))
    env.pop("CAPTIONEVAL_HOME", None)
    for args in (["manage", "check"], ["serve", "--port", "1"]):
        proc = cli(*args, cwd=tmp_path / "work", env=env)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(f"captioneval: error: {args[0]}: the platform is not installed: "
                                      "pip install captioneval-server"), proc.stderr
    # CAPTIONEVAL_HOME names a checkout, and is refused when it is not one
    proc = cli("manage", "check", cwd=tmp_path / "work", env=dict(env, CAPTIONEVAL_HOME=str(tmp_path)))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith(f"captioneval: error: CAPTIONEVAL_HOME={tmp_path}: not a captioneval source checkout")
    # from the checkout it is Django's manage.py (here: the help of one command, no database needed)
    proc = cli("manage", "help", "import_coco", cwd=ROOT)
    assert proc.returncode == 0 and "--annotations" in proc.stdout, proc.stderr


@pytest.mark.slow
def test_speed_benchmark_script(tmp_path):
    out = tmp_path / "speed.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cli_speed.py"), "--quick", "--no-meteor",
                           "--json", out], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(out.read_text())
    assert summary["images"] == 1000 and "METEOR" not in summary["metrics"] and "CIDEr" in summary["metrics"]
    assert summary["max_abs_diff"] <= 1e-12 and summary["reference_s"] > 0 and summary["ours_s"] > 0
    assert f"ratio (pycocoevalcap / captioneval): {summary['ratio']:.1f}x" in proc.stdout


@pytest.mark.slow
def test_the_python_examples_of_docs_library_run():
    """Every ```python block of docs/library.md runs, in order, in one namespace, from the checkout."""
    import re

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "library.md").read_text("utf-8"), re.S)
    assert len(blocks) >= 4
    script = "ns = {}\n" + "".join(f"exec(compile({b!r}, 'docs/library.md block {i}', 'exec'), ns)\n"
                                   for i, b in enumerate(blocks)) + "print('@@done')\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0 and "@@done" in proc.stdout, proc.stderr[-3000:]
    assert "'CIDEr': 0.1075" in proc.stdout and "kendall_tau_c" in proc.stdout
