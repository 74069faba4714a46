"""Issue 21, reproductions 3 and 4, through real HTTP requests (Django's test client, PostgreSQL):

* invitations are bound to their campaign: a rater invited to ``camp-b`` sees only ``camp-b`` on
  ``/rate/`` and every request about ``camp-a`` answers 404 as for a campaign that does not exist;
  owners, a rival owner and a superuser are raters nowhere unless invited;
* gold stays due: a rater who returns (or lets expire) a gold task is served another gold task,
  never a normal item (and no task at all once every gold item was given and dodged), and their
  judgments count only once they have passed the minimum number of gold checks (the rule of
  :func:`crowd.engine.gold_checks_required`).
"""
import importlib
import re
from datetime import timedelta

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from crowd import engine
from crowd.models import Assignment, Campaign, CampaignRater, Dataset, HumanJudgment, Item, WorkerStatus

from .conftest import run_command

pytestmark = pytest.mark.django_db

TASK = re.compile(r"/rate/[-\w]+/task/(\d+)/$")


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


@pytest.fixture
def owners():
    return User.objects.create_user("alice"), User.objects.create_user("bob")


def two_campaigns(dataset, owners):
    alice, bob = owners
    a = engine.create_campaign(dataset, "rating", name="camp-a", title="Alice's study", owners=[alice], options={"images": 2},
                               state=Campaign.LIVE, gold_every=0)
    b = engine.create_campaign(dataset, "rating", name="camp-b", title="Bob's study", owners=[bob], options={"images": 2},
                               state=Campaign.LIVE, gold_every=0)
    return a, b


def accept(client, name):
    """POST accept; the assignment it redirected to, or None (with the response)."""
    r = client.post(f"/rate/{name}/accept/")
    m = TASK.search(r.get("Location", "")) if r.status_code == 302 else None
    return (Assignment.objects.select_related("item").get(pk=int(m.group(1))) if m else None), r


def refused_everywhere(client, name, assignment_pk):
    """Every rater page of campaign ``name`` answers 404, and the answer is the one for a campaign
    that does not exist."""
    missing = [client.get("/rate/no-such-campaign/"), client.post("/rate/no-such-campaign/accept/")]
    answers = [
        client.get(f"/rate/{name}/"), client.post(f"/rate/{name}/accept/"),
        client.get(f"/rate/{name}/task/{assignment_pk}/"),
        client.post(f"/rate/{name}/task/{assignment_pk}/submit/", {"relevance": "5", "thoroughness": "5"}),
        client.post(f"/rate/{name}/task/{assignment_pk}/return/"),
    ]
    assert {r.status_code for r in missing + answers} == {404}
    assert answers[0].content == missing[0].content


# --- reproduction 3: invitations bound to campaigns ------------------------------------------------------
def test_a_rater_invited_to_camp_b_sees_and_does_only_camp_b(dataset, owners):
    camp_a, camp_b = two_campaigns(dataset, owners)
    out = run_command("invite_raters", "--campaign", "camp-b", "-n", "1", "--base-url", "http://testserver")
    link = out.strip()
    assert link.startswith("http://testserver/rate/join/") and link.endswith("?next=/rate/camp-b/")
    rater = Client()
    r = rater.get(link.removeprefix("http://testserver"))
    assert r.status_code == 302 and r["Location"] == "/rate/camp-b/"
    home = rater.get("/rate/").content.decode()
    assert 'href="/rate/camp-b/"' in home and "Bob&#x27;s study" in home
    assert "camp-a" not in home and "Alice" not in home

    # someone else's task in camp-a exists; the camp-b rater cannot reach the campaign at all
    other = engine.invite_workers(1, campaign=camp_a)[0]
    theirs = engine.accept(camp_a, other)
    before = list(Assignment.objects.order_by("pk").values_list("pk", "state", "answer"))
    refused_everywhere(rater, "camp-a", theirs.pk)
    assert list(Assignment.objects.order_by("pk").values_list("pk", "state", "answer")) == before
    assert not Assignment.objects.filter(campaign=camp_a).exclude(worker=other).exists()

    # camp-b works, and its task cannot be reached through camp-a's URLs either
    mine, _ = accept(rater, "camp-b")
    assert mine is not None and mine.campaign == camp_b
    r = rater.post(f"/rate/camp-a/task/{mine.pk}/submit/", {"relevance": "4", "thoroughness": "4", "item": mine.item_id})
    assert r.status_code == 404
    r = rater.post(f"/rate/camp-b/task/{mine.pk}/submit/", {"relevance": "4", "thoroughness": "4", "item": mine.item_id})
    assert r.status_code == 302
    assert not HumanJudgment.objects.filter(campaign=camp_a).exists()
    assert HumanJudgment.objects.filter(campaign=camp_b, rater=mine.worker.rater_id).count() == 2
    assert set(CampaignRater.objects.filter(worker=mine.worker).values_list("campaign__name", flat=True)) == {"camp-b"}


