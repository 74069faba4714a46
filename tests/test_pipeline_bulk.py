"""The pipeline's bulk path (issue 18): the progress counter, duplicated and concurrent chunks, the
document-frequency table stored with the run, chunk sizes, NaN scores and the SQLite fallback.

Real data throughout: a 40-image Flickr8k-Expert subset (about 230 candidates), scored with CIDEr-D,
whose expected values come from pycocoevalcap's ``Cider`` or the CIDEr-D kernel called directly on
captions tokenised here, never from the pipeline."""
import hashlib
import json
import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from django.db import connection

from crowd.models import Dataset
from metrics import pipeline, tasks
from metrics.models import DocumentFrequencyTable, MetricRun, MetricScore, SetScore
from captioneval.metrics import registry
from captioneval.kernels.cider import DocumentFrequency, cider_d

from .conftest import ROOT, run_command, write_subset
from .sqlite_var import migrated_var, sqlite_env
from .test_pipeline import independent_inputs, stored

pytestmark = pytest.mark.django_db


@pytest.fixture
def subset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    pipeline.clear_caches()
    yield Dataset.objects.get(name="sub")
    pipeline.clear_caches()


def planned(dataset, metric="cider_d"):
    (run,) = pipeline.plan_runs(dataset.name, [metric])
    pipeline.tokenize_dataset(dataset)
    return MetricRun.objects.select_related("dataset", "dataset__reference_system").get(pk=run.pk)


def real_count(run):
    return MetricScore.objects.filter(run=run).count()


def pycoco_cider(dataset):
    from pycocoevalcap.cider.cider import Cider

    cands, cand_tok, ref_tok = independent_inputs(dataset)
    _, values = Cider().compute_score({i: r for i, r in enumerate(ref_tok)}, {i: [c] for i, c in enumerate(cand_tok)})
    return cands, np.asarray(values)


def test_counter_equals_real_count_after_duplicated_retried_and_overlapping_chunks(subset):
    run = planned(subset)
    units = pipeline.level_of(run).missing()
    parts = list(pipeline.chunks(units, 50))
    assert len(parts) == math.ceil(len(units) / 50) >= 4
    new = [tasks.score_chunk.apply(args=(run.pk, parts[0])).get()]
    new.append(tasks.score_chunk.apply(args=(run.pk, parts[0])).get())  # delivered twice
    run.refresh_from_db()
    assert new == [50, 0] and run.completed == real_count(run) == 50
    overlap = parts[0][25:] + parts[1][:25]  # a retry that overlaps a done chunk: only its new half counts
    assert tasks.score_chunk.apply(args=(run.pk, overlap)).get() == 25
    run.refresh_from_db()
    assert run.completed == real_count(run) == 75 and run.status != MetricRun.DONE
    for part in parts[1:]:
        tasks.score_chunk.apply(args=(run.pk, part))
        tasks.score_chunk.apply(args=(run.pk, part))  # every chunk twice
    run.refresh_from_db()
    assert run.status == MetricRun.DONE and run.completed == real_count(run) == run.total == len(units)
    cands, expected = pycoco_cider(subset)
    values = stored(run)
    np.testing.assert_allclose([values[c.pk] for c in cands], expected, rtol=0, atol=1e-9)


