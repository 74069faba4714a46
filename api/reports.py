"""REST resources of the reports: a dataset's correlation report, benchmark meta-evaluation,
system leaderboard and caption-set diversity summary, and the cross-benchmark comparison.

Each answers exactly the JSON of the page's download (the same functions make it):

=====================================  ===============================================  ==================================
resource                               page download                                    made by
=====================================  ===============================================  ==================================
``/api/reports/correlation/<name>/``   ``/datasets/<name>/correlations.json``           :func:`analysis.reports.correlation_report` (stored)
``/api/reports/benchmark/<name>/``     ``/datasets/<name>/benchmark.json``              :func:`analysis.benchmarks.benchmark_report` (stored) + :func:`analysis.published.attach`
``/api/reports/leaderboard/<name>/``   ``/datasets/<name>/leaderboard.json``            :func:`analysis.leaderboard.leaderboard` (stored)
``/api/reports/diversity/<name>/``     ``/datasets/<name>/diversity.json``              :func:`analysis.diversity.diversity_summary`
``/api/reports/comparison/``           ``/compare.json``                                :func:`analysis.benchmarks.comparison` (stored) + :func:`analysis.published.attach_comparison`
=====================================  ===============================================  ==================================

Query parameters are the page's, validated by the page's own functions before anything is
requested: ``weighting`` (correlation); ``criterion``, ``resamples``, ``seed``, ``permutations``,
``alpha`` (benchmark, comparison; plus repeatable ``dataset`` for the comparison); ``metric``,
``criterion`` (repeatable), ``baseline``, ``test``, ``resamples``, ``seed``, ``alpha``
(leaderboard); ``m``, ``beta2`` (diversity).

Nothing slow runs in the request. The stored reports are read as the pages read them
(:func:`analysis.tasks.read_report`): the first request for a key queues the Celery task that
computes the report (in-process without a broker, the quick start); while it is queued or running
the answer is **202** with ``Retry-After`` and ``Location`` (the status resource
``/api/reports/status/<id>/``, the JSON of the page's progress bar) and the body
``{"report", "status", "error", "id", "status_url"}``; ask again after ``Retry-After`` seconds. The
diversity summary is not a stored report: like its page, it averages stored set scores (one query
per run) in the request.

Errors (RFC 9457 problem details, :mod:`api.base`): an unknown dataset in the path is 404; a bad
parameter (a number out of range, an unknown metric, criterion, test, baseline, weighting, or
comparison dataset) is 400 naming it; a report that cannot be made from the dataset's current data
(no metric computed yet, no human judgments, a forced-choice dataset's correlation report, which is
its benchmark report) is 409 with the page's message; a computation that failed is 503 with
``Retry-After`` (it is queued again after :data:`analysis.tasks.RETRY_AFTER`).

Limits (:mod:`analysis.limits`, as on the pages): anyone who is not staff chooses ``seed``,
``resamples``, ``permutations`` and ``alpha`` among the offered values (another is a 400 naming
them); every report resource but the status counts against ``REPORT_RATE_LIMIT``, one counter with
the pages (:class:`ReportThrottle`; 429 ``throttled`` with ``Retry-After``); a request that would start
a computation while ``REPORT_MAX_COMPUTING`` reports are queued or computed is 503 ``busy`` with
``Retry-After``, nothing stored.

The pages' own helpers do the work (their settings parsers, their ``read_*`` functions, which
request the stored report), called rather than copied, so the API cannot drift from the downloads.

Who may read: everyone, as the dashboard pages (datasets are public; systems of unpublished
campaigns are left out by the reports themselves, :mod:`crowd.privacy`). The status of a
campaign's report is its owners' (and superusers'), as ``/reports/<id>/status.json``.
"""
from __future__ import annotations

import re

from django.http import Http404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from analysis import benchmark_views, diversity_views, leaderboard_views, limits, published
from analysis import views as dataset_views
from analysis.benchmark_views import BadSettings
from analysis.diversity import diversity_summary
from analysis.models import Report
from analysis.query import control_character_parameter
from analysis.reports import ReportError, protocol
from analysis.status_views import report_status
from analysis.tasks import REFRESH_SECONDS, RETRY_AFTER
from crowd.models import Dataset

from .base import ProblemSerializer, RateThrottle, problem

#: the query parameters each report takes (for the ``field`` of a 400's ``errors``)
PARAMETERS = ("weighting", "criterion", "resamples", "seed", "permutations", "alpha", "dataset", "metric",
              "baseline", "test", "m", "beta2")
#: a dataset name in a path (a slug, as the pages' URLs)
DATASET = r"[-a-zA-Z0-9_]+"


