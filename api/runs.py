"""REST API: metric runs (list, detail with progress, create = plan and queue, per-unit scores).

``GET /api/runs/?dataset=NAME&metric=KEY&status=S``, ``GET /api/runs/{id}/``
    runs as the dataset page's run table shows them (public): status (``pending``, ``running``,
    ``done``, ``failed``), progress ``completed``/``total`` units (captions, caption sets or systems,
    by the metric's level) and ``percent``, the metric's version and parameters, the error of a
    failed run; for an LLM judge's run, ``judge``: its parse outcomes, requests, cache, tokens and budget
    (:func:`metrics.judges.summary`) and the page of its raw replies.
``POST /api/runs/`` ``{"dataset": NAME, "metrics": [KEY or group, ...]}`` (staff: :func:`api.base.can_compute`)
    the compute form's path (:func:`metrics.jobs.start_from_web`: the metrics the dataset offers,
    :func:`metrics.pipeline.plan_runs`, then Celery, or a background thread without a broker). Group
    names (``coco``...) are expanded as ``compute_metrics`` does. A metric that cannot run on this
    server now (METEOR without Java: :func:`captioneval.metrics.registry.unavailable_now`) is skipped
    with its reason in ``skipped`` and the others start; if that leaves none, or a metric is not
    offered for the dataset, or the plan is refused: 400 with the reason, nothing recorded. Answers
    202 with ``{"runs": [...], "started", "up_to_date", "pending": [run ids], "skipped": [{"metric",
    "reason"}]}``: follow each run's ``url`` until it is ``done`` or ``failed``. Idempotent by nature:
    runs are identified by dataset, metric, version and parameters, a done run is not computed again
    and a run in progress is not started twice (an ``Idempotency-Key`` replays the first answer).
``GET /api/runs/{id}/scores/`` (paginated JSON), ``GET /api/runs/{id}/scores/csv/``
    the run's stored scores, one row per unit: ``caption`` (id), ``image`` (key), ``system`` (name),
    ``key`` (the caption's key), ``value`` (null when undefined: NaN), ``raw`` (VIFIDEL's distance)
    for a caption-level run; set-level runs have no ``caption``/``key``, system-level ones no
    ``image`` either. Units of systems public pages hide (:func:`api.base.public_systems`) are left
    out. The CSV goes through :mod:`captioneval.utils.csvsafe` (no cell a spreadsheet would run as a formula),
    as every download of the site.
"""
from __future__ import annotations

import io
import json

from django.db.models import F
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from crowd.models import Dataset
from captioneval.utils import csvsafe
from captioneval.utils.numbers import finite_or_none
from metrics import jobs, judges, pipeline
from metrics.models import MetricRun, MetricScore, SetScore, SystemScore
from captioneval.metrics import registry
from metrics.uploads import metric_display_name

from . import base

#: columns of a run's scores, in order (JSON keys and CSV header)
SCORE_COLUMNS = ("caption", "image", "system", "key", "value", "raw")


class RunSerializer(serializers.ModelSerializer):
    """A metric run and its progress."""

    dataset = serializers.SlugRelatedField(slug_field="name", read_only=True)
    name = serializers.SerializerMethodField(help_text="the metric's display name")
    percent = serializers.SerializerMethodField(help_text="completed / total x 100, one decimal")
    seconds = serializers.SerializerMethodField(help_text="seconds since it started (to the end or now); null before")
    url = serializers.SerializerMethodField()
    scores_url = serializers.SerializerMethodField()
    judge = serializers.SerializerMethodField(
        help_text="an LLM judge's run (CLAIR, FLEUR, RefFLEUR): captions per parse outcome (ok, retried, failed) and "
        "parser status, requests sent, answers read from the reply cache, tokens, the budget, whether the budget "
        "stopped it, and page_url, the page with every caption's raw replies; null for other metrics")

    class Meta:
        model = MetricRun
        fields = ["id", "url", "dataset", "metric", "name", "version", "params", "status", "completed", "total",
                  "percent", "seconds", "error", "created_at", "started_at", "finished_at", "scores_url", "judge"]

    def get_name(self, run) -> str:
        return metric_display_name(run.metric, run)

    def get_percent(self, run) -> float:
        return round(100 * run.progress, 1)

    def get_seconds(self, run) -> float | None:
        return None if run.wall_seconds is None else round(run.wall_seconds, 1)

    def get_url(self, run) -> str:
        return reverse("api:run-detail", args=[run.pk])

    def get_scores_url(self, run) -> str:
        return reverse("api:run-scores", args=[run.pk])

    def get_judge(self, run) -> dict | None:
        if "judge" not in (run.params or {}):
            return None
        return {**judges.summary(run), "page_url": reverse("metrics:judge-run", args=[run.dataset.name, run.pk])}


