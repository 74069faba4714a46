"""The task-kind plug-in point: a toy kind in one file (tests/toy_kind.py, fluency 1-3 of a caption),
registered the way docs/architecture.md says, runs through the real platform -- created by the
``create_campaign`` command on real Flickr8k-Expert data, rated by three raters through the rater
pages, aggregated by quality control, and reported by :func:`analysis.campaigns.campaign_report`
with its criterion, agreement, ceiling and metric correlations, which are recomputed here
independently from the answers the raters posted (scipy for the correlations, the coincidence-matrix
formula for Krippendorff's alpha)."""
import importlib
import sys
from collections import defaultdict

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils.html import escape
from scipy import stats

from analysis.campaigns import campaign_report
from crowd import engine, quality
from crowd.kinds import KINDS, CampaignSpecError, Scale, TaskKind, get_kind, register, report_sections, unregister
from crowd.kinds.base import words
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment
from metrics.models import MetricScore

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db


@pytest.fixture
def toy():
    """Import the toy kind's module (which registers it); unregister it afterwards."""
    module = importlib.import_module("tests.toy_kind")
    yield module
    unregister("toy_fluency")
    sys.modules.pop("tests.toy_kind", None)


@pytest.fixture
def scored(tmp_path):
    """A 12-image Flickr8k-Expert subset with BLEU-4 and CIDEr-D computed."""
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub", 12)), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "cider_d", "--wait")
    return Dataset.objects.get(name="sub")


def fluency(text: str, caption_id: int, rater: int) -> int:
    """The answer rater ``rater`` gives: longer captions rate higher; every fifth (caption, rater)
    pair moves one step up (3 wraps to 1), so that raters disagree sometimes."""
    n = len(words(text))
    value = 1 + (n >= 9) + (n >= 12)
    return value % 3 + 1 if (caption_id + rater) % 5 == 0 else value


def rate_everything(client: Client, campaign: Campaign, worker, rater: int) -> list[tuple]:
    """Rate through the rater pages until no task is left; (caption id, image id, rater id, value) posted."""
    assert client.get(f"/rate/join/{worker.token}/").status_code == 302
    posted = []
    while True:
        accepted = client.post(f"/rate/{campaign.name}/accept/")
        if accepted.status_code != 302:
            text = accepted.content.decode()  # the last rater's last answer closed the complete campaign
            assert accepted.status_code == 200 and ("nothing left" in text or "This campaign has finished" in text)
            return posted
        url = accepted["Location"]
        a = Assignment.objects.select_related("item").get(pk=int(url.rstrip("/").rsplit("/", 1)[1]))
        page = client.get(url).content.decode()
        p = a.item.payload
        assert escape(p["text"]) in page and 'name="fluency"' in page
        assert "(keys <kbd>1</kbd>&ndash;<kbd>3</kbd>)" in page  # the toy's 1-3 scale, keyboard hints included
        value = fluency(p["text"], p["caption"], rater)
        done = client.post(url + "submit/", {"fluency": str(value), "item": a.item_id, "submit_key": f"k{a.pk}"})
        assert done.status_code == 302
        posted.append((p["caption"], p["image"], worker.rater_id, value))


def ordinal_alpha(ratings: dict) -> float:
    """Krippendorff's alpha, ordinal distance, from {unit: [values]} (Krippendorff 2011, "Computing
    Krippendorff's Alpha-Reliability", sections C and E), written out independently of the platform."""
    values = sorted({v for vs in ratings.values() for v in vs})
    o = defaultdict(float)
    for vs in ratings.values():
        if len(vs) < 2:
            continue
        for i, c in enumerate(vs):
            for j, k in enumerate(vs):
                if i != j:
                    o[c, k] += 1 / (len(vs) - 1)
    n_c = {c: sum(o[c, k] for k in values) for c in values}
    n = sum(n_c.values())

    def delta2(c, k):
        lo, hi = min(c, k), max(c, k)
        return (sum(n_c[g] for g in values if lo <= g <= hi) - (n_c[c] + n_c[k]) / 2) ** 2

    observed = sum(o[c, k] * delta2(c, k) for c in values for k in values)
    expected = sum(n_c[c] * n_c[k] * delta2(c, k) for c in values for k in values) / (n - 1)
    return 1 - observed / expected


