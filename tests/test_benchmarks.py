"""Benchmark reports on real data (PostgreSQL): every level, pairwise accuracy, significance clusters,
the human ceiling, forced choice, the comparison matrix and its CSV/JSON/LaTeX exports, and the
``correlate`` command's options. Expected values are recomputed here from the database rows with
scipy / numpy, independently of analysis.benchmarks."""
import csv
import functools
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st
from django.core.management.base import CommandError

from analysis.benchmarks import benchmark_report, comparison, comparison_csv_rows, comparison_latex
from analysis.reports import ReportError, correlation_report, judgment_rows
from crowd.models import Caption, Dataset, HumanJudgment, PairwiseJudgment
from metrics.models import MetricRun, MetricScore

from .conftest import ROOT, run_command

pytestmark = pytest.mark.django_db

THUMB = ROOT / "data" / "thumb"
PASCAL = ROOT / "data" / "pascal50s"


@functools.cache
def _thumb_subset_texts(n_images: int) -> tuple[str, str]:
    """The two files of :func:`write_thumb_subset` for ``n_images``, computed once per test session."""
    lines = (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines()
    segs = [json.loads(line)["seg_id"] for line in lines]
    keep = set(list(dict.fromkeys(segs))[:n_images])  # the first n_images segments, in file order
    judged = "\n".join(line for line, seg in zip(lines, segs) if seg in keep) + "\n"
    refs = [l for l in (THUMB / "mscoco_references.json").read_text().splitlines() if l.strip() and json.loads(l)["seg_id"] in keep]
    return judged, "\n".join(refs) + "\n"


def write_thumb_subset(directory: Path, n_images: int) -> Path:
    """The first ``n_images`` images of THumB 1.0 (all 5 systems each), real rows unchanged."""
    directory.mkdir(parents=True, exist_ok=True)
    judged, refs = _thumb_subset_texts(n_images)
    (directory / "mscoco_THumB-1.0.jsonl").write_text(judged)
    (directory / "mscoco_references.json").write_text(refs)
    return directory


@pytest.fixture
def expert(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_1", "bleu_4", "rouge_l", "cider_d", "--wait")
    return Dataset.objects.get(name="sub")


@pytest.fixture
def thumb(tmp_path):
    run_command("import_dataset", "thumb", str(write_thumb_subset(tmp_path / "thumb", 120)), "--name", "thumb")
    run_command("compute_metrics", "--dataset", "thumb", "--metric", "bleu_4", "rouge_l", "cider_d", "--wait")
    return Dataset.objects.get(name="thumb")


def rows_by_hand(dataset, metric, criterion=None, mean=False):
    """(metric scores, human scores, image ids, system ids, caption ids) straight from the tables."""
    run = MetricRun.objects.get(dataset=dataset, metric=metric)
    score = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    qs = HumanJudgment.objects.filter(image__dataset=dataset, criterion=criterion or dataset.criterion, campaign__isnull=True)
    data = list(qs.order_by("caption_id", "rater").values_list("caption_id", "score", "image_id", "system_id"))
    if mean:
        by = {}
        for c, s, i, sy in data:
            by.setdefault(c, [[], i, sy])[0].append(s)
        data = [(c, float(np.mean(v[0])), v[1], v[2]) for c, v in by.items()]
    x = np.array([score[d[0]] for d in data])
    return (x, np.array([d[1] for d in data]), np.array([d[2] for d in data]), np.array([d[3] for d in data]),
            np.array([d[0] for d in data]))


def brute_pairs(x, y):
    """(C, D, Tx, Ty, Txy) over all pairs, O(n^2): the definitions written out."""
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    iu = np.triu_indices(len(x), 1)
    dx, dy = dx[iu], dy[iu]
    return (int(np.sum(dx * dy > 0)), int(np.sum(dx * dy < 0)), int(np.sum((dx == 0) & (dy != 0))),
            int(np.sum((dx != 0) & (dy == 0))), int(np.sum((dx == 0) & (dy == 0))))


def test_expert_report_every_level_against_scipy(expert):
    report = benchmark_report("sub", n_resamples=200, n_permutations=200, seed=3)
    assert report["task"] == "rating" and report["headline"] == "kendall_tau_c"
    assert report["settings"]["seed"] == 3 and report["settings"]["n_resamples"] == 200
    assert list(report["metrics"]) == ["bleu_1", "bleu_4", "rouge_l", "cider_d"]
    classic = correlation_report("sub", n_resamples=200, seed=3)
    for key, m in report["metrics"].items():
        x, y, images, _, captions = rows_by_hand(expert, key)
        item = m["item"]
        assert item["values"]["kendall_tau_c"] == pytest.approx(st.kendalltau(x, y, variant="c").statistic, abs=1e-12)
        assert item["values"]["pearson"] == pytest.approx(st.pearsonr(x, y).statistic, abs=1e-12)
        # The bootstrap intervals are those of the item-level report (same rows, seed, resamples).
        assert item["ci95"]["kendall_tau_c"] == pytest.approx(classic["metrics"][key]["ci95"]["kendall_tau_c"], abs=1e-12)
        lo, hi = item["ci95"]["kendall_tau_c"]
        assert lo < item["values"]["kendall_tau_c"] < hi
        C, D, Tx, Ty, Txy = brute_pairs(x, y)
        T = C + D + Tx + Ty + Txy
        assert item["pairwise"]["pairwise_accuracy"] == pytest.approx((C + Txy) / T, abs=1e-12)
        assert item["pairwise"]["kendall_tau_23"] == pytest.approx((C + Txy - D - Tx - Ty) / T, abs=1e-12)
        assert item["pairwise"]["acc_eq"] >= item["pairwise"]["pairwise_accuracy"] - 1e-12
        # Per image: mean over images of the within-image Spearman of caption means.
        by_caption = {}
        for xi, yi, gi, ci in zip(x, y, images, captions):
            by_caption.setdefault((gi, ci, xi), []).append(yi)
        rhos = []
        for g in np.unique(images):
            pts = [(k[2], np.mean(v)) for k, v in by_caption.items() if k[0] == g]
            if len(pts) >= 2:
                a, b = np.array(pts).T
                if np.ptp(a) > 0 and np.ptp(b) > 0:
                    rhos.append(st.spearmanr(a, b).statistic)
        assert m["image"]["values"]["spearman"] == pytest.approx(np.mean(rhos), abs=1e-9)
        assert m["image"]["n_images_used"] == len(rhos)
        # One candidate system: no system level.
        assert "error" in m["system"] and "at least 3" in m["system"]["error"]
    ceiling = report["ceiling"]["item"]
    assert ceiling["method"] and ceiling["statistic"] == "kendall_tau_c"
    assert 0.3 < ceiling["value"] < 1 and ceiling["ci95"][0] < ceiling["value"] < ceiling["ci95"][1]
    sig = report["significance"]["permutation"]
    assert sorted(sig["names"]) == sorted(report["metrics"])
    values = [report["metrics"][k]["item"]["values"]["kendall_tau_c"] for k in sig["names"]]
    assert values == sorted(values, reverse=True)
    ranks = [sig["ranks"][k] for k in sig["names"]]
    assert ranks[0] == 1 and ranks == sorted(ranks) and all(b - a in (0, 1) for a, b in zip(ranks, ranks[1:]))
    assert report["significance"]["williams"]["statistic"] == "pearson"
    # Reproducible: the same settings give the same report, computed afresh.
    again = benchmark_report("sub", n_resamples=200, n_permutations=200, seed=3, use_cache=False)
    assert json.dumps(again, sort_keys=True) == json.dumps(report, sort_keys=True)
    other = benchmark_report("sub", n_resamples=200, n_permutations=200, seed=4, use_cache=False)
    assert other["metrics"]["cider_d"]["item"]["ci95"] != report["metrics"]["cider_d"]["item"]["ci95"]
    assert other["metrics"]["cider_d"]["item"]["values"] == report["metrics"]["cider_d"]["item"]["values"]
    # a run that lacks a judged caption's score is refused, naming how many are missing
    run = MetricRun.objects.get(dataset=expert, metric="bleu_1")
    judged = HumanJudgment.objects.filter(image__dataset=expert, caption__isnull=False).values_list("caption_id", flat=True)
    MetricScore.objects.filter(run=run, caption_id__in=list(judged.order_by("caption_id").distinct()[:2])).delete()
    with pytest.raises(ReportError, match="lacks scores for 2 judged captions"):
        judgment_rows(expert, {"bleu_1": run})


def test_thumb_system_level_criteria_and_no_ceiling(thumb):
    report = benchmark_report("thumb", n_resamples=100, n_permutations=100)
    assert report["headline"] == "pearson" and report["counts"]["systems"] == 5
    for key, m in report["metrics"].items():
        x, y, images, systems, _ = rows_by_hand(thumb, key)
        sx = [x[systems == s].mean() for s in np.unique(systems)]
        sy = [y[systems == s].mean() for s in np.unique(systems)]
        assert m["system"]["values"]["pearson"] == pytest.approx(st.pearsonr(sx, sy).statistic, abs=1e-12)
        assert m["system"]["n_systems"] == 5
        for ci in (m["system"]["ci95"]["pearson"], m["system"]["ci95_systems"]["pearson"]):
            assert -1 <= ci[0] <= ci[1] <= 1
        assert m["item"]["values"]["pearson"] == pytest.approx(st.pearsonr(x, y).statistic, abs=1e-12)
    # One rating per caption: the report says there is no ceiling rather than inventing one.
    assert "one rating per caption" in report["ceiling"]["item"]["error"]
    precision = benchmark_report("thumb", criterion="precision", n_resamples=0, n_permutations=0)
    x, y, _, _, _ = rows_by_hand(thumb, "cider_d", criterion="precision")
    assert precision["criterion"] == "precision"
    assert precision["metrics"]["cider_d"]["item"]["values"]["pearson"] == pytest.approx(st.pearsonr(x, y).statistic, abs=1e-12)
    assert "significance" not in precision
    with pytest.raises(CommandError, match="no judgments on criterion 'fluency'"):
        run_command("correlate", "--dataset", "thumb", "--criterion", "fluency")


def test_correlate_command_levels_statistics_formats(expert, tmp_path):
    table = run_command("correlate", "--dataset", "sub", "--resamples", "50", "--permutations", "50")
    assert "item level" in table and "per image" in table and "system level" in table and "human ceiling" in table
    report = benchmark_report("sub", n_resamples=50, n_permutations=50)
    cider = report["metrics"]["cider_d"]["item"]
    line = next(l for l in table.splitlines() if l.startswith("CIDEr-D") and "[" in l)
    lo, hi = cider["ci95"]["kendall_tau_c"]
    assert f"{100 * cider['values']['kendall_tau_c']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]" in line
    only = json.loads(run_command("correlate", "--dataset", "sub", "--level", "item", "--statistic", "kendall_tau_b",
                                  "--format", "json", "--resamples", "20", "--permutations", "20"))
    assert only["settings"]["levels"] == ["item"] and only["settings"]["statistics"] == ["kendall_tau_b"]
    assert set(only["metrics"]["cider_d"]) == {"name", "run", "version", "item"}
    assert set(only["metrics"]["cider_d"]["item"]["values"]) == {"kendall_tau_b"}
    out = tmp_path / "r.csv"
    run_command("correlate", "--dataset", "sub", "--format", "csv", "--resamples", "20", "--permutations", "20", "--out", str(out))
    rows = list(csv.DictReader(out.open()))
    got = {(r["metric"], r["level"], r["statistic"]): float(r["value"]) for r in rows if r["value"]}
    again = benchmark_report("sub", n_resamples=20, n_permutations=20)
    assert got[("cider_d", "item", "kendall_tau_c")] == pytest.approx(again["metrics"]["cider_d"]["item"]["values"]["kendall_tau_c"])
    assert got[("bleu_4", "image", "spearman")] == pytest.approx(again["metrics"]["bleu_4"]["image"]["values"]["spearman"])
    assert ("rouge_l", "item", "pairwise_accuracy") in got
    with pytest.raises(CommandError):
        run_command("correlate", "--dataset", "sub", "--level", "pixel")
    with pytest.raises(CommandError, match="--compare"):
        run_command("correlate", "--dataset", "sub", "--format", "latex")


def pascal_by_hand(dataset, metric):
    """Per-category and overall accuracy from PairwiseJudgment rows: majority of votes, metric ties 1/2."""
    run = MetricRun.objects.get(dataset=dataset, metric=metric)
    score = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    votes = {}
    for b, c, choice in PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset).values_list("caption_b_id", "caption_c_id", "choice"):
        votes.setdefault((b, c), []).append(choice == "b")
    system = dict(Caption.objects.filter(image__dataset=dataset).values_list("id", "system__name"))
    from crowd.importers.pascal50s import pascal50s_category

    correct = {}
    for (b, c), v in votes.items():
        share = np.mean(v)
        if share == 0.5:
            continue
        hit = 0.5 if score[b] == score[c] else float((score[b] > score[c]) == (share > 0.5))
        correct.setdefault(pascal50s_category(system[b], system[c]), []).append(hit)
    return {cat: np.mean(v) for cat, v in correct.items()}, np.mean([h for v in correct.values() for h in v])


def test_pascal_forced_choice_report_and_comparison_exports(expert, thumb, tmp_path, client):
    run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "pascal")
    run_command("compute_metrics", "--dataset", "pascal", "--metric", "bleu_4", "rouge_l", "cider_d", "--wait")
    pascal = Dataset.objects.get(name="pascal")
    report = benchmark_report("pascal", n_resamples=100, n_permutations=100)
    assert report["task"] == "forced_choice" and report["counts"]["pairs"] == 4000
    for key, m in report["metrics"].items():
        per_cat, overall = pascal_by_hand(pascal, key)
        assert m["accuracy"] == pytest.approx(overall, abs=1e-12)
        for cat in ("HC", "HI", "HM", "MM"):
            assert m["per_category"][cat]["accuracy"] == pytest.approx(per_cat[cat], abs=1e-12)
    # Published shape (Vedantam et al. 2015; CLIPScore Table 4): HI (correct vs another image's caption)
    # is by far the easiest category for every reference-based metric.
    assert all(m["per_category"]["HI"]["accuracy"] > 0.9 > m["per_category"]["MM"]["accuracy"] for m in report["metrics"].values())
    page = client.get("/datasets/pascal/").content.decode()
    assert "forced-choice benchmark" in page and 'id="benchmark-link"' in page
    page = client.get("/datasets/pascal/benchmark/?resamples=100&permutations=100").content.decode()
    hi = report["metrics"]["cider_d"]["per_category"]["HI"]["accuracy"]
    assert 'id="accuracy-table"' in page, page[page.find("<main"):][:3000]
    assert f'<td class="acc-HI">{100 * hi:.1f} <span class="ci">[' in page
    assert client.get("/datasets/pascal/benchmark/?resamples=-1").status_code == 400
    ceiling = report["ceiling"]["item"]
    assert 0.6 < ceiling["value"] < 1 and ceiling["ci95"][0] <= ceiling["value"] <= ceiling["ci95"][1]
    # Per category: people agree most on HI (the other image's caption is plainly wrong), least on MM.
    per_cat = {c: report["ceiling"]["per_category"][c]["value"] for c in ("HC", "HI", "HM", "MM")}
    assert per_cat["HI"] == max(per_cat.values()) and min(per_cat.values()) < ceiling["value"] < per_cat["HI"]
    assert f'<td class="ceiling-HI">{100 * per_cat["HI"]:.1f}</td>' in page

    matrix = comparison(n_resamples=50, n_permutations=50)
    ids = [c["id"] for c in matrix["columns"]]
    assert ids == ["pascal:HC", "pascal:HI", "pascal:HM", "pascal:MM", "pascal:all", "sub",
                   "thumb:human_score", "thumb:precision", "thumb:recall"]
    rows = {r["metric"]: r for r in matrix["rows"]}
    assert set(rows) == {"bleu_1", "bleu_4", "rouge_l", "cider_d"}
    assert "pascal:all" not in rows["bleu_1"]["cells"]  # bleu_1 was computed on the Expert subset only
    sub = benchmark_report("sub", levels=("item",), n_resamples=50, n_permutations=50)
    assert rows["cider_d"]["cells"]["sub"]["value"] == sub["metrics"]["cider_d"]["item"]["values"]["kendall_tau_c"]
    assert rows["cider_d"]["cells"]["sub"]["rank"] == sub["significance"]["permutation"]["ranks"]["cider_d"]

    # CSV: one row per cell plus the ceilings, same numbers as the JSON.
    text = run_command("correlate", "--compare", "--format", "csv", "--resamples", "50", "--permutations", "50")
    table = list(csv.DictReader(io.StringIO(text)))
    cells = {(r["metric"], r["benchmark"]): r for r in table}
    for metric, row in rows.items():
        for col, cell in row["cells"].items():
            assert float(cells[(metric, col)]["value"]) == pytest.approx(cell["value"], abs=1e-12)
    assert float(cells[("human_ceiling", "pascal:all")]["value"]) == pytest.approx(ceiling["value"])
    assert float(cells[("human_ceiling", "pascal:MM")]["value"]) == pytest.approx(per_cat["MM"])
    assert list(comparison_csv_rows(matrix))[0][:3] == ["metric", "name", "benchmark"]

    # LaTeX: a booktabs tabular with one row per metric and a cell per benchmark, values x100.
    latex = comparison_latex(matrix)
    assert latex == run_command("correlate", "--compare", "--format", "latex", "--resamples", "50", "--permutations", "50")
    body = latex[latex.index("\\midrule") + len("\\midrule"): latex.rindex("\\midrule")].strip().splitlines()
    assert len(body) == len(matrix["rows"])
    assert "\\begin{tabular}{l" + "c" * len(ids) + "}" in latex and "\\toprule" in latex and "\\bottomrule" in latex
    for line, row in zip(body, matrix["rows"]):
        assert line.endswith("\\\\") and line.count("&") == len(ids)
        first = line.split("&")[ids.index("sub") + 1]
        cell = row["cells"].get("sub")
        if cell:
            assert re.match(rf"\s*{100 * cell['value']:.1f}(\$\^\{{{cell['rank']}\}}\$)? \{{\\scriptsize \[", first)
    assert "CIDEr-D" in latex and "Human ceiling" in latex and "BLEU-4" in latex
    assert matrix == json.loads(run_command("correlate", "--compare", "--format", "json", "--resamples", "50", "--permutations", "50"))


