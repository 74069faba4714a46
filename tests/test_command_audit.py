"""Issue 31, "an audit entry for publishing results and every other irreversible owner action": the
same actions done with the management commands are written to the campaign's audit trail as the
owner pages write them (crowd.audit.PROVIDER_ACTIONS; actor ``command line``, the command in
``detail["command"]``), after a real run against the fake Prolific server (tests/fake_prolific)
and the fake MTurk (tests/fake_mturk), and never after a dry run or a preview:

* ``manage.py prolific``: publish, add-places, stop, approve, reject, review --yes, pay;
* ``manage.py mturk``: publish, review, send-bonuses, block, notify, expire;
* ``manage.py invite_raters``: the invitation links, as the campaign page's ``invite``."""
from __future__ import annotations

import pytest
from django.test import override_settings

from crowd import engine
from crowd.models import AuditEntry, Campaign, Dataset, ProlificBonus
from crowd.mturk import publish as pub
from crowd.mturk import review
from crowd.prolific import study as st
from crowd.prolific_client import ProlificAPI
from crowd.prolific.sync import sync_study
from tests.fake_prolific import fake_prolific  # noqa: F401 - fixture

from . import fake_mturk
from .conftest import run_command
from .test_prolific_submissions import LONG, arrive, dataset, finish, make_study, owner, work  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def trail(campaign) -> list[tuple]:
    """(action, actor, target, command) of ``campaign``'s audit entries, oldest first."""
    return [(e.action, e.actor, e.target, e.detail.get("command"))
            for e in AuditEntry.objects.filter(campaign=campaign).order_by("at", "pk")]


def test_prolific_commands_write_the_pages_audit_entries_and_dry_runs_none(fake_prolific, dataset, owner, tmp_path):
    # publishing a draft study: the dry run writes nothing, the real run the page's entry
    draft = engine.create_campaign(dataset, "rating", name="pd", owners=[owner], k=1, provider=Campaign.PROLIFIC,
                                   bundle_size=2, gold_every=0, options={"images": 2, "gold": 0})
    st.create_draft(draft, ProlificAPI(campaign=draft), reward=150, estimated_minutes=12,
                    site_url="https://eval.example.org")
    assert "DRY RUN" in run_command("prolific", "publish", "pd", "--dry-run")
    assert trail(draft) == []
    assert "is live" in run_command("prolific", "publish", "pd", "--yes")
    assert trail(draft) == [("prolific-publish", "command line", "", "manage.py prolific publish")]
    entry = AuditEntry.objects.get(campaign=draft)
    assert entry.user is None and "is live" in entry.detail["result"]

    study = make_study(fake_prolific, dataset, owner)
    campaign = study.campaign
    sids = []
    for _ in range(3):
        session, sid = arrive(fake_prolific, study)
        work(session)
        finish(fake_prolific, session, sid)
        sids.append(sid)
    sync_study(study, ProlificAPI(campaign=campaign))
    # dry runs and previews: nothing sent, nothing recorded
    run_command("prolific", "add-places", campaign.name, "5", "--dry-run")
    run_command("prolific", "stop", campaign.name, "--dry-run")
    assert "PREVIEW" in run_command("prolific", "review", campaign.name)
    assert "PREVIEW" in run_command("prolific", "review", campaign.name, "--dry-run")
    run_command("prolific", "sync", campaign.name)  # changes nothing that cannot be changed back
    assert trail(campaign) == []
    assert {fake_prolific.submissions[s]["status"] for s in sids} == {"AWAITING REVIEW"}

    run_command("prolific", "approve", campaign.name, sids[0])
    run_command("prolific", "reject", campaign.name, sids[1], "--category", "LOW_EFFORT", "--message", LONG)
    assert "approved 1" in run_command("prolific", "review", campaign.name, "--yes")
    pid = study.submissions.get(submission_id=sids[0]).participant_id
    lines = tmp_path / "bonus.csv"
    lines.write_text(f"{pid},1.50\n", encoding="utf-8")
    run_command("prolific", "bonus", campaign.name, str(lines))  # creates the bonus, pays nothing: not recorded
    bonus = ProlificBonus.objects.get(study=study)
    run_command("prolific", "pay", campaign.name, bonus.bonus_id)
    run_command("prolific", "add-places", campaign.name, "5")
    run_command("prolific", "stop", campaign.name)
    assert fake_prolific.pay_calls == [bonus.bonus_id]
    assert fake_prolific.submissions[sids[2]]["status"] == "APPROVED"
    assert trail(campaign) == [
        ("prolific-approve", "command line", sids[0], "manage.py prolific approve"),
        ("prolific-reject", "command line", sids[1], "manage.py prolific reject"),
        ("prolific-review", "command line", "", "manage.py prolific review"),
        ("prolific-pay", "command line", bonus.bonus_id, "manage.py prolific pay"),
        ("prolific-add-places", "command line", "", "manage.py prolific add-places"),
        ("prolific-stop", "command line", "", "manage.py prolific stop"),
    ]
    assert "approved 1" in AuditEntry.objects.get(campaign=campaign, action="prolific-review").detail["result"]


