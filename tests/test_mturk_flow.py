"""MTurk provider flow against the in-memory fake MTurk (tests/fake_mturk.py): publish, the
ExternalQuestion page inside MTurk's parameters, collection and reconciliation, review, bonuses,
and the requester-website export and results import (idempotent, all-or-nothing)."""
import csv
import io
import json

import pytest
from django.test import Client, override_settings

from crowd import engine
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment, MTurkHIT, MTurkSync, Payment
from crowd.mturk import publish as pub
from crowd.mturk import review, website
from crowd.mturk.client import MTurkAPI
from crowd.mturk.collect import collect
from crowd.mturk.questions import answers_xml

from . import fake_mturk
from .conftest import run_command

pytestmark = pytest.mark.django_db
SUBMIT_TO = "https://workersandbox.mturk.com"


@pytest.fixture
def fake():
    fake_mturk.FAKES.clear()
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        yield fake_mturk.fake_client("sandbox")


@pytest.fixture
def campaign(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    c = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="mt", options={"images": 4, "gold": 2},
                               reward="0.05", provider=Campaign.MTURK, gold_every=0)
    config = pub.config_for(c)
    config.public_url = "https://captions.example.org"
    config.save()
    return c


def test_publish_page_submit_collect_review_bonus(fake, campaign):
    api = MTurkAPI.for_campaign(campaign)
    report = pub.publish_batch(campaign, api)
    n_items = campaign.items.count()
    assert report.created == n_items and not report.failed
    assert len(fake.hits) == n_items
    campaign.refresh_from_db()
    assert campaign.state == Campaign.LIVE
    # a retry of the same batch makes no second HIT
    batch = campaign.mturk_batches.get()
    MTurkHIT.objects.filter(batch=batch).update(hit_id="")  # as if the responses had been lost
    again = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign), batch=batch)
    assert again.created == 0 and again.existing == n_items and len(fake.hits) == n_items

    hit = MTurkHIT.objects.filter(batch=batch, item__is_gold=False).select_related("item").first()
    aid = fake.accept(hit.hit_id, "AWORKER0001")
    client = Client()
    url = f"/mturk/{campaign.name}/item/{hit.item_id}/"
    preview = client.get(url, {"assignmentId": "ASSIGNMENT_ID_NOT_AVAILABLE", "hitId": hit.hit_id})
    assert preview.status_code == 200 and b'id="preview-notice"' in preview.content
    assert "frame-ancestors https://www.mturk.com https://workersandbox.mturk.com" == preview["Content-Security-Policy"]
    assert "X-Frame-Options" not in preview
    page = client.get(url, {"assignmentId": aid, "hitId": hit.hit_id, "workerId": "AWORKER0001", "turkSubmitTo": SUBMIT_TO})
    assert page.status_code == 200
    token = page.context["token"]
    bad = client.post(url + "submit/", {"token": token, "relevance": "9", "thoroughness": "2"})
    assert bad.status_code == 400 and Assignment.objects.get(provider_ref=aid).state == "accepted"
    done = client.post(url + "submit/", {"token": token, "relevance": "4", "thoroughness": "3", "item": hit.item_id})
    assert done.status_code == 200
    assert done.context["submit_url"] == SUBMIT_TO + "/mturk/externalSubmit"
    fields = dict(done.context["fields"])
    assert fields["relevance"] == "4"
    fake.external_submit({"assignmentId": aid, **fields})

    # a worker whose externalSubmit reached MTurk but never reached us (HTML bypass): recovered by the collector
    hit2 = MTurkHIT.objects.filter(batch=batch, item__is_gold=False).exclude(pk=hit.pk).first()
    aid2 = fake.accept(hit2.hit_id, "AWORKER0002")
    fake.external_submit({"assignmentId": aid2, "relevance": "2", "thoroughness": "2"})
    rec = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert rec.recorded == [aid2] and rec.unchanged == 1 and rec.ok, rec.lines()
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 4
    again = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert again.recorded == [] and again.unchanged == 2
    assert MTurkSync.objects.filter(campaign=campaign).count() == 2

    decisions = review.plan_review(campaign)
    assert sorted(d.assignment.provider_ref for d in decisions) == sorted([aid, aid2])
    fake.auto_approve()  # MTurk auto-approved one before we reviewed... both, in fact
    out = review.apply_review(campaign, MTurkAPI.for_campaign(campaign), decisions)
    assert out.done == {"already approved by MTurk": 2} and not out.failed
    assert set(Assignment.objects.filter(campaign=campaign, provider_ref__in=[aid, aid2]).values_list("state", flat=True)) == {"approved"}

    grant = review.grant_bonuses(campaign, "0.10", "careful work", "careful", min_gold_answers=0)
    assert grant.done == {"granted": 2}
    assert review.grant_bonuses(campaign, "0.10", "careful work", "careful", min_gold_answers=0).done == {"already granted": 2}
    sent = review.send_bonuses(campaign, MTurkAPI.for_campaign(campaign))
    assert sent.done == {"sent": 2} and len(fake.bonuses) == 2
    Payment.objects.update(state=Payment.PENDING)  # as if we crashed after sending
    resent = review.send_bonuses(campaign, MTurkAPI.for_campaign(campaign))
    assert resent.done == {"sent earlier": 2} and len(fake.bonuses) == 2


