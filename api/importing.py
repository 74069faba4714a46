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

import contextlib
import json
import logging
import lzma
import os
import struct
import tarfile
import tempfile
import zipfile
import zlib
from pathlib import Path

from django.core.files import File
from django.db import transaction
from django.db.models import Count
from django.utils import timezone
from rest_framework import exceptions, serializers, status
from rest_framework.utils.encoders import JSONEncoder

from crowd import images
from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.base import import_limit, shorten
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


#: compression methods of zip members that Python's zipfile reads (stored, deflate, bzip2, LZMA)
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
               zipfile.ZIP_LZMA: "LZMA"}
#: what reading a damaged, truncated, encrypted or otherwise unreadable archive raises: zipfile's
#: and tarfile's own errors, the decompressors' (zlib.error, lzma.LZMAError, gzip.BadGzipFile and
#: bz2's OSError, EOFError for a truncated stream), RuntimeError (an encrypted zip member) and its
#: subclass NotImplementedError (an unsupported compression method or encryption), ValueError (a
#: zip member name that is not the UTF-8 its flag declares, a corrupt offset) and struct.error
ARCHIVE_ERRORS = (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError,
                  RuntimeError, ValueError, struct.error)


def _extract(archive, folder: Path) -> Path:
    """Unpack the uploaded ``archive`` into ``folder`` and return the folder holding its files
    (``folder`` itself, or its single sub-folder).

    Every member counts towards :data:`MAX_ARCHIVE_MEMBERS` (files, folders and anything else; a
    tar is read member by member and refused at the first one past the cap, a zip from the count
    its end record declares, before its central directory is read). Raises ValidationError (one
    line, naming the upload) for an archive that cannot be read (damaged or truncated data,
    :data:`ARCHIVE_ERRORS`), more than :data:`MAX_ARCHIVE_MEMBERS` members, a member outside the
    folder, a link or special file, an encrypted zip member or one compressed with a method other
    than :data:`ZIP_METHODS`, or members whose sizes exceed ``IMPORT_MAX_FILE_BYTES`` together
    (declared or written). The caller removes ``folder`` whatever happens."""
    cap = import_limit("IMPORT_MAX_FILE_BYTES")
    shown = os.path.basename(archive.name)
    too_many = f"more than {MAX_ARCHIVE_MEMBERS} members (files and folders count alike)"
    too_large = f"unpacks to more than {cap:,} bytes (IMPORT_MAX_FILE_BYTES)"

    def refuse(problem):
        raise serializers.ValidationError({"archive": [f"{shown}: {problem}"]})

    try:
        if archive.name.lower().endswith(".zip"):
            # the member count the end record declares, read by zipfile's own reader (ZipFile()
            # builds an object per entry of the central directory: millions fit in 512 MiB)
            end_record = getattr(zipfile, "_EndRecData", None)
            total_at = getattr(zipfile, "_ECD_ENTRIES_TOTAL", None)
            if end_record is not None and total_at is not None:
                archive.seek(0)
                record = end_record(archive)
                if record and record[total_at] > MAX_ARCHIVE_MEMBERS:
                    refuse(too_many)
                archive.seek(0)
            with zipfile.ZipFile(archive) as zf:
                members = zf.infolist()
                if len(members) > MAX_ARCHIVE_MEMBERS:
                    refuse(too_many)
                for m in members:
                    parts = Path(m.filename).parts
                    if m.filename.startswith(("/", "\\")) or ".." in parts or not parts:
                        refuse(f"member {shorten(m.filename)} is outside the archive's folder")
                    if m.flag_bits & 0x1:
                        refuse(f"member {shorten(m.filename)} is encrypted: upload an archive without a password")
                    if m.compress_type not in ZIP_METHODS:
                        method = zipfile.compressor_names.get(m.compress_type, f"number {m.compress_type}")
                        refuse(f"member {shorten(m.filename)} is compressed with method {method}, which cannot be "
                               f"read: use {', '.join(ZIP_METHODS.values())}")
                if sum(m.file_size for m in members) > cap:
                    refuse(too_large)
                written = 0
                for m in members:
                    target = folder.joinpath(*Path(m.filename).parts)
                    if m.is_dir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(m) as src, target.open("wb") as out:
                        while chunk := src.read(1 << 20):
                            written += len(chunk)
                            if written > cap:
                                refuse(too_large)
                            out.write(chunk)
        else:
            with tarfile.open(fileobj=archive, mode="r:*") as tf:
                members, declared = [], 0
                while (m := tf.next()) is not None:
                    members.append(m)
                    if len(members) > MAX_ARCHIVE_MEMBERS:
                        refuse(too_many)
                    if not (m.isfile() or m.isdir()):
                        refuse("holds links or special files")
                    declared += m.size
                    if declared > cap:  # refused before the data is decompressed to reach the next member
                        refuse(too_large)
                tf.extractall(folder, members=members, filter="data")
    except ARCHIVE_ERRORS as exc:
        kind = type(exc).__name__ if type(exc).__name__ != "error" else f"{type(exc).__module__}.error"  # zlib.error
        detail = str(exc).splitlines()[0] if str(exc) else "damaged or truncated"
        refuse(f"not a readable archive ({kind}: {shorten(detail, limit=200, quote=False)})")
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


