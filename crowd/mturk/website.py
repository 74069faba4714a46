"""The requester-website route: export a batch as a layout plus an input CSV, import the results CSV.

Export (:func:`export_batch`): a layout HTML to paste into a requester-website project ("Design
layout" / source view) with ``${column}`` placeholders, and an input CSV with one row per item:
``batch_id``, ``item_key``, ``order`` (the presentation order baked into the row), ``image_key``,
``image_url`` and ``task_html`` (the item's question rendered by the kind's template, HTML-escaped
text inside). MTurk substitutes column values into the layout as they are, so the HTML in
``task_html`` is rendered and every caption in it is already escaped by our templates; ``image_key``
and ``image_url`` are written HTML-escaped for the same reason (they land in attributes), and
``item_key`` is not used in the layout (it only comes back in the results). Text cells a spreadsheet
would run as formulas get a leading quote (:mod:`captioneval.utils.csvsafe`); the import removes it again
from the ``Input.*`` columns, which echo this file, so ids round-trip exactly.

Import (:func:`import_results`): the batch results CSV MTurk lets you download (HITId,
AssignmentId, WorkerId, AssignmentStatus, WorkTimeInSeconds, Input.<column>, Answer.<field>).
Every row is validated first; if any row is bad (foreign batch, unknown item, malformed or unknown
worker id, invalid answer, conflicting ids) nothing is imported and the report lists every problem
with its line number. A valid file is imported in one transaction; importing it again changes
nothing (rows already held are ``unchanged``; MTurk status changes are applied).
"""
from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import asdict, dataclass, field

from django.db import transaction
from django.template.loader import render_to_string
from django.utils.html import escape

from captioneval.utils import csvsafe

from crowd.kinds import AnswerError, get_kind
from crowd.models import Assignment, Campaign, MTurkBatch, MTurkSync

from .collect import Reconciliation, ingest
from .publish import create_batch

INPUT_COLUMNS = ["batch_id", "item_key", "order", "image_key", "image_url", "task_html"]
REQUIRED = ["HITId", "AssignmentId", "WorkerId", "AssignmentStatus", "WorkTimeInSeconds", "Input.batch_id", "Input.item_key"]
STATUSES = {"Submitted", "Approved", "Rejected"}
WORKER_ID = re.compile(r"^A[0-9A-Z]{5,40}$")  # MTurk WorkerIds: 'A' then upper-case letters and digits
MTURK_ID = re.compile(r"^[0-9A-Z]{10,64}$")


def layout_html(campaign: Campaign) -> str:
    """The requester-website layout of the campaign's kind, with ${column} placeholders."""
    return render_to_string("crowd/mturk/layout.html", {"campaign": campaign, "spec": get_kind(campaign.kind)})


def task_html(campaign: Campaign, item, order: dict) -> str:
    spec = get_kind(campaign.kind)
    return render_to_string(spec.template, {"task": spec.context(item.payload, order), "data": {}, "payload": item.payload})


def input_rows(batch: MTurkBatch) -> list[dict]:
    rows = []
    for hit in batch.hits.select_related("item").order_by("pk"):
        p = hit.item.payload
        rows.append({
            "batch_id": batch.batch_id, "item_key": hit.item.key, "order": json.dumps(hit.order, sort_keys=True),
            "image_key": escape(p.get("image_key", "")), "image_url": escape(p.get("image_url", "")),
            "task_html": " ".join(task_html(batch.campaign, hit.item, hit.order).split()),
        })
    return rows


