"""Campaigns from the owner's side: commands that create and simulate a campaign, the campaign page
with agreement and metric correlations, exports, the creation form, and object-level permissions
(owners only; raters see only their own tasks)."""
import csv
import io
import json

import pytest
import scipy.stats
from django.contrib.auth.models import User

from crowd import engine
from crowd.export import COLUMNS
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment
from crowd.simulate import simulate

from .conftest import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def scored(subset_dir):
    """The 40-image subset with BLEU-4 and CIDEr-D computed (campaigns below sample 2-20 of its images)."""
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "cider_d", "--wait")
    return Dataset.objects.get(name="sub")


@pytest.fixture
def alice():
    return User.objects.create_user("alice", password="pw-alice")


@pytest.fixture
def bob():
    return User.objects.create_user("bob", password="pw-bob")


def test_one_command_creates_a_diversity_campaign_and_one_simulates_raters(scored, alice, client,
                                                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):  # its set-level metric runs start on commit
        out = run_command("create_campaign", "diversity", "--dataset", "sub", "--name", "div", "--images", "15",
                          "--owner", "alice", "--live")
    assert "campaign 'div' (diversity, live): 15 items + 5 gold, k = 3, 45 judgments needed" in out
    out = run_command("simulate_raters", "--campaign", "div", "--raters", "8", "--noise", "0.03")
    assert "progress: 45/45 judgments, 15/15 items complete" in out
    assert "Krippendorff's alpha (diversity, interval):" in out
    assert "human ceiling (diversity, split-half Kendall tau-b):" in out
    assert "Self-CIDEr vs diversity: Kendall tau-b" in out and "CIDEr-D    vs diversity" not in out
    campaign = Campaign.objects.get(name="div")
    # 15 images x 2 caption sets x 3 raters, set-level judgments
    assert HumanJudgment.objects.filter(campaign=campaign, caption__isnull=True, criterion="diversity").count() == 90
    client.force_login(alice)
    page = client.get("/campaigns/div/").content.decode()
    assert 'id="agreement"' in page and "Krippendorff" in page and "interval" in page
    assert 'data-criterion="diversity"' in page and "Self-CIDEr" in page and "LSA diversity" in page
    chart = client.get("/campaigns/div/correlations/diversity.png")
    assert chart.status_code == 200 and chart["Content-Type"] == "image/png" and chart.content[:4] == b"\x89PNG"
    report = client.get("/campaigns/div/report.json").json()
    assert report["progress"]["complete_items"] == 15
    # set diversity is validated against the set-level diversity measures, not accuracy (issue 17)
    assert set(report["correlations"]["diversity"]) == {"self_cider", "lsa", "mbleu_1", "mbleu_2", "mbleu_3",
                                                        "mbleu_4", "mbleu_mix"}
    assert report["correlations"]["diversity"]["self_cider"]["n_units"] == 30  # the reference sets too
    assert 0.3 < report["agreement"]["diversity"]["alpha"] <= 1
    assert report["ceiling"]["diversity"]["n_items"] == 30
    assert {w["status"] for w in report["workers"]} >= {"ok"}


def test_rating_campaign_correlations_follow_the_simulated_truth(scored, alice):
    campaign = engine.create_campaign(scored, "rating", name="rel", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 12}, k=3)
    simulate(campaign, raters=8, seed=3, noise=0.08)
    from analysis.campaigns import campaign_report

    report = campaign_report(campaign, n_resamples=200)
    # the simulated raters rate relevance from the experts' mean quality, so the metrics must agree
    # with them about as well as with the experts (CIDEr-D tau-b ~0.4 on Flickr8k-Expert)
    cider = report["correlations"]["relevance"]["cider_d"]
    assert 0.2 < cider["kendall_tau_b"] < 0.7
    lo, hi = cider["ci95"]["kendall_tau_b"]
    assert lo < cider["kendall_tau_b"] < hi
    assert report["agreement"]["relevance"]["level"] == "ordinal"
    assert report["agreement"]["relevance"]["alpha"] > 0.5
    assert report["ceiling"]["relevance"]["kendall_tau_b"] > cider["kendall_tau_b"]


