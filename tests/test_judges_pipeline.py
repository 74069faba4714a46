"""The LLM judges in the platform's pipeline (metrics/judges.py, issue 34), in-process on the test
database against the fake OpenAI-compatible server on loopback (tests/fake_openai.py): a small COCO
dataset (six pictures, two systems, twelve candidate captions) scored with CLAIR and FLEUR through
``compute_metrics``; each caption's score, parse outcome and raw replies stored; hostile replies
counted, never a crash; a budget that stops a run with its progress kept and a rerun that goes on
without asking a cached request again; the API key never in the database, the run's identity or the
log; the judges refused, with the reason, when no endpoint is configured."""
from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from django.core.management.base import CommandError
from django.db import connection

from captioneval.metrics import registry
from captioneval.metrics.judges.clair import Clair
from captioneval.metrics.judges.fleur import Fleur
from crowd.models import Caption, Dataset
from metrics import jobs, judges, pipeline
from metrics.models import JudgeReply, JudgeUsage, MetricRun, MetricScore
from tests import learned_models as lm

from .conftest import run_command
from .fake_openai import Answer, FakeOpenAI, Raw, completion
from .test_judges_metrics import tokens_for
from .test_learned_pipeline import CAPTIONS, coco_files, picture_folder

pytestmark = pytest.mark.django_db

KEY = "sk-test-" + "7f3a9c" * 4


@pytest.fixture(scope="module")
def pictures(tmp_path_factory):
    return lm.write_tiny_images(tmp_path_factory.mktemp("judge-pictures"))


@pytest.fixture
def dataset(tmp_path, pictures):
    run_command("import_coco", "--name", "pictures", *coco_files(tmp_path))
    run_command("set_image_source", "pictures", "--images-dir",
                str(picture_folder({"images": pictures}, tmp_path / "pictures")))
    return Dataset.objects.get(name="pictures")


@pytest.fixture
def endpoint(settings, monkeypatch, tmp_path):
    """Configure the judges for the fake server started by the test: returns ``configure(server)``."""

    def configure(server):
        monkeypatch.setenv("CAPTIONEVAL_JUDGE_URL", server.url)
        monkeypatch.setenv("CAPTIONEVAL_JUDGE_MODEL", server.model)
        monkeypatch.setenv("JUDGE_TEST_KEY", KEY)
        settings.JUDGE_URL, settings.JUDGE_MODEL, settings.JUDGE_API_KEY_ENV = server.url, server.model, "JUDGE_TEST_KEY"
        settings.JUDGE_CACHE_DIR = str(tmp_path / "judge-cache")
        settings.JUDGE_CONCURRENCY, settings.JUDGE_BATCH, settings.JUDGE_MAX_RETRIES = 2, 4, 1
        for cls in (Clair, Fleur):
            monkeypatch.setitem(registry.METRICS, cls.key, cls())
        return server

    return configure


def candidate(prompt: str) -> str:
    return prompt.split("Candidate set:\n- ")[1].split("\n")[0]


def clair_behaviour(body, n):
    """A score per caption from its text; one caption answered with garbage first (asked again), one
    always unparseable, one with HTML, one trying to inject an instruction."""
    text = candidate(body["messages"][0]["content"])
    if text == "A cat sleeps .":
        return Answer("I cannot rate this.")
    if text == "A boy in the snow .":
        return Raw(200, b"<html>502 Bad Gateway</html>")
    if text == "A dog in the water .":  # unparseable the first time, then a score
        return Answer('{"score": 40, "reason": "second try"}' if _asked_twice(text) else "no idea")
    return Answer(json.dumps({"score": 10 + 5 * len(text) % 90, "reason": f"<script>alert('{text}')</script>"}))


_seen: dict[str, int] = {}


def _asked_twice(text: str) -> bool:
    _seen[text] = _seen.get(text, 0) + 1
    return _seen[text] > 1


def expected_clair(text: str) -> float:
    if text in ("A cat sleeps .", "A boy in the snow ."):
        return math.nan
    if text == "A dog in the water .":
        return 0.4
    return (10 + 5 * len(text) % 90) / 100


def test_judges_refused_without_an_endpoint(dataset, settings):
    settings.JUDGE_URL = settings.JUDGE_MODEL = ""
    with pytest.raises(CommandError, match=r"CLAIR: an LLM judge, and no endpoint is configured: set CAPTIONEVAL_JUDGE_URL"):
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair")
    assert not MetricRun.objects.exists()
    _, refused = jobs.metric_choices(dataset)
    assert {r["key"] for r in refused} >= {"clair", "fleur", "ref_fleur"}


