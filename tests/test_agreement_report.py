"""The one metric-human agreement structure behind the dataset and benchmark reports: the documented
``correlate --json`` keys, and the same item-level numbers in the benchmark report, both equal to
captioneval.stats.correlate on the judgment rows read independently from the database
(a 40-image Flickr8k-Expert subset, CIDEr-D)."""
import json

import numpy as np
import pytest

from captioneval.stats import STATISTICS, correlate
from crowd.models import Dataset, HumanJudgment
from metrics.models import MetricScore

from .conftest import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def scored(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d", "--wait")
    return Dataset.objects.get(name="sub")


def rows(dataset):
    """(metric scores, ratings, image ids): one row per expert rating, read straight from the tables."""
    scores = dict(MetricScore.objects.filter(run__dataset=dataset, run__metric="cider_d").values_list("caption_id", "value"))
    data = list(
        HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True, caption__isnull=False)
        .order_by("caption_id", "rater").values_list("caption_id", "image_id", "score")
    )
    return (np.array([scores[c] for c, _, _ in data]), np.array([s for _, _, s in data], float),
            np.array([i for _, i, _ in data]))


def test_correlate_json_keeps_the_documented_keys_and_numbers(scored):
    report = json.loads(run_command("correlate", "--dataset", "sub", "--metric", "cider_d", "--json", "--resamples", "60"))
    assert list(report) == ["dataset", "criterion", "n_pairs", "n_ratings", "n_images", "bootstrap", "metrics"]
    entry = report["metrics"]["cider_d"]
    assert list(entry) == ["name", "run", "version", "params", *STATISTICS, "ci95", "per_image"]
    assert set(entry["ci95"]) == set(STATISTICS)
    assert set(entry["per_image"]) == {"spearman", "kendall_tau_b", "n_images", "n_images_skipped"}
    x, y, g = rows(scored)
    assert report["n_ratings"] == len(y)
    ref = correlate(x, y, g, STATISTICS, n_resamples=60, seed=0)
    for s in STATISTICS:
        assert entry[s] == pytest.approx(ref.values[s], abs=1e-12)
        assert entry["ci95"][s] == pytest.approx(list(ref.ci95[s]), abs=1e-12)

    from analysis.benchmarks import benchmark_report

    bench = benchmark_report("sub", ["cider_d"], levels=("item",), n_resamples=60, significance=False)
    item = bench["metrics"]["cider_d"]["item"]
    assert item["values"] == {s: entry[s] for s in STATISTICS}
    assert item["ci95"] == entry["ci95"]
