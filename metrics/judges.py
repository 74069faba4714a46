"""The LLM judges in the platform's pipeline (issue 34): CLAIR, FLEUR, RefFLEUR (and any metric of
the judge family, :class:`captioneval.metrics.judges._judge.JudgeMetric`, a user-defined judge
included) computed by the Celery workers through the library's client
(:mod:`captioneval.kernels.judges.client`).

What this module gives :mod:`metrics.pipeline` (which asks it only about metrics it reports judges,
:func:`is_judge`):

* **configuration** -- ``settings.JUDGE_URL`` and ``settings.JUDGE_MODEL`` (environment
  ``CAPTIONEVAL_JUDGE_URL``, ``CAPTIONEVAL_JUDGE_MODEL``); without both the judges are refused with
  the library's reason (:func:`problem`). ``settings.JUDGE_API_KEY_ENV`` names the environment
  variable holding the API key: the worker reads it when it sends a request; the key itself is never
  stored, logged, or part of a run's identity, and neither is the endpoint's URL;
* **the run's identity** (:func:`run_params`): the metric's own parameters
  (:meth:`~captioneval.metrics.judges._judge.JudgeMetric.parameters`: model, the prompt template's
  SHA-256, temperature, max_tokens, sampling settings, the parser's version, the failure policy, CLAIR's
  tries), so another model, prompt, sampling or parser is another run;
* **the metric object of a run** (:func:`metric_for`): built from the run's stored parameters with
  the reply cache ``settings.JUDGE_CACHE_DIR`` (one JSON file per answered request, named by the
  SHA-256 of the exact request: a rerun, or a worker restarted after a crash, reads what was answered
  instead of asking again) and the budget the run has left (:class:`metrics.models.JudgeUsage`);
* **one chunk per run** -- a judge run's units go to one ``score_chunk`` task (the requests run
  ``settings.JUDGE_CONCURRENCY`` at a time inside it), scored and stored ``settings.JUDGE_BATCH``
  captions at a time (:func:`metrics.pipeline.JudgeLevel.score`), so the run's budget is one
  :class:`~captioneval.kernels.judges.client.Budget`, exact, whatever the number of workers;
* **the record of every caption** (:func:`records`): a :class:`metrics.models.JudgeReply` with its parse
  outcome (``ok``, ``retried``, ``failed`` with the parser's reason), its score and every raw reply,
  written in the transaction of its score; a failed caption's score is NaN (left out of every mean
  and correlation) unless the run asked for the reference's fallback (``--judge-failure reference``:
  CLAIR's 0);
* **a budget that ends a run** (:class:`BudgetStopped`): when the requests or tokens allowed are
  spent, the run stops with ``stopped: budget ...`` as its error (status ``failed``), every caption
  scored so far stored and every reply received cached; ``compute_metrics`` again (with a larger
  budget) goes on from there without asking a cached request again;
* **the report** (:func:`summary`): captions per outcome and parser status, requests sent and read
  from the cache, tokens, the budget.
"""
from __future__ import annotations

import copy
import math

from django.conf import settings
from django.db.models import Count, F

from .models import JudgeReply, JudgeUsage, MetricRun
from captioneval.kernels.judges.client import JudgeError
from captioneval.metrics import registry
from captioneval.metrics.builtin import judges as builtin

#: failure policies a run may ask for (the library's :data:`~captioneval.metrics.judges._judge.FAILURE_POLICIES`)
FAILURES = ("nan", "reference")


class BudgetStopped(RuntimeError):
    """The run's request or token budget is spent: the run stops, its progress kept (a permanent
    failure of the chunk: retrying it would find the budget spent again)."""


def is_judge(metric) -> bool:
    """True for a metric of the LLM-judge family (CLAIR, FLEUR, RefFLEUR, a user-defined judge)."""
    if isinstance(metric, str):
        return metric in builtin.JUDGES or getattr(registry.METRICS.get(metric), "family", None) == "judge"
    return getattr(metric, "family", None) == "judge"


def configured() -> bool:
    """True when an endpoint and a model are configured (``settings.JUDGE_URL``, ``JUDGE_MODEL``)."""
    return bool(getattr(settings, "JUDGE_URL", "") and getattr(settings, "JUDGE_MODEL", ""))


def problem(key: str) -> str | None:
    """Why judge ``key`` cannot run on this installation (no endpoint configured, with the library's
    reason naming the metric first), or None. A user-defined judge carries its own endpoint: None."""
    if configured() or key not in builtin.JUDGES:
        return None
    return builtin.reasons().get(key) or f"{key}: an LLM judge, and no endpoint is configured (docs/metrics.md)"