def test_clair_run_stores_scores_outcomes_and_raw_replies(dataset, endpoint, caplog, client):
    _seen.clear()
    caplog.set_level(logging.DEBUG)
    with FakeOpenAI(clair_behaviour, api_key=KEY) as server:
        endpoint(server)
        offered, _ = jobs.metric_choices(dataset)
        assert "clair" in {m["key"] for m in offered}
        out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair")
    assert not server.problems
    run = MetricRun.objects.get(metric="clair")
    assert run.status == MetricRun.DONE and run.completed == run.total == 12
    assert "clair: done, 12/12 scores" in out
    assert "9 ok, 1 retried, 2 failed (failed: 2); 17 requests sent, 0 read from the cache" in out
    text_of = dict(Caption.objects.values_list("id", "text"))
    scores = {text_of[c]: v for c, v in MetricScore.objects.filter(run=run).values_list("caption_id", "value")}
    for system in CAPTIONS.values():
        for text in system:
            assert scores[text] == pytest.approx(expected_clair(text), nan_ok=True)
    replies = {text_of[r.caption_id]: r for r in JudgeReply.objects.filter(run=run)}
    assert replies["A cat sleeps ."].outcome == "failed" and replies["A cat sleeps ."].status == "failed"
    assert [r["text"] for r in replies["A cat sleeps ."].details["replies"]] == ["I cannot rate this."] * 3
    assert replies["A boy in the snow ."].details["replies"][0]["status"] == "invalid"
    assert replies["A dog in the water ."].outcome == "retried"
    assert replies["A dog runs on the grass ."].details["replies"][0]["text"].startswith('{"score": ')
    # the identity: model, prompt, sampling, parser; never the URL or the key
    judge = run.params["judge"]
    assert judge["model"] == "judge-model" and judge["parser"] == "clair-reference-parse/1"
    assert judge["temperature"] == 0.0 and judge["failure"] == "nan" and len(judge["prompt_sha256"]) == 16
    assert server.url not in json.dumps(run.params)
    with connection.cursor() as cur:  # the key is nowhere in the database
        for table in ("metrics_metricrun", "metrics_judgereply", "metrics_judgeusage", "metrics_metricscore"):
            cur.execute(f"SELECT count(*) FROM {table} t WHERE row_to_json(t)::text LIKE %s", [f"%{KEY[:12]}%"])
            assert cur.fetchone()[0] == 0, table
    assert KEY not in caplog.text and KEY not in out
    # the dataset page links the run's page, which counts the outcomes and shows the replies escaped
    assert f'href="/datasets/pictures/runs/{run.pk}/judge/"' in client.get("/datasets/pictures/").content.decode()
    page = client.get(f"/datasets/pictures/runs/{run.pk}/judge/")
    html = page.content.decode()
    assert page.status_code == 200 and KEY not in html
    assert '<tr data-outcome="ok"><td class="name"><a href="?outcome=ok">ok</a></td><td class="count">9</td>' in html
    assert '<tr data-outcome="failed"><td class="name"><a href="?outcome=failed">failed</a></td><td class="count">2</td>' in html
    assert "&lt;script&gt;alert(" in html and "<script>alert(" not in html
    failed = client.get(f"/datasets/pictures/runs/{run.pk}/judge/?outcome=failed").content.decode()
    assert failed.count('<tr data-caption=') == 2 and failed.count(">I cannot rate this.</pre>") == 3
    assert client.get(f"/datasets/pictures/runs/{run.pk}/judge/?outcome=bogus").status_code == 404


def test_reference_failure_policy_is_another_run(dataset, endpoint):
    _seen.clear()
    with FakeOpenAI(clair_behaviour, api_key=KEY) as server:
        endpoint(server)
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair")
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair", "--judge-failure", "reference")
    runs = list(MetricRun.objects.filter(metric="clair").order_by("pk"))
    assert len(runs) == 2 and runs[0].params_key != runs[1].params_key
    failed = JudgeReply.objects.filter(run=runs[1], outcome="failed").values_list("caption_id", flat=True)
    values = dict(MetricScore.objects.filter(run=runs[1]).values_list("caption_id", "value"))
    assert len(failed) == 2 and all(values[c] == 0.0 for c in failed)
    # the second run asked nothing the first had asked: same requests, read from the cache
    assert JudgeUsage.objects.get(run=runs[1]).requests == 0


