"""The judges' chat-completions client against a fake OpenAI-compatible server on loopback
(tests/fake_openai.py): retries and Retry-After, permanent errors, the cache (exact request keys,
atomic files, a crashed run resumed without repeating a request), the budget, the concurrency
limit, hostile bodies, and the API key kept out of everything stored."""
from __future__ import annotations

import json
import threading

import pytest

from captioneval.kernels.judges import client as jc
from tests.fake_openai import Answer, Delay, FakeOpenAI, Raw


def body(text="hello", **more):
    return {"model": "judge-model", "messages": [{"role": "user", "content": text}], "temperature": 0.0,
            "max_tokens": 8, **more}


def make(server, tmp_path=None, **options):
    sleeps = []
    cache = jc.ReplyCache(tmp_path / "cache") if tmp_path is not None else None
    c = jc.ChatClient(jc.Endpoint(server.url, "judge-model", timeout=options.pop("timeout", 5.0),
                                  api_key_env=options.pop("api_key_env", None)),
                      cache=cache, sleep=sleeps.append, **options)
    return c, sleeps


def test_retries_429_honouring_retry_after_then_5xx_with_backoff():
    answers = [Raw(429, b"slow down", {"Retry-After": "7"}), Raw(503, b"busy"), Raw(500, b"oops"), Answer("ok")]
    with FakeOpenAI(lambda b, n: answers[n - 1]) as server:
        c, sleeps = make(server, backoff=0.5, max_backoff=1.5)
        reply = c.complete(body())
    assert not server.problems and len(server.requests) == 4
    assert reply.status == "ok" and jc.message_text(reply.response) == "ok" and reply.tries == 4
    assert sleeps == [7.0, 1.0, 1.5]  # Retry-After honoured; then backoff * 2**(i-1) capped
    assert c.stats["retried"] == 3 and c.stats["sent"] == 4


def test_retry_after_as_http_date_and_capped():
    assert jc.retry_after("Wed, 21 Oct 2015 07:28:00 GMT", 60) == 0.0  # in the past
    assert jc.retry_after("100000", 60) == 60 and jc.retry_after("nonsense", 60) is None and jc.retry_after(None, 5) is None


def test_permanent_error_is_not_retried_and_retries_end():
    with FakeOpenAI(lambda b, n: Raw(404, b'{"error": "no such model"}')) as server:
        c, sleeps = make(server)
        with pytest.raises(jc.JudgeError, match="HTTP 404"):
            c.complete(body())
        assert len(server.requests) == 1 and sleeps == []
    with FakeOpenAI(lambda b, n: Raw(500, b"down")) as server:
        c, sleeps = make(server, max_retries=2, backoff=0.01)
        with pytest.raises(jc.JudgeError, match="after 3 tries"):
            c.complete(body())
        assert len(server.requests) == 3 and len(sleeps) == 2


def test_timeout_is_retried():
    answers = [Delay(1.0, Answer("late")), Answer("ok")]
    with FakeOpenAI(lambda b, n: answers[n - 1]) as server:
        c, sleeps = make(server, timeout=0.2, backoff=0.01)
        assert jc.message_text(c.complete(body()).response) == "ok"
        assert len(sleeps) == 1 and c.stats["sent"] == 2


def test_api_key_from_the_named_variable_never_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_JUDGE_KEY", "sk-secret-123")
    with FakeOpenAI(lambda b, n: Answer("fine"), api_key="sk-secret-123") as server:
        c, _ = make(server, tmp_path, api_key_env="FAKE_JUDGE_KEY")
        reply = c.complete(body())
        assert not server.problems and reply.status == "ok"
    stored = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert "sk-secret" not in stored and "sk-secret" not in repr(c.endpoint)
    monkeypatch.delenv("FAKE_JUDGE_KEY")
    with pytest.raises(jc.JudgeError, match="FAKE_JUDGE_KEY is not set"):
        c.endpoint.headers()


def test_cache_keyed_by_the_exact_request(tmp_path):
    with FakeOpenAI(lambda b, n: Answer(f"answer {n}")) as server:
        c, _ = make(server, tmp_path)
        first = c.complete(body("a"))
        again = c.complete(body("a"))
        other = c.complete(body("a", temperature=0.5))
        retry = c.complete(body("a"), attempt=1)
        assert len(server.requests) == 3
    assert again.cached and jc.message_text(again.response) == "answer 1" == jc.message_text(first.response)
    assert jc.message_text(other.response) == "answer 2" and jc.message_text(retry.response) == "answer 3"
    key = jc.request_key(server.url.rstrip("/") + "/chat/completions", body("a"), 0)
    assert first.key == key and key == __import__("hashlib").sha256(jc.canonical(
        {"url": server.url + "/chat/completions", "body": body("a"), "attempt": 0}).encode()).hexdigest()
    record = json.loads(c.cache.path(key).read_text())
    assert record["response"]["choices"][0]["message"]["content"] == "answer 1"
    assert not list((tmp_path / "cache").rglob(".tmp-*"))  # atomic writes leave no temporary file


