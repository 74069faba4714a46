"""compute_metrics with in-process Celery tasks: stored scores, idempotence, retries, failures, errors."""
import json

import numpy as np
import pytest
from django.core.management.base import CommandError

from crowd.models import Dataset
from metrics.models import CaptionTokens, MetricRun, MetricScore
from captioneval.kernels import coco
from captioneval.metrics import registry
from captioneval.text.tokenizer import ptb_tokenize

from .conftest import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def subset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


def independent_inputs(dataset):
    """Candidates and references straight from the rows, tokenised afresh (not via the cache)."""
    cands = list(dataset.candidates().order_by("id"))
    refs_by_image = {}
    for ref in dataset.references().order_by("image_id", "key"):
        refs_by_image.setdefault(ref.image_id, []).append(ref.text)
    texts = [c.text for c in cands] + [t for c in cands for t in refs_by_image[c.image_id]]
    tokens = ptb_tokenize(texts)
    cand_tok, pos, ref_tok = tokens[: len(cands)], len(cands), []
    for c in cands:
        n = len(refs_by_image[c.image_id])
        ref_tok.append(tokens[pos : pos + n])
        pos += n
    return cands, cand_tok, ref_tok


def stored(run):
    return dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))


def test_scores_stored_for_every_candidate_and_equal_to_reference_implementations(subset):
    out = run_command("compute_metrics", "--dataset", "sub", "--wait")
    assert "cider_d: done" in out
    cands, cand_tok, ref_tok = independent_inputs(subset)
    expected = {
        **{f"bleu_{n}": row for n, row in enumerate(coco.bleu(cand_tok, ref_tok), start=1)},
        "rouge_l": coco.rouge_l(cand_tok, ref_tok),
        "meteor": coco.meteor(cand_tok, ref_tok),
    }
    from pycocoevalcap.cider.cider import Cider

    _, cider_ref = Cider().compute_score({i: r for i, r in enumerate(ref_tok)}, {i: [c] for i, c in enumerate(cand_tok)})
    expected["cider_d"] = np.asarray(cider_ref)
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=subset)}
    assert set(runs) == set(registry.DEFAULT_METRICS)
    for key, run in runs.items():
        assert run.status == MetricRun.DONE and run.completed == run.total == len(cands)
        assert run.started_at and run.finished_at and run.compute_seconds > 0
        values = stored(run)
        got = np.array([values[c.pk] for c in cands])
        np.testing.assert_allclose(got, expected[key], atol=1e-6, err_msg=key)


def test_rerun_is_idempotent_and_force_recomputes(subset):
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "rouge_l", "--wait")
    run = MetricRun.objects.get(dataset=subset, metric="bleu_4")
    first = stored(run)
    out = run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "--wait")
    assert "bleu_4: up to date" in out
    assert MetricRun.objects.filter(dataset=subset).count() == 2
    assert MetricScore.objects.filter(run=run).count() == len(first)
    tokenised = CaptionTokens.objects.count()
    run.refresh_from_db()
    first_start = run.started_at
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "--force", "--wait")
    assert stored(run) == first
    run.refresh_from_db()  # timed afresh: started again, not counted from the first computation
    assert run.started_at > first_start and run.finished_at >= run.started_at
    assert CaptionTokens.objects.count() == tokenised