@pytest.fixture
def fake_turk():
    fake_mturk.FAKES.clear()
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        yield fake_mturk.fake_client("sandbox")


def test_mturk_commands_write_the_pages_audit_entries_and_dry_runs_none(fake_turk, dataset):
    campaign = engine.create_campaign(dataset, "rating", name="mt", options={"images": 3, "gold": 0},
                                      reward="0.05", provider=Campaign.MTURK, gold_every=0)
    config = pub.config_for(campaign)
    config.public_url = "https://captions.example.org"
    config.save()
    verbs = ("publish", "review", "send-bonuses", "block", "expire")
    for verb in verbs:
        run_command("mturk", verb, campaign.name, "--dry-run")
    run_command("mturk", "notify", campaign.name, "--subject", "Thanks", "--message", "Thank you.", "--dry-run")
    assert not fake_turk.hits and trail(campaign) == []

    assert "HITs created 3" in run_command("mturk", "publish", campaign.name, "--limit", "3")
    hit_id = next(iter(fake_turk.hits))
    aid = fake_turk.accept(hit_id, "AWORKER0001")
    fake_turk.external_submit({"assignmentId": aid, "relevance": "4", "thoroughness": "3"})
    run_command("mturk", "collect", campaign.name)  # reads MTurk, changes nothing there: not recorded
    run_command("mturk", "review", campaign.name)
    # a bonus in the ledger (no gold in this campaign, so granted without the command's gold rule): not recorded
    assert review.grant_bonuses(campaign, "0.10", "careful work", "careful", min_gold_answers=0).done == {"granted": 1}
    run_command("mturk", "send-bonuses", campaign.name)
    run_command("mturk", "block", campaign.name)
    run_command("mturk", "notify", campaign.name, "--subject", "Thanks", "--message", "Thank you.")
    run_command("mturk", "expire", campaign.name)
    assert len(fake_turk.bonuses) == 1
    assert trail(campaign) == [(f"mturk-{verb}", "command line", "", f"manage.py mturk {verb}")
                               for verb in ("publish", "review", "send-bonuses", "block", "notify", "expire")]
    assert "HITs created 3" in AuditEntry.objects.get(campaign=campaign, action="mturk-publish").detail["result"]


def test_invite_raters_records_the_links_as_the_campaign_page_does(dataset):
    campaign = engine.create_campaign(Dataset.objects.get(name="plsub"), "rating", name="local",
                                      options={"images": 2, "gold": 0}, gold_every=0)
    out = run_command("invite_raters", "--campaign", "local", "-n", "3", "--label", "lab-")
    assert out.count("/rate/join/") == 3
    entry = AuditEntry.objects.get(campaign=campaign)
    assert (entry.action, entry.actor, entry.target, entry.user) == ("invite", "command line", "lab-", None)
    assert entry.detail == {"links": 3, "command": "manage.py invite_raters"}