def test_owners_rivals_and_superusers_are_raters_only_where_invited(dataset, owners):
    camp_a, camp_b = two_campaigns(dataset, owners)
    alice, bob = owners
    root = User.objects.create_superuser("root", password="pw-root")
    staff = User.objects.create_user("sam", is_staff=True)
    someone = engine.invite_workers(1, campaign=camp_a)[0]
    theirs = engine.accept(camp_a, someone)
    for user in (alice, bob, root, staff):  # alice owns camp-a, bob (her rival) camp-b
        client = Client()
        client.force_login(user)
        home = client.get("/rate/")
        assert home.status_code == 200
        assert "No campaign is open" in home.content.decode() and "study" not in home.content.decode()
        for name in ("camp-a", "camp-b"):
            refused_everywhere(client, name, theirs.pk)
    assert Assignment.objects.filter(campaign__in=[camp_a, camp_b]).count() == 1
    assert not CampaignRater.objects.filter(worker__user__isnull=False).exists()

    # alice invites herself from her campaign page: the link is bound to camp-a, and only camp-a
    client = Client()
    client.force_login(alice)
    assert client.post("/campaigns/camp-a/invite/", {"n": "1", "label": "alice-test"}).status_code == 302
    link = client.session["new_invites"][0]
    assert link.endswith("?next=/rate/camp-a/")
    assert client.get(link.removeprefix("http://testserver")).status_code == 302
    mine, _ = accept(client, "camp-a")
    assert mine is not None and mine.campaign == camp_a and mine.worker.label == "alice-test1"
    refused_everywhere(client, "camp-b", theirs.pk)
    # a rival cannot make invitations for a campaign he does not own
    rival = Client()
    rival.force_login(bob)
    assert rival.post("/campaigns/camp-a/invite/", {"n": "1"}).status_code == 404
    assert CampaignRater.objects.filter(campaign=camp_a).count() == 2  # someone + alice's invitation


def test_existing_raters_keep_their_campaigns_through_the_data_migration(dataset, owners):
    camp_a, camp_b = two_campaigns(dataset, owners)
    w = engine.invite_workers(1)[0]  # an invitation from before the binding: rates nothing
    assert not engine.rater_campaigns(w).exists()
    engine.add_raters(camp_a, [w])
    engine.accept(camp_a, w)  # it worked in camp-a before the migration
    CampaignRater.objects.all().delete()
    migration = importlib.import_module("crowd.migrations.0009_campaign_raters")
    migration.keep_existing_raters(apps, None)
    assert list(engine.rater_campaigns(w).values_list("name", flat=True)) == ["camp-a"]


def test_mturk_campaigns_take_no_invitations(dataset, owners):
    engine.create_campaign(dataset, "rating", name="mt", owners=[owners[0]], options={"images": 2},
                           provider=Campaign.MTURK, gold_every=0)
    with pytest.raises(CommandError, match="takes its workers from mturk"):
        run_command("invite_raters", "--campaign", "mt")
    assert not CampaignRater.objects.exists()


