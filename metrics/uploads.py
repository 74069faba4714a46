"""Per-caption scores of a researcher's own metric, uploaded as a CSV file.

File format (UTF-8, comma-separated, a header row first; a UTF-8 byte-order mark is ignored)::

    image,caption,score
    1056338697_4f7d7ce270.jpg,1056338697_4f7d7ce270.jpg#2,0.731

``image`` is the dataset's image key (``Image.key``) and ``caption`` the key of one of its candidate
captions (``Caption.key``). When several systems of the dataset share caption keys (COCO-format
result files number each set's captions ``000``, ``001``...), a ``system`` column naming the
system is required. Instead of ``image`` and ``caption``, a ``caption_id`` column may hold our
database caption ids. Columns may come in any order; blank lines are skipped.

Validation happens before anything is written, and nothing is written unless all of it passes: the
text is UTF-8, the header names the columns, every row has one field per column, every caption is
a known candidate caption of the dataset (the error names the line of the first one that is not),
every score is a finite number, no caption appears twice, and every candidate caption that has a
caption-level human judgment (imported or from a campaign) has a score (the error says how many
are missing and gives examples). Other candidates may be left out.

Storage: the metric named e.g. "My Metric" gets the key ``user_my_metric`` (``user_`` + the
slugified name, ``-`` as ``_``); the name may not be, or slugify to, a built-in or plugin metric key,
group name or metric name (``CIDEr-D`` -> ``cider_d`` is refused). One done :class:`MetricRun`
holds the upload: ``metric`` = the key, ``version`` = ``"upload:" + sha256(file bytes)[:12]``,
``params`` = ``{"kind": "upload", "name", "higher", "file", "sha256", "rows"}``, ``total`` =
``completed`` = rows, and one :class:`MetricScore` per row (``value`` = the score exactly as given,
``raw`` = None).

Direction: scores are stored as given, never negated. ``params["higher"]`` records what a higher
score means, ``"better"`` (default) or ``"worse"`` (a distance, an error rate). Reports that want
"higher = better" numbers multiply by :func:`metric_sign` (or call :func:`oriented_value`); a
correlation of a ``"worse"`` metric with quality ratings is expected to be negative.

Re-uploading identical content (same bytes, name and direction) changes nothing. Anything else
under a name that already has an upload on that dataset *replaces* it: in one transaction the old
run and its scores are deleted and the new run is stored, so a report sees either the old or the
new upload, never a mix and never both. ``replace=False`` refuses instead.
"""
from __future__ import annotations

import csv
import hashlib
import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from crowd.importers.base import shorten
from crowd.models import Dataset, HumanJudgment

from .models import MetricRun, MetricScore, params_key
from captioneval.metrics import registry
from captioneval.metrics.plugins import UPLOAD_PREFIX

#: what a higher uploaded score means
DIRECTIONS = ("better", "worse")
#: ``params["kind"]`` of an upload run
KIND = "upload"
MAX_KEY_LENGTH = 50  # MetricRun.metric
EXAMPLES = 5


class UploadError(ValueError):
    """An upload that cannot be stored; the message says what is wrong (with the line number for a
    bad row). Nothing has been written when it is raised."""


@dataclass(frozen=True)
class UploadSummary:
    """What :func:`upload_scores` did.

    dataset, key ("user_my_metric"), name ("My Metric"), higher ("better"/"worse"), file (original
    file name), sha256 (hex digest of the file bytes), rows (scores in the file = stored),
    n_judged (judged candidate captions, all covered), run (id of the current upload run),
    changed (False: identical to the stored upload, nothing written), replaced (ids of deleted runs).
    """

    dataset: str
    key: str
    name: str
    higher: str
    file: str
    sha256: str
    rows: int
    n_judged: int
    run: int
    changed: bool
    replaced: list[int] = field(default_factory=list)

    def __str__(self) -> str:
        what = (
            f"{self.name!r} ({self.key}) on dataset {self.dataset!r}: {self.rows:,} scores from {self.file} "
            f"(sha256 {self.sha256[:12]}, higher is {self.higher}), run {self.run}"
        )
        if not self.changed:
            return f"unchanged: {what} is already stored"
        tail = f"; replaced run {', '.join(map(str, self.replaced))}" if self.replaced else ""
        return f"stored {what}{tail}"


