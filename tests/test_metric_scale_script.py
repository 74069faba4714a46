"""benchmarks/metric_scale.py end to end on the test database: its quick mode starts real Celery
workers on Redis, computes CIDEr-D, Self-CIDEr and VIFIDEL through them with 1 and 2 workers, and
stops them again (also when interrupted). No timing is asserted: only that every row is there,
the stored scores are complete and equal the in-process reference, and no worker is left behind."""
import importlib.util
import json
import os
import signal
import subprocess
import sys

import pytest
import redis
from django.db.models import Count

from crowd.models import Caption, Dataset, ObjectLabel
from metrics.models import MetricRun, MetricScore, SetScore

from .conftest import ROOT
from .test_celery_worker import BROKER, database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPT = ROOT / "benchmarks" / "metric_scale.py"
_spec = importlib.util.spec_from_file_location("metric_scale", SCRIPT)
metric_scale = sys.modules.setdefault("metric_scale", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(metric_scale)


def script(*args):
    return [sys.executable, str(SCRIPT), "--quick", "--database-url", database_url(), "--broker", BROKER, *args]


def no_worker_left(pids):
    return all(not metric_scale.alive_in_group(pid) for pid in pids)


def test_quick_run_scores_every_unit_with_one_and_two_workers(tmp_path):
    out = tmp_path / "scale.json"
    result = subprocess.run(script("--sizes", "300", "--chunk-size", "100", "--json", str(out)),
                            cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())

    rows = report["rows"]
    assert sorted((r["metric"], r["workers"]) for r in rows) == sorted(
        (m, w) for m in ("cider_d", "self_cider", "vifidel") for w in (1, 2))
    assert sorted(r["metric"] for r in report["in_process"]) == ["cider_d", "self_cider", "vifidel"]
    assert all(r["status"] == "ok" and r["max_abs_diff_vs_in_process"] <= 1e-9 for r in rows)
    assert all(r["seconds"] > 0 and r["captions_per_second"] > 0 for r in rows + report["in_process"])
    assert all("speedup_vs_1_worker" in r and "ratio_vs_in_process" in r for r in rows)

    # The dataset: 300 candidate captions (30 images x 10), 5 references per image, objects everywhere.
    dataset = Dataset.objects.get(name="scale-300")
    candidates = dataset.candidates()
    assert candidates.count() == 300
    assert candidates.values("image").annotate(n=Count("id")).filter(n=10).count() == 30
    assert dataset.references().count() == 150
    assert not candidates.exclude(image__in=ObjectLabel.objects.values("image")).exists()
    n_sets = Caption.objects.filter(image__dataset=dataset).values("image", "system").distinct().count()
    assert n_sets == 60

    # The last measurement's run of each metric is complete: one score per unit.
    by_metric = {r["metric"]: r for r in rows if r["workers"] == 2}
    expected_units = {"cider_d": 300, "vifidel": 300, "self_cider": n_sets}
    for metric, units in expected_units.items():
        run = MetricRun.objects.get(dataset=dataset, metric=metric)
        model = SetScore if metric == "self_cider" else MetricScore
        stored = model.objects.filter(run=run).count()
        assert run.status == MetricRun.DONE and stored == run.total == units == by_metric[metric]["units"]
        assert run.pk == by_metric[metric]["run_id"]
    assert by_metric["self_cider"]["captions"] == Caption.objects.filter(image__dataset=dataset).count() == 450

    # Chunks of 100 units: 3 per caption-level run, all accounted for in the workers' logs.
    for r in rows:
        assert len(r["chunks_per_worker"]) == r["workers"]
        if r["metric"] != "self_cider":
            assert r["chunks"] == 3
    assert len(report["worker_pids"]) == 3 and no_worker_left(report["worker_pids"])
    assert not redis.Redis.from_url(BROKER).keys(f"*{report['settings']['queue']}*")  # queue and bindings removed


def _start_deaf_to_ctrl_c():
    """In the child before exec: SIGINT ignored and blocked, as a parent can leave it (both are
    inherited through exec); the script must restore Ctrl-C itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def test_interrupt_stops_the_workers(tmp_path):
    proc = subprocess.Popen(script("--sizes", "100", "--chunk-size", "50"), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_start_deaf_to_ctrl_c)
    pids = []
    try:
        for line in proc.stdout:
            if line.startswith("  workers ready: pids"):
                pids = [int(p) for p in line.split("pids", 1)[1].split()]
                break
        assert pids, proc.stderr.read()[-3000:]
        assert not no_worker_left(pids)
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, (stdout[-3000:], stderr[-3000:])
    assert "interrupted: workers stopped" in stderr
    assert no_worker_left(pids)


def test_an_interrupt_that_surfaces_as_a_database_error_exits_130(monkeypatch, capsys):
    """Ctrl-C inside a database call can reach main() as another exception: Django's atomic() fails
    to restore autocommit on the interrupted connection and raises ProgrammingError from the
    KeyboardInterrupt (a CI run exited 1 that way). The script still reports the interrupt, 130."""
    import time

    from django.db.utils import ProgrammingError

    def benchmark(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)  # the handler raises before this ends
        except KeyboardInterrupt as exc:
            raise ProgrammingError("can't change 'autocommit' now: connection in transaction status ACTIVE") from exc
        raise AssertionError("SIGINT did not interrupt")

    for name, fn in (("ensure_database", lambda url: None), ("setup_django", lambda *a: None),
                     ("forget_queue", lambda queue: None), ("benchmark", benchmark)):
        monkeypatch.setattr(metric_scale, name, fn)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert metric_scale.main(["--quick", "--database-url", database_url()]) == 130
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert "interrupted: workers stopped" in capsys.readouterr().err
    # any other error still surfaces
    monkeypatch.setattr(metric_scale, "benchmark", lambda args: (_ for _ in ()).throw(LookupError("boom")))
    try:
        with pytest.raises(LookupError):
            metric_scale.main(["--quick", "--database-url", database_url()])
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