def test_run_is_not_marked_done_when_the_counter_is_wrong(subset):
    """The counter is verified with a real count once it reaches the total: a counter pushed to the
    total with scores missing is corrected, and the run stays unfinished until they are stored."""
    run = planned(subset)
    units = pipeline.level_of(run).missing()
    half = units[: len(units) // 2]
    tasks.score_chunk.apply(args=(run.pk, half))
    MetricRun.objects.filter(pk=run.pk).update(completed=run.total - 10)  # an impossible counter
    tasks.score_chunk.apply(args=(run.pk, units[len(units) // 2 : len(units) // 2 + 10]))
    run.refresh_from_db()
    assert run.status != MetricRun.DONE and run.completed == real_count(run) == len(half) + 10
    tasks.score_chunk.apply(args=(run.pk, units))
    run.refresh_from_db()
    assert run.status == MetricRun.DONE and run.completed == real_count(run) == run.total


@pytest.mark.django_db(transaction=True)
def test_a_chunk_delivered_twice_at_the_same_time_is_stored_and_counted_once(subset, monkeypatch):
    """Two workers score the same chunk concurrently (each on its own database connection); both
    compute every unit (the barrier makes both pass the "already scored" check first), both insert:
    ON CONFLICT DO NOTHING keeps one row per unit and the counter grows by the rows really inserted."""
    run = planned(subset)
    pipeline.level_of(run).prepare_document_frequency()
    units = pipeline.level_of(run).missing()
    metric = registry.METRICS["cider_d"]
    real = metric.score
    barrier = threading.Barrier(2, timeout=60)

    def both_computed(batch):
        out = real(batch)
        barrier.wait()
        return out

    monkeypatch.setattr(metric, "score", both_computed)
    created, errors = [], []

    def worker():
        try:
            fresh = MetricRun.objects.select_related("dataset", "dataset__reference_system").get(pk=run.pk)
            created.append(pipeline.level_of(fresh).score(units))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert sorted(created) == [0, len(units)]  # one insert stored every row, the other none
    run.refresh_from_db()
    assert run.completed == real_count(run) == len(units) == run.total
    assert len(set(MetricScore.objects.filter(run=run).values_list("caption_id", flat=True))) == len(units)


def test_document_frequency_is_built_once_stored_with_the_run_and_used_by_every_chunk(subset, monkeypatch, settings):
    settings.METRICS_CHUNK_SIZE = 40
    cands, cand_tok, ref_tok = independent_inputs(subset)
    # 1. start_run stores the table; it equals the table built here from independently tokenised references
    run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d")
    run = MetricRun.objects.get(dataset=subset, metric="cider_d")
    table = run.document_frequency
    assert table is not None and table.name == "dataset:sub"
    expected = DocumentFrequency.from_references(ref_tok)  # one document per candidate, as pycocoevalcap counts
    assert table.counts is None  # a table built from the dataset is stored packed only
    stored_df = DocumentFrequency.from_packed(bytes(table.packed))
    assert stored_df.n_documents == expected.n_documents == len(cands)
    assert stored_df.counts == expected.counts
    # the packed form is canonical: the table built here packs to the same bytes, hence the same key
    assert table.sha256 == hashlib.sha256(expected.to_packed()).hexdigest()
    # 2. every chunk reads the run's stored table: with other counts stored, every score follows them
    other = DocumentFrequency.from_references(ref_tok[: len(ref_tok) // 3])
    other_table = DocumentFrequencyTable.objects.create(
        sha256=pipeline._canonical_sha256(other.to_json()), name="a third of the references",
        n_documents=other.n_documents, counts=other.to_json()["counts"])
    MetricScore.objects.filter(run=run).delete()
    MetricRun.objects.filter(pk=run.pk).update(status=MetricRun.RUNNING, completed=0, document_frequency=other_table)
    pipeline.clear_caches()

    def no_rebuild(level):
        raise AssertionError("a chunk built its own document frequencies")

    monkeypatch.setattr(pipeline.CaptionLevel, "build_document_frequency", no_rebuild)
    n_chunks = tasks.start_run.apply(args=(run.pk,)).get()
    assert n_chunks == math.ceil(len(cands) / 40)
    run.refresh_from_db()
    assert run.status == MetricRun.DONE and run.document_frequency_id == other_table.pk
    values = stored(run)
    got = np.array([values[c.pk] for c in cands])
    np.testing.assert_allclose(got, cider_d(cand_tok, ref_tok, df=other), rtol=0, atol=1e-9)
    assert not np.allclose(got, cider_d(cand_tok, ref_tok))
    # 3. --force builds it again from the dataset (the same counts: the same stored row as in 1.)
    monkeypatch.undo()
    run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d", "--force")
    run.refresh_from_db()
    assert run.document_frequency_id == table.pk
    _, reference = pycoco_cider(subset)
    values = stored(run)
    np.testing.assert_allclose([values[c.pk] for c in cands], reference, rtol=0, atol=1e-9)


def test_supplied_table_keeps_its_identity_is_packed_once_and_chunks_load_the_packed_form(
        subset, flickr8k_dir, tmp_path, monkeypatch):
    from tests.flickr8k_data import load_flickr8k_expert_tokenized

    cands, cand_tok, ref_tok = independent_inputs(subset)
    # a table over all 5,664 Flickr8k-Expert pairs' references (pycocoevalcap's tokeniser), with words and
    # n-grams the subset does not have and a word-free key of order 6 the scorer never asks for
    supplied = DocumentFrequency.from_references([p.references for p in load_flickr8k_expert_tokenized()])
    data = supplied.to_json()
    data["counts"]["a b c d e f"] = 3.0
    df_file = tmp_path / "expert-df.json"
    df_file.write_text(json.dumps(data))
    table_df = DocumentFrequency.from_json(data)
    run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d", "--cider-df", str(df_file))
    run = MetricRun.objects.get(dataset=subset, metric="cider_d")
    table = run.document_frequency
    assert run.status == MetricRun.DONE and table.name == "expert-df.json"
    assert table.sha256 == pipeline._canonical_sha256(data) and table.counts == data["counts"]  # identity unchanged
    packed = bytes(table.packed)  # added by start_run (prepare_document_frequency)
    unpacked = DocumentFrequency.from_packed(packed)
    assert unpacked.counts == table_df.counts and unpacked.n_documents == table_df.n_documents == len(
        load_flickr8k_expert_tokenized())
    expected = cider_d(cand_tok, ref_tok, df=table_df)
    values = stored(run)
    got = np.array([values[c.pk] for c in cands])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    assert not np.allclose(got, cider_d(cand_tok, ref_tok))
    # scored again by fresh processes' caches: the chunks read the packed form, never the JSON
    MetricScore.objects.filter(run=run).delete()
    MetricRun.objects.filter(pk=run.pk).update(status=MetricRun.RUNNING, completed=0)
    pipeline.clear_caches()

    def no_json(data):
        raise AssertionError("a chunk parsed the JSON counts")

    monkeypatch.setattr(DocumentFrequency, "from_json", staticmethod(no_json))
    tasks.start_run.apply(args=(run.pk,)).get()
    run.refresh_from_db()
    assert run.status == MetricRun.DONE and bytes(run.document_frequency.packed) == packed  # packed once
    values = stored(run)
    np.testing.assert_array_equal([values[c.pk] for c in cands], got)


def test_chunk_sizes_use_every_worker_for_small_runs_and_cap_large_ones(settings):
    settings.METRICS_CHUNK_SIZE = 1000
    # ceil(units / (workers * 4)) within [100, METRICS_CHUNK_SIZE]
    assert pipeline.chunk_size(5664, workers=2, eager=False) == 708  # 8 chunks: 4 per worker
    assert pipeline.chunk_size(5664, workers=1, eager=False) == 1000  # ceil(5664 / 4) = 1416 > 1000
    assert pipeline.chunk_size(100_000, workers=2, eager=False) == 1000
    assert pipeline.chunk_size(1000, workers=2, eager=False) == 125
    assert pipeline.chunk_size(230, workers=2, eager=False) == 100  # the lower bound
    assert pipeline.chunk_size(5664, eager=True) == 1000  # in-process: the largest chunks
    settings.METRICS_CHUNK_SIZE = 5000  # the default: workers get larger chunks, in-process ones stay at 1000
    assert pipeline.chunk_size(100_000, workers=2, eager=False) == 5000
    assert pipeline.chunk_size(5664, workers=2, eager=False) == 708
    assert pipeline.chunk_size(5664, eager=True) == pipeline.EAGER_CHUNK_SIZE == 1000
    settings.METRICS_CHUNK_SIZE = 1000
    settings.METRICS_CHUNK_SIZE = 20  # a small METRICS_CHUNK_SIZE bounds the lower bound too
    assert pipeline.chunk_size(5664, workers=2, eager=False) == 20
    assert pipeline.chunk_size(30, workers=2, eager=False) == 20
    settings.METRICS_WORKERS = 3
    assert pipeline.metric_workers() == 3
    settings.METRICS_CHUNK_SIZE = 1000
    assert pipeline.chunk_size(5664, eager=False) == 472  # ceil(5664 / 12)
    settings.METRICS_WORKERS = "none"
    with pytest.raises(ValueError, match="METRICS_WORKERS must be a positive integer"):
        pipeline.metric_workers()
    settings.METRICS_WORKERS = None
    assert pipeline.metric_workers() == (os.environ.get("METRICS_WORKERS") and int(os.environ["METRICS_WORKERS"])
                                         or os.cpu_count())
    assert list(map(len, pipeline.chunks(list(range(5664)), 708))) == [708] * 8


def test_nan_scores_are_stored_and_counted(subset):
    """NaN ("undefined for this unit") goes through the multi-row insert as a value and reads back as NaN."""
    run = planned(subset)
    ids = pipeline.level_of(run).missing()[:3]
    from django.db import transaction

    with transaction.atomic():
        n = pipeline.level_of(run).insert(ids, [float("nan"), 0.5, float("nan")], [None, 2.0, float("nan")])
        pipeline.store_progress(run, n, 0.0)
    assert n == 3 and run.completed == 3
    rows = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    assert math.isnan(rows[ids[0]]) and rows[ids[1]] == 0.5 and math.isnan(rows[ids[2]])
    assert pipeline.level_of(run).insert(ids, [1.0, 1.0, 1.0]) == 0  # conflicts: nothing replaced
    assert MetricScore.objects.get(run=run, caption_id=ids[1]).raw == 2.0
    (lsa,) = pipeline.plan_runs("sub", ["lsa"])
    units = [tuple(u) for u in pipeline.level_of(lsa).missing()[:2]]
    assert pipeline.level_of(lsa).insert(units, [float("nan"), 0.25], [1, 5]) == 2
    got = {(s.image_id, s.system_id): s for s in SetScore.objects.filter(run=lsa)}
    assert math.isnan(got[units[0]].value) and got[units[1]].value == 0.25 and got[units[1]].n_captions == 5


PROBE = """
import json, math
from django.db import transaction
from metrics import pipeline, tasks
from metrics.models import MetricRun, MetricScore
(run,) = pipeline.plan_runs("sub", ["cider_d"])
units = pipeline.level_of(run).missing()
parts = list(pipeline.chunks(units, 50))
first = [tasks.score_chunk.apply(args=(run.pk, p)).get() for p in parts[:2]]
again = [tasks.score_chunk.apply(args=(run.pk, p)).get() for p in parts]
run.refresh_from_db()
ids = list(MetricScore.objects.filter(run=run).values_list("caption_id", flat=True))
(lsa,) = pipeline.plan_runs("sub", ["lsa"])
u = [tuple(x) for x in pipeline.level_of(lsa).missing()[:2]]
with transaction.atomic():
    n = pipeline.level_of(lsa).insert(u, [float("nan"), 0.5], [1, 2])
    dup = pipeline.level_of(lsa).insert(u, [0.1, 0.1], [1, 2])
vals = sorted(lsa.set_scores.values_list("value", flat=True), key=lambda v: (not math.isnan(v), v))
print(json.dumps({"vendor": __import__("django.db").db.connection.vendor, "first": first, "again": again,
                  "completed": run.completed, "total": run.total, "status": run.status, "count": len(ids),
                  "distinct": len(set(ids)), "df": run.document_frequency_id is not None, "sets": [n, dup],
                  "set_values": [None if math.isnan(v) else v for v in vals]}))
"""


@pytest.mark.slow
def test_sqlite_fallback_stores_counts_and_keeps_nan(tmp_path):
    """The quick start's SQLite database: the ORM's bulk_create with conflicts ignored, the rows
    inserted counted by total_changes(), the counter exact after every chunk delivered twice."""
    env = sqlite_env(migrated_var(tmp_path / "var"))  # migrated once per session (tests.sqlite_var)
    data = write_subset(tmp_path / "subset", 40)

    def manage(*args):
        result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    manage("import_dataset", "flickr8k-expert", str(data), "--name", "sub")
    out = json.loads(manage("shell", "-c", PROBE).strip().splitlines()[-1])
    assert out["vendor"] == "sqlite"
    total = out["total"]
    assert out["first"] == [50, 50] and out["again"][:2] == [0, 0] and sum(out["again"]) == total - 100
    assert out["status"] == "done" and out["completed"] == out["count"] == out["distinct"] == total
    assert out["df"] and out["sets"] == [2, 0] and out["set_values"] == [None, 0.5]


def test_warm_dataset_fills_the_token_cache_and_never_raises(subset, caplog):
    from crowd.models import Caption

    pipeline.clear_caches()
    assert not pipeline._token_cache
    assert tasks.warm_dataset(subset.pk) == Caption.objects.filter(system__dataset=subset).count() > 0
    (entry,) = pipeline._token_cache.values()
    assert entry is pipeline.dataset_tokens(subset)  # the chunk's own read is now a cache hit
    assert tasks.warm_dataset(10 ** 9) == 0  # no such dataset: logged, not raised
    assert "warming the token cache of dataset" in caplog.text