def metric_key(name: str) -> str:
    """The key of an uploaded metric called ``name``: ``"user_" + slug`` (``"My Metric"`` ->
    ``"user_my_metric"``). UploadError for a name without letters or digits, a key longer than 50
    characters, or a name that is (or slugifies to) a built-in/plugin metric key or name or a group."""
    if not isinstance(name, str) or not name.strip():
        raise UploadError("a metric name is required (e.g. --name \"My Metric\")")
    name = name.strip()
    if len(name) > 100:
        raise UploadError("the metric name is longer than 100 characters")
    if "\x00" in name:
        raise UploadError("the metric name contains a NUL character (U+0000)")
    slug = slugify(name).replace("-", "_").strip("_")
    if not slug:
        raise UploadError(f"the metric name {shorten(name)} has no letters or digits to make a key from")
    taken_names = {m.name.casefold(): k for k, m in registry.METRICS.items()}
    if slug in registry.METRICS or slug in registry.GROUPS or slug in registry.UNAVAILABLE:
        raise UploadError(f"the metric name {shorten(name)} clashes with the platform's metric or group {shorten(slug)}; choose another")
    if name.casefold() in taken_names:
        raise UploadError(
            f"the metric name {shorten(name)} is the name of the platform's metric {shorten(taken_names[name.casefold()])}; choose another"
        )
    key = UPLOAD_PREFIX + slug
    if len(key) > MAX_KEY_LENGTH:
        raise UploadError(f"the metric name {shorten(name)} is too long: its key {shorten(key)} exceeds {MAX_KEY_LENGTH} characters")
    return key


def _read(path_or_fileobj) -> tuple[bytes, str]:
    """(content bytes, file name) of a path or a binary/text file object (e.g. a Django upload)."""
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        path = Path(path_or_fileobj)
        try:
            return path.read_bytes(), path.name
        except FileNotFoundError:
            raise UploadError(f"{path}: file not found") from None
        except IsADirectoryError:
            raise UploadError(f"{path}: is a directory, not a CSV file") from None
    if hasattr(path_or_fileobj, "seek"):
        try:
            path_or_fileobj.seek(0)
        except (OSError, ValueError):
            pass
    data = path_or_fileobj.read()
    if isinstance(data, str):
        data = data.encode("utf-8")
    name = os.path.basename(str(getattr(path_or_fileobj, "name", "") or "")) or "upload.csv"
    return bytes(data), name


