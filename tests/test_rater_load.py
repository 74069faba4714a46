"""The claim fast path (``Item.full``) and the load benchmark script.

``Item.full`` lets a claim skip items whose k slots are held; if it were ever True on an item with a
free slot, that item would silently stop being offered (work lost for the campaign). A random
sequence of claims, submissions, returns, expiries and a blocked worker's release is checked after
every step. The load script is then run for a few seconds against a real gunicorn + PostgreSQL,
with a tight rate limit so 429 answers happen, and its own database check must report nothing lost,
duplicated or half-written (the throughput it prints is a benchmark figure, not asserted here).
Its ``--scenario study-burst`` (Prolific participants arriving, each consenting and doing a bundle,
against the fake Prolific API) is run with a handful of participants and must find every session
holding exactly its submitted tasks. Both runs share one scratch database (the dataset is imported
once).
"""
import json
import random
import subprocess
import sys
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from crowd import engine
from crowd.models import Assignment, Campaign, Dataset, Item

from .conftest import ROOT, run_command

pytestmark = pytest.mark.django_db(transaction=True)


def held_slots(campaign):
    return dict(Item.objects.filter(campaign=campaign, is_gold=False)
                .annotate(n=Count("assignments", filter=Q(assignments__slot__isnull=False)))
                .values_list("pk", "n"))


def assert_flags_exact(campaign):
    held = held_slots(campaign)
    flags = dict(Item.objects.filter(campaign=campaign, is_gold=False).values_list("pk", "full"))
    k = campaign.judgments_per_item
    wrong = {pk: (flags[pk], n) for pk, n in held.items() if flags[pk] != (n >= k)}
    assert not wrong, f"Item.full disagrees with the held slots (full, held) for {len(wrong)} items: {wrong}"


def test_full_flag_follows_every_slot_change(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    campaign = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="flags",
                                      options={"images": 6, "gold": 2}, k=2, gold_every=4, state=Campaign.LIVE)
    workers = engine.invite_workers(12)
    rng = random.Random(3)
    answer = {"relevance": "3", "thoroughness": "4"}
    done_ops = {"accept": 0, "submit": 0, "return": 0, "expire": 0, "late": 0, "release": 0}
    for step in range(400):
        campaign.refresh_from_db()  # as each web request reads it: it may have closed itself (complete)
        w = rng.choice(workers)
        op = rng.random()
        active = engine.active_assignment(campaign, w)
        try:
            if active is None:
                engine.accept(campaign, w)
                done_ops["accept"] += 1
            elif op < 0.55:
                engine.submit(active.pk, w, answer)
                done_ops["submit"] += 1
            elif op < 0.7:
                engine.return_assignment(active.pk, w)
                done_ops["return"] += 1
            elif op < 0.9:
                Assignment.objects.filter(pk=active.pk).update(deadline=timezone.now() - timedelta(seconds=1))
                engine.expire_overdue(campaign)
                done_ops["expire"] += 1
                if rng.random() < 0.5:  # the late answer takes a slot back if one is free
                    engine.submit(active.pk, w, answer)
                    done_ops["late"] += 1
            elif step > 150 and done_ops["release"] < 2 and campaign.state == Campaign.LIVE:
                engine.release_counted_work(campaign, w)
                done_ops["release"] += 1
        except engine.NoTask:
            pass
        except engine.Conflict as exc:  # the campaign closed itself when its last item was complete
            assert exc.code == "finished" and engine.is_complete(campaign), exc
        assert_flags_exact(campaign)
    assert min(done_ops.values()) > 0, done_ops
    # and the campaign can still be completed: every open slot is found by claims
    for _ in range(5):
        for w in workers + engine.invite_workers(4):
            while True:
                campaign.refresh_from_db()
                try:
                    a = engine.accept(campaign, w)
                except engine.NoTask:
                    break
                engine.submit(a.pk, w, answer)
    k = campaign.judgments_per_item
    assert set(held_slots(campaign).values()) == {k}
    assert Item.objects.filter(campaign=campaign, is_gold=False, full=False).count() == 0
    assert_flags_exact(campaign)


