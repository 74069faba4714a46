"""System leaderboards on real data (PostgreSQL): THumB 1.0's five systems scored each on its own as
COCOEvalCap scores one model's results (pycocoevalcap's PTBTokenizer, Cider, Bleu), the human means
read from the data file, the paired tests, the system-level table, the ``leaderboard`` command, a
COCO-format dataset without judgments, and the stored-report plumbing. Expected values come from
pycocoevalcap and from the published data file, never from analysis.leaderboard itself."""
import csv
import io
import json
from collections import defaultdict

import numpy as np
import pytest
from django.core.management.base import CommandError

from analysis import cached_reports, warm
from analysis.leaderboard import LeaderboardError, holm, leaderboard, leaderboard_csv_rows, leaderboard_table
from analysis.models import Report
from analysis.tasks import request_report
from crowd.models import Dataset

from .conftest import ROOT, run_command

THUMB = ROOT / "data" / "thumb"
SYSTEMS = ["Human", "Unified-VLP", "Up-Down", "VinVL-base", "VinVL-large"]


def thumb_lines() -> list[dict]:
    return [json.loads(line) for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines() if line.strip()]


def thumb_refs() -> dict[str, list[str]]:
    return {r["seg_id"]: r["refs"] for r in map(json.loads, (THUMB / "mscoco_references.json").read_text().splitlines())
            if r}


