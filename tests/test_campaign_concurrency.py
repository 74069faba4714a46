"""Acceptance: 50 simulated raters at once over HTTP against a live server on PostgreSQL, on a
k = 3 campaign, with double submissions, expiries (and late submissions) and returns injected.
Every item must end with exactly 3 counted judgments, no worker may judge an item twice, and no
submission may be lost."""
from collections import Counter

import pytest
from django.db import connection

from crowd import engine
from crowd.models import Assignment, Campaign, Dataset, HumanJudgment
from crowd.simulate import Faults, simulate

from .conftest import run_command

pytestmark = pytest.mark.django_db(transaction=True)


def test_fifty_raters_at_once_lose_nothing_and_never_double_assign(live_server, subset_dir):
    assert connection.vendor == "postgresql", "the concurrency acceptance test needs PostgreSQL (DATABASE_URL)"
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    # 10 images (about 60 items, 180 slots) are enough for 50 raters to contend for every slot; a
    # gold check every 2nd task passes each rater's 3 gold checks after 2 answers held awaiting gold
    # (still counted concurrently afterwards), so the run is not mostly uncounted early answers
    campaign = engine.create_campaign(
        Dataset.objects.get(name="sub"), "rating", name="load", options={"images": 10, "gold": 3},
        k=3, gold_every=2, state=Campaign.LIVE,
    )
    items = campaign.items.filter(is_gold=False)
    n_items = items.count()
    assert n_items > 50  # every candidate caption of 10 images

    faults = Faults(double_submit=0.15, return_task=0.05, abandon=0.05, late_submit=0.6)
    result = simulate(campaign, raters=50, url=live_server.url, faults=faults, seed=7, noise=0.05)

    # the faults really happened, several times each (how often varies with the threads' scheduling)
    assert result.counts["double"] > 10 and result.counts["returned"] > 3
    assert result.counts["abandoned"] > 3 and result.counts["late"] > 0
    assert not [k for k in result.counts if k.startswith("http_")], result.counts
    # exactly k counted judgments per item, from k different workers
    per_item = Counter(Assignment.objects.filter(campaign=campaign, counted=True, item__is_gold=False)
                       .values_list("item_id", flat=True))
    assert len(per_item) == n_items and set(per_item.values()) == {3}
    pairs = Assignment.objects.filter(campaign=campaign).values_list("item_id", "worker_id")
    assert len(pairs) == len(set(pairs))
    # nothing lost: every accepted submission (first or late) is stored, repeats added nothing
    done = Assignment.objects.filter(campaign=campaign, state__in=Assignment.DONE_STATES)
    assert done.count() == result.counts["submitted"] + result.counts["late"]
    assert done.filter(late=True).count() == result.counts["late"]
    assert Assignment.objects.filter(campaign=campaign, state="returned").count() == result.counts["returned"]
    assert Assignment.objects.filter(campaign=campaign, state="expired").count() == (
        result.counts["abandoned"] - result.counts["late"]
    )
    assert not Assignment.objects.filter(campaign=campaign, state="accepted").exists()
    # the judgment tables hold exactly the counted answers (2 criteria each)
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 2 * 3 * n_items
    counted = Assignment.objects.filter(campaign=campaign, counted=True).select_related("item", "worker")
    stored = {(j.caption_id, j.rater, j.criterion): j.score for j in HumanJudgment.objects.filter(campaign=campaign)}
    for a in counted:
        for criterion in ("relevance", "thoroughness"):
            assert stored[(a.item.payload["caption"], a.worker.rater_id, criterion)] == a.answer[criterion]
