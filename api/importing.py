"""Dataset uploads of the REST API: the form, the import through the importers, and the background
jobs that import large uploads. Used by :mod:`api.datasets` (the upload), :mod:`api.imports` (the
jobs' status) and :mod:`api.tasks` (the Celery task); it imports none of them.

:func:`run_import` imports a validated upload with the importer of its format (the same functions
as ``import_coco`` / ``import_dataset`` and the staff upload page; everything validated before
anything is written, in one transaction) and :func:`import_result` gives the answer's status and
body. An upload whose files together exceed ``settings.API_INLINE_IMPORT_BYTES`` is stored as an
:class:`api.models.ImportJob` (:func:`create_job`) and imported by :func:`run_job` in a Celery
worker (or, without a broker, a background thread of the web process, as the score uploads of
:mod:`metrics.jobs`).
"""
from __future__ import annotations

import json
import logging
import os
import tarfile
import tempfile
import zipfile
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db.models import Count
from django.utils import timezone
from rest_framework import exceptions, serializers, status
from rest_framework.utils.encoders import JSONEncoder

from crowd import images
from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.base import import_limit
from crowd.importers.coco import SystemFile, import_coco
from crowd.importers.judgments import JudgmentMapping, import_judgments
from crowd.models import Dataset
from crowd.views.judgments_upload import _one_line, _save_upload

from .models import ImportFile, ImportJob

log = logging.getLogger("api.importing")

#: formats the upload accepts: COCO, a judgments file, and every directory format of the importers
FORMATS = ("coco", "judgments") + tuple(f for f in IMPORTERS if f != "judgments")
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
#: most files an archive may hold
MAX_ARCHIVE_MEMBERS = 100
_NAME = r"^[-a-zA-Z0-9_]{1,100}$"
_SYSTEM = r"^[-A-Za-z0-9_.+]{1,100}$"


class DatasetSerializer(serializers.ModelSerializer):
    """A dataset as its page describes it."""

    reference_system = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    images = serializers.IntegerField(source="n_images", read_only=True, help_text="number of images")

    class Meta:
        model = Dataset
        fields = ["name", "kind", "description", "citation", "criterion", "scale_min", "scale_max",
                  "reference_system", "images", "created_at"]


class DatasetUploadSerializer(serializers.Serializer):
    """The multipart form of an upload (see :mod:`api.datasets`); ``validate`` checks that the
    files given are those of ``format`` and no others."""

    name = serializers.RegexField(_NAME, help_text="dataset name: 1-100 letters, digits, - and _")
    format = serializers.ChoiceField(choices=FORMATS)
    annotations = serializers.FileField(required=False, help_text="coco: COCO caption annotation JSON (references)")
    results = serializers.FileField(required=False, help_text="coco: a model's COCO results JSON")
    system = serializers.RegexField(_SYSTEM, required=False, help_text="coco: the system name of `results`")
    objects = serializers.FileField(required=False, help_text="coco: object labels per image")
    references_name = serializers.RegexField(_SYSTEM, required=False, default="coco-references",
                                             help_text="coco: name of the reference system")
    file = serializers.FileField(required=False, help_text="judgments: the JSON, JSON Lines, CSV or TSV file")
    mapping = serializers.JSONField(required=False, help_text="judgments: JudgmentMapping fields as a JSON object")
    references_file = serializers.FileField(required=False, help_text="judgments: COCO annotations giving references")
    archive = serializers.FileField(required=False, help_text="other formats: .zip/.tar/.tar.gz of the folder")
    options = serializers.JSONField(required=False, help_text="other formats: importer options, e.g. {\"references\": 5}")

    FILES = {"coco": {"annotations", "results", "objects"}, "judgments": {"file", "references_file"}}

    def validate(self, data):
        fmt = data["format"]
        allowed = self.FILES.get(fmt, {"archive"})
        given = {k for k in ("annotations", "results", "objects", "file", "references_file", "archive") if data.get(k)}
        errors = {k: [f"not a file of format {fmt}"] for k in sorted(given - allowed)}
        for k in ("mapping",):
            if k in data and fmt != "judgments":
                errors[k] = [f"only for format judgments, not {fmt}"]
        if "options" in data and fmt in self.FILES:
            errors["options"] = [f"not an option of format {fmt}"]
        if fmt == "coco":
            if not given & {"annotations", "results", "objects"}:
                errors["results"] = ["give annotations, results or objects"]
            if data.get("results") and not data.get("system"):
                errors["system"] = ["name the system of the results file"]
            if data.get("system") and not data.get("results"):
                errors["results"] = ["a system name needs its results file"]
        elif data.get("system"):
            errors["system"] = [f"only for format coco, not {fmt}"]
        elif fmt == "judgments" and not data.get("file"):
            errors["file"] = ["this field is required for format judgments"]
        elif fmt not in self.FILES and not data.get("archive"):
            errors["archive"] = [f"this field is required for format {fmt}"]
        if data.get("archive") and not data["archive"].name.lower().endswith(ARCHIVE_SUFFIXES):
            errors.setdefault("archive", []).append(f"must end in {', '.join(ARCHIVE_SUFFIXES)}")
        for k in ("mapping", "options"):
            if k in data and not isinstance(data[k], dict):
                errors.setdefault(k, []).append("must be a JSON object")
        cap = import_limit("IMPORT_MAX_FILE_BYTES")
        for k in given:
            if data[k].size > cap:
                errors.setdefault(k, []).append(
                    f"{data[k].size:,} bytes is over the {cap:,}-byte cap (IMPORT_MAX_FILE_BYTES)")
        if errors:
            raise serializers.ValidationError(errors)
        return data