def input_csv(batch: MTurkBatch) -> str:
    """The batch's input CSV (header :data:`INPUT_COLUMNS`, one row per HIT; formulas neutralised)."""
    out = io.StringIO()
    writer = csvsafe.DictWriter(out, fieldnames=INPUT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(input_rows(batch))
    return out.getvalue()


def export_batch(campaign: Campaign, *, limit: int | None = None, user: str = "") -> MTurkBatch:
    """A new requester-website batch of the campaign's unpublished items (PublishError if none)."""
    return create_batch(campaign, limit=limit, user=user, route=MTurkBatch.WEBSITE)


@dataclass
class ImportReport:
    rows: int = 0
    imported: int = 0
    unchanged: int = 0
    status_changes: int = 0
    errors: list = field(default_factory=list)  # [line number, message]
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors

    def lines(self) -> list[str]:
        if self.errors:
            out = [f"NOTHING IMPORTED: {len(self.errors)} problem(s) in {self.rows} rows; fix them and import again"]
            out += [f"  line {line}: {msg}" for line, msg in self.errors[:200]]
            return out
        verb = "would import" if self.dry_run else "imported"
        return [f"{self.rows} rows: {verb} {self.imported}, unchanged {self.unchanged}, status changes {self.status_changes}"]


def _read(data) -> tuple[list[str], list[dict]]:
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ValueError(f"the file is not UTF-8 text (byte {exc.start}); save it as CSV UTF-8") from None
    if "\x00" in data:
        raise ValueError("the file contains NUL bytes; it is not a CSV text file")
    reader = csv.DictReader(io.StringIO(data, newline=""))
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise ValueError(f"the file is not valid CSV: {exc}") from None
    for row in rows:  # Input.* echo our input CSV: undo its formula-neutralising quotes
        for k, v in row.items():
            if isinstance(k, str) and k.startswith("Input.") and isinstance(v, str):
                row[k] = csvsafe.restore(v)
    return list(reader.fieldnames or []), rows


def import_results(campaign: Campaign, data, *, dry_run: bool = False) -> ImportReport:
    """Validate then import a requester-website results CSV (bytes or str) into ``campaign``."""
    report = ImportReport(dry_run=dry_run)
    try:
        columns, rows = _read(data)
    except ValueError as exc:
        report.errors.append([1, str(exc)])
        return _finish(campaign, report)
    report.rows = len(rows)
    missing = [c for c in REQUIRED if c not in columns]
    if missing:
        report.errors.append([1, f"missing column(s) {', '.join(missing)} (is this an MTurk batch results CSV of a batch exported here?)"])
        return _finish(campaign, report)
    if not rows:
        report.errors.append([1, "the file has no rows"])
        return _finish(campaign, report)
    spec = get_kind(campaign.kind)
    batches = {b.batch_id: b for b in MTurkBatch.objects.filter(campaign=campaign, route=MTurkBatch.WEBSITE)}
    hits = {}
    for b in batches.values():
        for h in b.hits.select_related("item"):
            hits[(b.batch_id, h.item.key)] = h
    seen_aid, seen_pair, hit_of = {}, {}, {}
    plan = []
    for line, row in enumerate(rows, start=2):
        errs = []
        bid, key = (row.get("Input.batch_id") or "").strip(), (row.get("Input.item_key") or "").strip()
        aid, wid = (row.get("AssignmentId") or "").strip(), (row.get("WorkerId") or "").strip()
        hid, status = (row.get("HITId") or "").strip(), (row.get("AssignmentStatus") or "").strip()
        if bid not in batches:
            errs.append(f"batch {bid!r} is not a requester-website batch of campaign {campaign.name!r} (foreign batch)")
        hit = hits.get((bid, key))
        if bid in batches and hit is None:
            errs.append(f"item {key!r} is not in batch {bid!r}")
        if not WORKER_ID.match(wid):
            errs.append(f"unknown worker {wid!r}: not an MTurk WorkerId")
        if not MTURK_ID.match(aid):
            errs.append(f"malformed AssignmentId {aid!r}")
        elif aid in seen_aid:
            errs.append(f"AssignmentId {aid} appears twice (line {seen_aid[aid]})")
        if not MTURK_ID.match(hid):
            errs.append(f"malformed HITId {hid!r}")
        if status not in STATUSES:
            errs.append(f"AssignmentStatus {status!r} is not one of {', '.join(sorted(STATUSES))}")
        try:
            seconds = float(row.get("WorkTimeInSeconds") or "")
            if not 0 <= seconds < 10 ** 7:
                raise ValueError
        except ValueError:
            errs.append(f"WorkTimeInSeconds {row.get('WorkTimeInSeconds')!r} is not a number of seconds")
            seconds = None
        answers = {k[len("Answer."):]: v or "" for k, v in row.items() if k and k.startswith("Answer.")}
        if hit is not None:
            if hit.hit_id and hid and hit.hit_id != hid:
                errs.append(f"item {key!r} was imported with HIT {hit.hit_id}, this row says {hid}")
            elif hid in hit_of and hit_of[hid] != key:
                errs.append(f"HIT {hid} has rows for items {hit_of[hid]!r} and {key!r}")
            hit_of.setdefault(hid, key)
            try:
                spec.clean(hit.item.payload, hit.order, answers, item=hit.item)
            except AnswerError as exc:
                errs.append(f"answer invalid: {exc}")
            pair = (wid, key)
            if pair in seen_pair:
                errs.append(f"worker {wid} answered item {key!r} twice (line {seen_pair[pair]})")
            seen_pair.setdefault(pair, line)
            local = Assignment.objects.filter(campaign=campaign, provider_ref=aid).select_related("worker", "item").first()
            if local is not None and (local.worker.external_id != wid or local.item_id != hit.item_id):
                errs.append(f"AssignmentId {aid} is already recorded for another worker or item")
            elif local is None and Assignment.objects.filter(
                item=hit.item, worker__provider=Campaign.MTURK, worker__external_id=wid
            ).exists():
                errs.append(f"worker {wid} already has another assignment of item {key!r}")
        seen_aid.setdefault(aid, line)
        report.errors += [[line, e] for e in errs]
        plan.append((hit, aid, wid, hid, status, answers, seconds))
    if report.errors or dry_run:
        if dry_run and not report.errors:
            for _, aid, *_ in plan:
                if Assignment.objects.filter(campaign=campaign, provider_ref=aid).exists():
                    report.unchanged += 1
                else:
                    report.imported += 1
        return _finish(campaign, report, save=not dry_run)
    try:
        with transaction.atomic():
            rec = Reconciliation()
            for hit, aid, wid, hid, status, answers, seconds in plan:
                if not hit.hit_id:
                    hit.hit_id, hit.status = hid, "imported"
                    hit.save(update_fields=["hit_id", "status"])
                before = len(rec.recorded)
                ingest(campaign, hit.item, rec, assignment_id=aid, worker_id=wid, status=status, answers=answers,
                       order=hit.order)
                if rec.invalid or rec.mismatched:
                    raise _Abort([[0, " ".join(map(str, x))] for x in rec.invalid + rec.mismatched])
                if len(rec.recorded) > before and seconds is not None:
                    Assignment.objects.filter(campaign=campaign, provider_ref=aid).update(work_seconds=seconds)
            report.imported, report.unchanged, report.status_changes = len(rec.recorded), rec.unchanged, len(rec.status_changes)
    except _Abort as exc:
        report.errors += exc.errors
        report.imported = report.unchanged = report.status_changes = 0
    return _finish(campaign, report)


class _Abort(Exception):
    def __init__(self, errors):
        self.errors = errors
        super().__init__(errors)


def _finish(campaign, report: ImportReport, save: bool = True) -> ImportReport:
    if save:
        MTurkSync.objects.create(campaign=campaign, source="csv", ok=report.ok, report=asdict(report) | {"ok": report.ok})
    return report

