"""The vectorised statistics give exactly the numbers of the reference loops, report by report, on
every bundled benchmark (Flickr8k-Expert, Flickr8k-CrowdFlower, THumB's three criteria, PASCAL-50S;
real rows, subsets of the images so that it runs in seconds with small resample counts but the same
code), and the cross-benchmark comparison reads the stored benchmark reports instead of computing
them again (issue 35). ``benchmarks/report_speed.py`` times the same two paths on the full data."""
import shutil

import numpy as np
import pytest
import scipy.stats as st

from analysis import benchmarks
from analysis.benchmarks import benchmark_columns, benchmark_report, comparison
from analysis.models import CorrelationReport
from captioneval.stats.batched import row_statistic, weighted_pair_sums
from captioneval.stats.engine import reference_path, vectorised
from crowd.models import Dataset

from .conftest import FLICKR8K, ROOT, run_command, write_subset
from .test_benchmarks import write_thumb_subset

pytestmark = pytest.mark.django_db

SETTINGS = {"n_resamples": 60, "n_permutations": 60, "seed": 3}
METRICS = ("bleu_4", "rouge_l", "cider_d")


def write_crowdflower_subset(directory, n_images: int):
    """The CrowdFlower judgments of the first ``n_images`` query images (real rows, unchanged)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = (FLICKR8K / "CrowdFlowerAnnotations.txt").read_text().splitlines()
    keep = set(list(dict.fromkeys(line.split("\t")[0] for line in lines))[:n_images])
    (directory / "CrowdFlowerAnnotations.txt").write_text("\n".join(l for l in lines if l.split("\t")[0] in keep) + "\n")
    shutil.copy(FLICKR8K / "Flickr8k.token.txt", directory / "Flickr8k.token.txt")
    return directory


@pytest.fixture
def bundled(tmp_path):
    """Every bundled benchmark imported (subsets of images) with BLEU-4, ROUGE-L and CIDEr-D computed."""
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "expert", 60)), "--name", "expert")
    run_command("import_dataset", "flickr8k-crowdflower", str(write_crowdflower_subset(tmp_path / "cf", 60)), "--name", "cf")
    run_command("import_dataset", "thumb", str(write_thumb_subset(tmp_path / "thumb", 80)), "--name", "thumb")
    run_command("import_dataset", "pascal50s", str(ROOT / "data" / "pascal50s"), "--name", "pascal")
    for name in ("expert", "cf", "thumb", "pascal"):
        run_command("compute_metrics", "--dataset", name, "--metric", *METRICS, "--wait")
    return ["cf", "expert", "pascal", "thumb"]


def test_vectorised_reports_equal_the_reference_loops_on_every_bundled_benchmark(bundled):
    assert vectorised()
    seen = set()
    for name in bundled:
        for column in benchmark_columns(Dataset.objects.get(name=name)):
            if (name, column["criterion"]) in seen:
                continue
            seen.add((name, column["criterion"]))
            new = benchmark_report(name, criterion=column["criterion"], use_cache=False, **SETTINGS)
            with reference_path():
                assert not vectorised()
                old = benchmark_report(name, criterion=column["criterion"], use_cache=False, **SETTINGS)
            assert new == old, (name, column["criterion"])  # every number, exactly (no tolerance)
            # the comparison is not vacuous: the levels, the tie calibration and the tests were computed
            if new["task"] == "rating":
                entry = new["metrics"]["cider_d"]
                assert entry["item"]["ci95"]["kendall_tau_b"][0] is not None
                assert entry["item"]["pairwise"]["acc_eq"] is not None
                assert entry["image"]["values"]["kendall_tau_c"] is not None
                assert "ranks" in new["significance"]["permutation"]
                if name == "thumb":  # five systems, with and without the human one
                    assert entry["system"]["ci95"]["spearman"][0] is not None
                    assert entry["system"]["without_human"]["values"]["pearson"] is not None
                else:
                    assert "error" not in new["ceiling"]["item"] and new["ceiling"]["item"]["ci95"][0] is not None
            else:
                assert new["metrics"]["cider_d"]["ci95"][0] is not None and new["ceiling"]["item"]["value"] is not None
    assert {n for n, _ in seen} == set(bundled) and len(seen) == 6  # THumB: its three criteria


def _refuse(*args, **kwargs):
    raise AssertionError("a benchmark report was computed although one is stored")


def test_comparison_reads_the_stored_benchmark_reports_or_stores_full_ones(bundled, monkeypatch):
    # today's path: the item-level-only reports, computed for the comparison
    before = comparison(**SETTINGS, reuse=False)
    assert {c["id"] for c in before["columns"]} >= {"cf", "thumb:precision", "pascal:all"}
    # the benchmark pages' reports (every level), stored as warm_reports / the Celery task store them
    for name in bundled:
        for criterion in {c["criterion"] for c in benchmark_columns(Dataset.objects.get(name=name))}:
            benchmark_report(name, criterion=criterion, **SETTINGS)
    deleted, _ = CorrelationReport.objects.filter(payload__settings__levels=["item"]).delete()
    assert deleted == 6  # the item-level-only reports of the six benchmark reports are gone
    monkeypatch.setattr(benchmarks, "_rating_report", _refuse)
    monkeypatch.setattr(benchmarks, "_forced_choice_report", _refuse)
    assert comparison(**SETTINGS) == before  # same matrix, read from the stored full reports
    with pytest.raises(AssertionError, match="was computed"):  # a setting with no stored report is computed
        comparison(**dict(SETTINGS, seed=4))
    monkeypatch.undo()

    # with nothing stored for its settings, the comparison computes the full reports and stores them,
    # so the benchmark pages (every level) find them
    settings = dict(SETTINGS, seed=5)
    matrix = comparison(["thumb"], **settings)
    monkeypatch.setattr(benchmarks, "_rating_report", _refuse)
    for criterion in ("human_score", "precision", "recall"):
        report = benchmark_report("thumb", criterion=criterion, **settings)  # the page's report: stored
        assert set(report["metrics"]["cider_d"]) >= {"item", "image", "system"}
        cell = next(r for r in matrix["rows"] if r["metric"] == "cider_d")["cells"][f"thumb:{criterion}"]
        assert cell["value"] == report["metrics"]["cider_d"]["item"]["values"]["pearson"]


def test_row_statistic_equals_scipy_row_by_row():
    """The batched statistics of the system level and of the per-image level against scipy on each
    row (THumB's human scores: ties, few systems)."""
    rng = np.random.default_rng(0)
    y = np.round(rng.uniform(1, 5, size=(300, 5)), 0)
    x = y + np.round(rng.normal(size=(300, 5)), 1)
    x[7] = 1.0  # a constant row: nan
    expected = {
        "pearson": lambda a, b: st.pearsonr(a, b).statistic, "spearman": lambda a, b: st.spearmanr(a, b).statistic,
        "kendall_tau_b": lambda a, b: st.kendalltau(a, b).statistic,
        "kendall_tau_c": lambda a, b: st.kendalltau(a, b, variant="c").statistic,
    }
    for name, fn in expected.items():
        got = row_statistic(x, y, name)
        assert np.isnan(got[7])
        want = np.array([np.nan if i == 7 else fn(x[i], y[i]) for i in range(300)])
        assert np.array_equal(got, want, equal_nan=True), name


def test_weighted_pair_sums_count_the_materialised_sample():
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 6, 40) / 2.0, rng.integers(0, 4, 40) / 3.0
    w = rng.integers(0, 3, size=(3, 40))
    sums = weighted_pair_sums(x, y, w)
    for r in range(3):
        xr, yr = np.repeat(x, w[r]), np.repeat(y, w[r])
        i, j = np.triu_indices(xr.size, k=1)
        prod = np.sign(xr[i] - xr[j]) * np.sign(yr[i] - yr[j])
        assert sums["d"][r] == (prod < 0).sum()
        assert (sums["sx2"][r] - xr.size) // 2 == (xr[i] == xr[j]).sum()
        assert (sums["sxy2"][r] - xr.size) // 2 == ((xr[i] == xr[j]) & (yr[i] == yr[j])).sum()


@pytest.mark.parametrize("distinct", [3, 1024, 1025, 40_000])
def test_dense_ranks_equal_numpy_unique(distinct):
    """Both ways of batched._dense_ranks (search of few distinct values, argsort of many) give
    np.unique's inverse and count, on values with repeats, negative zero and ties."""
    from captioneval.stats.batched import _dense_ranks

    rng = np.random.default_rng(distinct)
    v = rng.integers(0, distinct, 50_000) / 7.0 - 3.0
    v[:3] = [0.0, -0.0, 0.0]
    ranks, k = _dense_ranks(v)
    uniq, inverse = np.unique(v, return_inverse=True)
    assert k == uniq.size and np.array_equal(ranks, inverse.ravel())
