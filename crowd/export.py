"""Long-format export of a campaign's answers: one row per rated unit (or per description), with
the worker, the value, timings, the presentation order and the template version, as CSV or JSONL.

Every submitted assignment is exported, including gold items, late and uncounted ones (the
``counted``, ``late``, ``gold`` and ``gold_correct`` columns say which are which), so nothing the
workers did is invisible. Unconfirmed provider claims (``Assignment.verified`` False: URL
parameters MTurk has not confirmed) are left out until the provider confirms them. CSV cells that are text starting with ``= + - @`` (or tab / CR) get a
leading apostrophe so spreadsheet programs do not run them as formulas (OWASP "CSV injection", see
:mod:`captioneval.utils.csvsafe`); plain numbers are left as they are.
"""
from __future__ import annotations

import io
import json

from captioneval.utils import csvsafe

from .kinds import get_kind
from .models import Assignment

COLUMNS = [
    "campaign", "kind", "item", "unit", "criterion", "worker", "value", "assignment", "state", "counted",
    "late", "gold", "gold_correct", "accepted_at", "submitted_at", "work_seconds", "order", "seed",
    "template_version",
]


def rows(campaign):
    """Export rows (dicts with :data:`COLUMNS`), ordered by item position then submission time."""
    spec = get_kind(campaign.kind)
    qs = (
        Assignment.objects.filter(campaign=campaign, state__in=Assignment.DONE_STATES, verified=True)
        .select_related("item", "worker").order_by("item__position", "submitted_at", "pk")
    )
    for a in qs:
        base = {
            "campaign": campaign.name, "kind": campaign.kind, "item": a.item.key, "worker": a.worker.rater_id,
            "assignment": a.pk, "state": a.state, "counted": a.counted, "late": a.late, "gold": a.item.is_gold,
            "gold_correct": a.gold_correct, "accepted_at": a.accepted_at.isoformat(),
            "submitted_at": a.submitted_at.isoformat() if a.submitted_at else None,
            "work_seconds": round(a.work_seconds, 3) if a.work_seconds is not None else None,
            "order": a.order, "seed": a.seed, "template_version": a.template_version,
        }
        units = spec.units(a.item.key, a.item.payload, a.answer)
        if not units:  # free text
            yield base | {"unit": a.item.key, "criterion": "description", "value": a.answer.get("text")}
        for u in units:
            yield base | {"unit": u.key, "criterion": u.criterion, "value": u.value}


def _cell(value):
    """A CSV cell before neutralising: lists and dicts become compact JSON, None becomes empty."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return "" if value is None else value


def to_csv(campaign) -> str:
    """The long-format export as CSV text (header :data:`COLUMNS`, one row per :func:`rows` entry;
    formula-like text neutralised by :mod:`captioneval.utils.csvsafe`)."""
    buf = io.StringIO()
    writer = csvsafe.writer(buf)
    writer.writerow(COLUMNS)
    for r in rows(campaign):
        writer.writerow([_cell(r[c]) for c in COLUMNS])
    return buf.getvalue()


def to_jsonl(campaign) -> str:
    return "".join(json.dumps({c: r[c] for c in COLUMNS}, ensure_ascii=False) + "\n" for r in rows(campaign))