def test_failed_chunk_is_retried_and_run_completes(subset, monkeypatch, settings):
    settings.METRICS_CHUNK_SIZE = 50
    calls = {"n": 0}
    metric = registry.METRICS["rouge_l"]
    real = metric.score

    def flaky(batch):
        calls["n"] += 1
        if calls["n"] == 2:  # the second chunk fails once
            raise ConnectionError("worker lost its database connection")
        return real(batch)

    monkeypatch.setattr(metric, "score", flaky)  # the pipeline calls the metric object's score
    run_command("compute_metrics", "--dataset", "sub", "--metric", "rouge_l", "--wait")
    run = MetricRun.objects.get(dataset=subset, metric="rouge_l")
    assert run.status == MetricRun.DONE
    assert MetricScore.objects.filter(run=run).count() == run.total == subset.candidates().count()
    assert calls["n"] == -(-run.total // 50) + 1  # one extra call: the retry


def test_run_is_never_done_with_missing_scores_and_resumes(subset, monkeypatch, settings):
    settings.METRICS_CHUNK_SIZE = 50
    metric = registry.METRICS["bleu_1"]
    real = metric.score
    state = {"calls": 0, "broken": True}

    def broken_third_chunk(batch):
        state["calls"] += 1
        if state["broken"] and state["calls"] >= 3:
            raise RuntimeError("scorer crashed")
        return real(batch)

    monkeypatch.setattr(metric, "score", broken_third_chunk)
    with pytest.raises(CommandError, match="did not finish: bleu_1: RuntimeError: scorer crashed"):
        run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_1", "--wait")
    run = MetricRun.objects.get(dataset=subset, metric="bleu_1")
    assert run.status == MetricRun.FAILED
    assert 0 < MetricScore.objects.filter(run=run).count() < run.total
    assert run.completed < run.total
    # A correlation report refuses the incomplete run.
    with pytest.raises(CommandError, match="bleu_1' is failed"):
        run_command("correlate", "--dataset", "sub", "--metric", "bleu_1", "--json")
    # Resuming scores only what is missing.
    state["broken"], state["calls"] = False, 0
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_1", "--wait")
    run.refresh_from_db()
    assert run.status == MetricRun.DONE and run.completed == run.total
    assert state["calls"] == -(-(run.total - 100) // 50)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "nope"], "unknown dataset 'nope'"),
        (["--dataset", "sub", "--metric", "bleurt"], "unknown metric 'bleurt'"),
        (["--dataset", "sub", "--metric", "spice"], "SPICE is unavailable: its jar downloads Stanford CoreNLP"),
    ],
)
def test_bad_requests_fail_with_one_line_and_change_nothing(subset, args, message):
    with pytest.raises(CommandError, match=message) as err:
        run_command("compute_metrics", *args)
    assert "\n" not in str(err.value)
    assert MetricRun.objects.count() == 0 and CaptionTokens.objects.count() == 0


def test_empty_dataset_is_refused(subset):
    subset.candidates().delete()
    with pytest.raises(CommandError, match="has no candidate captions"):
        run_command("compute_metrics", "--dataset", "sub")
    assert MetricRun.objects.count() == 0


def test_correlate_errors(subset):
    with pytest.raises(CommandError, match="no metric has been computed on dataset 'sub'"):
        run_command("correlate", "--dataset", "sub", "--json")
    with pytest.raises(CommandError, match="unknown dataset 'zzz'"):
        run_command("correlate", "--dataset", "zzz", "--json")
    with pytest.raises(CommandError, match="unknown metric 'foo'"):
        run_command("correlate", "--dataset", "sub", "--metric", "foo", "--json")


def test_supplied_document_frequency_table(subset, flickr8k_dir, tmp_path):
    """CIDEr-D with a supplied df table (here: from all 5,664 Flickr8k-Expert pairs' references, a
    corpus larger than the evaluated subset) equals cider_d called with that table, and is stored as
    its own run beside the default one."""
    from captioneval.kernels.cider import DocumentFrequency, cider_d
    from tests.flickr8k_data import load_flickr8k_expert_tokenized

    table = DocumentFrequency.from_references([p.references for p in load_flickr8k_expert_tokenized()])
    df_file = tmp_path / "flickr8k-df.json"
    df_file.write_text(json.dumps(table.to_json()))

    run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d", "--wait")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d", "--cider-df", str(df_file), "--wait")
    runs = list(MetricRun.objects.filter(dataset=subset, metric="cider_d").order_by("id"))
    assert len(runs) == 2 and all(r.status == MetricRun.DONE for r in runs)
    assert runs[0].params["document_frequency"] == "dataset"
    assert runs[1].params["document_frequency"]["name"] == "flickr8k-df.json"

    cands, cand_tok, ref_tok = independent_inputs(subset)
    expected = cider_d(cand_tok, ref_tok, df=table)
    got = np.array([stored(runs[1])[c.pk] for c in cands])
    np.testing.assert_allclose(got, expected, atol=1e-9)
    assert not np.allclose(got, np.array([stored(runs[0])[c.pk] for c in cands]))

    default = json.loads(run_command("correlate", "--dataset", "sub", "--metric", "cider_d", "--json", "--resamples", "0"))
    supplied = json.loads(
        run_command("correlate", "--dataset", "sub", "--metric", "cider_d", "--cider-df", str(df_file), "--json", "--resamples", "0")
    )
    assert default["metrics"]["cider_d"]["run"] == runs[0].pk and supplied["metrics"]["cider_d"]["run"] == runs[1].pk


