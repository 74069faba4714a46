"""The assignment engine on PostgreSQL: building the five kinds from real Flickr8k data, claiming,
submitting, returning, expiring, late and repeated submissions, gold checks and blocking, and bad
input that must change nothing."""
from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from crowd import engine
from crowd.kinds import AnswerError, CampaignSpecError
from crowd.models import (
    Assignment,
    Campaign,
    Caption,
    Dataset,
    HumanJudgment,
    Item,
    PairwiseJudgment,
    System,
    WorkerStatus,
)

from .conftest import run_command

pytestmark = pytest.mark.django_db

ATOMS = [["dog", "entity"], ["grass", "entity"], ["running", "action"], ["jumping", "action"], ["red", "attribute"]]


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


def make(dataset, kind, name=None, **kw):
    kw.setdefault("state", Campaign.LIVE)
    kw.setdefault("gold_every", 0)
    options = kw.pop("options", {})
    if kind == "visual_atom":
        options.setdefault("atoms", ATOMS)
    return engine.create_campaign(dataset, kind, name=name or f"c-{kind}", options=options, **kw)


def snapshot():
    """Counts of every table a request could write."""
    return (
        Campaign.objects.count(), Item.objects.count(), Assignment.objects.count(),
        list(Assignment.objects.order_by("pk").values_list("state", "slot", "counted", "answer")),
        HumanJudgment.objects.count(), PairwiseJudgment.objects.count(), Caption.objects.count(),
        System.objects.count(), WorkerStatus.objects.count(),
    )


def valid_answer(assignment):
    kind = assignment.campaign.kind
    if kind == "diversity":
        return {f"set_{p}": "0.5" for p in range(len(assignment.order["sets"]))}
    if kind == "rating":
        return {"relevance": "4", "thoroughness": "3"}
    if kind == "forced_choice":
        return {"choice": "1"}
    if kind == "visual_atom":
        return {"visual": "yes"}
    return {"description": f"a brown dog runs across the green grass number {assignment.pk}"}


# --- building ---------------------------------------------------------------------------------
def test_diversity_items_are_images_with_caption_sets_and_identical_gold(dataset):
    c = make(dataset, "diversity", options={"images": 10, "gold": 3})
    items = list(c.items.filter(is_gold=False))
    assert len(items) == 10
    names = {s.name for s in dataset.systems.all()}
    for it in items:
        assert {s["name"] for s in it.payload["sets"]} == names  # references and candidates of the image
        for s in it.payload["sets"]:
            texts = set(Caption.objects.filter(image_id=it.payload["image"], system_id=s["system"]).values_list("text", flat=True))
            assert {t for _, t in s["captions"]} == texts
    gold = list(c.items.filter(is_gold=True))
    assert len(gold) == 3
    for g in gold:
        identical = g.payload["sets"][g.gold["set"]]["captions"]
        assert len({t for _, t in identical}) == 1 and len(identical) >= 2
    assert sorted(c.items.values_list("position", flat=True)) == list(range(13))


def test_each_kind_builds_from_imported_data(dataset):
    rating = make(dataset, "rating", options={"images": 5})
    n_cands = dataset.candidates().filter(image__key__in=[i.payload["image_key"] for i in rating.items.filter(is_gold=False)]).count()
    assert rating.items.filter(is_gold=False).count() == n_cands
    for g in rating.items.filter(is_gold=True):  # a caption of another image
        own = set(Caption.objects.filter(image_id=g.payload["image"]).values_list("text", flat=True))
        assert g.payload["text"] not in own and g.gold == {"relevance": 1}
    fc = make(dataset, "forced_choice", options={"images": 8, "pairs_per_image": 2})
    for it in fc.items.filter(is_gold=False):
        a, b, cc = it.payload["a"][0], it.payload["b"][0], it.payload["c"][0]
        assert len({a, b, cc}) == 3
        assert Caption.objects.get(pk=a).system_id == dataset.reference_system_id
    for g in fc.items.filter(is_gold=True):
        assert g.payload[g.gold["choice"]][1] == g.payload["a"][1]
    atoms = make(dataset, "visual_atom")
    assert atoms.items.filter(is_gold=False).count() == len(ATOMS)
    dog = atoms.items.get(key="atom-entity-dog")
    assert dog.payload["examples"] and all("dog" in e.lower() for e in dog.payload["examples"])
    desc = make(dataset, "description", options={"images": 4})
    assert desc.items.count() == 4 and desc.judgments_per_item == 5
    assert System.objects.filter(dataset=dataset, name="campaign-c-description", kind="human").exists()


