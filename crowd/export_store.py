"""Dataset exports stored per dataset version, so a bulk download is a file streamed from disk.

``/datasets/<name>/export.<fmt>`` (:func:`crowd.views.judgments_upload.dataset_export`) serves
:func:`crowd.dataset_export.export_dataset`'s file. Building it reads every caption, reference and
rating of the dataset (Flickr8k-CrowdFlower: 47,830 candidates, 55.8 MB of CSV, about 3 s), so it
is built once per *version* of what it reads and kept under ``settings.EXPORTS_ROOT``
(default ``VAR_DIR/exports``):

* the version (:func:`export_version`) is a SHA-256 of the dataset's own fields, the (count, max id)
  of its captions and of its imported human and pairwise judgments (rows are inserted or deleted,
  never edited in place, so the pair changes whenever the set does), the systems the public view
  hides (:func:`crowd.privacy.private_system_ids`), the format and :data:`FORMAT`;
* :func:`stored_export` returns the file of the current version, building it when missing: written
  to a temporary file in the same folder and renamed into place (``os.replace``), so a reader never
  sees half a file and two concurrent builds leave one whole file; the files of older versions of the
  same dataset and format are deleted then;
* ``manage.py warm_reports`` builds them ahead of any visit (``./run demo`` runs it), so the first
  download is served from disk too.

Layering: crowd only (models, :mod:`crowd.dataset_export`, :mod:`crowd.privacy`).
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Max

from .dataset_export import EXPORT_FORMATS, export_dataset, import_command
from .models import Caption, Dataset, HumanJudgment, PairwiseJudgment
from .privacy import private_system_ids

#: bump when :func:`crowd.dataset_export.export_dataset` changes what it writes
FORMAT = 1


def export_dir() -> Path:
    """The folder of stored exports (``settings.EXPORTS_ROOT``, default ``VAR_DIR/exports``), created if missing."""
    path = Path(settings.EXPORTS_ROOT)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _id_set(qs) -> list:
    agg = qs.aggregate(n=Count("pk"), top=Max("pk"))
    return [agg["n"], agg["top"]]


def export_version(dataset: Dataset, fmt: str, hidden: list[int]) -> str:
    """SHA-256 (hex) of everything the export of ``dataset`` in ``fmt`` reads, ``hidden`` being the
    system ids its public view leaves out (module docstring). Four aggregate queries."""
    ident = {
        "dataset": [dataset.pk, dataset.name, dataset.fingerprint, dataset.criterion, dataset.protocol,
                    dataset.reference_system_id],
        "captions": _id_set(Caption.objects.filter(image__dataset=dataset)),
        "human": _id_set(HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True)),
        "pairwise": _id_set(PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset)),
        "hidden": sorted(hidden), "fmt": fmt, "format": FORMAT,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()


def _stem(dataset: Dataset) -> str:
    """A file-name-safe prefix for the dataset (its name is a slug, but the files must not depend on it)."""
    return f"{dataset.pk}-" + re.sub(r"[^A-Za-z0-9_-]", "_", dataset.name)[:80]


def public_view(dataset: Dataset) -> Dataset:
    """``dataset`` as the public pages show it, for :func:`crowd.dataset_export.export_dataset`: a
    copy of the instance whose ``candidates()`` leaves out the systems of unpublished campaigns
    (:func:`crowd.privacy.private_system_ids`); the instance itself when there are none. The export
    already reads imported judgments only (``campaign`` null), as the public reports do, so no
    campaign's ratings reach it."""
    hidden = private_system_ids(dataset)
    if not hidden:
        return dataset
    view = copy.copy(dataset)
    view.candidates = lambda: Dataset.candidates(dataset).exclude(system_id__in=hidden)
    return view


def stored_export(view: Dataset, fmt: str) -> tuple[Path, str]:
    """(path of the stored file, the ``import_dataset judgments`` line that re-imports it) for the
    public view ``view`` of a dataset (:func:`public_view`: the dataset
    itself, or a copy whose ``candidates()`` leaves out unpublished systems) in ``fmt``, building the
    file when the current version has none.

    Raises ValueError (one line, from :func:`crowd.dataset_export.export_dataset`) for a format not in
    :data:`crowd.dataset_export.EXPORT_FORMATS` or a dataset the format cannot hold; nothing is stored then.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format; known: {', '.join(EXPORT_FORMATS)}")
    folder = export_dir()
    stem = _stem(view)
    version = export_version(view, fmt, private_system_ids(view))
    path = folder / f"{stem}-{version[:32]}.{fmt}"
    command_path = path.with_suffix(path.suffix + ".command")
    if path.exists() and command_path.exists():
        return path, command_path.read_text(encoding="utf-8")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=f".{fmt}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            mapping = export_dataset(view, fmt, out)
        command = import_command(view.name, f"{view.name}.{fmt}", mapping)
        cmd_fd, cmd_tmp = tempfile.mkstemp(dir=folder, prefix=".building-", suffix=".command")
        with os.fdopen(cmd_fd, "w", encoding="utf-8") as out:
            out.write(command)
        os.replace(cmd_tmp, command_path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for old in folder.glob(f"{stem}-*.{fmt}*"):  # the files of older versions are never served again
        if old.name not in (path.name, command_path.name):
            old.unlink(missing_ok=True)
    return path, command