def test_a_toy_kind_in_one_file_runs_through_engine_quality_and_report(toy, scored):
    kind = get_kind("toy_fluency")
    assert isinstance(kind, toy.Fluency) and kind.scale("fluency") == Scale(1, 3)
    assert report_sections() == ["forced_choice", "visual_atoms"]  # the toy has no section of its own
    User.objects.create_user("alice")
    out = run_command("create_campaign", "toy_fluency", "--dataset", "sub", "--name", "flu", "--images", "6",
                      "--owner", "alice", "--live")
    campaign = Campaign.objects.get(name="flu")
    n_items = campaign.items.count()
    assert f"campaign 'flu' (toy_fluency, live): {n_items} items + 0 gold, k = 3, {3 * n_items} judgments needed" in out
    assert n_items == scored.candidates().filter(image__key__in={i.payload["image_key"] for i in campaign.items.all()}).count()

    posted = []
    for rater, worker in enumerate(engine.invite_workers(3, campaign=campaign)):
        posted += rate_everything(Client(), campaign, worker, rater)
    assert len(posted) == 3 * n_items
    assert HumanJudgment.objects.filter(campaign=campaign, criterion="fluency").count() == 3 * n_items

    # aggregated judgments: the mean of the three posted answers per caption
    by_caption = defaultdict(list)
    for caption, _, _, value in posted:
        by_caption[caption].append(value)
    assert quality.aggregate(campaign) == {
        "fluency": {f"caption-{c}": sum(vs) / len(vs) for c, vs in by_caption.items()}}

    report = campaign_report(campaign, n_resamples=200, seed=0)
    assert report["kind"] == "toy_fluency" and report["campaign"] == "flu" and report["dataset"] == "sub"
    assert set(report) == {"campaign", "kind", "dataset", "progress", "agreement", "ceiling", "correlations",
                           "forced_choice", "visual_atoms", "position_bias", "notes", "bootstrap"}
    assert report["forced_choice"] is None and report["visual_atoms"] is None and report["position_bias"] is None
    assert report["progress"]["judgments"] == 3 * n_items and report["progress"]["complete_items"] == n_items

    agreement = report["agreement"]["fluency"]
    assert (agreement["level"], agreement["units"], agreement["ratings"]) == ("ordinal", n_items, 3 * n_items)
    assert agreement["alpha"] == pytest.approx(ordinal_alpha(by_caption), abs=1e-12)
    assert report["ceiling"]["fluency"]["n_items"] == n_items

    assert set(report["correlations"]) == {"fluency"} and set(report["correlations"]["fluency"]) == {"bleu_4", "cider_d"}
    for metric in ("bleu_4", "cider_d"):
        score = dict(MetricScore.objects.filter(run__dataset=scored, run__metric=metric).values_list("caption_id", "value"))
        x = np.array([score[caption] for caption, _, _, _ in posted])
        y = np.array([float(value) for _, _, _, value in posted])
        entry = report["correlations"]["fluency"][metric]
        assert (entry["n_ratings"], entry["n_units"]) == (3 * n_items, n_items)
        assert entry["pearson"] == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
        assert entry["spearman"] == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
        assert entry["kendall_tau_b"] == pytest.approx(stats.kendalltau(x, y, variant="b")[0], abs=1e-12)
        assert entry["kendall_tau_c"] == pytest.approx(stats.kendalltau(x, y, variant="c")[0], abs=1e-12)
        lo, hi = entry["ci95"]["kendall_tau_b"]
        assert lo <= entry["kendall_tau_b"] <= hi


def test_registration_rejects_what_the_platform_cannot_store_or_report(toy):
    class Bad(toy.Fluency):
        pass

    for attrs, message in [
        ({"name": "Toy-Fluency"}, "need \\[a-z\\]"),
        ({"name": "x" * 31}, "at most 30"),
        ({"name": "toy_fluency"}, "already registered by"),  # another class under a taken name
        ({"name": "toy2", "unit": "sentence"}, "unit 'sentence'"),
        ({"name": "toy2", "scales": {}}, "one Scale per criterion"),
        ({"name": "toy2", "scales": {"fluency": Scale(labels=("ok", "bad"))}}, "not numeric"),
        ({"name": "toy2", "report_section": "visual_atoms"}, "taken by another kind"),
    ]:
        kind = Bad()
        for key, value in attrs.items():
            setattr(kind, key, value)
        with pytest.raises(ValueError, match=message):
            register(kind)
    assert set(KINDS) == {"diversity", "rating", "forced_choice", "visual_atom", "description", "toy_fluency"}
    with pytest.raises(CampaignSpecError, match="unknown campaign kind 'toy2'"):
        get_kind("toy2")
    with pytest.raises(ValueError, match="either numeric"):
        Scale(3, 1)
    assert issubclass(toy.Fluency, TaskKind)


def test_built_in_kinds_declare_what_reports_and_quality_control_read():
    """The declarations that replaced the kind-name branches of analysis/ and the scale table of
    crowd/quality.py."""
    assert list(KINDS)[:5] == ["diversity", "rating", "forced_choice", "visual_atom", "description"]
    assert {n: k.unit for n, k in KINDS.items() if n in ("diversity", "rating", "forced_choice", "visual_atom", "description")} == {
        "diversity": "caption_set", "rating": "caption", "forced_choice": "caption_pair", "visual_atom": "word",
        "description": "image"}
    assert KINDS["diversity"].metric_levels == ("caption", "set") and KINDS["rating"].metric_levels == ("caption",)
    assert KINDS["rating"].metric_criteria == ("relevance", "thoroughness") and KINDS["diversity"].metric_criteria == ("diversity",)
    assert KINDS["rating"].scale("thoroughness").span == 4.0 and KINDS["diversity"].scale("diversity").span == 1.0
    assert KINDS["forced_choice"].metric_criteria == () and KINDS["forced_choice"].report_section == "forced_choice"
