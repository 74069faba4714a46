"""Integration: a real `celery worker` process, Redis as the broker, PostgreSQL as the database.

A Flickr8k-Expert job (the first 200 judged images, 1,000+ pairs, cut into several chunks shared by
the worker's two processes) goes through the worker; the stored scores must equal, score by score,
what pycocoevalcap's own scorers give for the same tokenised captions (all seven COCO metrics), and
`correlate` on them gives scipy's Kendall tau-c. The published Flickr8k-Expert correlations are
checked on the full dataset by tests/test_library.py (the library's path) and
tests/test_acceptance_sqlite.py; with the same per-caption scores, the worker path cannot give
other correlations."""
import json
import os
import signal
import subprocess
import sys
import uuid

import numpy as np
import pytest

from crowd.models import Dataset
from metrics.models import MetricRun, MetricScore

from .conftest import ROOT, run_command
from .servers import BROKER, database_url

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker_env():
    env = dict(os.environ, DATABASE_URL=database_url(), CELERY_BROKER_URL=BROKER, CELERY_QUEUE=f"test-{uuid.uuid4().hex}")
    return env


@pytest.fixture
def worker(worker_env, tmp_path):
    log = open(tmp_path / "worker.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "evalsite", "worker", "-l", "info", "--concurrency", "2",
         "-Q", worker_env["CELERY_QUEUE"], "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=worker_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.seek(0)
    print(log.read()[-3000:])


#: judged images of the Flickr8k-Expert subset the metric job scores (a prefix of the expert file)
N_IMAGES = 200


def test_metric_job_through_a_real_worker(worker, worker_env, tmp_path):
    from scipy.stats import kendalltau

    from .conftest import write_subset

    subset = write_subset(tmp_path / "expert-subset", N_IMAGES)
    lines = [line.split("\t") for line in (subset / "ExpertAnnotations.txt").read_text().splitlines()]
    # (image, candidate id) in the loader's order: file order, own-reference pairs skipped
    pair_lines = [f for f in lines if not f[1].startswith(f[0] + "#")]
    pair_ids = [tuple(f[:2]) for f in pair_lines]
    n = len(pair_ids)
    assert 1000 < n < 1500
    run_command("import_dataset", "flickr8k-expert", str(subset), "--name", "flickr8k-expert")
    result = subprocess.run(
        [sys.executable, "manage.py", "compute_metrics", "--dataset", "flickr8k-expert", "--wait", "--timeout", "1500"],
        cwd=ROOT, env=worker_env, capture_output=True, text=True, timeout=1800,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert worker.poll() is None, "the worker died"
    dataset = Dataset.objects.get(name="flickr8k-expert")
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=dataset)}
    assert len(runs) == 7
    for run in runs.values():
        assert run.status == MetricRun.DONE
        assert MetricScore.objects.filter(run=run).count() == run.total == n
    # several chunks, so both worker processes took part in the runs
    from metrics.pipeline import chunk_size

    assert chunk_size(n, workers=2, eager=False) < n / 2

    # The subset's pairs are the first n of the 5,664 (tests.references tokenised them with pycocoevalcap's
    # Java PTB tokeniser).
    from tests import references

    all_cands, all_refs = references.expert_inputs()
    exp_cands, exp_refs = all_cands[:n], all_refs[:n]
    stored = {
        (image, key): value
        for image, key, value in MetricScore.objects.filter(run=runs["cider_d"]).values_list(
            "caption__image__key", "caption__key", "value"
        )
    }
    got = np.array([stored[ids] for ids in pair_ids])
    np.testing.assert_allclose(got, references.cider_d(exp_cands, exp_refs)[1], atol=1e-6)

    # Every stored score of the seven metrics equals pycocoevalcap's own classes (Bleu(4), Rouge(), Meteor(),
    # Cider(), not our wrappers) called once on the whole dataset with the tokenised captions the pipeline
    # scored: first, those are pair by pair the tokens of pycocoevalcap's Java PTB tokeniser that
    # tests.references scored.
    from crowd.models import Caption
    from metrics.models import CaptionTokens
    from metrics.pipeline import TOKENIZER

    tokens = dict(CaptionTokens.objects.filter(caption__image__dataset=dataset, tokenizer=TOKENIZER)
                  .values_list("caption_id", "tokens"))
    refs = {}
    for cid, image in dataset.references().order_by("image_id", "key").values_list("id", "image_id"):
        refs.setdefault(image, []).append(tokens[cid])
    by_pair = {(image_key, key): (cid, image)
               for cid, image, image_key, key in dataset.candidates().values_list("id", "image_id", "image__key", "key")}
    cands = [by_pair[ids] for ids in pair_ids]  # (caption id, image id) in the loader's order
    assert len(cands) == len(by_pair) == n and len(tokens) == Caption.objects.filter(image__dataset=dataset).count()
    assert [tokens[cid] for cid, _ in cands] == exp_cands
    assert [refs[image] for _, image in cands] == exp_refs
    _, bleu = references.bleu(exp_cands, exp_refs)
    reference = {
        **{f"bleu_{n}": (bleu[n - 1], 1e-12) for n in range(1, 5)},
        "rouge_l": (references.rouge_l(exp_cands, exp_refs), 1e-12),
        "meteor": (references.meteor(exp_cands, exp_refs)[1], 1e-12),
        "cider_d": (references.cider_d(exp_cands, exp_refs)[1], 1e-9),
    }
    assert set(reference) == set(runs)
    for metric, (values, tolerance) in reference.items():
        by_caption = dict(MetricScore.objects.filter(run=runs[metric]).values_list("caption_id", "value"))
        assert len(by_caption) == len(cands), metric
        np.testing.assert_allclose([by_caption[cid] for cid, _ in cands], np.asarray(values, dtype=float),
                                   rtol=0, atol=tolerance, err_msg=metric)
    assert runs["cider_d"].document_frequency is not None  # built once by start_run, used by every chunk

    # `correlate` on the worker's scores: each expert rating is a row (3 per pair), Kendall tau-c as scipy's
    report = json.loads(run_command("correlate", "--dataset", "flickr8k-expert", "--json", "--resamples", "50"))
    assert report["n_pairs"] == n and report["n_ratings"] == 3 * n
    ratings = [float(r) for f in pair_lines for r in f[2:5]]
    for metric, (values, _) in reference.items():
        per_row = np.repeat(np.asarray(values, dtype=float), 3)
        expected = kendalltau(per_row, ratings, variant="c")[0]
        assert 0.1 < expected < 0.6
        assert abs(report["metrics"][metric]["kendall_tau_c"] - expected) <= 1e-9, metric