# --- reproduction 4: gold that stays due ------------------------------------------------------------------
def gold_campaign(dataset, **kw):
    """Rating, k = 1, 4 gold items, a gold check every 3rd task, 3 gold answers needed (default)."""
    kw.setdefault("options", {"images": 3, "gold": 4})
    c = engine.create_campaign(dataset, "rating", name=kw.pop("name", "gold-loop"), k=1, gold_every=3,
                               state=Campaign.LIVE, **kw)
    assert c.gold_min_answers == 3
    return c


def joined(campaign):
    worker = engine.invite_workers(1, campaign=campaign)[0]
    client = Client()
    assert client.get(f"/rate/join/{worker.token}/").status_code == 302
    return worker, client


def answer_gold(client, a, correct=True):
    relevance = "1" if correct else "5"
    r = client.post(f"/rate/{a.campaign.name}/task/{a.pk}/submit/",
                    {"relevance": relevance, "thoroughness": "1", "item": a.item_id})
    assert r.status_code == 302


def answer(client, a):
    r = client.post(f"/rate/{a.campaign.name}/task/{a.pk}/submit/",
                    {"relevance": "4", "thoroughness": "3", "item": a.item_id})
    assert r.status_code == 302


def test_returning_every_gold_task_earns_only_gold_again_and_nothing_counted(dataset):
    """The return-the-gold loop: each returned (or expired) gold task is replaced by another gold
    task, never by a normal one; once every gold item was given and dodged, there is no task at all."""
    c = gold_campaign(dataset)
    worker, client = joined(c)
    served = []
    for n in range(4):
        a, r = accept(client, c.name)
        assert a is not None, r.content[:300]
        assert a.item.is_gold, f"task {n + 1} was a normal item after {n} gold returns"
        served.append(a.item_id)
        if n == 2:  # letting a gold task expire does not help either
            Assignment.objects.filter(pk=a.pk).update(deadline=timezone.now() - timedelta(seconds=1))
            continue
        assert client.post(f"/rate/{c.name}/task/{a.pk}/return/", {"reason": "too hard"}).status_code == 302
    assert set(served) == set(Item.objects.filter(campaign=c, is_gold=True).values_list("pk", flat=True))
    for response in (client.post(f"/rate/{c.name}/accept/"), client.get(f"/rate/{c.name}/")):
        assert response.status_code == 200
        assert 'data-reason="gold"' in response.content.decode() and "quality check" in response.content.decode()
    mine = Assignment.objects.filter(campaign=c, worker=worker)
    assert mine.count() == 4 and not mine.filter(item__is_gold=False).exists()
    assert sorted(mine.values_list("state", flat=True)) == ["expired", "returned", "returned", "returned"]
    assert not Assignment.objects.filter(campaign=c, counted=True).exists()
    assert not HumanJudgment.objects.filter(campaign=c).exists()
    # another rater is not affected
    other, client2 = joined(c)
    a, _ = accept(client2, c.name)
    assert a is not None and a.item.is_gold


def test_judgments_count_only_once_the_minimum_gold_checks_pass(dataset):
    c = gold_campaign(dataset)
    worker, client = joined(c)
    kinds, normal = [], []
    while len([k for k in kinds if k == "gold"]) < 3:
        a, _ = accept(client, c.name)
        kinds.append("gold" if a.item.is_gold else "normal")
        if a.item.is_gold:
            if len(kinds) == 1:  # the first gold task is returned: gold stays due
                assert client.post(f"/rate/{c.name}/task/{a.pk}/return/").status_code == 302
                kinds[-1] = "returned"
                continue
            answer_gold(client, a)
        else:
            answer(client, a)
            normal.append(a.pk)
            a.refresh_from_db()
            if len(kinds) < 9:  # before the 3rd gold answer: stored, holding no slot, not counted
                assert a.state == "submitted" and a.awaiting_gold and not a.counted and a.slot is None
                assert not HumanJudgment.objects.filter(campaign=c).exists()
    # the rate held: the returned gold, then gold, 2 normal, gold, 2 normal, gold
    assert kinds == ["returned", "gold", "normal", "normal", "gold", "normal", "normal", "gold"]
    # the 3rd gold answer passed the checks: the 4 waiting judgments count now, once each
    done = Assignment.objects.filter(pk__in=normal)
    assert done.filter(counted=True, awaiting_gold=False, slot=0).count() == 4
    assert HumanJudgment.objects.filter(campaign=c, rater=worker.rater_id).count() == 2 * 4
    assert engine.count_awaiting_gold(c, worker) == 0  # idempotent
    assert HumanJudgment.objects.filter(campaign=c).count() == 2 * 4
    # from now on a judgment counts at once
    a, _ = accept(client, c.name)
    assert not a.item.is_gold
    answer(client, a)
    a.refresh_from_db()
    assert a.counted and not a.awaiting_gold