class ReportComputing(serializers.Serializer):
    """The answer while a stored report is queued or being computed (HTTP 202)."""

    report = serializers.CharField(help_text='what is computed, e.g. "leaderboard"')
    status = serializers.ChoiceField(choices=[Report.PENDING, Report.RUNNING], help_text="pending (queued) or running")
    error = serializers.CharField(allow_blank=True, help_text="empty")
    id = serializers.IntegerField(help_text="the stored report's id")
    status_url = serializers.URLField(help_text="its status resource: progress, elapsed seconds, when to ask again")


class ReportStatus(serializers.Serializer):
    """The state of one stored report (``/reports/<id>/status.json``, :mod:`analysis.status_views`)."""

    id = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.ChoiceField(choices=[Report.PENDING, Report.RUNNING, Report.DONE, Report.FAILED])
    percent = serializers.FloatField(allow_null=True, help_text="estimate in [0, 95] while running, 100 once done")
    elapsed = serializers.FloatField(help_text="seconds since queued or started")
    last_seconds = serializers.FloatField(allow_null=True, help_text="duration of the last computation of the same report")
    error = serializers.CharField(allow_blank=True)
    refresh = serializers.IntegerField(allow_null=True, help_text="seconds to wait before asking again (null once done or failed)")


def bad_parameter(message: str, field: str | None = None, query=None) -> exceptions.ValidationError:
    """A 400 for a query parameter: ``field``, or else a parameter the page's message names
    ("resamples must be...", "metric: unknown metric...") -- of several ("resamples and
    permutations must be...", "m must be an integer and beta2 a number"), the first one the
    request's ``query`` gives."""
    if field is None:
        named = [w for w in re.findall(r"[a-z0-9_]+", message) if w in PARAMETERS]
        given = [w for w in named if query is not None and w in query]
        field = (given or named or ["non_field_errors"])[0]
    return exceptions.ValidationError({field: [message]})


class ReportUnavailable(exceptions.APIException):
    """The report cannot be made from the dataset's current data (the page's stored message)."""

    status_code = 409
    default_detail = "the report cannot be made from the current data"
    default_code = "report_unavailable"


def dataset_or_404(name: str) -> Dataset:
    """The dataset ``name``; Http404 (answered 404) naming it otherwise."""
    dataset = Dataset.objects.filter(name=name).first()
    if dataset is None:
        raise Http404(f"unknown dataset {name!r}")
    return dataset


def status_url(request, row: Report) -> str:
    """The absolute URL of the status resource of stored report ``row``."""
    return request.build_absolute_uri(reverse("api:report-status", args=[row.pk]))


def answer(request, read: tuple, what: str, finish=None) -> Response:
    """The response to a stored report read by a page's function (``read`` = (report, problem,
    computing, row), :func:`analysis.tasks.read_report`): 200 with ``finish(report)`` (default the
    report itself), 409 with the stored problem, 202 while it is queued or computed (``Retry-After``,
    ``Location``: the status resource), 503 when the computation failed (``Retry-After``: when a
    request queues it again). A stale report of the same parameters is never answered: the API
    answers the report of the current data or says it is being computed."""
    report, message, computing, row = read
    if message is not None:
        raise ReportUnavailable(message)
    if computing is None:
        return Response(finish(report) if finish else report)
    url = status_url(request, row)
    if row.status == Report.FAILED:  # queued again by the first request RETRY_AFTER after it failed
        wait = RETRY_AFTER - (timezone.now() - row.finished_at) if row.finished_at else RETRY_AFTER
        return problem(request, 503, f"the {what} could not be computed ({row.error}); it is computed again on a "
                       "request after a few minutes", "report_failed",
                       headers={"Retry-After": str(max(1, int(wait.total_seconds()))), "Location": url})
    return Response({"report": what, "status": row.status, "error": row.error, "id": row.pk, "status_url": url},
                    status=202, headers={"Retry-After": str(REFRESH_SECONDS), "Location": url})


def _settings(read_settings, request, *args):
    """``read_settings(request, *args)`` (a page's settings parser) with BadSettings as a 400."""
    try:
        return read_settings(request, *args)
    except BadSettings as exc:
        raise bad_parameter(str(exc), query=request.query_params) from None


def check_benchmark_criterion(dataset: Dataset, criterion: str | None) -> None:
    """A 400 for a ``criterion`` the dataset has no judgments on (the leaderboard page's check,
    :func:`analysis.leaderboard_views.leaderboard_settings`), before a report is requested."""
    message = benchmark_views.criterion_problem(dataset, criterion)
    if message is not None:
        raise bad_parameter(message, "criterion")


# --- documentation of the parameters ----------------------------------------------------------------------
def _int(name, text):
    return OpenApiParameter(name, OpenApiTypes.INT, OpenApiParameter.QUERY, required=False, description=text)


def _float(name, text):
    return OpenApiParameter(name, OpenApiTypes.DOUBLE, OpenApiParameter.QUERY, required=False, description=text)