def test_uploaded_metric_appears_in_every_report_oriented(expert, tmp_path):
    """A researcher's own scores (here: CIDEr-D as a distance, -CIDEr-D, declared lower-is-better)
    are reported like a built-in metric, with the same numbers as CIDEr-D once oriented."""
    run = MetricRun.objects.get(dataset=expert, metric="cider_d")
    rows = MetricScore.objects.filter(run=run).values_list("caption__image__key", "caption__key", "value")
    path = tmp_path / "distance.csv"
    path.write_text("image,caption,score\n" + "".join(f"{i},{c},{-v!r}\n" for i, c, v in rows))
    out = run_command("upload_scores", "--dataset", "sub", "--name", "CIDEr distance", "--file", str(path), "--higher", "worse")
    assert "user_cider_distance" in out
    report = benchmark_report("sub", n_resamples=50, n_permutations=50)
    mine, cider = report["metrics"]["user_cider_distance"], report["metrics"]["cider_d"]
    assert mine["name"] == "CIDEr distance"
    for s in ("kendall_tau_c", "kendall_tau_b", "pearson", "spearman"):
        assert mine["item"]["values"][s] == pytest.approx(cider["item"]["values"][s], abs=1e-12)
    assert mine["image"]["values"] == pytest.approx(cider["image"]["values"], abs=1e-12)
    assert report["significance"]["permutation"]["ranks"]["user_cider_distance"] == report["significance"]["permutation"]["ranks"]["cider_d"]
    classic = correlation_report("sub", n_resamples=0)
    assert classic["metrics"]["user_cider_distance"]["kendall_tau_c"] == pytest.approx(classic["metrics"]["cider_d"]["kendall_tau_c"])
    only = benchmark_report("sub", ["user_cider_distance", "bleu_4"], levels=("item",), n_resamples=0, n_permutations=0)
    assert list(only["metrics"]) == ["bleu_4", "user_cider_distance"]
    matrix = comparison(["sub"], n_resamples=0, n_permutations=20)
    assert {r["metric"]: r["name"] for r in matrix["rows"]}["user_cider_distance"] == "CIDEr distance"
    table = run_command("correlate", "--dataset", "sub", "--resamples", "0", "--permutations", "0")
    assert any(line.startswith("CIDEr distance") for line in table.splitlines())
    with pytest.raises(CommandError, match="no scores uploaded as 'user_nothing'"):
        run_command("correlate", "--dataset", "sub", "--metric", "user_nothing")