@pytest.mark.parametrize("kind, kwargs, message", [
    ("diversity", {"options": {"systems": ["nope"]}}, "unknown system"),
    ("diversity", {"options": {"images": 41}}, "only 40 images"),
    ("diversity", {"options": {"captions_per_set": 1}}, "at least 2 captions"),
    ("diversity", {"k": 0}, "at least 1"),
    ("visual_atom", {"options": {"atoms": [["dog", "animal"]]}}, "category"),
    ("visual_atom", {"options": {"atoms": [["dog", "entity"], ["dog", "entity"]]}}, "twice"),
    ("nonsense", {}, "unknown campaign kind"),
])
def test_bad_campaign_specs_write_nothing(dataset, kind, kwargs, message):
    before = snapshot()
    with pytest.raises(CampaignSpecError, match=message):
        make(dataset, kind, **kwargs)
    assert snapshot() == before


def test_duplicate_name_and_description_system_clash_write_nothing(dataset):
    make(dataset, "rating", name="dup", options={"images": 2})
    before = snapshot()
    with pytest.raises(CampaignSpecError, match="exists already"):
        make(dataset, "diversity", name="dup")
    System.objects.create(dataset=dataset, name="campaign-clash", kind="human")
    before = snapshot()
    with pytest.raises(CampaignSpecError, match="already has a system"):
        make(dataset, "description", name="clash", options={"images": 2})
    assert snapshot() == before


# --- claiming and submitting ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["diversity", "rating", "forced_choice", "visual_atom", "description"])
def test_accept_submit_records_one_counted_judgment(dataset, kind):
    c = make(dataset, kind, options={"images": 3} if kind != "visual_atom" else {})
    w = engine.invite_workers(1)[0]
    a = engine.accept(c, w)
    assert a.state == "accepted" and a.slot == 0 and a.template_version == c.template_version
    assert engine.accept(c, w).pk == a.pk  # an unfinished task is resumed, not doubled
    result = engine.submit(a.pk, w, valid_answer(a), submit_key="k1")
    a.refresh_from_db()
    assert result.created and result.counted and not result.late
    assert a.state == "submitted" and a.counted and a.answer and a.work_seconds >= 0
    if kind == "diversity":
        assert HumanJudgment.objects.filter(campaign=c).count() == len(a.item.payload["sets"])
        assert set(HumanJudgment.objects.filter(campaign=c).values_list("score", flat=True)) == {0.5}
    elif kind == "rating":
        rows = dict(HumanJudgment.objects.filter(campaign=c).values_list("criterion", "score"))
        assert rows == {"relevance": 4.0, "thoroughness": 3.0}
    elif kind == "forced_choice":
        pj = PairwiseJudgment.objects.get(campaign=c)
        assert pj.choice == a.order["sides"][0] and pj.rater == w.rater_id
    elif kind == "description":
        cap = Caption.objects.get(system__name="campaign-c-description")
        assert cap.image_id == a.item.payload["image"] and cap.text.startswith("a brown dog")
    # a repeated request (double click, retry) records nothing new
    before = snapshot()
    again = engine.submit(a.pk, w, valid_answer(a), submit_key="k1")
    assert not again.created and snapshot() == before
    again = engine.submit(a.pk, w, valid_answer(a), submit_key="other-key")  # same answer, new key
    assert not again.created and snapshot() == before


