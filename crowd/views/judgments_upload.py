"""Staff pages for bring-your-own benchmarks: the upload form of a human-judgment file
(``/judgments/upload/``) and the re-importable export of a dataset
(``/datasets/<name>/export.jsonl``, ``/datasets/<name>/export.csv``).

Upload: the same file formats, options and validation as ``manage.py import_dataset judgments``
(:func:`crowd.importers.judgments.import_judgments`; a JSON list of objects, JSON Lines, CSV or
TSV, one row per candidate caption or per rating). Only active staff users and superusers may
import (a dataset is shown to every visitor); anonymous visitors are sent to the login page, other
users get 403. The form keeps Django's CSRF check. A file over ``IMPORT_MAX_FILE_BYTES``
(:func:`crowd.importers.base.import_limit`) is refused from the size the upload declares, before
a byte of it is read. The upload is copied under its own base name into a private temporary folder
(the extension chooses the format unless the form forces one) and imported in the request; the
importer validates every row before writing in one transaction, so an error shows its one line on
the form (HTTP 400, the temporary path replaced by the uploaded file's name) with the database
unchanged. On success the browser is sent to the dataset page, with the import summary as a
message.

Export: :func:`crowd.dataset_export.export_dataset` of a dataset in the same judgment-file format,
served as an attachment (``<name>.jsonl`` / ``<name>.csv``) that ``import_dataset judgments``
(or the upload form) reads back. Dataset pages are public, so the export is too, and it holds what
the public pages show: imported judgments only and no system of an unpublished campaign
(:mod:`crowd.privacy`). A dataset the format cannot hold answers 400 with the one-line reason.
CSV cells go through :mod:`captioneval.utils.csvsafe` (no cell a spreadsheet would run as a formula).

Layering: crowd only (no metrics or analysis import); the dataset page is named by its URL name.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_safe

from crowd import images
from crowd.dataset_export import EXPORT_FORMATS
from crowd.export_store import public_view, stored_export
from crowd.importers.base import DatasetExistsError, DatasetFormatError, import_limit, shorten
from crowd.importers import judgments as judgments_importer
from crowd.importers.judgments import JUDGMENTS_KIND, JudgmentMapping, import_judgments
from crowd.models import Dataset

#: names on the dashboard of the headline statistics a benchmark may declare
HEADLINE_LABELS = {"kendall_tau_c": "Kendall tau-c", "kendall_tau_b": "Kendall tau-b", "pearson": "Pearson r",
                   "spearman": "Spearman rho"}
HEADLINES = tuple((h, HEADLINE_LABELS.get(h, h)) for h in judgments_importer.HEADLINES)
#: file formats of the importer; "" = from the file's extension
FORMATS = (("", "by extension (.json, .jsonl, .csv, .tsv)"), ("json", "JSON list of objects"),
           ("jsonl", "JSON Lines"), ("csv", "CSV"), ("tsv", "TSV"))
EXTENSIONS = judgments_importer.FORMATS  # extension -> format
#: published benchmarks whose published Kendall values can be attached to the import
PUBLISHED = (("", "none"),) + tuple((p, p.capitalize()) for p in judgments_importer.PUBLISHED_AS)
#: longest field (column) name and criterion name the form accepts (criterion: HumanJudgment.criterion)
MAX_FIELD_CHARS, MAX_CRITERION_CHARS = 200, 50
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def is_staff(user) -> bool:
    """True for an active, logged-in staff user or superuser: who may import datasets."""
    return bool(user and user.is_authenticated and user.is_active and (user.is_staff or user.is_superuser))


class ListInput(forms.TextInput):
    """A text box whose value may also be sent several times (``score_field=a&score_field=b``):
    the values are joined with commas, so both spellings reach the same comma-separated field."""

    def value_from_datadict(self, data, files, name):
        if hasattr(data, "getlist"):
            values = [v for v in data.getlist(name) if v is not None]
            return ", ".join(values) if values else None
        return data.get(name)


def _names(text: str, what: str, limit: int) -> tuple[str, ...]:
    """The comma-separated names in ``text``, stripped, each non-empty, at most ``limit``
    characters, without control characters and without a name twice; ValidationError naming
    ``what`` otherwise."""
    parts = tuple(p.strip() for p in (text or "").split(","))
    if parts == ("",):
        return ()
    for p in parts:
        if not p:
            raise forms.ValidationError(f"{what}: an empty name (two commas in a row, or a comma at an end)")
        if len(p) > limit:
            raise forms.ValidationError(f"{what}: {shorten(p)} is longer than {limit} characters")
        if _CONTROL.search(p):
            raise forms.ValidationError(f"{what}: {shorten(p)} contains a control character")
    twice = sorted({p for p in parts if parts.count(p) > 1})
    if twice:
        raise forms.ValidationError(f"{what}: {shorten(twice[0])} is given twice")
    return parts


def _field_name(value: str, what: str, required: bool) -> str | None:
    """One column name (stripped; None when empty and not ``required``); ValidationError naming
    ``what`` for an empty required name, a comma, a control character or a name too long."""
    value = (value or "").strip()
    if not value:
        if required:
            raise forms.ValidationError(f"{what}: give the name of the column")
        return None
    if "," in value:
        raise forms.ValidationError(f"{what}: one column name, got {shorten(value)} (a comma)")
    return _names(value, what, MAX_FIELD_CHARS)[0]


class JudgmentsUploadForm(forms.Form):
    """Everything :class:`crowd.importers.judgments.JudgmentMapping` holds, plus the files and the
    dataset name; ``clean`` builds ``cleaned_data["mapping_options"]`` (keyword arguments of the
    mapping, without ``references_file``)."""

    file = forms.FileField(label="judgments file", help_text="UTF-8; a JSON list of objects, JSON Lines, CSV or TSV, "
                                                             "one row per candidate caption (or per rating)")
    name = forms.SlugField(max_length=100, label="dataset name",
                           help_text="letters, digits, '-' and '_'; the dataset page is /datasets/<name>/")
    image_field = forms.CharField(initial="image", max_length=MAX_FIELD_CHARS, label="image field",
                                  help_text="the image key (e.g. imgid, image)")
    candidate_field = forms.CharField(initial="candidate", max_length=MAX_FIELD_CHARS, label="candidate field",
                                      help_text="the candidate caption (e.g. mt, hyp)")
    references_field = forms.CharField(initial="references", max_length=MAX_FIELD_CHARS, label="references field",
                                       help_text="a list of reference captions (CSV: a JSON list, or columns "
                                                 "references.1, references.2...); with a references file the rows "
                                                 "hold none")
    score_fields = forms.CharField(initial="score", max_length=2000, widget=ListInput, label="score fields",
                                   help_text="one or more, comma separated: each is one criterion; a list of "
                                             "numbers is one rating per rater")
    criteria = forms.CharField(required=False, max_length=2000, widget=ListInput, label="criterion names",
                               help_text="optional, comma separated, one per score field (default: the field names)")
    system_field = forms.CharField(required=False, max_length=MAX_FIELD_CHARS, label="system field",
                                   help_text="optional: the captioning system (e.g. SYS)")
    rater_field = forms.CharField(required=False, max_length=MAX_FIELD_CHARS, label="rater field",
                                  help_text="optional: the rater id (then rows are ratings, several per caption)")
    key_field = forms.CharField(required=False, max_length=MAX_FIELD_CHARS, label="caption id field",
                                help_text="optional: each candidate's own id (several candidates of an image may "
                                          "then share a text)")
    human_system = forms.CharField(required=False, max_length=100, label="human system",
                                   help_text="optional: the system of human-written candidates (e.g. Human); "
                                             "system-level figures are then also given without it")
    rows = forms.ChoiceField(choices=[("mean", "one per caption (the mean)"),
                                      ("ratings", "one per rating")], initial="mean", label="correlation rows")
    headline = forms.ChoiceField(choices=HEADLINES, initial="kendall_tau_c", label="headline statistic")
    format = forms.ChoiceField(choices=FORMATS, required=False, initial="", label="file format")
    published_as = forms.ChoiceField(choices=PUBLISHED, required=False, initial="", label="published values",
                                     help_text="show the published Kendall values of this benchmark beside ours")
    references_file = forms.FileField(required=False, label="references file",
                                      help_text="optional: COCO caption annotations (JSON), references by image id")

    def _size_checked(self, upload):
        """Refuse ``upload`` when its declared size is over IMPORT_MAX_FILE_BYTES (before reading)."""
        if upload is None:
            return upload
        cap = import_limit("IMPORT_MAX_FILE_BYTES")
        if upload.size > cap:
            raise forms.ValidationError(
                f"{shorten(os.path.basename(upload.name))} has {upload.size:,} bytes, too large: the cap is {cap:,} "
                "bytes per file (setting IMPORT_MAX_FILE_BYTES)")
        if upload.size == 0:
            raise forms.ValidationError(f"{shorten(os.path.basename(upload.name))} is empty")
        return upload

    def clean_file(self):
        return self._size_checked(self.cleaned_data.get("file"))

    def clean_references_file(self):
        return self._size_checked(self.cleaned_data.get("references_file"))

    def clean_image_field(self):
        return _field_name(self.cleaned_data.get("image_field"), "image field", True)

    def clean_candidate_field(self):
        return _field_name(self.cleaned_data.get("candidate_field"), "candidate field", True)

    def clean_references_field(self):
        return _field_name(self.cleaned_data.get("references_field"), "references field", True)

    def clean_system_field(self):
        return _field_name(self.cleaned_data.get("system_field"), "system field", False)

    def clean_rater_field(self):
        return _field_name(self.cleaned_data.get("rater_field"), "rater field", False)

    def clean_key_field(self):
        return _field_name(self.cleaned_data.get("key_field"), "caption id field", False)

    def clean_human_system(self):
        value = (self.cleaned_data.get("human_system") or "").strip()
        if _CONTROL.search(value):
            raise forms.ValidationError(f"human system: {shorten(value)} contains a control character")
        return value or None

    def clean_score_fields(self):
        names = _names(self.cleaned_data.get("score_fields"), "score fields", MAX_FIELD_CHARS)
        if not names:
            raise forms.ValidationError("score fields: give at least one")
        return names

    def clean_criteria(self):
        return _names(self.cleaned_data.get("criteria"), "criterion names", MAX_CRITERION_CHARS)

    def clean(self):
        data = super().clean()
        scores, criteria = data.get("score_fields"), data.get("criteria")
        if scores and criteria and len(criteria) != len(scores):
            self.add_error("criteria", f"criterion names: {len(criteria)} given for {len(scores)} score field(s); "
                                       "give one per score field or none")
        if scores and not criteria:
            for s in scores:
                if len(s) > MAX_CRITERION_CHARS:
                    self.add_error("criteria", f"criterion names: score field {shorten(s)} is longer than "
                                               f"{MAX_CRITERION_CHARS} characters; name its criterion")
        upload = data.get("file")
        if upload is not None and not data.get("format"):
            ext = Path(upload.name).suffix.lower()
            if ext not in EXTENSIONS:
                self.add_error("format", f"file format: {shorten(os.path.basename(upload.name))} does not end in "
                                         f"{', '.join(EXTENSIONS)}; choose the format")
        fields = [data.get(k) for k in ("image_field", "candidate_field", "references_field", "system_field",
                                        "rater_field", "key_field")] + list(scores or ())
        given = [f for f in fields if f]
        twice = sorted({f for f in given if given.count(f) > 1})
        if twice and not self.errors:
            raise forms.ValidationError(f"the column {shorten(twice[0])} is named for two different fields")
        if not self.errors:
            data["mapping_options"] = {
                "image": data["image_field"], "candidate": data["candidate_field"],
                "references": data["references_field"], "scores": tuple(scores),
                "criteria": tuple(criteria or ()), "system": data.get("system_field"),
                "rater": data.get("rater_field"), "rows": data["rows"], "headline": data["headline"],
                "format": data.get("format") or None, "published_as": data.get("published_as") or None,
                "key": data.get("key_field"), "human_system": data.get("human_system"),
            }
        return data


#: the form's fieldsets: (legend, field names)
FIELD_GROUPS = (
    ("File and name", ("file", "name", "format")),
    ("Columns of the file", ("image_field", "candidate_field", "references_field", "score_fields", "system_field",
                             "rater_field", "key_field")),
    ("Protocol", ("criteria", "rows", "headline", "human_system", "published_as")),
    ("References from COCO annotations (optional)", ("references_file",)),
)


def _save_upload(upload, folder: Path, fallback: str) -> Path:
    """Copy ``upload`` in chunks to ``folder`` under its own base name (a safe version of it;
    ``fallback`` when nothing is left) and return the path."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(upload.name or "")).lstrip(".") or fallback
    path = folder / base[-150:]
    with path.open("wb") as out:
        for chunk in upload.chunks():
            out.write(chunk)
    return path