class UploadResultSerializer(serializers.Serializer):
    """What an import did (:class:`crowd.importers.base.ImportSummary`)."""

    dataset = DatasetSerializer()
    created = serializers.BooleanField(help_text="false: identical data was already imported, nothing changed")
    summary = serializers.CharField(help_text="the importer's summary, as the command prints it")
    counts = serializers.DictField(child=serializers.IntegerField())
    notes = serializers.ListField(child=serializers.CharField())
    image_source = serializers.CharField(allow_null=True, help_text="the image source set by this import, if any")


def _extract(archive, folder: Path) -> Path:
    """Unpack the uploaded ``archive`` into ``folder`` and return the folder holding its files
    (``folder`` itself, or its single sub-folder). Raises ValidationError for an archive that cannot
    be read, has more than :data:`MAX_ARCHIVE_MEMBERS` files, a member outside the folder or a
    link, or members whose sizes exceed ``IMPORT_MAX_FILE_BYTES`` together."""
    cap = import_limit("IMPORT_MAX_FILE_BYTES")
    shown = os.path.basename(archive.name)

    def refuse(problem):
        raise serializers.ValidationError({"archive": [f"{shown}: {problem}"]})

    try:
        if archive.name.lower().endswith(".zip"):
            with zipfile.ZipFile(archive) as zf:
                members = [m for m in zf.infolist() if not m.is_dir()]
                if len(members) > MAX_ARCHIVE_MEMBERS:
                    refuse(f"more than {MAX_ARCHIVE_MEMBERS} files")
                written = 0
                for m in members:
                    parts = Path(m.filename).parts
                    if m.filename.startswith(("/", "\\")) or ".." in parts or not parts:
                        refuse(f"member {m.filename!r} is outside the archive's folder")
                    target = folder.joinpath(*parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(m) as src, target.open("wb") as out:
                        while chunk := src.read(1 << 20):
                            written += len(chunk)
                            if written > cap:
                                refuse(f"unpacks to more than {cap:,} bytes (IMPORT_MAX_FILE_BYTES)")
                            out.write(chunk)
        else:
            with tarfile.open(fileobj=archive, mode="r:*") as tf:
                members = [m for m in tf.getmembers() if not m.isdir()]
                if len(members) > MAX_ARCHIVE_MEMBERS:
                    refuse(f"more than {MAX_ARCHIVE_MEMBERS} files")
                if any(not m.isfile() for m in members):
                    refuse("holds links or special files")
                if sum(m.size for m in members) > cap:
                    refuse(f"unpacks to more than {cap:,} bytes (IMPORT_MAX_FILE_BYTES)")
                tf.extractall(folder, filter="data")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        refuse(f"not a readable archive ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'damaged'})")
    entries = [p for p in folder.iterdir() if p.name != "__MACOSX"]
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else folder


def run_import(data: dict):
    """Import the validated upload ``data`` (:class:`DatasetUploadSerializer`) with the importer of
    its format; returns ``(ImportSummary, hint for the image source)``. Raises ValidationError with
    the importer's one-line message (temporary paths replaced by the uploaded names) or
    :class:`DatasetExists` (409); the database is unchanged then."""
    fmt, name = data["format"], data["name"]
    with tempfile.TemporaryDirectory(prefix="api-upload-") as tmp:
        folder = Path(tmp)
        replacements, hint = {}, ""

        def save(field):
            upload = data.get(field)
            if not upload:
                return None
            (folder / field).mkdir()
            path = _save_upload(upload, folder / field, field)
            replacements[str(path)] = os.path.basename(upload.name) or field
            return path

        try:
            if fmt == "coco":
                annotations, results, objects = save("annotations"), save("results"), save("objects")
                hint = data["annotations"].name if data.get("annotations") else ""
                systems = [SystemFile(data["system"], results)] if results else []
                summary = import_coco(name, annotations, systems, objects, references_name=data["references_name"])
            elif fmt == "judgments":
                path, refs = save("file"), save("references_file")
                options = dict(data.get("mapping") or {})
                options.pop("references_file", None)
                for key in ("scores", "criteria"):
                    if isinstance(options.get(key), list):
                        options[key] = tuple(options[key])
                if refs is not None:
                    options["references_file"] = str(refs)
                    hint = data["references_file"].name
                try:
                    mapping = JudgmentMapping(**options)
                except TypeError as exc:
                    raise ValueError(f"mapping: {exc}") from None
                summary = import_judgments(path, name, mapping, display_name=os.path.basename(data["file"].name))
            else:
                (folder / "archive").mkdir()
                directory = _extract(data["archive"], folder / "archive")
                replacements[str(directory)] = os.path.basename(data["archive"].name)
                summary = IMPORTERS[fmt](directory, name, **dict(data.get("options") or {}))
        except DatasetExistsError as exc:
            raise DatasetExists(_one_line(str(exc), replacements)) from None
        except (DatasetFormatError, ValueError) as exc:
            replacements[tmp] = "upload"
            raise serializers.ValidationError({"": [_one_line(str(exc), replacements)]}) from None
    return summary, hint


class DatasetExists(exceptions.APIException):
    """409: the dataset's name (or a system's) holds other data (the importers' DatasetExistsError)."""

    status_code = 409
    default_detail = "a dataset of this name holds other data"
    default_code = "dataset_exists"


def datasets_queryset():
    """Datasets with their image counts (``n_images``), by name."""
    return Dataset.objects.select_related("reference_system").annotate(n_images=Count("images")).order_by("name")




def import_result(data: dict) -> tuple[int, dict]:
    """Import the validated upload ``data``; returns ``(HTTP status, body)``: 201 when something was
    imported, 200 when identical data was already there, with ``{"dataset", "created", "summary",
    "counts", "notes", "image_source"}``. Raises what :func:`run_import` raises."""
    summary, hint = run_import(data)
    dataset = datasets_queryset().get(name=summary.dataset)
    source = images.default_source(dataset, os.path.basename(hint)) if summary.created else None
    body = {"dataset": DatasetSerializer(dataset).data, "created": summary.created, "summary": str(summary),
            "counts": summary.counts, "notes": list(summary.notes),
            "image_source": source.describe() if source is not None else None}
    return (status.HTTP_201_CREATED if summary.created else status.HTTP_200_OK), body


#: the upload's file fields, in the order a job stores them
FILE_FIELDS = ("annotations", "results", "objects", "file", "references_file", "archive")


def upload_size(data: dict) -> int:
    """Bytes of the upload's files together."""
    return sum(data[k].size for k in FILE_FIELDS if data.get(k))


def create_job(user, data: dict) -> ImportJob:
    """Store the validated upload ``data`` as a pending :class:`ImportJob` of ``user`` (the files'
    bytes read in chunks into :class:`ImportFile` rows) and return it; the caller queues it."""
    fields = {k: v for k, v in data.items() if k not in FILE_FIELDS}
    job = ImportJob.objects.create(user=user, name=data["name"], format=data["format"], fields=fields,
                                   size=upload_size(data))
    for field in FILE_FIELDS:
        upload = data.get(field)
        if upload:
            content = b"".join(upload.chunks())
            ImportFile.objects.create(job=job, field=field, filename=os.path.basename(upload.name) or field,
                                      size=len(content), content=content)
    return job


def run_job(job_id: int) -> str:
    """Import the upload of job ``job_id`` (:func:`import_result`); returns the job's final status.
    Only a pending job is claimed (a job delivered twice is imported once). A refusal of the importer
    fails the job with its one-line message (nothing written); the files' bytes are emptied at the end."""
    if not ImportJob.objects.filter(pk=job_id, status=ImportJob.PENDING).update(
            status=ImportJob.RUNNING, started_at=timezone.now()):
        return ImportJob.objects.get(pk=job_id).status
    job = ImportJob.objects.get(pk=job_id)
    data = dict(job.fields)
    for f in job.files.all():
        data[f.field] = SimpleUploadedFile(f.filename, bytes(f.content))
    fields = {}
    try:
        code, body = import_result(data)
    except (serializers.ValidationError, DatasetExists) as exc:
        detail = exc.detail
        messages = [str(m) for v in (detail.values() if isinstance(detail, dict) else [detail])
                    for m in (v if isinstance(v, list) else [v])]
        fields = {"status": ImportJob.FAILED, "message": "; ".join(messages) or "the import was refused"}
    except Exception as exc:  # noqa: BLE001 - recorded on the job, never lost
        log.exception("import job %s failed", job_id)
        fields = {"status": ImportJob.FAILED, "message": f"the import failed on the server ({type(exc).__name__})"}
    else:
        fields = {"status": ImportJob.DONE, "result_status": code,
                  "result": json.loads(json.dumps(body, cls=JSONEncoder)), "message": body["summary"].splitlines()[0]}
    ImportJob.objects.filter(pk=job_id).update(finished_at=timezone.now(), **fields)
    ImportFile.objects.filter(job_id=job_id).update(content=b"")
    return fields["status"]