def _decode(content: bytes) -> str:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = content[: exc.start].count(b"\n") + 1
        raise UploadError(
            f"the file is not UTF-8 text: byte 0x{content[exc.start]:02x} on line {line} cannot be decoded; "
            "save it as UTF-8 CSV"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


HEADER_HELP = "expected a header row image,caption,score (plus system when caption keys repeat across systems) or caption_id,score"


def _header(row: list[str]) -> dict[str, int]:
    names = [c.strip().lower() for c in row]
    allowed = {"image", "caption", "score", "caption_id", "system"}
    if "score" not in names:
        looks_like_data = bool(row) and _is_number(row[-1])
        raise UploadError(
            "the first line is not a header" + (" (it looks like a data row)" if looks_like_data else "")
            + f": {HEADER_HELP}; got {shorten(','.join(row))}"
        )
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise UploadError(f"unknown column {shorten(unknown[0])} in the header: {HEADER_HELP}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UploadError(f"column {shorten(repeated[0])} appears twice in the header")
    columns = {n: i for i, n in enumerate(names)}
    if "caption_id" in columns:
        if {"image", "caption", "system"} & set(columns):
            raise UploadError("use either a caption_id column or image,caption[,system] columns, not both")
    elif not {"image", "caption"} <= set(columns):
        raise UploadError(f"the header lacks {'image' if 'image' not in columns else 'caption'}: {HEADER_HELP}")
    return columns


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@dataclass
class _Parsed:
    scores: dict[int, float]  # caption id -> score, file order
    n_judged: int  # candidate captions with human judgments (all have a score)


def _parse(dataset: Dataset, text: str) -> _Parsed:
    """Validate the CSV ``text`` against ``dataset`` (see the module docstring); UploadError otherwise."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header, columns = None, None
    candidates = dataset.candidates()
    rows = list(candidates.values_list("id", "image__key", "key", "system__name"))
    by_id = {cid: (image, key, system) for cid, image, key, system in rows}
    by_key: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for cid, image, key, system in rows:
        by_key.setdefault((image, key), []).append((cid, system))
    image_keys = set(dataset.images.values_list("key", flat=True))
    reference_keys = set(dataset.references().values_list("image__key", "key")) if dataset.reference_system_id else set()
    scores: dict[int, float] = {}
    first_line: dict[int, int] = {}
    try:
        for row in reader:
            if not row or not any(c.strip() for c in row):
                continue
            line = reader.line_num
            if header is None:
                header, columns = row, _header(row)
                continue
            if len(row) != len(header):
                raise UploadError(f"line {line}: {len(row)} fields, but the header has {len(header)} columns")
            field_ = {name: row[i].strip() for name, i in columns.items()}
            if "caption_id" in columns:
                try:
                    cid = int(field_["caption_id"])
                except ValueError:
                    raise UploadError(f"line {line}: caption_id {shorten(field_['caption_id'])} is not an integer") from None
                if cid not in by_id:
                    raise UploadError(f"line {line}: caption id {cid} is not a candidate caption of dataset {shorten(dataset.name)}")
                where = f"caption id {cid}"
            else:
                image, key = field_["image"], field_["caption"]
                if image not in image_keys:
                    raise UploadError(f"line {line}: unknown image {shorten(image)} (not an image of dataset {shorten(dataset.name)})")
                matches = by_key.get((image, key), [])
                if "system" in columns:
                    matches = [m for m in matches if m[1] == field_["system"]]
                if not matches:
                    if (image, key) in reference_keys:
                        raise UploadError(
                            f"line {line}: caption {shorten(key)} of image {shorten(image)} is a reference caption; only candidate "
                            "captions are scored"
                        )
                    system = f" of system {shorten(field_['system'])}" if "system" in columns else ""
                    raise UploadError(f"line {line}: image {shorten(image)} has no candidate caption {shorten(key)}{system}")
                if len(matches) > 1:
                    systems = ", ".join(sorted(s for _, s in matches))
                    raise UploadError(
                        f"line {line}: caption {shorten(key)} of image {shorten(image)} exists for several systems ({systems}); "
                        "add a system column"
                    )
                cid = matches[0][0]
                where = f"caption {shorten(key)} of image {shorten(image)}"
            raw = field_["score"]
            try:
                value = float(raw)
            except ValueError:
                raise UploadError(f"line {line}: score {shorten(raw)} is not a number") from None
            if not math.isfinite(value):
                raise UploadError(f"line {line}: score {shorten(raw)} is not a finite number")
            if cid in scores:
                raise UploadError(f"line {line}: {where} already has a score on line {first_line[cid]}")
            scores[cid], first_line[cid] = value, line
    except csv.Error as exc:
        raise UploadError(f"line {reader.line_num}: not valid CSV ({exc})") from None
    if header is None:
        raise UploadError(f"the file is empty: {HEADER_HELP}")
    if not scores:
        raise UploadError("the file has a header but no score rows")
    judged = set(
        HumanJudgment.objects.filter(caption__in=candidates).values_list("caption_id", flat=True).distinct()
    )
    missing = sorted(judged - set(scores))
    if missing:
        several = len({system for _, _, system in by_id.values()}) > 1
        examples = "; ".join(
            f"image {shorten(by_id[c][0])} caption {shorten(by_id[c][1])}" + (f" of system {shorten(by_id[c][2])}" if several else "")
            for c in missing[:EXAMPLES]
        )
        raise UploadError(
            f"{len(missing)} of the {len(judged)} candidate captions with human judgments have no score, e.g. {examples}"
        )
    return _Parsed(scores, len(judged))


def upload_scores(
    dataset_name: str, path_or_fileobj: str | os.PathLike | BinaryIO, name: str, higher: str = "better",
    replace: bool = True, *, filename: str | None = None,
) -> UploadSummary:
    """Validate and store one uploaded metric's per-caption scores for ``dataset_name``.

    Parameters
    ----------
    dataset_name : an imported dataset's name.
    path_or_fileobj : a CSV file path, or a file object giving its bytes (or text) from ``read()``.
    name : the metric's display name, e.g. "My Metric"; its key is :func:`metric_key` (``user_my_metric``).
    higher : "better" (default) or "worse": what a higher score means; recorded in ``params["higher"]``,
        scores are stored as given.
    replace : True (default): a different file under a name that already has an upload on this
        dataset replaces it (old run and scores deleted in the same transaction); False: UploadError.
    filename : the file name to record (default: the path's or file object's name).

    Returns an :class:`UploadSummary` (``changed`` False when the identical upload is already stored).

    Raises UploadError (a ValueError) with a clear message for an unknown dataset, a bad name or
    direction, and every problem with the file (see the module docstring); nothing is written then.
    """
    try:
        dataset = Dataset.objects.get(name=dataset_name)
    except Dataset.DoesNotExist:
        known = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported yet"
        raise UploadError(f"unknown dataset {shorten(dataset_name)} (known: {known})") from None
    key = metric_key(name)
    name = name.strip()
    if higher not in DIRECTIONS:
        raise UploadError(f"higher must be 'better' or 'worse', got {shorten(higher)}")
    content, read_name = _read(path_or_fileobj)
    file_name = os.path.basename(filename) if filename else read_name
    if "\x00" in file_name:
        raise UploadError("the file name contains a NUL character (U+0000); rename the file")
    sha = hashlib.sha256(content).hexdigest()
    parsed = _parse(dataset, _decode(content))
    params = {"kind": KIND, "name": name, "higher": higher, "file": file_name, "sha256": sha, "rows": len(parsed.scores)}
    identity = params_key({"kind": KIND, "name": name, "higher": higher, "sha256": sha})
    version = f"upload:{sha[:12]}"
    with transaction.atomic():
        Dataset.objects.select_for_update().filter(pk=dataset.pk).first()  # one upload per dataset at a time
        existing = list(MetricRun.objects.filter(dataset=dataset, metric=key))
        for run in existing:
            if run.version == version and run.params_key == identity and run.status == MetricRun.DONE:
                return UploadSummary(
                    dataset.name, key, name, higher, run.params.get("file", file_name), sha, run.total,
                    parsed.n_judged, run.pk, changed=False,
                )
        if existing and not replace:
            raise UploadError(
                f"dataset {shorten(dataset.name)} already has an upload named {shorten(existing[0].params.get('name', name))} "
                f"({existing[0].params.get('file', '?')}); replace it or choose another name"
            )
        replaced = [r.pk for r in existing]
        MetricRun.objects.filter(pk__in=replaced).delete()
        now = timezone.now()
        run = MetricRun.objects.create(
            dataset=dataset, metric=key, version=version, params=params, params_key=identity,
            status=MetricRun.DONE, total=len(parsed.scores), completed=len(parsed.scores),
            started_at=now, finished_at=now,
        )
        MetricScore.objects.bulk_create(
            [MetricScore(run=run, caption_id=cid, value=value, raw=None) for cid, value in parsed.scores.items()],
            batch_size=5000,
        )
    return UploadSummary(
        dataset.name, key, name, higher, file_name, sha, len(parsed.scores), parsed.n_judged, run.pk,
        changed=True, replaced=replaced,
    )


def is_upload(run: MetricRun | None) -> bool:
    """True when ``run`` stores uploaded scores (``params["kind"] == "upload"``)."""
    return run is not None and isinstance(run.params, dict) and run.params.get("kind") == KIND


def is_upload_key(key: str) -> bool:
    """True when ``key`` names an uploaded metric (``user_...``; plugins and built-ins never do)."""
    return isinstance(key, str) and key.startswith(UPLOAD_PREFIX)


def uploaded_run(dataset: Dataset, key: str) -> MetricRun | None:
    """The current done upload run of ``key`` on ``dataset``, or None (never uploaded there)."""
    return uploaded_runs(dataset).get(key) if is_upload_key(key) else None


def uploaded_runs(dataset: Dataset) -> dict[str, MetricRun]:
    """{key: the current done upload run} of ``dataset``, e.g. ``{"user_my_metric": <MetricRun>}``,
    in key order; empty when nothing was uploaded. Each run's scores are caption-level
    :class:`MetricScore` rows covering at least every judged candidate caption."""
    runs: dict[str, MetricRun] = {}
    qs = MetricRun.objects.filter(
        dataset=dataset, metric__startswith=UPLOAD_PREFIX, status=MetricRun.DONE, params__kind=KIND
    ).order_by("metric", "-created_at", "-pk")
    for run in qs:
        runs.setdefault(run.metric, run)
    return runs


def metric_display_name(key: str, run: MetricRun | None = None) -> str:
    """The name to show for metric ``key``: ``METRICS[key].name`` for built-in and plugin metrics,
    the uploaded name (``run.params["name"]``) for an upload, else the key itself.

    ``run`` : the upload run; when omitted for an uploaded key, the newest upload of that key (on any
    dataset) supplies the name.
    """
    if key in registry.METRICS:
        return registry.METRICS[key].name
    if run is None and is_upload_key(key):
        run = MetricRun.objects.filter(metric=key, params__kind=KIND).order_by("-created_at", "-pk").first()
    if is_upload(run) and run.params.get("name"):
        return str(run.params["name"])
    return key


def metric_direction(key: str, run: MetricRun | None = None) -> str:
    """What a higher value of ``key`` means: the upload's ``params["higher"]`` ("better"/"worse") for
    an upload run, else the registry's ``Metric.higher`` ("better", "worse", "more diverse"...);
    "better" for an unknown key."""
    if is_upload(run):
        return run.params.get("higher", "better")
    if key in registry.METRICS:
        return registry.METRICS[key].higher
    return "better"


def metric_sign(key: str, run: MetricRun | None = None) -> int:
    """-1 when a lower value of ``key`` is better (direction "worse", see :func:`metric_direction`),
    else +1. Multiply scores (or correlations) by it to get "higher = better" numbers."""
    return -1 if metric_direction(key, run) == "worse" else 1


def oriented_value(value: float, key: str, run: MetricRun | None = None) -> float:
    """``value`` oriented so that higher is better: ``metric_sign(key, run) * value``."""
    return metric_sign(key, run) * value