def test_presentation_order_is_random_per_assignment_and_answers_are_in_item_order(dataset):
    c = make(dataset, "diversity", options={"images": 20}, k=1)
    w = engine.invite_workers(1)[0]
    orders = []
    for _ in range(20):
        a = engine.accept(c, w)
        orders.append(tuple(a.order["sets"]))
        screen = {f"set_{p}": f"{0.1 * (p + 1):.1f}" for p in range(len(a.order["sets"]))}
        engine.submit(a.pk, w, screen)
        a.refresh_from_db()
        for pos, index in enumerate(a.order["sets"]):
            assert a.answer["scores"][index] == pytest.approx(0.1 * (pos + 1))
    assert len(set(orders)) == 2  # both orders of the two sets occur
    seeds = Assignment.objects.filter(campaign=c).values_list("seed", flat=True)
    assert len(set(seeds)) == 20


@pytest.mark.parametrize("data, field", [
    ({"set_0": "1.5", "set_1": "0.2"}, "set_0"),
    ({"set_0": "-0.1", "set_1": "0.2"}, "set_0"),
    ({"set_0": "abc", "set_1": "0.2"}, "set_0"),
    ({"set_0": "nan", "set_1": "0.2"}, "set_0"),
    ({"set_0": "0.3"}, "set_1"),
])
def test_out_of_range_or_missing_answers_store_nothing(dataset, data, field):
    c = make(dataset, "diversity", options={"images": 2})
    w = engine.invite_workers(1)[0]
    a = engine.accept(c, w)
    before = snapshot()
    with pytest.raises(AnswerError) as err:
        engine.submit(a.pk, w, data)
    assert field in err.value.errors
    assert snapshot() == before


def test_forged_item_foreign_assignment_closed_campaign_and_returned_task_change_nothing(dataset):
    c = make(dataset, "rating", options={"images": 3})
    w1, w2 = engine.invite_workers(2)
    a1 = engine.accept(c, w1)
    other_item = Item.objects.filter(campaign=c).exclude(pk=a1.item_id).first()
    before = snapshot()
    with pytest.raises(engine.EngineError, match="item does not match"):
        engine.submit(a1.pk, w1, valid_answer(a1), item_id=other_item.pk)
    with pytest.raises(engine.Forbidden):
        engine.submit(a1.pk, w2, valid_answer(a1))
    with pytest.raises(engine.Forbidden):
        engine.return_assignment(a1.pk, w2)
    with pytest.raises(engine.EngineError, match="no such assignment"):
        engine.submit(10**9, w1, valid_answer(a1))
    assert snapshot() == before
    engine.set_state(c, Campaign.FINISHED)
    with pytest.raises(engine.Conflict, match="finished"):
        engine.submit(a1.pk, w1, valid_answer(a1))
    assert snapshot() == before
    with pytest.raises(engine.Conflict):
        engine.set_state(c, Campaign.LIVE)  # finished is final
    c2 = make(dataset, "rating", name="c2", options={"images": 2})
    a2 = engine.accept(c2, w1)
    engine.return_assignment(a2.pk, w1, "  the image does not load  ")
    a2.refresh_from_db()
    assert a2.state == "returned" and a2.slot is None and a2.return_reason == "the image does not load"
    before = snapshot()
    with pytest.raises(engine.Conflict, match="returned"):
        engine.submit(a2.pk, w1, valid_answer(a2))
    assert snapshot() == before
    assert engine.accept(c2, w1).item_id != a2.item_id  # never offered the same item again


