"""Pages that change a dataset's scores: the upload page of a researcher's own metric
(/datasets/<name>/upload-scores/), the compute form's target (/datasets/<name>/compute/) and the
progress of both (/datasets/<name>/jobs.json).

Only staff users and superusers may use them (:func:`metrics.jobs.can_compute`; scores change
every report of the dataset, which all visitors see, and campaign owners -- anyone logged in may
create a campaign -- are not the dataset's owners); anonymous visitors are sent to the login page, other users get 403. Forms keep Django's CSRF
check. A valid upload of at most :data:`metrics.jobs.INLINE_UPLOAD_BYTES` is stored in the request
and redirects to the dataset dashboard; a larger one is stored by a background job
(:func:`metrics.jobs.queue_upload`) and redirects to the upload page, which shows its progress. An
invalid upload shows the form again with the problem in ``#upload-errors`` (HTTP 400) and stores
nothing (for a background job: the job fails with the problem, shown on the upload page).
"""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from crowd.models import Dataset, HumanJudgment

from . import jobs, judges, pipeline
from .models import JudgeReply, MetricRun, UploadJob
from captioneval.metrics import registry
from .uploads import DIRECTIONS, UploadError, metric_display_name, metric_key, upload_scores, uploaded_runs

#: uploads larger than this are refused before they are read (bytes)
MAX_UPLOAD_BYTES = 64 * 1024 * 1024


class UploadScoresForm(forms.Form):
    """Name, direction and CSV file of an upload (see :mod:`metrics.uploads` for the format)."""

    name = forms.CharField(max_length=100, label="metric name", help_text='e.g. "My Metric"; its key is user_my_metric')
    higher = forms.ChoiceField(
        choices=[(d, f"higher is {d}") for d in DIRECTIONS], initial="better", label="direction",
        help_text="scores are stored as given; the direction is recorded with them",
    )
    file = forms.FileField(label="CSV file", help_text="UTF-8, header image,caption,score (or caption_id,score)")


def _dataset_for_staff(request, name) -> Dataset:
    """The dataset ``name`` (404) if the user may change its scores, else PermissionDenied (403)."""
    dataset = get_object_or_404(Dataset, name=name)
    if not jobs.can_compute(request.user, dataset):
        raise PermissionDenied("only staff users can change a dataset's scores")
    return dataset