def test_forced_choice_and_visual_atom_reports(scored, alice, client):
    fc = engine.create_campaign(scored, "forced_choice", name="fc", owners=[alice], state=Campaign.LIVE,
                                options={"images": 20, "pairs_per_image": 3})
    simulate(fc, raters=6, seed=1)
    from analysis.campaigns import campaign_report

    report = campaign_report(fc, n_resamples=0)
    assert report["forced_choice"]["pairs"] == 60
    for m in report["forced_choice"]["metrics"].values():
        assert 0 <= m["accuracy"] <= 1 and m["n_pairs"] > 0
    assert report["agreement"]["choice"]["level"] == "nominal"
    bias = report["position_bias"]  # sides are shuffled per assignment; simulated raters have no bias
    assert bias["n"] == 180
    # unbiased raters: the share is Binomial(180, 0.5) / 180 (0.4 itself came up once in CI, p = 0.01):
    # a two-sided binomial test rejects 0.5 only at p < 1e-4, and the share must be one of the k / 180
    k = round(bias["first_shown_share"] * 180)
    assert abs(k / 180 - bias["first_shown_share"]) < 1e-9
    assert scipy.stats.binomtest(k, 180, 0.5).pvalue > 1e-4, bias
    client.force_login(alice)
    for method, label in [("", "majority"), ("?method=dawid_skene", "dawid_skene")]:
        rows = list(csv.DictReader(io.StringIO(client.get(f"/campaigns/fc/aggregate.csv{method}").content.decode())))
        assert len(rows) == 60 and {r["value"] for r in rows} <= {"b", "c"} and {r["method"] for r in rows} == {label}
    assert client.get("/campaigns/fc/aggregate.csv?method=nonsense").status_code == 400
    atoms = engine.create_campaign(scored, "visual_atom", name="atoms", owners=[alice], state=Campaign.LIVE, options={
        "atoms": [["dog", "entity"], ["idea", "entity"], ["running", "action"], ["thought", "entity"], ["red", "attribute"]],
    })
    simulate(atoms, raters=5, seed=2, noise=0.0)
    shares = campaign_report(atoms)["visual_atoms"]
    assert shares == {
        "action": {"visual": 1, "atoms": 1, "share": 1.0},
        "attribute": {"visual": 1, "atoms": 1, "share": 1.0},
        "entity": {"visual": 1, "atoms": 3, "share": 1 / 3},
    }


def test_exports_are_long_format_and_neutralise_formulas(scored, alice, client):
    campaign = engine.create_campaign(scored, "description", name="desc", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 2}, k=1, gold_every=0)
    w = engine.invite_workers(1)[0]
    a = engine.accept(campaign, w)
    engine.submit(a.pk, w, {"description": "=HYPERLINK(\"http://x\") a dog runs over grass"})
    a = engine.accept(campaign, w)
    engine.submit(a.pk, w, {"description": "two children play with a red ball outside"})
    client.force_login(alice)
    text = client.get("/campaigns/desc/judgments.csv").content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == COLUMNS and len(rows) == 2
    assert {r["value"] for r in rows} == {"'=HYPERLINK(\"http://x\") a dog runs over grass",
                                          "two children play with a red ball outside"}
    lines = client.get("/campaigns/desc/judgments.jsonl").content.decode().splitlines()
    records = [json.loads(x) for x in lines]
    assert [r["value"] for r in records][0].startswith("=HYPERLINK")  # JSON keeps the raw text
    assert all(r["worker"] == w.rater_id and r["template_version"] == "description-1" for r in records)
    # a rating campaign exports one row per criterion with order and timings
    rating = engine.create_campaign(scored, "rating", name="r2", owners=[alice], state=Campaign.LIVE,
                                    options={"images": 3}, gold_every=0)
    simulate(rating, raters=3)
    out = run_command("export_campaign", "r2", "--format", "jsonl")
    records = [json.loads(x) for x in out.splitlines()]
    n_done = Assignment.objects.filter(campaign=rating, state="submitted").count()
    assert len(records) == 2 * n_done
    assert {r["criterion"] for r in records} == {"relevance", "thoroughness"}
    assert all(r["work_seconds"] is not None and r["seed"] for r in records)