def _options(failure: str = "nan", tries: int | None = None) -> dict:
    options = {"endpoint": settings.JUDGE_URL, "model": settings.JUDGE_MODEL,
               "api_key_env": settings.JUDGE_API_KEY_ENV or None, "failure": failure}
    if tries is not None:
        options["tries"] = tries
    return options


def _build(key: str, **options):
    """Judge ``key`` made for the platform. A built-in judge (CLAIR, FLEUR, RefFLEUR) is made anew with
    ``options`` (the configured endpoint and model, the failure policy, the worker's client settings).
    A user-defined judge (a registered :class:`~captioneval.metrics.judges._judge.JudgeMetric` with its
    own key, template and parser) keeps its own endpoint, model, template, parser, temperature and
    max_tokens: a copy of the registered object is given the run's failure policy and the worker's
    client settings (cache, concurrency, retries, budget)."""
    if key in builtin.JUDGES:
        return builtin.judge_class(key)(**options)
    from captioneval.metrics.judges._judge import JudgeMetric

    registered = registry.METRICS[key]
    if not isinstance(registered, JudgeMetric):
        raise ValueError(f"{key} is of the judge family but not a JudgeMetric: the platform cannot run it")
    made = copy.copy(registered)
    endpoint = registered.endpoint
    for name in ("endpoint", "model", "api_key_env", "tries"):
        options.pop(name, None)
    JudgeMetric.__init__(made, endpoint.url, endpoint.model, endpoint.api_key_env, temperature=registered.temperature,
                         max_tokens=registered.max_tokens, **options)
    return made


def run_params(key: str, failure: str = "nan") -> dict:
    """The parameters of a judge run (merged into the run's stored ``params``; part of its identity):
    the metric's :meth:`parameters` built with the configured model and ``failure`` (``"nan"`` or
    ``"reference"``). Never the endpoint's URL nor its key. ValueError for a bad ``failure`` or one
    the metric refuses (FLEUR: only ``"nan"``)."""
    if failure not in FAILURES:
        raise ValueError(f"judge failure policy must be one of {', '.join(FAILURES)}, got {failure!r}")
    params = _build(key, **_options(failure)).parameters()
    return {"judge": params}