@login_required
@require_http_methods(["GET", "POST"])
def upload_scores_page(request, name):
    """GET: the form with the expected format and the dataset's current uploads. POST: store the
    upload and redirect to the dashboard, or 400 with the errors in ``#upload-errors``."""
    dataset = _dataset_for_staff(request, name)
    form = UploadScoresForm(request.POST or None, request.FILES or None)
    errors = []
    if request.method == "POST":
        if form.is_valid():
            upload = form.cleaned_data["file"]
            if upload.size > MAX_UPLOAD_BYTES:
                errors.append(f"the file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
            elif upload.size > jobs.INLINE_UPLOAD_BYTES:
                try:
                    metric_key(form.cleaned_data["name"])  # a bad name is refused now, not by the job
                except UploadError as exc:
                    errors.append(str(exc))
                else:
                    job = jobs.queue_upload(dataset, request.user, form.cleaned_data["name"].strip(),
                                            form.cleaned_data["higher"], upload.name, upload.read())
                    messages.info(request, f"Upload of {upload.name} ({upload.size:,} bytes) queued as job {job.pk}; "
                                           "its progress is shown below.")
                    return redirect("metrics:upload-scores", name=dataset.name)
            else:
                try:
                    summary = upload_scores(
                        dataset.name, upload, form.cleaned_data["name"], higher=form.cleaned_data["higher"],
                        filename=upload.name,
                    )
                except UploadError as exc:
                    errors.append(str(exc))
                else:
                    messages.success(request, str(summary)[0].upper() + str(summary)[1:] + ".")
                    return redirect("analysis:dataset", name=dataset.name)
        else:
            for field_name, field_errors in form.errors.items():
                label = form.fields[field_name].label if field_name in form.fields else None
                errors.extend(f"{label}: {e}" if label else e for e in field_errors)
    judged = (
        dataset.candidates().filter(pk__in=HumanJudgment.objects.filter(caption__isnull=False).values("caption_id"))
        .order_by("image__key", "key").values_list("image__key", "key")
    )
    return render(
        request, "metrics/upload.html",
        {
            "dataset": dataset, "form": form, "errors": errors, "uploads": list(uploaded_runs(dataset).values()),
            "n_judged": judged.count(), "examples": list(judged[:2]),
            "jobs": [jobs.upload_job_dict(j) for j in UploadJob.objects.filter(dataset=dataset)[:10]],
            "inline_bytes": jobs.INLINE_UPLOAD_BYTES,
            "jobs_busy": UploadJob.objects.filter(dataset=dataset, status__in=(UploadJob.PENDING, UploadJob.RUNNING)).exists(),
        },
        status=400 if errors else 200,
    )


@login_required
@require_POST
def compute(request, name):
    """Start metric runs chosen on the dataset page (POST ``metric`` = one or more offered metric
    keys) as background jobs; redirects to the dataset page (whose run table shows their progress)
    with a message saying what was started. 400 with the reason for an empty or unknown choice or
    what :func:`metrics.pipeline.plan_runs` refuses; nothing is recorded then. A chosen metric that
    cannot run on this server now (METEOR without Java: :func:`captioneval.metrics.registry.unavailable_now`)
    is skipped with its reason as a warning and the others start; 400 with the reason if that leaves none."""
    dataset = _dataset_for_staff(request, name)
    keys = request.POST.getlist("metric")
    skipped = registry.unavailable_now(keys)
    if skipped:
        keys = [k for k in keys if k not in skipped]
        if not keys:
            return render(request, "metrics/compute_refused.html",
                          {"dataset": dataset, "reason": "; ".join(skipped.values())}, status=400)
        for reason in skipped.values():
            messages.warning(request, reason + ".")
    try:
        started, done, pending = jobs.start_from_web(dataset, keys)
    except (jobs.JobError, pipeline.PipelineError) as exc:
        return render(request, "metrics/compute_refused.html", {"dataset": dataset, "reason": str(exc)}, status=400)
    names = lambda runs: ", ".join(metric_display_name(r.metric) for r in runs)  # noqa: E731
    if started:
        where = "in the background of this server" if jobs.in_process() else "on the Celery workers"
        messages.success(request, f"Started {names(started)} {where}; progress is shown in the metric runs table.")
    if pending:
        messages.warning(request, f"The task queue (CELERY_BROKER_URL) is unreachable: {names(pending)} recorded as "
                                  "queued; they start when a worker connects.")
    if done:
        messages.info(request, f"Already up to date: {names(done)}.")
    return redirect(reverse("analysis:dataset", args=[dataset.name]) + "#runs")


def run_dict(run: MetricRun) -> dict:
    """``{"id", "metric", "name", "status", "completed", "total", "percent", "seconds", "error"}`` of
    a run: units scored of all (captions, caption sets or systems), percent in [0, 100], seconds
    since it started (None before)."""
    return {"id": run.pk, "metric": run.metric, "name": metric_display_name(run.metric, run), "status": run.status,
            "completed": run.completed, "total": run.total, "percent": round(100 * run.progress, 1),
            "seconds": None if run.wall_seconds is None else round(run.wall_seconds, 1), "error": run.error}


@login_required
@require_GET
def jobs_json(request, name):
    """Progress of the dataset's metric runs and its last 10 upload jobs (staff only):
    ``{"dataset", "busy", "runs": [run_dict...], "uploads": [upload_job_dict...]}``; ``busy`` is True
    while any is pending or running."""
    dataset = _dataset_for_staff(request, name)
    runs = [run_dict(r) for r in MetricRun.objects.filter(dataset=dataset).order_by("metric", "-created_at")]
    uploads = [jobs.upload_job_dict(j) for j in UploadJob.objects.filter(dataset=dataset)[:10]]
    busy = any(x["status"] in ("pending", "running") for x in runs + uploads)
    return JsonResponse({"dataset": dataset.name, "busy": busy, "runs": runs, "uploads": uploads})


#: captions per page of a judge run's page
JUDGE_PAGE_SIZE = 50


@require_GET
def judge_run(request, name, pk):
    """The page of an LLM judge's run (/datasets/<name>/runs/<pk>/judge/): its report (captions per
    parse outcome and parser status, requests, cache, tokens, budget; :func:`metrics.judges.summary`)
    and its captions, :data:`JUDGE_PAGE_SIZE` a page (``?page=N``, ``?outcome=ok|retried|failed``),
    each with its score, outcome and every raw reply of the model. The replies are untrusted text: the
    template escapes them (Django's autoescape) and shows them as preformatted text. Public like the
    dataset's page; 404 for another dataset's run, a run that is not a judge's, or a bad parameter."""
    from django.core.paginator import EmptyPage, PageNotAnInteger, Paginator
    from django.http import Http404

    dataset = get_object_or_404(Dataset, name=name)
    run = get_object_or_404(MetricRun, pk=pk, dataset=dataset)
    if not judges.is_judge(run.metric) and "judge" not in run.params:
        raise Http404("not an LLM judge's run")
    outcome = request.GET.get("outcome") or ""
    if outcome not in ("", JudgeReply.OK, JudgeReply.RETRIED, JudgeReply.FAILED):
        raise Http404("outcome must be ok, retried or failed")
    rows = (JudgeReply.objects.filter(run=run, **({"outcome": outcome} if outcome else {}))
            .select_related("caption", "caption__image", "caption__system").order_by("caption_id"))
    try:
        page = Paginator(rows, JUDGE_PAGE_SIZE).page(request.GET.get("page") or 1)
    except (EmptyPage, PageNotAnInteger):
        raise Http404("no such page") from None
    return render(request, "metrics/judge_run.html", {
        "dataset": dataset, "run": run, "name": jobs.display_name(run.metric),
        "report": judges.summary(run), "page": page, "outcome": outcome, "judge": run.params.get("judge", {})})