def test_website_export_and_import(fake, campaign, tmp_path):
    out = run_command("mturk", "export-website", campaign.name, "--out", str(tmp_path))
    assert "wrote" in out
    layout = (tmp_path / "layout.html").read_text()
    assert "${task_html}" in layout and "${image_url}" in layout
    rows = list(csv.DictReader(io.StringIO((tmp_path / "input.csv").read_text())))
    assert len(rows) == campaign.items.count()
    results = io.StringIO()
    fieldnames = ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "WorkTimeInSeconds",
                  *[f"Input.{k}" for k in rows[0]], "Answer.relevance", "Answer.thoroughness"]
    w = csv.DictWriter(results, fieldnames=fieldnames)
    w.writeheader()
    for i, row in enumerate(rows):
        for j, worker in enumerate(["AWORKERAAA1", "AWORKERBBB2"]):
            w.writerow({"HITId": f"HIT{i:027d}", "AssignmentId": f"ASG{i:03d}{j}{'X' * 23}", "WorkerId": worker,
                        "AssignmentStatus": "Submitted", "WorkTimeInSeconds": "31",
                        **{f"Input.{k}": v for k, v in row.items()}, "Answer.relevance": "3", "Answer.thoroughness": "4"})
    data = results.getvalue().encode()
    path = tmp_path / "results.csv"
    path.write_bytes(data)
    first = run_command("mturk", "import-results", campaign.name, str(path))
    n = 2 * len(rows)
    assert f"{n} rows: imported {n}, unchanged 0" in first
    judgments = HumanJudgment.objects.filter(campaign=campaign).count()
    second = run_command("mturk", "import-results", campaign.name, str(path))
    assert f"{n} rows: imported 0, unchanged {n}" in second
    assert HumanJudgment.objects.filter(campaign=campaign).count() == judgments
    assert Assignment.objects.filter(campaign=campaign).count() == n
    assert set(Assignment.objects.values_list("work_seconds", flat=True)) == {31.0}
    # a bad file: nothing imported
    bad = data.decode().replace("AWORKERBBB2", "not-a-worker", 1).replace('"3"', '"9"')
    before = Assignment.objects.count()
    report = website.import_results(campaign, bad.replace(rows[0]["batch_id"], "someone-else-1", 1).encode())
    assert not report.ok and Assignment.objects.count() == before
    text = "\n".join(report.lines())
    assert "unknown worker 'not-a-worker'" in text and "foreign batch" in text