def test_budget_stops_the_run_and_a_rerun_resumes_without_repeating(dataset, endpoint, settings, client):
    settings.JUDGE_MAX_REQUESTS = 6  # the budget of a run planned without one (the form, the API)
    with FakeOpenAI(lambda body, n: Answer('{"score": 50, "reason": "fine"}'), api_key=KEY) as server:
        endpoint(server)
        with pytest.raises(CommandError, match=r"stopped: budget"):
            run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair")
        run = MetricRun.objects.get(metric="clair")
        assert run.status == MetricRun.FAILED and run.error.startswith("stopped: budget")
        assert run.completed == 4 and MetricScore.objects.filter(run=run).count() == 4  # one batch of 4 stored
        assert len(server.requests) == 6
        assert judges.summary(run)["stopped"] and JudgeUsage.objects.get(run=run).requests == 6
        api = client.get(f"/api/runs/{run.pk}/").json()["judge"]
        assert api["stopped"] and api["requests"] == 6 and api["max_requests"] == 6 and api["outcomes"]["ok"] == 4
        assert api["page_url"] == f"/datasets/pictures/runs/{run.pk}/judge/"
        out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair", "--judge-max-requests", "20")
        assert len(server.requests) == 12  # the 2 answered in the stopped batch came from the cache
    bodies = [json.dumps(r["body"], sort_keys=True) for r in server.requests]
    assert len(set(bodies)) == 12
    run.refresh_from_db()
    assert run.status == MetricRun.DONE and "12 ok, 0 retried, 0 failed; 12 requests sent, 2 read from the cache" in out
    assert "(budget: 20 requests)" in out
    assert (np.array(MetricScore.objects.filter(run=run).values_list("value", flat=True)) == 0.5).all()


def test_token_budget(dataset, endpoint, settings):
    def behaviour(body, n):
        return Raw(200, json.dumps({**completion('{"score": 30}'), "usage": {"total_tokens": 100}}).encode())

    with FakeOpenAI(behaviour, api_key=KEY) as server:
        endpoint(server)
        settings.JUDGE_CONCURRENCY = 1
        with pytest.raises(CommandError, match=r"stopped: budget \(250 tokens"):
            run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair", "--judge-max-tokens", "250")
        run = MetricRun.objects.get(metric="clair")
        usage = JudgeUsage.objects.get(run=run)
        # three answers reach 300 >= 250 tokens: the fourth request is not sent, the batch of 4 is not stored
        assert (usage.requests, usage.tokens, run.completed) == (3, 300, 0) and len(server.requests) == 3
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clair", "--judge-max-tokens", "100000")
        assert len(server.requests) == 12
    usage.refresh_from_db()
    assert (usage.requests, usage.cached, usage.tokens) == (12, 3, 1200)


def test_fleur_with_the_pictures(dataset, endpoint):
    rng = np.random.default_rng(3)

    def behaviour(body, n):
        text = body["messages"][0]["content"][1]["text"]
        if "A cat sleeps" in text:
            return Answer("excellent", tokens_for(rng, "excellent"))
        return Answer("0.6", tokens_for(rng, "0.6"))

    with FakeOpenAI(behaviour, api_key=KEY, logprobs=True, images=True) as server:
        endpoint(server)
        out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "fleur")
    assert not server.problems and len(server.requests) == 12
    run = MetricRun.objects.get(metric="fleur")
    assert run.status == MetricRun.DONE and run.params["judge"]["logprobs"] is True
    assert "11 ok, 0 retried, 1 failed (no_number: 1)" in out
    values = list(MetricScore.objects.filter(run=run).values_list("value", flat=True))
    assert sum(math.isnan(v) for v in values) == 1
    assert all(0.0 <= v <= 1.0 for v in values if not math.isnan(v))
    # the published FLEUR and RefFLEUR correlations are linked to our keys: computed here with an endpoint
    from analysis import published

    assert published.metric_info("fleur") == ("fleur", "FLEUR", True)
    assert published.metric_info("reffleur")[:2] == ("ref_fleur", "RefFLEUR")


def test_published_fleur_is_not_computed_here_without_an_endpoint():
    from analysis import published

    assert "fleur" not in registry.METRICS
    assert published.metric_info("fleur") == ("fleur", "FLEUR", False)


def test_a_user_defined_judge_keeps_its_own_prompt_and_parser_on_the_platform(dataset, endpoint, monkeypatch):
    template = "Is '{candidate_statements}' fluent? References: {target_statements} Answer JSON with a score 0-100."

    def behaviour(body, n):
        text = body["messages"][0]["content"]
        assert text.startswith("Is '- ")
        return Answer('{"score": 64}' if "A cat" not in text else "score: 100")  # the json parser refuses the second

    with FakeOpenAI(behaviour, api_key=KEY) as server:
        endpoint(server)
        mine = Clair(server.url, server.model, "JUDGE_TEST_KEY", key="fluency_judge", name="Fluency judge", version="fluency-judge/1",
                     template=template, parser="json", tries=2)
        monkeypatch.setitem(registry.METRICS, "fluency_judge", mine)
        out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "fluency_judge")
    assert not server.problems and len(server.requests) == 11 + 2
    run = MetricRun.objects.get(metric="fluency_judge")
    assert run.version == "fluency-judge/1" and run.params["judge"] == mine.parameters()
    assert run.params["judge"]["parser"] == "json-score-only/1" and run.params["judge"]["tries"] == 2
    assert "11 ok, 0 retried, 1 failed (failed: 1)" in out
    values = list(MetricScore.objects.filter(run=run).values_list("value", flat=True))
    assert sum(math.isnan(v) for v in values) == 1 and [v for v in values if not math.isnan(v)] == [0.64] * 11