def test_campaigns_are_visible_only_to_their_owners(scored, alice, bob, client):
    campaign = engine.create_campaign(scored, "rating", name="private", owners=[alice], options={"images": 2})
    urls = ["/campaigns/private/", "/campaigns/private/report.json", "/campaigns/private/judgments.csv",
            "/campaigns/private/correlations/relevance.png"]
    for url in urls:
        assert client.get(url).status_code == 302  # anonymous: to the login page
    client.force_login(bob)
    for url in urls:
        assert client.get(url).status_code == 404
    assert client.post("/campaigns/private/state/", {"state": "live"}).status_code == 404
    assert client.post("/campaigns/private/invite/", {"n": "3"}).status_code == 404
    campaign.refresh_from_db()
    assert campaign.state == "draft"
    assert "private" not in client.get("/campaigns/").content.decode()
    client.force_login(alice)
    assert client.get("/campaigns/private/").status_code == 200
    assert client.post("/campaigns/private/state/", {"state": "live"}).status_code == 302
    campaign.refresh_from_db()
    assert campaign.state == "live"
    client.post("/campaigns/private/invite/", {"n": "3"})
    page = client.get("/campaigns/private/").content.decode()
    assert page.count("/rate/join/") == 3


def test_raters_see_only_their_own_tasks(scored, client):
    campaign = engine.create_campaign(scored, "rating", name="mine", options={"images": 2}, state=Campaign.LIVE,
                                      gold_every=0)
    w1, w2 = engine.invite_workers(2, campaign=campaign)
    a2 = engine.accept(campaign, w2)
    assert client.get("/rate/mine/").status_code == 403  # no invitation, not logged in
    client.get(f"/rate/join/{w1.token}/")
    # another rater's task answers exactly as a missing one (issue 21: no existence oracle)
    assert client.get(f"/rate/mine/task/{a2.pk}/").status_code == 404
    response = client.post(f"/rate/mine/task/{a2.pk}/submit/", {"relevance": "5", "thoroughness": "5",
                                                                 "item": a2.item_id})
    assert response.status_code == 404
    assert client.post(f"/rate/mine/task/{a2.pk}/return/").status_code == 404
    a2.refresh_from_db()
    assert a2.state == "accepted" and a2.answer is None
    assert not HumanJudgment.objects.filter(campaign=campaign).exists()
    # a forged item id in the rater's own form is refused too
    response = client.post("/rate/mine/accept/")
    own = Assignment.objects.get(campaign=campaign, worker=w1)
    other_item = campaign.items.exclude(pk=own.item_id).first()
    response = client.post(f"/rate/mine/task/{own.pk}/submit/", {"relevance": "5", "thoroughness": "5",
                                                                  "item": other_item.pk})
    assert response.status_code == 400 and b"does not match" in response.content
    own.refresh_from_db()
    assert own.state == "accepted"


def test_campaign_form_creates_or_explains(scored, alice, client):
    client.force_login(alice)
    response = client.post("/campaigns/new/", {
        "name": "bad", "dataset": "sub", "kind": "diversity", "k": 3, "assignment_minutes": 10, "reward": "0",
        "seed": 0, "systems": "no-such-system",
    })
    assert response.status_code == 400 and b"unknown system" in response.content
    assert not Campaign.objects.filter(name="bad").exists()
    atoms = io.BytesIO(b"word,category,count\ndog,entity,120\nrunning,action,40\n")
    atoms.name = "atoms.csv"
    response = client.post("/campaigns/new/", {
        "name": "good", "dataset": "sub", "kind": "visual_atom", "k": 3, "assignment_minutes": 10, "reward": "0.05",
        "seed": 0, "atoms": atoms,
    })
    assert response.status_code == 302 and response["Location"] == "/campaigns/good/"
    campaign = Campaign.objects.get(name="good")
    assert list(campaign.owners.all()) == [alice] and campaign.state == "draft"
    assert campaign.items.get(key="atom-entity-dog").payload["count"] == 120


def test_command_errors_are_one_line(scored):
    from django.core.management.base import CommandError

    for args, message in [
        (["create_campaign", "diversity", "--dataset", "nope", "--name", "x"], "unknown dataset 'nope'"),
        (["create_campaign", "diversity", "--dataset", "sub", "--name", "x", "--owner", "zed"], "unknown user 'zed'"),
        (["create_campaign", "diversity", "--dataset", "sub", "--name", "x", "--images", "0"], "at least 1"),
        (["create_campaign", "visual_atom", "--dataset", "sub", "--name", "x"], "needs atoms"),
        (["simulate_raters", "--campaign", "nope"], "unknown campaign"),
    ]:
        with pytest.raises(CommandError, match=message):
            run_command(*args)
    assert not Campaign.objects.exists()
    run_command("create_campaign", "rating", "--dataset", "sub", "--name", "drafty", "--images", "2")
    with pytest.raises(CommandError, match="publish it first"):
        run_command("simulate_raters", "--campaign", "drafty")
