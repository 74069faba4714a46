"""A diversity campaign validates the set-level diversity measures (issue 17, "also fix").

Creating a diversity campaign starts the runs of Self-CIDEr, LSA and mBLEU on its dataset
(:mod:`metrics.campaigns`, wired to Django's ``post_save`` of Campaign, run once the creation
commits), and its report correlates the human diversity scores with exactly those measures, with
the protocol of Wang & Chan (2019, CVPR, Table 2) on unit means; accuracy metrics computed on the
dataset (BLEU-4, CIDEr-D) are left out with a note saying why.

Data (bundled, see data/*/SOURCE.txt): the 30 COCO images that are both in the official Self-CIDEr
example (10 sampled model captions each, merge_results.json) and in THumB (4 references and the
captions of 4 models each): 3 caption sets per image.
"""
import pytest

from analysis.campaigns import campaign_report
from crowd.models import Campaign, Dataset
from metrics.campaigns import measures_of, set_metrics_for
from metrics.models import MetricRun

from .coco_sets import write_coco_files
from .conftest import run_command

pytestmark = pytest.mark.django_db

DIVERSITY_MEASURES = {"self_cider", "lsa", "mbleu_1", "mbleu_2", "mbleu_3", "mbleu_4", "mbleu_mix"}


@pytest.fixture
def div(tmp_path):
    files = write_coco_files(tmp_path)
    run_command("import_coco", "--name", "div", "--annotations", str(files / "captions.json"),
                "--results", f"merge={files / 'merge.json'}", "--results", f"thumb-models={files / 'thumb_models.json'}")
    return Dataset.objects.get(name="div")


def test_the_diversity_measures_are_self_cider_lsa_and_mbleu_not_accuracy():
    assert set(measures_of("diversity")) == DIVERSITY_MEASURES  # Wang & Chan 2019, Table 2
    assert "set_accuracy" not in measures_of("diversity") and measures_of("relevance") == []


def test_creating_a_diversity_campaign_computes_its_set_metrics_and_the_report_correlates_them(
        div, django_capture_on_commit_callbacks):
    from django.contrib.auth.models import User

    User.objects.create_user("alice", password="pw")
    # accuracy metrics computed on the dataset beforehand: they must not be what the report validates
    run_command("compute_metrics", "--dataset", "div", "--metric", "bleu_4", "cider_d", "--wait")
    assert not MetricRun.objects.filter(dataset=div, metric__in=DIVERSITY_MEASURES).exists()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run_command("create_campaign", "diversity", "--dataset", "div", "--name", "divc", "--images", "30",
                    "--owner", "alice", "--live")
    assert len(callbacks) == 1
    campaign = Campaign.objects.get(name="divc")
    assert set(set_metrics_for(campaign)) == DIVERSITY_MEASURES
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=div, metric__in=DIVERSITY_MEASURES)}
    assert set(runs) == DIVERSITY_MEASURES
    for run in runs.values():  # computed in-process (no broker): every set of the dataset, all captions
        assert run.status == MetricRun.DONE and run.completed == run.total == 90, (run.metric, run.status, run.error)
        assert run.params["m"] is None
    assert not MetricRun.objects.filter(dataset=div, metric="set_accuracy").exists()

    out = run_command("simulate_raters", "--campaign", "divc", "--raters", "8", "--noise", "0.03")
    assert "progress: 90/90 judgments, 30/30 items complete" in out  # 30 images x k = 3, each scoring 3 sets
    assert "Self-CIDEr vs diversity: Kendall tau-b" in out and "per-image Spearman" in out
    assert "BLEU-4     vs diversity" not in out and "CIDEr-D    vs diversity" not in out
    report = campaign_report(campaign, n_resamples=100)
    corr = report["correlations"]["diversity"]
    assert set(corr) == DIVERSITY_MEASURES
    for key in ("self_cider", "lsa", "mbleu_mix"):
        entry = corr[key]
        # 30 images x 3 sets (references, merge, THumB models), each with a set-level score
        assert entry["n_units"] == 90 and entry["n_ratings"] == 270
        # the simulated raters judge word overlap between captions, which the diversity measures measure too
        assert entry["kendall_tau_b"] > 0.3 and entry["per_unit_mean"]["spearman"] > 0.5, (key, entry)
        assert entry["per_unit_mean"]["n_units"] == 90
        assert entry["per_image"]["n_images"] == 30 and entry["per_image"]["spearman"] > 0.3, (key, entry["per_image"])
    note = next(n for n in report["notes"] if n.startswith("diversity: accuracy metrics"))
    assert "BLEU-4" in note and "CIDEr-D" in note


def test_a_campaign_showing_fewer_captions_gets_runs_on_those_captions(div, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run_command("create_campaign", "diversity", "--dataset", "div", "--name", "div3", "--images", "10",
                    "--captions-per-set", "3", "--systems", "merge")
    runs = MetricRun.objects.filter(dataset=div, metric__in=DIVERSITY_MEASURES)
    assert {r.metric for r in runs} == DIVERSITY_MEASURES and {r.params["m"] for r in runs} == {3}
    assert all(r.status == MetricRun.DONE for r in runs)
    # a rating campaign rates captions, not sets: it starts nothing
    before = MetricRun.objects.count()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run_command("create_campaign", "rating", "--dataset", "div", "--name", "rate", "--images", "5")
    assert callbacks == [] and MetricRun.objects.count() == before


def test_a_campaign_whose_creation_rolls_back_starts_nothing(div, django_capture_on_commit_callbacks):
    from django.db import transaction

    from crowd import engine

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            engine.create_campaign(div, "diversity", name="gone", options={"images": 5})
            raise RuntimeError("the creating transaction fails after the campaign row was written")
    assert callbacks == [] and not MetricRun.objects.exists()