def _one_line(message: str, replacements: dict[str, str]) -> str:
    """The first line of an importer message with temporary paths replaced by the uploaded names."""
    for temp, shown in replacements.items():
        message = message.replace(temp, shown)
    return message.splitlines()[0] if message else "the import failed"


def import_upload(form: JudgmentsUploadForm):
    """Import the files of a valid ``form``: returns the ImportSummary, or raises ValueError with the
    importer's one-line message (file names as uploaded). The database is unchanged on error."""
    data = form.cleaned_data
    upload, refs = data["file"], data.get("references_file")
    shown = os.path.basename(upload.name) or "upload"
    with tempfile.TemporaryDirectory(prefix="judgments-upload-") as tmp:
        folder = Path(tmp)
        (folder / "judgments").mkdir()
        path = _save_upload(upload, folder / "judgments", "judgments")
        replacements = {str(path): shown}
        options = dict(data["mapping_options"])
        if refs is not None:
            (folder / "references").mkdir()
            refs_path = _save_upload(refs, folder / "references", "references.json")
            options["references_file"] = str(refs_path)
            replacements[str(refs_path)] = os.path.basename(refs.name) or "references file"
        replacements[tmp] = "upload"
        try:
            mapping = JudgmentMapping(**options)
            return import_judgments(path, data["name"], mapping, display_name=shown)
        except (DatasetFormatError, DatasetExistsError, ValueError) as exc:
            raise ValueError(_one_line(str(exc), replacements)) from None