def test_bad_document_frequency_file_changes_nothing(subset, tmp_path):
    bad = tmp_path / "df.json"
    bad.write_text('{"n_documents": 3}')
    with pytest.raises(CommandError, match=r"df.json: document-frequency JSON must be an object"):
        run_command("compute_metrics", "--dataset", "sub", "--metric", "cider_d", "--cider-df", str(bad))
    bad.write_text("not json")
    with pytest.raises(CommandError, match=r"df.json: not a JSON document-frequency table"):
        run_command("compute_metrics", "--dataset", "sub", "--cider-df", str(bad))
    with pytest.raises(CommandError, match=r"missing.json: file not found"):
        run_command("compute_metrics", "--dataset", "sub", "--cider-df", str(tmp_path / "missing.json"))
    assert MetricRun.objects.count() == 0


def test_llm_judges_are_refused_without_an_endpoint_and_offered_with_one(subset, monkeypatch, client, settings):
    """Without an endpoint compute_metrics refuses the judges (nothing written) and the compute form
    lists them as refused by their names, with one reason on the dataset page; with one configured
    (settings.JUDGE_URL/JUDGE_MODEL, the registry having them) the form offers them (issue 34; their
    runs: tests/test_judges_pipeline.py)."""
    from captioneval.metrics.judges.clair import Clair
    from metrics import jobs

    settings.JUDGE_URL = settings.JUDGE_MODEL = ""
    with pytest.raises(CommandError, match="CLAIR: an LLM judge, and no endpoint is configured"):
        run_command("compute_metrics", "--dataset", "sub", "--metric", "clair", "bleu_4")
    assert not MetricRun.objects.exists()
    offered, refused = jobs.metric_choices(Dataset.objects.get(name="sub"))
    assert {r["key"]: r["name"] for r in refused if r["key"] in ("clair", "fleur", "ref_fleur")} == {
        "clair": "CLAIR", "fleur": "FLEUR", "ref_fleur": "RefFLEUR"}
    # the dataset page says the judges' one reason once, naming the three
    import html as html_module
    import re

    page = client.get("/datasets/sub/").content.decode()
    lines = dict(re.findall(r'<p class="muted" data-unavailable="([^"]+)">(.*?)</p>', page, re.S))
    assert html_module.unescape(lines["clair fleur ref_fleur"]).startswith(
        "CLAIR, FLEUR, RefFLEUR: an LLM judge, and no endpoint is configured: set CAPTIONEVAL_JUDGE_URL")
    assert page.count("no endpoint is configured") == 1 and "spice" in lines
    monkeypatch.setenv("CAPTIONEVAL_JUDGE_URL", "http://127.0.0.1:9/v1")  # as on a server with an endpoint
    monkeypatch.setenv("CAPTIONEVAL_JUDGE_MODEL", "judge")
    settings.JUDGE_URL, settings.JUDGE_MODEL = "http://127.0.0.1:9/v1", "judge"
    monkeypatch.setitem(registry.METRICS, "clair", Clair())
    monkeypatch.delitem(registry.UNAVAILABLE, "clair", raising=False)
    offered, refused = jobs.metric_choices(Dataset.objects.get(name="sub"))
    assert "clair" in {o["key"] for o in offered} and "clair" not in {r["key"] for r in refused}