def test_k_slots_and_one_judgment_per_worker_are_database_constraints(dataset):
    c = make(dataset, "rating", options={"images": 1}, k=2)
    workers = engine.invite_workers(4)
    items = set(c.items.filter(is_gold=False).values_list("pk", flat=True))
    for w in workers:
        while True:
            try:
                a = engine.accept(c, w)
            except engine.NoTask as exc:
                assert exc.code == "done"
                break
            engine.submit(a.pk, w, valid_answer(a))
    for item in items:
        done = Assignment.objects.filter(item_id=item, counted=True)
        assert done.count() == 2 and len(set(done.values_list("worker", flat=True))) == 2
    a = Assignment.objects.filter(campaign=c, counted=True).first()
    fields = dict(campaign=c, item=a.item, seed=1, order={}, template_version="x", deadline=timezone.now())
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(worker=a.worker, **fields)  # same worker, same item
    other = engine.invite_workers(1)[0]
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(worker=other, slot=a.slot, **fields)  # a slot already held
    with pytest.raises(IntegrityError), transaction.atomic():
        Assignment.objects.create(worker=other, slot=None, state="expired", **{**fields, "item": a.item})
        Assignment.objects.filter(worker=other).update(slot=5)  # an expired assignment cannot hold a slot


def test_expiry_releases_the_slot_and_a_late_submission_is_kept_and_flagged(dataset):
    c = make(dataset, "rating", options={"images": 1}, k=1)
    item_count = c.items.filter(is_gold=False).count()
    w1, w2 = engine.invite_workers(2)
    a1 = engine.accept(c, w1)
    Assignment.objects.filter(pk=a1.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    from crowd.tasks import expire_assignments

    assert expire_assignments.apply().get() == 1  # the periodic Celery task
    a1.refresh_from_db()
    assert a1.state == "expired" and a1.slot is None and a1.expired_at is not None
    a2 = engine.accept(c, w2)
    assert a2.item_id == a1.item_id and a2.slot == 0  # the slot went back to the pool
    engine.submit(a2.pk, w2, valid_answer(a2))
    late = engine.submit(a1.pk, w1, {"relevance": "2", "thoroughness": "2"})
    a1.refresh_from_db()
    assert late.created and late.late and not late.counted
    assert a1.state == "submitted" and a1.late and not a1.counted and a1.answer == {"relevance": 2, "thoroughness": 2}
    assert Assignment.objects.filter(item_id=a1.item_id, counted=True).count() == 1
    assert HumanJudgment.objects.filter(campaign=c, caption_id=a1.item.payload["caption"]).count() == 2  # w2's only
    assert item_count >= 1


def test_a_late_submission_counts_when_its_slot_is_still_free(dataset):
    c = make(dataset, "rating", options={"images": 1}, k=1)
    w = engine.invite_workers(1)[0]
    a = engine.accept(c, w)
    Assignment.objects.filter(pk=a.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    engine.expire_overdue()
    result = engine.submit(a.pk, w, valid_answer(a))
    a.refresh_from_db()
    assert result.late and result.counted and a.slot == 0 and a.counted


def test_why_there_is_no_task(dataset):
    c = make(dataset, "visual_atom", state=Campaign.DRAFT, per_worker_cap=2)
    w = engine.invite_workers(1)[0]
    for state, code in [(None, "draft"), (Campaign.LIVE, None), (Campaign.PAUSED, "paused")]:
        if state:
            engine.set_state(c, state)
        if code:
            with pytest.raises(engine.NoTask) as exc:
                engine.accept(c, w)
            assert exc.value.code == code and str(exc.value) == engine.REASONS[code]
    engine.set_state(c, Campaign.LIVE)
    for _ in range(2):
        a = engine.accept(c, w)
        engine.submit(a.pk, w, valid_answer(a))
    with pytest.raises(engine.NoTask) as exc:
        engine.accept(c, w)
    assert exc.value.code == "cap"
    c.expires_at = timezone.now() - timedelta(minutes=1)
    c.save()
    assert engine.unavailable_reason(c, engine.invite_workers(1)[0]) == "expired"


def test_failed_gold_blocks_the_worker_and_their_work_is_redone_by_others(dataset):
    c = make(dataset, "forced_choice", options={"images": 10, "gold": 4}, gold_every=2, k=1)
    c.gold_min_answers = 3
    c.save()
    spammer, good = engine.invite_workers(2)
    for _ in range(6):
        a = engine.accept(c, spammer)
        if a.item.is_gold:
            gold_side = a.item.gold["choice"]
            wrong = "2" if a.order["sides"][0] == gold_side else "1"  # pick the non-copy
            engine.submit(a.pk, spammer, {"choice": wrong})
        else:
            engine.submit(a.pk, spammer, {"choice": "1"})
        if engine.worker_state(c, spammer) == WorkerStatus.BLOCKED:
            break
    status = WorkerStatus.objects.get(campaign=c, worker=spammer)
    assert status.state == "blocked" and "0/3" in status.reason
    with pytest.raises(engine.NoTask) as exc:
        engine.accept(c, spammer)
    assert exc.value.code == "blocked"
    released = Assignment.objects.filter(campaign=c, worker=spammer, item__is_gold=False)
    assert released.count() == 2 and not released.filter(counted=True).exists()  # kept, not counted
    assert all(a.answer for a in released)
    assert not PairwiseJudgment.objects.filter(rater=spammer.rater_id).exists()
    redo = {a.item_id for a in released}
    seen = set()
    while True:
        try:
            a = engine.accept(c, good)
        except engine.NoTask:
            break
        seen.add(a.item_id)
        side = "1" if not a.item.is_gold or a.order["sides"][0] == a.item.gold["choice"] else "2"
        engine.submit(a.pk, good, {"choice": side})
    assert redo <= seen
    assert engine.worker_state(c, good) == WorkerStatus.OK


@pytest.mark.parametrize("kind", ["rating", "description"])
def test_releasing_a_workers_counted_work_undoes_what_the_kind_recorded(dataset, kind):
    """A blocked worker's counted work is released through the kind: judgment rows for ratings, the
    collected captions for descriptions; another worker's records stay."""
    c = make(dataset, kind, options={"images": 2}, k=2)
    w1, w2 = engine.invite_workers(2)
    mine = []
    for w in (w1, w2, w1):
        a = engine.accept(c, w)
        engine.submit(a.pk, w, valid_answer(a))
        if w == w1:
            mine.append(a.pk)
    recorded = (HumanJudgment.objects.filter(campaign=c).count() if kind == "rating"
                else Caption.objects.filter(system__name="campaign-c-description").count())
    assert recorded == (6 if kind == "rating" else 3)
    assert engine.release_counted_work(c, w1) == 2
    if kind == "rating":
        assert set(HumanJudgment.objects.filter(campaign=c).values_list("rater", flat=True)) == {w2.rater_id}
        assert HumanJudgment.objects.filter(campaign=c).count() == 2
    else:
        left = Caption.objects.filter(system__name="campaign-c-description")
        assert [cap.key for cap in left] == [f"assignment-{Assignment.objects.get(worker=w2).pk}"]
    assert not Assignment.objects.filter(pk__in=mine, counted=True).exists()
    assert Assignment.objects.filter(pk__in=mine, slot__isnull=True).count() == 2
    assert not Item.objects.filter(campaign=c, full=True).exists()


def test_description_checks_length_and_duplicates(dataset):
    c = make(dataset, "description", options={"images": 2})
    w = engine.invite_workers(1)[0]
    a = engine.accept(c, w)
    ref = dataset.references().filter(image_id=a.item.payload["image"]).first().text
    before = snapshot()
    with pytest.raises(AnswerError, match="at least 5 words"):
        engine.submit(a.pk, w, {"description": "a dog"})
    with pytest.raises(AnswerError, match="repeats an existing caption"):
        engine.submit(a.pk, w, {"description": "  " + ref.upper() + " !"})
    assert snapshot() == before