@login_required
@require_http_methods(["GET", "POST"])
def judgments_upload(request):
    """GET: the upload form. POST: import the file and redirect to the dataset page with the
    summary as a message, or answer 400 with the form and the one-line problem in
    ``#upload-errors`` (nothing written)."""
    if not is_staff(request.user):
        raise PermissionDenied("only staff users can import datasets")
    form = JudgmentsUploadForm(request.POST or None, request.FILES or None)
    errors: list[str] = []
    if request.method == "POST":
        if form.is_valid():
            try:
                summary = import_upload(form)
            except ValueError as exc:
                errors.append(str(exc))
            else:
                dataset = Dataset.objects.get(name=summary.dataset)
                lines = str(summary).splitlines()
                text = lines[0][0].upper() + lines[0][1:] + "."
                (messages.success if summary.created else messages.info)(request, text)
                for note in lines[1:]:
                    messages.info(request, note)
                if summary.created:
                    hint = os.path.basename(form.cleaned_data["references_file"].name) \
                        if form.cleaned_data.get("references_file") else ""
                    source = images.default_source(dataset, hint)
                    if source is not None:
                        messages.info(request, f"Image source: {source.describe()}.")
                return redirect("analysis:dataset", name=dataset.name)
        else:
            for field_name, field_errors in form.errors.items():
                label = form.fields[field_name].label if field_name in form.fields else None
                for e in field_errors:
                    # the field's own messages already start with its name
                    errors.append(e if (label is None or e.startswith(label)) else f"{label}: {e}")
    existing = Dataset.objects.filter(kind=JUDGMENTS_KIND).order_by("-created_at")[:20]
    groups = [(legend, [form[n] for n in names]) for legend, names in FIELD_GROUPS]
    return render(request, "crowd/judgments_upload.html", {
        "form": form, "groups": groups, "errors": errors, "datasets": existing,
        "max_bytes": import_limit("IMPORT_MAX_FILE_BYTES"),
    }, status=400 if errors else 200)