class RunCreateSerializer(serializers.Serializer):
    """What to compute: a dataset and metric keys or group names."""

    dataset = serializers.RegexField(r"^[-a-zA-Z0-9_]{1,100}$", help_text="dataset name")
    metrics = serializers.ListField(
        child=serializers.CharField(max_length=50), min_length=1, max_length=50,
        help_text=f"metric keys or groups ({', '.join(registry.GROUPS)})")


class SkippedSerializer(serializers.Serializer):
    metric = serializers.CharField()
    reason = serializers.CharField()


class RunCreatedSerializer(serializers.Serializer):
    """The runs planned for a request and what happened to each."""

    runs = RunSerializer(many=True)
    started = serializers.ListField(child=serializers.IntegerField(), help_text="run ids queued now")
    up_to_date = serializers.ListField(child=serializers.IntegerField(), help_text="run ids already done")
    pending = serializers.ListField(child=serializers.IntegerField(),
                                    help_text="run ids recorded but not queued (broker unreachable): workers start them")
    skipped = SkippedSerializer(many=True)


class ScoreSerializer(serializers.Serializer):
    """One stored score (see the module docstring for which fields a level has)."""

    caption = serializers.IntegerField(allow_null=True)
    image = serializers.CharField(allow_null=True)
    system = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    value = serializers.FloatField(allow_null=True, help_text="null when undefined (NaN)")
    raw = serializers.FloatField(allow_null=True)


def score_rows(run: MetricRun):
    """``(rows, level)``: the run's scores as a QuerySet of dicts ordered by primary key (keys
    ``caption_id``, ``image_key``, ``system_name``, ``caption_key``, ``value``, ``raw`` as the level
    has them), leaving out units of systems public pages hide (:func:`api.base.hidden_system_ids`)."""
    hidden = base.hidden_system_ids(run.dataset)
    level = registry.METRICS[run.metric].level if run.metric in registry.METRICS else "caption"
    if level == "set":
        qs = SetScore.objects.filter(run=run).exclude(system_id__in=hidden).annotate(
            image_key=F("image__key"), system_name=F("system__name"))
        return qs.order_by("pk").values("value", "image_key", "system_name"), level
    if level == "system":
        qs = SystemScore.objects.filter(run=run).exclude(system_id__in=hidden).annotate(system_name=F("system__name"))
        return qs.order_by("pk").values("value", "system_name"), level
    qs = MetricScore.objects.filter(run=run).exclude(caption__system_id__in=hidden).annotate(
        image_key=F("caption__image__key"), system_name=F("caption__system__name"), caption_key=F("caption__key"))
    return qs.order_by("pk").values("caption_id", "image_key", "system_name", "caption_key", "value", "raw"), level


def score_dict(row: dict) -> dict:
    """One row of :func:`score_rows` with the API's names; NaN and infinities as None."""
    return {"caption": row.get("caption_id"), "image": row.get("image_key"), "system": row.get("system_name"),
            "key": row.get("caption_key"), "value": finite_or_none(row.get("value")), "raw": finite_or_none(row.get("raw"))}