def test_claims_skip_full_items_through_the_partial_index(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    campaign = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="plan", k=1, gold_every=0,
                                      state=Campaign.LIVE)
    with connection.cursor() as cur:
        cur.execute("SET enable_seqscan = off")  # a tiny table: make the planner show what it would use at scale
        sql, params = engine._open_items(campaign, engine.invite_workers(1)[0]).query.sql_with_params()
        cur.execute("EXPLAIN " + sql, params)
        plan = "\n".join(r[0] for r in cur.fetchall())
        cur.execute("RESET enable_seqscan")
    assert "item_open_position" in plan, plan


@pytest.fixture(scope="module")
def load_database():
    """A scratch PostgreSQL database URL for the load script (created by the script, dataset
    imported once for the module), dropped afterwards."""
    from django.conf import settings

    s = settings.DATABASES["default"]
    assert s["ENGINE"] == "django.db.backends.postgresql"
    base = f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"
    name = f"test_load_{uuid.uuid4().hex[:8]}"
    yield f"{base}/{name}"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_load_script(tmp_path, database_url, *args) -> dict:
    out = tmp_path / "load.json"
    proc = subprocess.run([sys.executable, "benchmarks/rater_load.py", "--database-url", database_url, *args,
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_load_script_loses_nothing_under_a_tight_rate_limit(tmp_path, load_database):
    result = run_load_script(
        tmp_path, load_database, "--duration", "6", "--warmup", "1", "--raters", "6", "--concurrency", "6",
        "--gunicorn-workers", "2", "--threads", "2", "--k", "2", "--rate-limit", "6/2s")
    check = result["check"]
    assert result["cycles"] > 20
    assert check["client_submissions"] == check["stored_submissions"] > 20
    for key in ("lost", "answer_differs", "stored_not_sent", "duplicate_judgments", "items_over_k",
                "worker_item_twice", "judgments_not_matching_answer"):
        assert check[key] == 0, (key, check)
    assert check["judgment_rows"] == check["expected_judgment_rows"] == 2 * check["counted"]
    # the rate limit really answered 429 (and the raters came back after Retry-After)
    assert sum(n for k, n in result["status"].items() if k.endswith(" 429")) > 0, result["status"]
    # the chain a browser makes (the default flow): each rater accepts at most once (in the warm-up here),
    # then every cycle is the task page and the submission that accepts the next task
    assert {"task", "submit", "cycle"} <= set(result["latency_ms"]) and result["settings"]["flow"] == "chain"
    assert result["status"].get("accept 302", 0) <= 6 < result["status"]["submit 302"]
    assert result["cpu_seconds"]["web"] > 0


def test_study_burst_gives_every_participant_exactly_their_bundle(tmp_path, load_database):
    # 7 Prolific participants (1 warm-up) arrive within 2 s, each consents and does a bundle of 3;
    # k = 2 puts several of them on the same items, and 4 requests per 2 s per address makes the
    # arrival and task pages answer 429 (the participants come back after Retry-After)
    result = run_load_script(
        tmp_path, load_database, "--scenario", "study-burst", "--participants", "6", "--warmup-participants", "1",
        "--arrival-seconds", "2", "--bundle", "3", "--gunicorn-workers", "2", "--k", "2", "--rate-limit", "4/2s",
        "--think-seconds", "0")
    check = result["check"]
    assert result["scenario"] == "study-burst"
    assert check["participants"] == check["sessions"] == check["sessions_completed"] == check["client_finished"] == 7
    assert check["client_submissions"] == check["stored_submissions"] == 21
    for key in ("lost", "answer_differs", "stored_not_sent", "duplicate_judgments", "items_over_k",
                "worker_item_twice", "judgments_not_matching_answer", "sessions_tasks_mismatch",
                "sessions_over_target", "completed_short", "submitted_without_session", "participant_two_sessions",
                "sessions_open"):
        assert check[key] == 0, (key, check)
    assert check["judgment_rows"] == check["expected_judgment_rows"] == 2 * 21
    assert result["rate_limited"] > 0, result["status"]
    # every participant's arrival was confirmed with (the fake) Prolific, once
    assert result["prolific_calls"].get("GET submissions") == 7, result["prolific_calls"]
    latency = result["latency_ms"]
    assert {"arrive", "consent", "instructions", "task", "submit", "done", "per_task", "participant"} <= set(latency)
    assert latency["per_task"]["n"] == 18 and latency["participant"]["n"] == 6  # the measured burst only
    assert all(v["p99"] > 0 for v in latency.values())