def _str(name, text, many=False, enum=None):
    return OpenApiParameter(name, OpenApiTypes.STR, OpenApiParameter.QUERY, required=False, description=text,
                            many=many, enum=enum, explode=True if many else None)


def _offered(name: str) -> str:
    """What anyone but staff may choose for ``name`` (:data:`analysis.limits.OFFERED`), for a description."""
    return f"offered: {', '.join(map(str, limits.OFFERED[name]))}; staff: "


BOOTSTRAP = [
    _int("resamples", f"bootstrap resamples ({_offered('resamples')}0-{benchmark_views.MAX_RESAMPLES}; "
                      f"default {benchmark_views.DEFAULT_RESAMPLES})"),
    _int("seed", f"random seed ({_offered('seed')}0 to 2^32 - 1; default 0)"),
    _int("permutations", f"permutation-test permutations ({_offered('permutations')}0-{benchmark_views.MAX_RESAMPLES}; "
                         f"default {benchmark_views.DEFAULT_PERMUTATIONS})"),
    _float("alpha", f"significance level ({_offered('alpha')}in (0, 1); default {benchmark_views.DEFAULT_ALPHA})"),
]
STORED = {
    202: OpenApiResponse(ReportComputing, description="queued or being computed: ask again after Retry-After seconds"),
    409: OpenApiResponse(ProblemSerializer, description="cannot be made from the current data (the page's message)"),
    503: OpenApiResponse(ProblemSerializer, description="the computation failed (report_failed), or the server "
                         "computes as many reports as it may at once (busy): ask again after Retry-After seconds"),
}


class ReportThrottle(RateThrottle):
    """The dashboard's report rate limit (``settings.REPORT_RATE_LIMIT``, :func:`analysis.limits.hit`):
    one counter per client for the report pages, downloads and charts and these resources together."""

    def count(self, request) -> int:
        return limits.hit(request)


class Busy(exceptions.APIException):
    """The cap on concurrent report computations is reached (:class:`analysis.limits.ComputationsBusy`):
    503 with ``Retry-After``, nothing requested."""

    status_code = 503
    default_code = "busy"

    def __init__(self, refused: limits.ComputationsBusy):
        super().__init__(str(refused))
        self.wait = refused.retry_after  # DRF's handler answers it as Retry-After