class CSVRenderer(BaseRenderer):
    """Lets a client that asks for ``Accept: text/csv`` reach the CSV download (the view writes the
    CSV itself); anything else it is given (an error document) is written as JSON."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, (bytes, str)) else json.dumps(data).encode()


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Metric runs: read by everybody, started by staff (module docstring)."""

    permission_classes = [base.StaffWritesOrReadOnly]
    serializer_class = RunSerializer
    queryset = MetricRun.objects.none()

    def get_queryset(self):
        qs = MetricRun.objects.select_related("dataset").order_by("-created_at", "-pk")
        if self.request is None or self.action != "list":
            return qs
        dataset = base.text_param(self.request, "dataset")
        metric = base.text_param(self.request, "metric")
        state = base.text_param(self.request, "status", choices=[s for s, _ in MetricRun.STATUS_CHOICES])
        if dataset is not None:
            qs = qs.filter(dataset__name=dataset)
        if metric is not None:
            qs = qs.filter(metric=metric)
        if state is not None:
            qs = qs.filter(status=state)
        return qs

    @extend_schema(parameters=[
        OpenApiParameter("dataset", str, description="only this dataset's runs (its name)"),
        OpenApiParameter("metric", str, description="only this metric's runs (its key)"),
        OpenApiParameter("status", str, enum=[s for s, _ in MetricRun.STATUS_CHOICES], description="only runs in this state"),
    ])
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=RunCreateSerializer, responses={202: RunCreatedSerializer},
                   summary="Plan and start metric runs (staff)")
    def create(self, request, *args, **kwargs):
        return base.idempotent_write(request, RunCreateSerializer, lambda data: self._start(request, data))

    def _start(self, request, data):
        dataset = get_object_or_404(Dataset, name=data["dataset"])
        if not base.can_compute(request.user, dataset):
            self.permission_denied(request, "only staff users can start metric runs")
        keys = registry.expand(data["metrics"])
        skipped = registry.unavailable_now(keys)
        keys = [k for k in keys if k not in skipped]
        if not keys:
            raise serializers.ValidationError({"metrics": ["; ".join(skipped.values())]})
        try:
            started, done, pending = jobs.start_from_web(dataset, keys)
        except (jobs.JobError, pipeline.PipelineError) as exc:
            raise serializers.ValidationError({"metrics": [str(exc)]}) from None
        runs = sorted(started + done + pending, key=lambda r: r.pk)
        for run in runs:
            run.refresh_from_db()
        body = {"runs": RunSerializer(runs, many=True).data, "started": [r.pk for r in started],
                "up_to_date": [r.pk for r in done], "pending": [r.pk for r in pending],
                "skipped": [{"metric": k, "reason": why} for k, why in skipped.items()]}
        return Response(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=ScoreSerializer(many=True), summary="The run's stored scores (JSON, paginated)")
    @action(detail=True, methods=["get"])
    def scores(self, request, pk=None):
        run = self.get_object()
        rows, _ = score_rows(run)
        page = self.paginate_queryset(rows)
        return self.get_paginated_response([score_dict(r) for r in page])

    @extend_schema(responses={(200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description=(
        "header caption,image,system,key,value,raw; one row per unit; cells neutralised by captioneval.utils.csvsafe"))},
        summary="The run's stored scores (CSV)")
    @action(detail=True, methods=["get"], url_path="scores/csv", url_name="scores-csv",
            renderer_classes=[JSONRenderer, CSVRenderer])
    def scores_csv(self, request, pk=None):
        run = self.get_object()
        rows, _ = score_rows(run)

        def lines():
            buffer = io.StringIO()
            out = csvsafe.writer(buffer)
            out.writerow(SCORE_COLUMNS)
            for i, row in enumerate(rows.iterator(chunk_size=2000)):
                d = score_dict(row)
                out.writerow(["" if d[c] is None else d[c] for c in SCORE_COLUMNS])
                if i % 2000 == 1999:
                    yield buffer.getvalue()
                    buffer.seek(0)
                    buffer.truncate()
            yield buffer.getvalue()

        response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{run.dataset.name}-{run.metric}-run{run.pk}.csv"'
        response["X-Content-Type-Options"] = "nosniff"
        return response


def register(router) -> None:
    """Add ``runs`` (and its ``scores`` routes) to the API router."""
    router.register("runs", RunViewSet, basename="run")