def test_a_blocked_worker_never_counts_and_frees_the_items(dataset):
    c = gold_campaign(dataset)
    spammer, client = joined(c)
    while engine.worker_state(c, spammer) != WorkerStatus.BLOCKED:
        a, r = accept(client, c.name)
        assert a is not None, r.content[:300]
        if a.item.is_gold:
            answer_gold(client, a, correct=False)
        else:
            answer(client, a)
    waiting = Assignment.objects.filter(campaign=c, worker=spammer, item__is_gold=False)
    assert waiting.count() == 4 and not waiting.filter(counted=True).exists() and not waiting.filter(slot__isnull=False)
    assert engine.count_awaiting_gold(c, spammer) == 0
    assert not HumanJudgment.objects.filter(campaign=c).exists()
    # another rater gets the items the spammer answered (they hold no slot)
    good, client2 = joined(c)
    seen = set()
    while True:
        a, r = accept(client2, c.name)
        if a is None:  # every item complete: the campaign closed itself (issue 15)
            c.refresh_from_db()
            assert r.status_code == 200 and b"has finished" in r.content and c.state == Campaign.FINISHED
            break
        seen.add(a.item_id)
        answer_gold(client2, a) if a.item.is_gold else answer(client2, a)
    assert set(waiting.values_list("item_id", flat=True)) <= seen
    per_item = Assignment.objects.filter(campaign=c, counted=True).values_list("item_id", flat=True)
    assert len(per_item) == len(set(per_item)) == Item.objects.filter(campaign=c, is_gold=False).count()


def test_a_waiting_judgment_never_makes_an_item_exceed_k(dataset):
    """k = 1: while a newcomer's judgment waits for their gold checks, another rater does the same
    item (it holds no slot) and passes first; when the newcomer passes, their judgment is kept but
    not counted: the item has exactly one counted judgment."""
    c = gold_campaign(dataset, options={"images": 2, "gold": 3})
    newcomer, client = joined(c)
    g, _ = accept(client, c.name)
    assert g.item.is_gold
    answer_gold(client, g)
    first, _ = accept(client, c.name)
    assert not first.item.is_gold
    answer(client, first)
    first.refresh_from_db()
    assert first.awaiting_gold and first.slot is None and not first.counted

    other = engine.invite_workers(1, campaign=c)[0]
    done = []
    while engine._graded_gold(c, other) < 3:
        a = engine.accept(c, other)
        done.append(a.item_id)
        engine.submit(a.pk, other, {"relevance": "1" if a.item.is_gold else "2", "thoroughness": "2"})
    assert first.item_id in done  # the newcomer's item was still open
    theirs = Assignment.objects.get(item_id=first.item_id, worker=other)
    assert theirs.counted and theirs.slot == 0

    while engine._graded_gold(c, newcomer) < 3:  # the newcomer passes too (gold served when nothing else is left)
        a, r = accept(client, c.name)
        assert a is not None, r.content[:300]
        answer_gold(client, a) if a.item.is_gold else answer(client, a)
    first.refresh_from_db()
    assert not first.awaiting_gold and not first.counted and first.answer == {"relevance": 4, "thoroughness": 3}
    assert Assignment.objects.filter(item_id=first.item_id, counted=True).count() == 1
    counted = list(Assignment.objects.filter(campaign=c, counted=True).values_list("item_id", flat=True))
    assert len(counted) == len(set(counted))
    judged = HumanJudgment.objects.filter(campaign=c).values_list("caption_id", flat=True)
    assert len(judged) == 2 * len(counted)