class ReportViewSet(viewsets.ViewSet):
    """The reports of the dashboard pages, read from their stored computation (see the module docstring)."""

    permission_classes = [permissions.AllowAny]

    def get_throttles(self):
        """The API's rate limit, and for every report (not its status) the report rate limit."""
        return [RateThrottle()] + ([] if self.action == "status" else [ReportThrottle()])

    def handle_exception(self, exc):
        """A report refused at the cap on concurrent computations is 503 with ``Retry-After``."""
        return super().handle_exception(Busy(exc) if isinstance(exc, limits.ComputationsBusy) else exc)

    def initial(self, request, *args, **kwargs):
        """DRF's checks, then every query value refused (400 naming it) when it holds a control
        character: the pages' own check (:func:`analysis.query.control_character_parameter`; no
        stored name, key or criterion holds one, and PostgreSQL refuses NUL in a query)."""
        super().initial(request, *args, **kwargs)
        name = control_character_parameter(request.query_params)
        if name is not None:
            raise exceptions.ValidationError({name: ["control characters are not allowed"]})

    @extend_schema(
        summary="Correlation report of a dataset",
        description="The JSON of /datasets/<dataset>/correlations.json: every computed metric's item-level "
                    "correlation with the human judgments, with bootstrap intervals (analysis.reports).",
        parameters=[_str("weighting", "gap-weighted entries: gap:<lexical measure> or ldr:<lexical measure>, "
                                      "e.g. gap:mtld (offered when the lexical measures are computed)")],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the correlation report"), **STORED})
    @action(detail=False, methods=["get"], url_path=f"correlation/(?P<dataset>{DATASET})", url_name="correlation")
    def correlation(self, request, dataset=None):
        ds = dataset_or_404(dataset)
        weighting = request.query_params.get("weighting") or None
        read = dataset_views.read_correlations(ds, weighting)
        if read[3] is None and read[1] is not None and weighting and \
                protocol(ds)["task"] != Dataset.TASK_FORCED_CHOICE:  # refused before any report: the weighting
            raise bad_parameter(read[1], "weighting")
        return answer(request, read, "correlation report")

    @extend_schema(
        summary="Benchmark meta-evaluation of a dataset",
        description="The JSON of /datasets/<dataset>/benchmark.json: correlations or forced-choice accuracies at "
                    "every level, significance clusters, the human ceiling, published values "
                    "(analysis.benchmarks.benchmark_report, analysis.published).",
        parameters=[_str("criterion", "human criterion (default the dataset's main one)"), *BOOTSTRAP],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the benchmark report"), **STORED})
    @action(detail=False, methods=["get"], url_path=f"benchmark/(?P<dataset>{DATASET})", url_name="benchmark")
    def benchmark(self, request, dataset=None):
        ds = dataset_or_404(dataset)
        settings = _settings(benchmark_views.benchmark_settings, request)
        criterion = request.query_params.get("criterion") or None
        check_benchmark_criterion(ds, criterion)
        return answer(request, benchmark_views.read_benchmark(ds, settings, criterion), "benchmark report",
                      lambda report: published.attach(ds, report))

    @extend_schema(
        summary="System leaderboard of a dataset",
        description="The JSON of /datasets/<dataset>/leaderboard.json: each candidate system's corpus score of "
                    "every computed metric and mean of every human criterion with bootstrap intervals and ranks, "
                    "pairwise significance tests, system-level agreement (analysis.leaderboard).",
        parameters=[
            _str("metric", "metric key (repeatable; default every computed metric)", many=True),
            _str("criterion", "human criterion (repeatable; default every criterion)", many=True),
            _str("baseline", "a candidate system: compare every other system against it only (default all pairs)"),
            _str("test", "paired test (default bootstrap)", enum=list(leaderboard_views.TESTS)),
            _int("resamples", f"bootstrap resamples / randomization trials ({_offered('resamples')}"
                              f"1-{leaderboard_views.MAX_RESAMPLES}; default 1000)"),
            BOOTSTRAP[1], BOOTSTRAP[3],  # seed, alpha
        ],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the leaderboard"), **STORED})
    @action(detail=False, methods=["get"], url_path=f"leaderboard/(?P<dataset>{DATASET})", url_name="leaderboard")
    def leaderboard(self, request, dataset=None):
        ds = dataset_or_404(dataset)
        settings = _settings(leaderboard_views.leaderboard_settings, request, ds)
        return answer(request, leaderboard_views.read_leaderboard(ds, settings), "leaderboard")

    @extend_schema(
        summary="Caption-set diversity of a dataset",
        description="The JSON of /datasets/<dataset>/diversity.json: per-system diversity (Self-CIDEr, LSA, "
                    "mBLEU), accuracy and F-score, vocabulary and lexical measures (analysis.diversity). Read "
                    "from the stored set scores in the request, as the page does.",
        parameters=[_int("m", "captions per set of the runs to show (>= 2; default all)"),
                    _float("beta2", "F-score weight beta^2 (> 0, default 5)")],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the diversity summary"),
                   409: STORED[409]})
    @action(detail=False, methods=["get"], url_path=f"diversity/(?P<dataset>{DATASET})", url_name="diversity")
    def diversity(self, request, dataset=None):
        ds = dataset_or_404(dataset)
        try:
            m, beta2 = diversity_views.diversity_options(request)
        except Http404 as exc:  # the page answers a bad m or beta2 with 404; a parameter is a 400 here
            raise bad_parameter(str(exc), query=request.query_params) from None
        try:
            return Response(diversity_summary(ds.name, m=m, beta2=beta2))
        except ReportError as exc:
            raise ReportUnavailable(str(exc)) from None

    @extend_schema(
        summary="Cross-benchmark comparison",
        description="The JSON of /compare.json: every metric's headline statistic on every benchmark, with "
                    "intervals, ranks and the published values (analysis.benchmarks.comparison).",
        parameters=[_str("dataset", "a dataset to compare (repeatable; default every dataset)", many=True), *BOOTSTRAP],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="the comparison matrix"), **STORED})
    @action(detail=False, methods=["get"], url_path="comparison", url_name="comparison")
    def comparison(self, request):
        names = [n for n in request.query_params.getlist("dataset") if n]
        known = set(Dataset.objects.filter(name__in=names).values_list("name", flat=True))
        unknown = [n for n in names if n not in known]
        if unknown:
            raise bad_parameter(f"unknown dataset {unknown[0]!r}", "dataset")
        matrix, message, computing, row, _ = _settings(benchmark_views.read_comparison, request)
        return answer(request, (matrix, message, computing, row), "comparison")

    @extend_schema(
        summary="Status of a stored report",
        description="The JSON of /reports/<id>/status.json (the pages' progress bar): pending, running, done or "
                    "failed, an estimate of the progress, when to ask again. A campaign's report: its owners' and "
                    "superusers' only (the page's rule), 404 for anyone else.",
        responses={200: ReportStatus})
    @action(detail=False, methods=["get"], url_path=r"status/(?P<pk>[0-9]+)", url_name="status")
    def status(self, request, pk=None):
        return report_status(request._request, int(pk))


def register(router) -> None:
    """Add the reports (:class:`ReportViewSet`, under ``reports/``) to the API router (:mod:`api.urls`)."""
    router.register("reports", ReportViewSet, basename="report")