def test_set_and_system_level_runs_through_a_real_worker(worker, worker_env, tmp_path):
    """Self-CIDEr, LSA, mBLEU, accuracy, vocabulary, MTLD and VIFIDEL computed by the worker process
    (chunks of 40 units) equal the kernels called directly on the same captions."""
    from crowd.models import Caption
    from metrics.models import SetScore, SystemScore
    from captioneval.kernels import diversity
    from captioneval.kernels.cider import DocumentFrequency
    from captioneval.text.tokenizer import ptb_tokenize

    from .coco_sets import write_coco_files

    d = write_coco_files(tmp_path)
    run_command("import_coco", "--name", "div", "--annotations", str(d / "captions.json"), "--results",
                f"merge={d / 'merge.json'}", "--objects", str(d / "objects.csv"))
    result = subprocess.run(
        [sys.executable, "manage.py", "compute_metrics", "--dataset", "div", "--metric", "diversity", "mtld", "vifidel",
         "--wait", "--timeout", "600"],
        cwd=ROOT, env=dict(worker_env, METRICS_CHUNK_SIZE="40"), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert worker.poll() is None, "the worker died"
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset__name="div")}
    assert all(r.status == MetricRun.DONE and r.completed == r.total for r in runs.values())
    assert runs["self_cider"].total == 60 and runs["mtld"].total == 2 and runs["vifidel"].total > 0
    rows = list(Caption.objects.filter(image__dataset__name="div").order_by("image_id", "system_id", "key")
                .values_list("image_id", "system_id", "text"))
    tokens = ptb_tokenize([t for _, _, t in rows])
    sets = {}
    for (img, sys_, _), tok in zip(rows, tokens):
        sets.setdefault((img, sys_), []).append(tok)
    ref_id = Dataset.objects.get(name="div").reference_system_id
    df = DocumentFrequency.from_references([v for (img, s), v in sorted(sets.items()) if s == ref_id])
    stored = {(s.image_id, s.system_id): s.value for s in SetScore.objects.filter(run=runs["self_cider"])}
    units = sorted(sets)
    np.testing.assert_allclose([stored[u] for u in units], diversity.self_cider([sets[u] for u in units], df), atol=1e-9)
    assert SystemScore.objects.filter(run=runs["mtld"]).count() == 2
    assert MetricScore.objects.filter(run=runs["vifidel"], raw__isnull=False).count() == runs["vifidel"].total
