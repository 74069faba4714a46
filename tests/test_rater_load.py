"""The claim fast path (``Item.full``) and the load benchmark script.

``Item.full`` lets a claim skip items whose k slots are held; if it were ever True on an item with a
free slot, that item would silently stop being offered (work lost for the campaign). A random
sequence of claims, submissions, returns, expiries and a blocked worker's release is checked after
every step. The load script is then run for a few seconds against a real gunicorn + PostgreSQL,
with a tight rate limit so 429 answers happen, and its own database check must report nothing lost,
duplicated or half-written (the throughput it prints is a benchmark figure, not asserted here).
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


def test_load_script_loses_nothing_under_a_tight_rate_limit(tmp_path):
    assert connection.vendor == "postgresql"
    s = connection.settings_dict
    base = f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}"
    name = f"test_load_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "load.json"
    try:
        proc = subprocess.run(
            [sys.executable, "benchmarks/rater_load.py", "--database-url", f"{base}/{name}", "--duration", "6",
             "--warmup", "1", "--raters", "6", "--concurrency", "6", "--gunicorn-workers", "2", "--threads", "2",
             "--k", "2", "--rate-limit", "6/2s", "--json", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=600,
        )
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        result = json.loads(out.read_text())
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    check = result["check"]
    assert result["cycles"] > 20
    assert check["client_submissions"] == check["stored_submissions"] > 20
    for key in ("lost", "answer_differs", "stored_not_sent", "duplicate_judgments", "items_over_k",
                "worker_item_twice", "judgments_not_matching_answer"):
        assert check[key] == 0, (key, check)
    assert check["judgment_rows"] == check["expected_judgment_rows"] == 2 * check["counted"]
    # the rate limit really answered 429 (and the raters came back after Retry-After)
    assert sum(n for k, n in result["status"].items() if k.endswith(" 429")) > 0, result["status"]
    assert {"accept", "task", "submit", "cycle"} <= set(result["latency_ms"])
    assert result["cpu_seconds"]["web"] > 0