# --- export -----------------------------------------------------------------------------------------

@require_safe
def dataset_export(request, name, fmt):
    """Dataset ``name`` as a re-importable judgment file (``fmt`` jsonl or csv), attachment
    ``<name>.<fmt>``, streamed from the file stored for the dataset's current version
    (:func:`crowd.export_store.stored_export`; built here only when no visit or ``warm_reports`` built
    it yet); 404 for an unknown dataset or format, 400 (plain text, one line) when the format cannot
    hold the dataset. The manage.py line that re-imports it is in the header ``X-Import-Command``."""
    if fmt not in EXPORT_FORMATS:
        raise Http404("no such export format")
    dataset = public_view(get_object_or_404(Dataset, name=name))
    try:
        path, command = stored_export(dataset, fmt)
    except ValueError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else "this dataset cannot be exported"
        return HttpResponse(f"{reason}\n", status=400, content_type="text/plain; charset=utf-8")
    content_type = "application/jsonl" if fmt == "jsonl" else "text/csv"
    response = FileResponse(open(path, "rb"), as_attachment=True, filename=f"{dataset.name}.{fmt}",
                            content_type=f"{content_type}; charset=utf-8")
    response["X-Import-Command"] = " ".join(command.split())[:2000].encode("ascii", "replace").decode()
    response["X-Content-Type-Options"] = "nosniff"
    return response