def test_questions_and_costs():
    from decimal import Decimal

    from crowd.mturk.questions import (
        cost_estimate,
        external_question,
        html_question,
        locale_values,
        parse_answers,
        qualification_requirements,
    )

    xml = external_question("https://h.example/mturk/c/item/3/", 600)
    assert "<ExternalURL>https://h.example/mturk/c/item/3/</ExternalURL><FrameHeight>600</FrameHeight>" in xml
    with pytest.raises(ValueError, match="https"):
        external_question("http://h.example/")
    doc = "<!DOCTYPE html><html><body>a ]]> b</body></html>"
    wrapped = html_question(doc)
    assert "]]]]><![CDATA[>" in wrapped  # the CDATA terminator inside the page is split
    with pytest.raises(ValueError, match="DOCTYPE"):
        html_question("<html></html>")
    fields = {"relevance": "4", "note": "a <b> & \"c\"", "multi": ""}
    assert parse_answers(answers_xml(fields)) == fields
    with pytest.raises(ValueError):
        parse_answers("<notxml")
    assert locale_values(["us", "US-NY"]) == [{"Country": "US"}, {"Country": "US", "Subdivision": "NY"}]
    with pytest.raises(ValueError):
        locale_values(["USA"])
    reqs = qualification_requirements("live", min_approval_rate=95, locales=["GB"], masters=True)
    assert [r["QualificationTypeId"] for r in reqs] == ["000000000000000000L0", "00000000000000000071",
                                                          "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH"]
    assert qualification_requirements("sandbox", masters=True)[0]["QualificationTypeId"] == "2ARFPLSP75KLA8M8DH1HTEQVJT3SY6"
    # hand-computed: 9 assignments at $0.05 -> 20 % fee = $0.01 each; 10 assignments -> 40 % = $0.02 each
    est = cost_estimate([3, 3, 3], "0.05")
    assert (est.rewards, est.fees, est.total) == (Decimal("0.45"), Decimal("0.09"), Decimal("0.54"))
    est = cost_estimate([10], "0.05", masters=True)  # 45 % of 0.05 = 0.0225 -> 0.02
    assert (est.fee_rate, est.fees, est.total) == (Decimal("0.45"), Decimal("0.20"), Decimal("0.70"))
    assert cost_estimate([1], "0.01").fees == Decimal("0.01")  # the $0.01 minimum


def test_command_dry_run_live_gate_and_html_question(fake, campaign):
    out = run_command("mturk", "publish", campaign.name, "--dry-run", "--limit", "2")
    assert "DRY RUN, nothing sent" in out and "create_hit_type" in out and out.count("create_hit_with_hit_type") == 2
    assert not fake.hits and not campaign.mturk_batches.exists()
    run_command("mturk", "settings", campaign.name, "--question-type", "html", "--masters", "--locales", "US,GB")
    pub.set_environment(campaign, "live")
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="real money"):
        run_command("mturk", "publish", campaign.name)
    with pytest.raises(CommandError, match="type the campaign name"):
        run_command("mturk", "golive", campaign.name, "--confirm", "wrong")
    out = run_command("mturk", "golive", campaign.name, "--confirm", campaign.name)
    assert "real money" in out and "total $" in out
    live = fake_mturk.fake_client("live")
    out = run_command("mturk", "publish", campaign.name, "--limit", "3")
    assert "HITs created 3" in out and len(live.hits) == 3 and not fake.hits
    hit = next(iter(live.hits.values()))
    assert "<HTMLQuestion" in hit["Question"] and "https://www.mturk.com/mturk/externalSubmit" in hit["Question"]
    hit_type = live.hit_types[hit["HITTypeId"]]
    assert {"QualificationTypeId": "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH", "Comparator": "Exists",
            "ActionsGuarded": "DiscoverPreviewAndAccept"} in hit_type["QualificationRequirements"]
    # an HTMLQuestion answer comes back only through the collector, in the HIT's baked-in order
    row = MTurkHIT.objects.filter(hit_id=hit["HITId"]).select_related("item").get()
    aid = live.accept(hit["HITId"], "AWORKERHTML1")
    answer = {"relevance": "5", "thoroughness": "1"} if not row.item.is_gold else {"relevance": "1", "thoroughness": "1"}
    live.external_submit({"assignmentId": aid, "item_key": row.item.key, "order": json.dumps(row.order), **answer})
    rec = collect(campaign, MTurkAPI.for_campaign(campaign))
    assert rec.recorded == [aid] and rec.ok, rec.lines()
    a = Assignment.objects.get(provider_ref=aid)
    assert a.answer == {"relevance": int(answer["relevance"]), "thoroughness": int(answer["thoroughness"])}
    assert a.order == row.order and a.state == "submitted"