def test_budget_stops_cleanly_and_a_rerun_resumes_without_repeating(tmp_path):
    bodies = [(body(f"q{i}"), 0) for i in range(10)]
    with FakeOpenAI(lambda b, n: Answer(b["messages"][0]["content"].upper())) as server:
        c, _ = make(server, tmp_path, concurrency=1, budget=jc.Budget(4))
        with pytest.raises(jc.BudgetExhausted) as info:
            c.complete_many(bodies)
        assert info.value.done == 4 and info.value.total == 10 and len(server.requests) == 4
        c2, _ = make(server, tmp_path, concurrency=4)
        replies = c2.complete_many(bodies)
        sent = [r["body"]["messages"][0]["content"] for r in server.requests]
    assert len(sent) == 10 and len(set(sent)) == 10  # each question asked exactly once over both runs
    assert [jc.message_text(r.response) for r in replies] == [f"Q{i}" for i in range(10)]
    assert c2.stats["cached"] == 4 and c2.stats["sent"] == 6


def test_crash_mid_run_resumes_from_the_cache(tmp_path):
    """A worker dies (here: an exception from the server's 6th answer ends the run); the rerun asks
    only what was not answered."""
    bodies = [(body(f"c{i}"), 0) for i in range(8)]
    with FakeOpenAI(lambda b, n: Raw(400, b"crash") if n == 6 else Answer("x")) as server:
        c, _ = make(server, tmp_path, concurrency=1)
        with pytest.raises(jc.JudgeError):
            c.complete_many(bodies)
        assert len(c.cache) == 5
        c.complete_many(bodies)
        asked = [r["body"]["messages"][0]["content"] for r in server.requests]
    assert asked == [f"c{i}" for i in range(6)] + ["c5", "c6", "c7"]


def test_concurrency_limit_is_respected():
    lock, state = threading.Lock(), {"now": 0, "most": 0}

    def behaviour(b, n):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        import time

        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return Answer("ok")

    with FakeOpenAI(behaviour) as server:
        c, _ = make(server, concurrency=3)
        replies = c.complete_many([(body(f"{i}"), 0) for i in range(12)])
    assert all(r.status == "ok" for r in replies) and state["most"] == 3


def test_hostile_bodies_are_answers_not_crashes(tmp_path):
    answers = {"notjson": Raw(200, b"<html>gateway</html>"), "huge": Raw(200, b"x" * 2_000_000),
               "empty": Raw(200, b'{"choices": []}'), "weird": Raw(200, b'{"choices": [{"message": {"content": 5}}]}')}
    with FakeOpenAI(lambda b, n: answers[b["messages"][0]["content"]]) as server:
        c, _ = make(server, tmp_path, max_reply_bytes=100_000)
        got = {k: c.complete(body(k)) for k in answers}
    assert got["notjson"].status == "invalid" and got["notjson"].raw == "<html>gateway</html>"
    assert got["huge"].status == "too_large" and len(got["huge"].raw) == 100_000
    assert got["empty"].status == "ok" and jc.message_text(got["empty"].response) is None
    assert jc.message_text(got["weird"].response) is None
    assert c.stats["too_large"] == 1 and c.stats["invalid"] == 1


def test_token_logprobs_rejects_malformed_entries():
    good = {"choices": [{"logprobs": {"content": [{"token": "0", "top_logprobs": [{"token": "0", "logprob": -0.1}]}]}}]}
    assert jc.token_logprobs(good) == [("0", {"0": -0.1})]
    bad = json.loads(json.dumps(good))
    bad["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0]["logprob"] = 3.0
    assert jc.token_logprobs(bad) is None and jc.token_logprobs({"choices": []}) is None


def test_throughput_benchmark_runs_and_the_rerun_sends_nothing():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "judge_throughput.py"
    spec = importlib.util.spec_from_file_location("judge_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.run(captions=12, latency=0.001, levels=(1, 4))
    assert [r["requests"] for r in result["concurrency"].values()] == [12, 12]
    assert result["rerun"]["requests"] == 0 and result["rerun"]["cached"] == 12


def test_token_budget_counts_the_reported_usage_and_ignores_nonsense(tmp_path):
    usage = {"q0": 40, "q1": 70, "q2": -5, "q3": "lots", "q4": 10}

    def behaviour(b, n):
        q = b["messages"][0]["content"]
        return Raw(200, json.dumps({"choices": [{"message": {"content": q}}], "usage": {"total_tokens": usage.get(q, 1)}}).encode())

    with FakeOpenAI(behaviour) as server:
        c, _ = make(server, tmp_path, concurrency=1, budget=jc.Budget(max_tokens=100))
        with pytest.raises(jc.BudgetExhausted, match="100 tokens") as info:
            c.complete_many([(body(f"q{i}"), 0) for i in range(5)])
    assert info.value.done == 2 and c.budget.tokens == 110 and len(server.requests) == 2
    b = jc.Budget()
    assert [b.spend_tokens({"usage": {"total_tokens": v}}) for v in (-5, "lots", True, 7)] == [0, 0, 0, 7]
