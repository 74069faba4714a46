"""Long-format export of a campaign's answers: one row per rated unit (or per description), with
the worker, the value, timings, the presentation order and the template version, as CSV or JSONL.

Every row also names what was rated (:data:`SUBJECT_COLUMNS`, after the older columns so that
readers of the older layout keep working): the image key, the system and the caption text, as
Label Studio, Turkle and Potato put a task's inputs on each annotation row (:func:`subjects`). The
aggregated CSV of the owner page carries the same three columns.

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
from .kinds.description import system_name
from .models import Assignment, Caption, Item, System

#: what each row says was rated (:func:`subjects`)
SUBJECT_COLUMNS = ["image_key", "system", "caption"]
COLUMNS = [
    "campaign", "kind", "item", "unit", "criterion", "worker", "value", "assignment", "state", "counted",
    "late", "gold", "gold_correct", "accepted_at", "submitted_at", "work_seconds", "order", "seed",
    "template_version", *SUBJECT_COLUMNS,
]
#: the columns of the aggregated CSV (``/campaigns/<name>/aggregate.csv``)
AGGREGATE_COLUMNS = ["unit", "criterion", "value", "method", *SUBJECT_COLUMNS]


def subjects(campaign) -> dict[str, dict]:
    """What each rated unit of ``campaign`` is: ``{unit key: {"image_key", "system", "caption"}}``
    for every item (gold items included), read from the items' frozen payloads in three queries
    (the items, the dataset's system names, and for forced choice the compared captions' systems).

    Per kind: *rating* the caption's image, system name and text (a gold item's system is None: its
    caption was taken from another image); *forced choice* the image, and the two compared captions
    (B then C, item order) as two-element lists of system names and texts; *diversity* one unit per
    caption set (``<item>/<set name>``), its system and its captions (a list of texts); *description*
    the image and the campaign's own system (``campaign-<name>``), no caption (the rater wrote it: the
    ``value``); *visual atom* the word as ``caption``, no image nor system."""
    names = dict(System.objects.filter(dataset_id=campaign.dataset_id).values_list("pk", "name"))
    items = list(Item.objects.filter(campaign=campaign).values_list("key", "payload"))
    out = {}
    if campaign.kind == "forced_choice":
        ids = {p[side][0] for _, p in items for side in ("b", "c") if p.get(side) and p[side][0] is not None}
        systems = dict(Caption.objects.filter(pk__in=ids).values_list("pk", "system_id"))
    for key, p in items:
        image_key = p.get("image_key")
        if campaign.kind == "rating":
            out[key] = {"image_key": image_key, "system": names.get(p.get("system")), "caption": p.get("text")}
        elif campaign.kind == "forced_choice":
            out[key] = {"image_key": image_key,
                        "system": [names.get(systems.get(p[s][0])) for s in ("b", "c")],
                        "caption": [p[s][1] for s in ("b", "c")]}
        elif campaign.kind == "diversity":
            for s in p.get("sets", []):
                out[f"{key}/{s['name']}"] = {"image_key": image_key, "system": names.get(s.get("system")),
                                             "caption": [text for _, text in s.get("captions", [])]}
        elif campaign.kind == "description":
            out[key] = {"image_key": image_key, "system": system_name(campaign), "caption": None}
        else:  # visual atoms and kinds added later: the word if there is one, the image if there is one
            out[key] = {"image_key": image_key, "system": names.get(p.get("system")),
                        "caption": p.get("text", p.get("word"))}
    return out


def rows(campaign):
    """Export rows (dicts with :data:`COLUMNS`), ordered by item position then submission time.
    A fixed number of queries whatever the campaign's size (the assignments with their item and
    worker, and :func:`subjects`)."""
    spec = get_kind(campaign.kind)
    rated = subjects(campaign)
    nothing = dict.fromkeys(SUBJECT_COLUMNS)
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
            yield base | rated.get(a.item.key, nothing) | {
                "unit": a.item.key, "criterion": "description", "value": a.answer.get("text")}
        for u in units:
            yield base | rated.get(u.key, nothing) | {"unit": u.key, "criterion": u.criterion, "value": u.value}


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


def aggregate_csv(campaign, aggregate: dict, method_label: str) -> str:
    """The aggregated answers ``{criterion: {unit: value}}`` (:func:`crowd.quality.aggregate`) as
    CSV with :data:`AGGREGATE_COLUMNS`, rows by criterion then unit, each naming what was rated
    (:func:`subjects`); formula-like text neutralised as in :func:`to_csv`."""
    rated = subjects(campaign)
    buf = io.StringIO()
    writer = csvsafe.writer(buf)
    writer.writerow(AGGREGATE_COLUMNS)
    for criterion, values in sorted(aggregate.items()):
        for unit, value in sorted(values.items(), key=lambda kv: str(kv[0])):
            subject = rated.get(str(unit), {})
            writer.writerow([unit, criterion, value, method_label,
                             *(_cell(subject.get(c)) for c in SUBJECT_COLUMNS)])
    return buf.getvalue()


def to_jsonl(campaign) -> str:
    """The long-format export as JSON Lines (one object with :data:`COLUMNS` per :func:`rows` entry)."""
    return "".join(json.dumps({c: r[c] for c in COLUMNS}, ensure_ascii=False) + "\n" for r in rows(campaign))
