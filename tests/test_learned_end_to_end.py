"""A learned metric end to end on the platform, as a user runs it: import a dataset (``import_coco``:
six pictures, their references, two systems), give it a local picture folder (``set_image_source``),
compute CLIP-S with the tiny seeded CLIP of tests/learned_models.py from a local weights file
(``LEARNED_MODELS``), read the system leaderboard -- once on PostgreSQL through a real Celery worker
that consumes only the GPU queue (``CELERY_GPU_QUEUE``: the run can only have been computed there;
the device is CPU here, ``LEARNED_DEVICE=cpu``), once on the embedded SQLite default with in-process
tasks. The leaderboard's CLIP-S of each system is the mean of the library's per-caption scores (which
equal the reference code's, tests/test_learned_clip.py). Kept small: a handful of captions."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

from tests import learned_models as lm

from .conftest import ROOT, run_command
from .sqlite_var import migrated_var, sqlite_env
from .test_learned_pipeline import CAPTIONS, coco_files, picture_folder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-clip-e2e")
    return {"weights": lm.write_tiny_clip(root / "models"), "images": lm.write_tiny_images(root / "generated")}


def offline_env(base: dict, tmp_path, tiny) -> dict:
    env = {**base, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CAPTIONEVAL_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf"), "LEARNED_MODELS": f"clip_s={tiny['weights']['openai']}",
           "LEARNED_DEVICE": "cpu"}
    env.pop("CAPTIONEVAL_MODELS_DIR", None)
    return env


def expected_means(tiny, folder) -> dict[str, float]:
    """system -> mean of the library's CLIP-S of its captions (the same pictures and weights)."""
    import captioneval

    refs = lm.flickr8k_captions(30)
    out = {}
    for system, caps in CAPTIONS.items():
        result = captioneval.evaluate(caps, [refs[5 * i:5 * i + 5] for i in range(6)], metrics=["clip_s"],
                                      images=[next(folder.glob(f"{i + 1}.*")) for i in range(6)],
                                      options={"clip_s": {"model": str(tiny["weights"]["openai"]), "device": "cpu"}})
        out[system] = float(np.mean(result.scores["clip_s"]))
    return out


def manage(*args, env, timeout=300):
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def check_leaderboard(board: dict, expected: dict[str, float]) -> None:
    assert [m["key"] for m in board["metrics"]] == ["clip_s"] and board["metrics"][0]["name"] == "CLIP-S"
    for system, mean in expected.items():
        entry = board["systems"][system]["metrics"]["clip_s"]
        assert entry["score"] == pytest.approx(mean, abs=1e-6) and entry["n_images"] == 6
    assert board["settings"]["metrics"]["clip_s"]["params"]["model"].endswith("tiny-clip.pt")


@pytest.mark.django_db(transaction=True)
def test_clip_s_through_a_real_worker_on_the_gpu_queue(tiny, tmp_path, monkeypatch):
    from analysis.leaderboard import leaderboard
    from metrics.models import ImageFeature, MetricRun

    from .servers import BROKER, database_url, stop_group

    lm.offline(monkeypatch, tmp_path)
    gpu = f"gpu-{uuid.uuid4().hex}"
    env = offline_env(dict(os.environ, DATABASE_URL=database_url(), CELERY_BROKER_URL=BROKER,
                           CELERY_QUEUE=f"test-{uuid.uuid4().hex}", CELERY_GPU_QUEUE=gpu), tmp_path, tiny)
    log = open(tmp_path / "worker.log", "w+")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "-l", "info", "--concurrency", "1",
         "-Q", gpu, "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        run_command("import_coco", "--name", "pictures", *coco_files(tmp_path))
        folder = picture_folder(tiny, tmp_path / "pictures")
        run_command("set_image_source", "pictures", "--images-dir", str(folder))
        computed = manage("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--wait", "--timeout", "240",
                          env=env)
        assert computed.returncode == 0, computed.stderr + computed.stdout
        assert "clip_s: done, 12/12 scores" in computed.stdout
        assert worker.poll() is None, "the worker died"
    finally:
        stop_group(worker)
        log.seek(0)
        print(log.read()[-3000:])
    run = MetricRun.objects.get(metric="clip_s")
    assert run.params["device"] == "cpu" and run.params["dtype"] == "float32"
    assert ImageFeature.objects.count() == 6
    check_leaderboard(leaderboard("pictures", metrics=["clip_s"], n_resamples=100), expected_means(tiny, folder))


def test_clip_s_on_the_embedded_sqlite_default(tiny, tmp_path):
    var = migrated_var(tmp_path / "var")
    env = offline_env(sqlite_env(var), tmp_path, tiny)
    imported = manage("import_coco", "--name", "pictures", *coco_files(tmp_path), env=env)
    assert imported.returncode == 0, imported.stderr
    folder = picture_folder(tiny, tmp_path / "pictures")
    assert manage("set_image_source", "pictures", "--images-dir", str(folder), env=env).returncode == 0
    computed = manage("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--wait", env=env)
    assert computed.returncode == 0, computed.stderr
    assert "clip_s: done, 12/12 scores" in computed.stdout
    board = manage("leaderboard", "--dataset", "pictures", "--metric", "clip_s", "--resamples", "100", "--json", env=env)
    assert board.returncode == 0, board.stderr
    check_leaderboard(json.loads(board.stdout), expected_means(tiny, folder))