def coco_eval_scores(segs: set[str] | None = None) -> dict[str, dict[str, float]]:
    """{system: {"cider_d", "bleu_1", "bleu_4"}}: each system's results scored alone as COCOEvalCap does
    (PTBTokenizer on references and results, then Cider().compute_score / Bleu(4).compute_score)."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    refs = thumb_refs()
    by_system = defaultdict(dict)
    for row in thumb_lines():
        if segs is None or row["seg_id"] in segs:
            by_system[row["SYS"]][row["seg_id"]] = row["hyp"]
    tokenizer = PTBTokenizer()
    out = {}
    for system, hyps in by_system.items():
        gts = tokenizer.tokenize({seg: [{"caption": r} for r in refs[seg]] for seg in hyps})
        res = tokenizer.tokenize({seg: [{"caption": h}] for seg, h in hyps.items()})
        cider, _ = Cider().compute_score(gts, res)
        bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
        out[system] = {"cider_d": float(cider), "bleu_1": float(bleu[0]), "bleu_4": float(bleu[3])}
    return out


@pytest.fixture(scope="module")
def thumb(django_db_setup, django_db_blocker):
    """The whole of THumB 1.0 imported, BLEU-1, BLEU-4, ROUGE-L and CIDEr-D computed (eager Celery),
    and its leaderboards under both tests (committed once for the module, deleted at the end)."""
    with django_db_blocker.unblock():
        run_command("import_dataset", "thumb", str(THUMB), "--name", "lb-thumb")
        run_command("compute_metrics", "--dataset", "lb-thumb", "--metric", "bleu_1", "bleu_4", "rouge_l", "cider_d",
                    "--wait")
        dataset = Dataset.objects.get(name="lb-thumb")
        boards = {test: leaderboard("lb-thumb", n_resamples=1000, seed=0, test=test) for test in ("bootstrap", "randomization")}
        yield dataset, boards
        Report.objects.filter(dataset=dataset).delete()
        dataset.delete()


@pytest.fixture(scope="module")
def expected():
    return coco_eval_scores()


pytestmark = pytest.mark.django_db


def test_thumb_corpus_scores_equal_pycocoevalcap_per_system(thumb, expected):
    _, boards = thumb
    report = boards["bootstrap"]
    assert sorted(report["systems"]) == SYSTEMS  # the reference system is not ranked
    assert [m["key"] for m in report["metrics"]] == ["bleu_1", "bleu_4", "rouge_l", "cider_d"]
    for name in SYSTEMS:
        metrics = report["systems"][name]["metrics"]
        assert metrics["cider_d"]["score"] == pytest.approx(expected[name]["cider_d"], abs=1e-6)
        assert metrics["bleu_4"]["score"] == pytest.approx(expected[name]["bleu_4"], abs=1e-12)
        assert metrics["bleu_1"]["score"] == pytest.approx(expected[name]["bleu_1"], abs=1e-12)
        for key, entry in metrics.items():
            lo, hi = entry["ci95"]
            assert lo < entry["score"] < hi, (name, key)
            assert entry["n_images"] == 500
        assert report["systems"][name]["n_images"] == 500 and report["systems"][name]["n_captions"] == 500
    # The pooled run's mean per-caption CIDEr-D (df over all 2,500 candidates) is not what is reported.
    from metrics.models import MetricRun, MetricScore

    run = MetricRun.objects.get(dataset__name="lb-thumb", metric="cider_d")
    pooled = np.mean(list(MetricScore.objects.filter(run=run, caption__system__name="Up-Down").values_list("value", flat=True)))
    assert abs(pooled - report["systems"]["Up-Down"]["metrics"]["cider_d"]["score"]) > 1e-3
    # ROUGE-L: the mean of the stored per-caption scores (pycocoevalcap's corpus ROUGE-L is that mean).
    rouge = MetricRun.objects.get(dataset__name="lb-thumb", metric="rouge_l")
    for name in SYSTEMS:
        values = list(MetricScore.objects.filter(run=rouge, caption__system__name=name).values_list("value", flat=True))
        assert report["systems"][name]["metrics"]["rouge_l"]["score"] == pytest.approx(np.mean(values), abs=1e-12)
    # Ranks follow the scores (higher is better for all four).
    for key in ("bleu_4", "cider_d"):
        order = sorted(SYSTEMS, key=lambda s: -expected[s][key])
        assert [report["systems"][s]["metrics"][key]["rank"] for s in order] == [1, 2, 3, 4, 5]


def test_thumb_human_means_equal_the_data_file(thumb):
    _, boards = thumb
    report = boards["bootstrap"]
    assert report["criteria"] == ["human_score", "precision", "recall"]
    rows = thumb_lines()
    for criterion, field in (("human_score", "human_score"), ("precision", "P"), ("recall", "R")):
        means = {s: float(np.mean([r[field] for r in rows if r["SYS"] == s])) for s in SYSTEMS}
        for s in SYSTEMS:
            entry = report["systems"][s]["human"][criterion]
            assert entry["mean"] == pytest.approx(means[s], abs=1e-12)
            assert entry["n_ratings"] == 500
            assert entry["ci95"][0] < entry["mean"] < entry["ci95"][1]
        order = sorted(SYSTEMS, key=lambda s: -means[s])
        assert report["systems"][order[0]]["human"][criterion]["rank"] == 1


def test_thumb_vinvl_large_beats_up_down_on_cider_under_both_tests(thumb, expected):
    _, boards = thumb
    for test, report in boards.items():
        assert report["settings"]["test"] == test and report["settings"]["seed"] == 0
        assert report["settings"]["metrics"]["cider_d"]["version"]
        cider = [c for c in report["comparisons"] if c["metric"] == "cider_d"]
        assert len(cider) == 10  # all pairs of 5 systems
        (pair,) = [c for c in cider if {c["a"], c["b"]} == {"VinVL-large", "Up-Down"}]
        assert pair["test"] == test and pair["p_value"] < 0.05 and pair["significant"]
        assert pair["better"] == "VinVL-large"
        # delta = score(a) - score(b) on the 500 images both captioned
        sign_delta = expected[pair["a"]]["cider_d"] - expected[pair["b"]]["cider_d"]
        assert pair["delta"] == pytest.approx(sign_delta, abs=1e-6)
        assert pair["ci95"][0] <= pair["delta"] <= pair["ci95"][1]
        assert pair["ci95"][0] * pair["ci95"][1] > 0  # the interval excludes 0
        # Holm's adjustment over the 10 CIDEr-D comparisons
        adjusted = holm([c["p_value"] for c in cider])
        assert [c["p_holm"] for c in cider] == pytest.approx(adjusted)
        assert "10 pairwise comparisons per metric" in report["multiple_comparisons"]
        assert "Bonferroni" in report["multiple_comparisons"] and "0.005" in report["multiple_comparisons"]
        # clusters: every system has one, 1 = best, and the best CIDEr-D system is in cluster 1
        clusters = report["clusters"]["cider_d"]
        assert set(clusters) == set(SYSTEMS)
        best = max(SYSTEMS, key=lambda s: expected[s]["cider_d"])
        assert clusters[best] == 1
        assert clusters["Up-Down"] > clusters["VinVL-large"]


def test_holm_matches_the_definition():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> running max 0.02, 0.03, 0.06, 0.06
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_thumb_system_level_table(thumb, expected):
    """Kasai et al. 2022: people rank the Human captions first while CIDEr-D puts them low."""
    _, boards = thumb
    report = boards["bootstrap"]
    human = report["systems"]["Human"]
    rows = thumb_lines()
    human_means = {s: np.mean([r["human_score"] for r in rows if r["SYS"] == s]) for s in SYSTEMS}
    cider_order = sorted(SYSTEMS, key=lambda s: -expected[s]["cider_d"])
    assert human["metrics"]["cider_d"]["rank"] == cider_order.index("Human") + 1
    assert human["human"]["human_score"]["rank"] == sorted(SYSTEMS, key=lambda s: -human_means[s]).index("Human") + 1
    # what the data says (issue 16's acceptance): CIDEr-D puts Human 4th of 5, people 1st
    assert human["metrics"]["cider_d"]["rank"] == 4
    assert human["human"]["human_score"]["rank"] == 1
    agreement = report["system_agreement"]["cider_d"]["human_score"]
    assert agreement["n_systems"] == 5 and agreement["caveat"] is None
    import scipy.stats as st

    x = [expected[s]["cider_d"] for s in SYSTEMS]
    y = [human_means[s] for s in SYSTEMS]
    assert agreement["pearson"] == pytest.approx(st.pearsonr(x, y).statistic, abs=1e-6)
    assert agreement["kendall_tau"] == pytest.approx(st.kendalltau(x, y).statistic, abs=1e-12)
    table = leaderboard_table(report)
    line = next(l for l in table.splitlines() if l.startswith("Human "))
    assert "#4" in line and "#1" in line


def test_thumb_baseline_comparisons(thumb):
    report = leaderboard("lb-thumb", metrics=["cider_d"], criteria=["human_score"], baseline="Up-Down",
                         n_resamples=200, seed=1, test="randomization")
    assert [m["key"] for m in report["metrics"]] == ["cider_d"] and report["criteria"] == ["human_score"]
    assert report["baseline"] == "Up-Down"
    assert sorted(c["a"] for c in report["comparisons"]) == ["Human", "Unified-VLP", "VinVL-base", "VinVL-large"]
    assert all(c["b"] == "Up-Down" for c in report["comparisons"])
    assert "4 comparisons with the baseline" in report["multiple_comparisons"]
    assert set(report["systems"]["Human"]["human"]) == {"human_score"}


def test_thumb_errors(thumb):
    for kwargs, message in (
        ({"metrics": ["nope"]}, "nope"),
        ({"metrics": ["meteor"]}, "has not been computed"),
        ({"criteria": ["fluency"]}, "no judgments"),
        ({"baseline": "GPT-9"}, "unknown baseline system 'GPT-9'"),
        ({"test": "t-test"}, "test must be one of bootstrap, randomization"),
        ({"n_resamples": 0}, "resamples"),
        ({"alpha": 1.5}, "alpha"),
    ):
        with pytest.raises(LeaderboardError, match=message):
            leaderboard("lb-thumb", **kwargs)
    with pytest.raises(LeaderboardError, match="unknown dataset 'missing'"):
        leaderboard("missing")


def test_command_outputs(thumb):
    out = run_command("leaderboard", "--dataset", "lb-thumb", "--metric", "bleu_4", "--metric", "cider_d",
                      "--resamples", "200", "--json")
    report = json.loads(out)
    for key in ("dataset", "settings", "systems", "metrics", "criteria", "comparisons", "clusters", "system_agreement",
                "multiple_comparisons", "baseline", "notes"):
        assert key in report
    assert report["settings"]["n_resamples"] == 200
    for s in report["systems"].values():
        assert set(s["metrics"]) == {"bleu_4", "cider_d"}
        for e in s["metrics"].values():
            assert set(e) >= {"score", "ci95", "rank"} and len(e["ci95"]) == 2
        for e in s["human"].values():
            assert set(e) >= {"mean", "ci95", "rank"}
    for c in report["comparisons"]:
        assert set(c) >= {"a", "b", "metric", "delta", "ci95", "p_value", "test"}
    # same settings, same numbers as the function
    direct = leaderboard("lb-thumb", metrics=["bleu_4", "cider_d"], n_resamples=200)
    assert report == json.loads(json.dumps(direct))

    text = run_command("leaderboard", "--dataset", "lb-thumb", "--metric", "cider_d", "--resamples", "200")
    assert "CIDEr-D" in text and all(s in text for s in SYSTEMS) and "VinVL-large vs" not in text.split("paired")[0]
    rows = list(csv.reader(io.StringIO(run_command("leaderboard", "--dataset", "lb-thumb", "--metric", "cider_d",
                                                   "--resamples", "200", "--format", "csv"))))
    blank = rows.index([])
    direct_cider = leaderboard("lb-thumb", metrics=["cider_d"], n_resamples=200)
    assert rows[:blank] == [[str(v) if v is not None else "" for v in r] for r in leaderboard_csv_rows(direct_cider)]
    assert rows[blank + 1][:3] == ["a", "b", "metric"] and len(rows) - blank - 2 == len(direct_cider["comparisons"])
    latex = run_command("leaderboard", "--dataset", "lb-thumb", "--metric", "cider_d", "--resamples", "200",
                        "--format", "latex")
    assert "\\begin{tabular}" in latex and "VinVL-large" in latex and "CIDEr-D" in latex

    for args, message in (
        (["--dataset", "missing"], "unknown dataset"),
        (["--dataset", "lb-thumb", "--metric", "nope"], "nope"),
        (["--dataset", "lb-thumb", "--criterion", "fluency"], "fluency"),
        (["--dataset", "lb-thumb", "--baseline", "GPT-9"], "GPT-9"),
        (["--dataset", "lb-thumb", "--test", "t"], "test must be"),
        (["--dataset", "lb-thumb", "--format", "xml"], "--format must be"),
    ):
        with pytest.raises(CommandError, match=message) as info:
            run_command("leaderboard", *args)
        assert "\n" not in str(info.value)


def test_stored_report_and_warm(thumb):
    dataset, _ = thumb
    labels = [t[0] for t in warm.reports_for([dataset], compare=False, campaigns=False)]
    assert "lb-thumb: leaderboard" in labels
    settings = {"metrics": ["cider_d"], "resamples": 100}
    key, params = cached_reports.leaderboard_key(dataset, settings)
    assert params["resamples"] == 100 and params["test"] == "bootstrap" and params["baseline"] is None
    assert cached_reports.leaderboard_key(dataset, settings)[0] == key
    assert cached_reports.leaderboard_key(dataset, {**settings, "seed": 1})[0] != key
    row = request_report(Report.LEADERBOARD, key, params, dataset=dataset)
    assert row.status == Report.DONE
    assert row.data == json.loads(json.dumps(leaderboard(dataset, metrics=["cider_d"], n_resamples=100)))
    # a problem of the inputs is stored as the report's problem
    key2, params2 = cached_reports.leaderboard_key(dataset, {"baseline": "GPT-9"})
    row2 = request_report(Report.LEADERBOARD, key2, params2, dataset=dataset)
    assert "unknown baseline" in cached_reports.problem(row2.data)


def write_coco_files(directory, n_images: int) -> tuple:
    """THumB's first ``n_images`` images as COCO files: the 4 references as caption annotations, and
    each system as a COCO results file."""
    directory.mkdir(parents=True, exist_ok=True)
    refs = thumb_refs()
    segs = list(dict.fromkeys(r["seg_id"] for r in thumb_lines()))[:n_images]
    annotations = {"images": [{"id": int(s), "file_name": f"COCO_val2014_{int(s):012d}.jpg"} for s in segs],
                   "annotations": [{"id": int(s) * 10 + k, "image_id": int(s), "caption": c}
                                   for s in segs for k, c in enumerate(refs[s])]}
    (directory / "annotations.json").write_text(json.dumps(annotations))
    results = []
    for system in SYSTEMS:
        rows = [{"image_id": int(r["seg_id"]), "caption": r["hyp"]} for r in thumb_lines()
                if r["SYS"] == system and r["seg_id"] in segs]
        path = directory / f"{system}.json"
        path.write_text(json.dumps(rows))
        results.append(f"{system}={path}")
    return directory / "annotations.json", results, set(segs)


def test_coco_results_dataset_without_judgments(tmp_path):
    annotations, results, segs = write_coco_files(tmp_path / "coco", 150)
    args = ["import_coco", "--name", "lb-coco", "--annotations", str(annotations)]
    for spec in results[:3]:
        args += ["--results", spec]
    run_command(*args)
    with pytest.raises(LeaderboardError, match="no computed metric and no human judgments"):
        leaderboard("lb-coco")
    run_command("compute_metrics", "--dataset", "lb-coco", "--metric", "bleu_4", "cider_d", "--wait")
    dataset = Dataset.objects.get(name="lb-coco")
    key_before = cached_reports.leaderboard_key(dataset)[0]
    run_command("import_coco", "--name", "lb-coco", *sum((["--results", s] for s in results[3:]), []))
    run_command("compute_metrics", "--dataset", "lb-coco", "--metric", "bleu_4", "cider_d", "--wait")
    assert cached_reports.leaderboard_key(dataset)[0] != key_before  # a new system: a new report
    report = leaderboard("lb-coco", n_resamples=200, test="randomization")
    assert report["criteria"] == [] and all(s["human"] == {} for s in report["systems"].values())
    assert sorted(report["systems"]) == SYSTEMS and report["system_agreement"] == {"bleu_4": {}, "cider_d": {}}
    # a leaderboard reads best first: systems in the order of the first metric's rank
    ranks = [entry["metrics"][report["metrics"][0]["key"]]["rank"] for entry in report["systems"].values()]
    assert ranks == sorted(ranks) and ranks[0] == 1
    assert len(report["comparisons"]) == 2 * 10 and report["clusters"]
    expected = coco_eval_scores(segs)
    for name in SYSTEMS:
        assert report["systems"][name]["metrics"]["cider_d"]["score"] == pytest.approx(expected[name]["cider_d"], abs=1e-6)
        assert report["systems"][name]["metrics"]["bleu_4"]["score"] == pytest.approx(expected[name]["bleu_4"], abs=1e-12)
        assert report["systems"][name]["n_images"] == 150
    text = run_command("leaderboard", "--dataset", "lb-coco", "--resamples", "100", "--baseline", "Up-Down")
    assert "human" not in text.splitlines()[2] and "Up-Down" in text


def test_fewer_than_two_systems(tmp_path):
    annotations, results, _ = write_coco_files(tmp_path / "coco1", 20)
    run_command("import_coco", "--name", "lb-one", "--annotations", str(annotations), "--results", results[0])
    with pytest.raises(LeaderboardError, match="at least 2"):
        leaderboard("lb-one")
    with pytest.raises(CommandError, match="at least 2"):
        run_command("leaderboard", "--dataset", "lb-one")


def test_settings_from_query():
    from django.http import QueryDict

    from analysis.leaderboard import default_settings, settings_from_query

    assert settings_from_query(QueryDict("")) == default_settings()
    got = settings_from_query(QueryDict("metric=cider_d&metric=bleu_4&resamples=200&seed=3&test=randomization&baseline=Up-Down"))
    assert got["metrics"] == ["cider_d", "bleu_4"] and got["resamples"] == 200 and got["seed"] == 3
    assert got["test"] == "randomization" and got["baseline"] == "Up-Down" and got["criteria"] is None
    for query, message in (("resamples=x", "resamples must be an integer"), ("alpha=2", "alpha"),
                           ("test=t", "test must be"), ("seed=-1", "seed")):
        with pytest.raises(LeaderboardError, match=message):
            settings_from_query(QueryDict(query))