def set_budget(run: MetricRun, max_requests: int | None, max_tokens: int | None) -> JudgeUsage:
    """Give ``run`` its budget (None: unlimited), replacing the one it had: counted over the whole run,
    resumptions included. ValueError for a negative limit."""
    for name, value in (("max requests", max_requests), ("max tokens", max_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"judge {name} must be a non-negative integer, got {value!r}")
    usage, _ = JudgeUsage.objects.get_or_create(run=run)
    JudgeUsage.objects.filter(pk=usage.pk).update(max_requests=max_requests, max_tokens=max_tokens)
    usage.refresh_from_db()
    return usage


def default_budget() -> dict:
    """The budget of a run planned without one (the compute form, the API, ``compute_metrics`` without
    ``--judge-max-*``): ``{"max_requests": settings.JUDGE_MAX_REQUESTS, "max_tokens": settings.JUDGE_MAX_TOKENS}``
    (None: unlimited)."""
    return {"max_requests": getattr(settings, "JUDGE_MAX_REQUESTS", None),
            "max_tokens": getattr(settings, "JUDGE_MAX_TOKENS", None)}


def usage_of(run: MetricRun) -> JudgeUsage:
    """The run's :class:`JudgeUsage` (created, unlimited, when it has none)."""
    return JudgeUsage.objects.get_or_create(run=run)[0]


def metric_for(run: MetricRun):
    """The judge that scores ``run``: the run's metric with its stored failure policy (and CLAIR's
    tries), the configured endpoint, the reply cache ``settings.JUDGE_CACHE_DIR``, and the budget the
    run has left (:func:`remaining`). ValueError (with the reason) when no endpoint is configured."""
    if not configured():
        raise ValueError(problem(run.metric))
    params = run.params.get("judge", {})
    usage = usage_of(run)
    left_requests, left_tokens = remaining(usage)
    metric = _build(run.metric, **_options(params.get("failure", "nan"), params.get("tries")),
                    concurrency=max(1, int(settings.JUDGE_CONCURRENCY)), max_retries=int(settings.JUDGE_MAX_RETRIES),
                    timeout=float(settings.JUDGE_TIMEOUT), cache_dir=settings.JUDGE_CACHE_DIR or None,
                    max_requests=left_requests, max_total_tokens=left_tokens)
    if {k: v for k, v in metric.parameters().items()} != params:
        raise ValueError(f"run {run.pk} of {run.metric} was planned with other judge settings than this worker's "
                         f"({params.get('model')!r} vs {metric.parameters().get('model')!r}): plan it again "
                         "(compute_metrics) with the worker's CAPTIONEVAL_JUDGE_MODEL")
    return metric


def remaining(usage: JudgeUsage) -> tuple[int | None, int | None]:
    """(requests, tokens) the run may still spend (None: unlimited; never below 0)."""
    req = None if usage.max_requests is None else max(0, usage.max_requests - usage.requests)
    tok = None if usage.max_tokens is None else max(0, usage.max_tokens - usage.tokens)
    return req, tok


def spend(run: MetricRun, sent: int, cached: int, tokens: int) -> None:
    """Add what a batch of the run spent to its :class:`JudgeUsage` (one UPDATE)."""
    usage_of(run)
    JudgeUsage.objects.filter(run=run).update(requests=F("requests") + int(sent), cached=F("cached") + int(cached),
                                              tokens=F("tokens") + int(tokens))


def outcome(detail: dict, value: float) -> str:
    """``ok``, ``retried`` or ``failed`` for one caption's ``details`` entry and its stored score:
    failed when the parser found no usable number (``status`` ``failed``, ``out_of_range`` or any
    status but CLAIR's ``json``/``number`` and FLEUR's ``ok``); retried when it took more than one
    request to the model (``tries`` > 1, CLAIR asking again after an unparseable answer)."""
    status = detail.get("status")
    if status not in ("json", "number", "ok") or (isinstance(value, float) and math.isnan(value)):
        return JudgeReply.FAILED
    return JudgeReply.RETRIED if int(detail.get("tries", 1) or 1) > 1 else JudgeReply.OK


def records(run: MetricRun, caption_ids, values, details) -> list[JudgeReply]:
    """The :class:`JudgeReply` rows of a scored batch (not saved)."""
    out = []
    for cid, value, detail in zip(caption_ids, values, details):
        value = float(value)
        out.append(JudgeReply(run=run, caption_id=int(cid), outcome=outcome(detail, value),
                              status=str(detail.get("status"))[:30], score=value, details=_clean(detail)))
    return out


def _clean(detail: dict) -> dict:
    """``detail`` as JSON the database accepts: NaN and infinities (a model's number) as None, NUL
    characters (which PostgreSQL's jsonb refuses) dropped from strings."""
    def fix(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, str):
            return v.replace("\x00", "")
        if isinstance(v, dict):
            return {str(k).replace("\x00", ""): fix(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [fix(x) for x in v]
        return v
    return fix(detail)


def summary(run: MetricRun) -> dict:
    """A judge run's report: ``outcomes`` (captions per ``ok``/``retried``/``failed``), ``statuses``
    (captions per parser status), ``requests`` (sent, retries included), ``cached`` (answers read from
    the cache), ``tokens``, ``max_requests`` / ``max_tokens`` (None: unlimited), ``stopped`` (True when
    the budget stopped the run)."""
    rows = JudgeReply.objects.filter(run=run).values("outcome", "status").annotate(n=Count("id")).order_by()
    outcomes = {o: 0 for o in (JudgeReply.OK, JudgeReply.RETRIED, JudgeReply.FAILED)}
    statuses: dict[str, int] = {}
    for row in rows:
        outcomes[row["outcome"]] = outcomes.get(row["outcome"], 0) + row["n"]
        statuses[row["status"]] = statuses.get(row["status"], 0) + row["n"]
    usage = JudgeUsage.objects.filter(run=run).first()
    return {"outcomes": outcomes, "statuses": dict(sorted(statuses.items())),
            "requests": usage.requests if usage else 0, "cached": usage.cached if usage else 0,
            "tokens": usage.tokens if usage else 0,
            "max_requests": usage.max_requests if usage else None, "max_tokens": usage.max_tokens if usage else None,
            "stopped": run.status == MetricRun.FAILED and run.error.startswith("stopped: budget")}


def describe(report: dict) -> str:
    """One line of :func:`summary`: ``"10 ok, 1 retried, 1 failed (no_number: 1); 13 requests sent, 2 read
    from the cache, 0 tokens (budget: 100 requests)"``."""
    o = report["outcomes"]
    failed = {k: v for k, v in report["statuses"].items() if k not in ("json", "number", "ok")}
    why = f" ({', '.join(f'{k}: {v}' for k, v in failed.items())})" if failed and o["failed"] else ""
    limits = [f"{report['max_requests']} requests"] if report["max_requests"] is not None else []
    limits += [f"{report['max_tokens']} tokens"] if report["max_tokens"] is not None else []
    budget = f" (budget: {' / '.join(limits)})" if limits else ""
    return (f"{o['ok']} ok, {o['retried']} retried, {o['failed']} failed{why}; {report['requests']} requests sent, "
            f"{report['cached']} read from the cache, {report['tokens']} tokens{budget}")


__all__ = ["BudgetStopped", "JudgeError", "configured", "describe", "is_judge", "metric_for", "outcome", "problem", "records", "remaining",
           "run_params", "set_budget", "spend", "summary", "usage_of"]