#: bytes of an uploaded file per :class:`ImportFile` row: a job's files are stored and read back a
#: chunk at a time, so an upload of any size costs the web and worker processes this much memory
JOB_CHUNK_BYTES = 1024 * 1024


def create_job(user, data: dict) -> ImportJob:
    """Store the validated upload ``data`` as a pending :class:`ImportJob` of ``user`` and return it;
    the caller queues it. Each file is read from the upload (on disk: Django's
    ``TemporaryFileUploadHandler`` keeps only uploads under ``FILE_UPLOAD_MAX_MEMORY_SIZE`` in
    memory) in chunks of :data:`JOB_CHUNK_BYTES`, one :class:`ImportFile` row each, in one
    transaction: the job and all its files, or nothing."""
    fields = {k: v for k, v in data.items() if k not in FILE_FIELDS}
    with transaction.atomic():
        job = ImportJob.objects.create(user=user, name=data["name"], format=data["format"], fields=fields,
                                       size=upload_size(data))
        for field in FILE_FIELDS:
            upload = data.get(field)
            if upload:
                filename = os.path.basename(upload.name) or field
                upload.seek(0)
                chunk = upload.read(JOB_CHUNK_BYTES)  # at least one row, even for an empty file
                while True:
                    ImportFile.objects.create(job=job, field=field, filename=filename, size=len(chunk), content=chunk)
                    chunk = upload.read(JOB_CHUNK_BYTES)
                    if not chunk:
                        break
    return job


def _job_files(job_id: int, folder: Path, stack: contextlib.ExitStack) -> dict:
    """The files of job ``job_id`` written to ``folder`` one :class:`ImportFile` chunk at a time
    (a chunk in memory at once) and opened as Django files under their uploaded names: form
    field -> File (closed by ``stack``)."""
    files = {}
    for field in FILE_FIELDS:
        chunks = list(ImportFile.objects.filter(job_id=job_id, field=field).order_by("pk").values_list("pk", flat=True))
        if not chunks:
            continue
        path = folder / field
        with path.open("wb") as out:
            for pk in chunks:
                out.write(ImportFile.objects.values_list("content", flat=True).get(pk=pk))
        filename = ImportFile.objects.values_list("filename", flat=True).get(pk=chunks[0])
        files[field] = File(stack.enter_context(path.open("rb")), name=filename)
    return files


def run_job(job_id: int) -> str:
    """Import the upload of job ``job_id`` (:func:`import_result`); returns the job's final status.
    Only a pending job is claimed (a job delivered twice is imported once). The files are copied
    from the database to a temporary folder a chunk at a time (:func:`_job_files`), so the job's
    memory does not grow with the upload's size. A refusal of the importer fails the job with its
    one-line message (nothing written); the files' bytes are emptied at the end."""
    if not ImportJob.objects.filter(pk=job_id, status=ImportJob.PENDING).update(
            status=ImportJob.RUNNING, started_at=timezone.now()):
        return ImportJob.objects.get(pk=job_id).status
    job = ImportJob.objects.get(pk=job_id)
    data = dict(job.fields)
    fields = {}
    try:
        with tempfile.TemporaryDirectory(prefix="api-job-") as tmp, contextlib.ExitStack() as stack:
            data.update(_job_files(job_id, Path(tmp), stack))
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