def test_reconciliation_unconfirmed_no_eviction_and_periodic_task(fake, campaign):
    from crowd.tasks import collect_mturk

    pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign))
    hit = MTurkHIT.objects.filter(batch__campaign=campaign, item__is_gold=False).select_related("item").first()
    client = Client()
    url = f"/mturk/{campaign.name}/item/{hit.item_id}/"

    def open_task(worker):
        aid = fake.accept(hit.hit_id, worker)
        page = client.get(url, {"assignmentId": aid, "hitId": hit.hit_id, "workerId": worker, "turkSubmitTo": SUBMIT_TO})
        assert page.status_code == 200
        return aid, page.context["token"]

    # worker 1 submits here, but the externalSubmit POST never reaches MTurk: an unconfirmed claim,
    # never counted, never reviewed, never paid
    aid1, token1 = open_task("AWORKEREXTRA")
    assert client.post(url + "submit/", {"token": token1, "relevance": "3", "thoroughness": "3"}).status_code == 200
    a1 = Assignment.objects.get(provider_ref=aid1)
    assert (a1.state, a1.verified, a1.counted, a1.slot) == ("submitted", False, False, None)
    # workers 2 and 3 open the task (claims: no slot held); MTurk then drops worker 2 (returned there)
    # and gives the HIT to worker 5: a page visit never expires anyone (no "superseded" eviction)
    held = [open_task(w) for w in ("AWORKERTWO2", "AWORKERTHREE")]
    assert Assignment.objects.filter(item=hit.item, slot__isnull=False).count() == 0
    fake.assignments[held[0][0]]["AssignmentStatus"] = "Returned"
    aid5, token5 = open_task("AWORKERFIVE5")
    assert set(Assignment.objects.filter(provider_ref__in=[held[0][0], held[1][0], aid5]).values_list("state", flat=True)) == {"accepted"}
    assert not Assignment.objects.filter(campaign=campaign, state="expired").exists()
    # a blocked worker is told why on the HIT page and asked to return it
    from crowd.models import Worker, WorkerStatus

    WorkerStatus.objects.create(campaign=campaign, worker=Worker.objects.get(external_id="AWORKERTHREE"),
                                state="blocked", reason="gold accuracy 0/3")
    blocked_hit = MTurkHIT.objects.filter(batch__campaign=campaign, item__is_gold=False).exclude(pk=hit.pk).first()
    aid6 = fake.accept(blocked_hit.hit_id, "AWORKERTHREE")
    page = client.get(f"/mturk/{campaign.name}/item/{blocked_hit.item_id}/",
                      {"assignmentId": aid6, "hitId": blocked_hit.hit_id, "workerId": "AWORKERTHREE", "turkSubmitTo": SUBMIT_TO})
    assert page.context["reason"] == "blocked" and b"return this HIT" in page.content
    assert not Assignment.objects.filter(provider_ref=aid6).exists()
    # the periodic task (run in-process here) collects every live MTurk campaign and stores the report
    summary = collect_mturk.apply().get()
    assert campaign.name in summary
    sync = MTurkSync.objects.filter(campaign=campaign).latest("started_at")
    assert sync.report["extra"] == [] and sync.report["unconfirmed"] == [[aid1, "claim MTurk does not list"]]
    assert sync.report["confirmed"] == [] and sync.ok
    assert review.plan_review(campaign) == []  # an unconfirmed claim is never reviewed
    out = review.apply_review(campaign, MTurkAPI.for_campaign(campaign), [review.Decision(a1, review.REJECT, "no")])
    assert out.failed == [(aid1, "not confirmed by MTurk's records (a claim): never approved or rejected")]
    assert fake.assignments[aid1]["AssignmentStatus"] == "Accepted"
