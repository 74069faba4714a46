"""The upload page of a researcher's own metric: /datasets/<name>/upload-scores/.

Only staff users and superusers may upload (scores change every report of the dataset, which all
visitors see); anonymous visitors are sent to the login page, other users get 403. A valid upload
redirects to the dataset dashboard; an invalid one shows the form again with the problem in
``#upload-errors`` (HTTP 400) and stores nothing.
"""
from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from crowd.models import Dataset, HumanJudgment

from .uploads import DIRECTIONS, UploadError, upload_scores, uploaded_runs

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


def can_upload(user) -> bool:
    """True for an active staff user or superuser."""
    return bool(user.is_active and (user.is_staff or user.is_superuser))


@login_required
@require_http_methods(["GET", "POST"])
def upload_scores_page(request, name):
    """GET: the form with the expected format and the dataset's current uploads. POST: store the
    upload and redirect to the dashboard, or 400 with the errors in ``#upload-errors``."""
    if not can_upload(request.user):
        raise PermissionDenied("only staff users can upload metric scores")
    dataset = get_object_or_404(Dataset, name=name)
    form = UploadScoresForm(request.POST or None, request.FILES or None)
    errors = []
    if request.method == "POST":
        if form.is_valid():
            upload = form.cleaned_data["file"]
            if upload.size > MAX_UPLOAD_BYTES:
                errors.append(f"the file is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB")
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
        },
        status=400 if errors else 200,
    )
