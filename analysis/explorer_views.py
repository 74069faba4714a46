"""The example explorer's pages: a dataset's candidate captions with their human and metric scores,
filtered, sorted and paged (:mod:`analysis.explorer`), and the same rows as CSV.

GET parameters (all optional, validated; a bad one answers HTTP 400 with a one-line reason):
``q`` (text contained, case-insensitive), ``system`` (a system name), ``hmin`` / ``hmax`` (human
score range, inclusive), ``sort`` (a column id: image, system, text, human, n_human,
human:<criterion>, a metric key, or disagreement), ``order`` (asc | desc), ``disagree`` (a metric
key: adds the disagreement column and sorts by it, largest first), ``page`` (from 1, 50 rows a page).

The table is built once by a Celery task (a :class:`analysis.models.Report` of kind ``explorer``
under :func:`analysis.cached_reports.explorer_key`); while it is being built the page shows the
computing notice (with the previous table of the dataset, if any) and the CSV answers 202.
"""
from __future__ import annotations

import io
from urllib.parse import urlencode

from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.html import escape
from django.views.decorators.http import require_GET

from crowd.models import Dataset, Image
from captioneval.utils import csvsafe

from . import cached_reports, explorer
from .models import Report
from .tasks import computing_context, request_report
from .views import not_ready


def _bad(dataset, message: str) -> HttpResponse:
    return HttpResponse(
        f"<!doctype html><title>Bad request</title><h1>Bad request</h1><p id='problem'>{escape(message)}</p>"
        f"<p><a href='?'>the explorer of {escape(dataset.name)} without parameters</a></p>",
        status=400, content_type="text/html; charset=utf-8")


def _payload_of(pk: int):
    return lambda: Report.objects.filter(pk=pk).values_list("payload", flat=True).get()


def _table(dataset):
    """(table or None, computing context or None, the current report row, stale?). Reads the stored
    table of the dataset's current key (queued if new); while it is not done, the newest done table
    of the dataset (stale) if there is one."""
    key, params = cached_reports.explorer_key(dataset)
    done = Report.objects.filter(key=key, status=Report.DONE).values_list("pk", flat=True).first()
    if done is not None:  # the common case: no payload transfer once this process has parsed it
        return explorer.table_for(key, _payload_of(done)), None, None, False
    row = request_report(Report.EXPLORER, key, params, dataset=dataset)
    if row.status == Report.DONE:
        return explorer.table_for(key, lambda: row.payload), None, row, False
    previous = (Report.objects.filter(kind=Report.EXPLORER, dataset=dataset, status=Report.DONE)
                .order_by("-finished_at").values_list("pk", "key").first())
    stale = explorer.table_for(previous[1], _payload_of(previous[0])) if previous else None
    prev_row = Report.objects.filter(pk=previous[0]).only("started_at", "finished_at").first() if previous else None
    return stale, computing_context(row, prev_row), row, stale is not None


def _url(q: explorer.Query, **changes) -> str:
    return "?" + urlencode(q.params(**changes))


#: columns shown first, before any other: the image (a thumbnail), the caption and its human score
FRONT = ("image", "text", "human")


def column_order(columns: list[dict], q: explorer.Query) -> list[dict]:
    """``columns`` (:meth:`analysis.explorer.Table.columns`, plus the disagreement column when
    ``q.disagree`` names a metric) in the order the page shows them: :data:`FRONT`, then the metric
    of the disagreement and the disagreement itself, then the sorted column, then the rest in their
    own order. So what the page is sorted by stays in view next to the caption on a desktop and
    within the first swipe of the table on a phone, however many metrics there are."""
    by_id = {c["id"]: c for c in columns}
    first = [*FRONT]
    if q.disagree:
        first += [q.disagree, "disagreement"]
    if q.sort:
        first.append(q.sort)
    seen, out = set(), []
    for cid in first + [c["id"] for c in columns]:
        if cid in by_id and cid not in seen:
            seen.add(cid)
            out.append(by_id[cid])
    return out


def row_cells(table, values: dict, order: list[dict]) -> list[dict]:
    """The cells of one row (:func:`analysis.explorer.row_values`) in the page's column ``order``:
    [{"id", "kind", "value"}]."""
    by_id = {"image": values["image"], "system": values["system"], "text": values["text"], "human": values["human"],
             "n_human": values["n_human"], "disagreement": values["disagreement"]}
    by_id.update({f"human:{c}": v for c, v in zip(table.further, values["further"])})
    by_id.update({m["key"]: v for m, v in zip(table.metrics, values["metrics"])})
    return [{"id": c["id"], "kind": c["kind"], "value": by_id.get(c["id"], "")} for c in order]


def thumbnails(dataset, keys) -> dict[str, str]:
    """{image key: picture URL} of the given keys of ``dataset`` (one query), from the dataset's
    image source (:func:`crowd.images.image_url`); keys without a picture are left out, and so is a
    URL that is neither http(s) nor a path on this site (the stored value is data: never a
    ``javascript:`` link)."""
    try:
        from crowd.images import image_url
    except ImportError:  # an installation without image sources
        return {}
    out = {}
    for image in Image.objects.filter(dataset=dataset, key__in=list(keys)).select_related("dataset"):
        url = image_url(image)
        if url and url.lower().startswith(("http://", "https://", "/")) and not url.startswith("//"):
            out[image.key] = url
    return out


@require_GET
def explorer_page(request, name):
    """The explorer page of dataset ``name`` (module docstring for the parameters)."""
    dataset = get_object_or_404(Dataset, name=name)
    try:
        q = explorer.parse_query(request.GET)
    except explorer.ExplorerError as exc:
        return _bad(dataset, str(exc))
    table, computing, _, stale = _table(dataset)
    context = {"dataset": dataset, "computing": computing, "stale": stale, "q": q, "table": table,
               "page_size": explorer.PAGE_SIZE}
    if table is not None:
        try:
            result = explorer.query(table, q)
        except explorer.ExplorerError as exc:
            return _bad(dataset, str(exc))
        columns = table.columns()
        for c in columns:
            active = q.sort == c["id"]
            next_order = "desc" if (not active or q.order == "asc") else "asc"
            c["href"] = _url(q, sort=c["id"], order=next_order, page=1)
            c["sorted"] = q.order if active else ""
        first = (result.page - 1) * explorer.PAGE_SIZE
        shown = columns
        if q.disagree:
            shown = columns + [{"id": "disagreement", "kind": "disagreement", "sorted": q.order if q.sort == "disagreement" else "",
                                "label": "disagreement (" + next((m["name"] for m in table.metrics if m["key"] == q.disagree), "") + ")",
                                "href": _url(q, sort="disagreement", page=1,
                                             order="asc" if q.sort == "disagreement" and q.order == "desc" else "desc")}]
        order = column_order(shown, q)
        values = [explorer.row_values(table, int(i), result.disagreement) for i in result.indices]
        pictures = thumbnails(dataset, {v["image"] for v in values})
        rows = [dict(v, cells=row_cells(table, v, order), thumbnail=pictures.get(v["image"])) for v in values]
        context.update({
            "columns": order, "metric_columns": [c for c in columns if c["kind"] == "metric"],
            "further": table.further, "metrics": table.metrics, "systems": table.systems,
            "rows": rows,
            "total": result.total, "n_rows": table.n, "page": result.page, "pages": result.pages,
            "first": first + 1 if result.total else 0, "last": first + len(result.indices),
            "prev_url": _url(q, page=result.page - 1) if result.page > 1 else "",
            "next_url": _url(q, page=result.page + 1) if result.page < result.pages else "",
            "csv_url": "?" + urlencode(q.params(page=1)),
            "disagree_name": next((m["name"] for m in table.metrics if m["key"] == q.disagree), ""),
            "disagreement_href": _url(q, sort="disagreement", order="asc" if q.sort == "disagreement" and q.order == "desc" else "desc", page=1),
            "human_label": table.human_label, "human_unit": table.human_unit, "forced": table.task == Dataset.TASK_FORCED_CHOICE,
        })
    elif computing is None:
        context["problem"] = "the example table could not be read"
    return render(request, "analysis/explorer.html", context)


@require_GET
def explorer_csv(request, name):
    """Every row matching the filters (all pages), sorted, as CSV (:func:`analysis.explorer.csv_row`;
    text cells neutralised by :mod:`captioneval.utils.csvsafe`). 400 for bad parameters, 202 while the table
    is being built."""
    dataset = get_object_or_404(Dataset, name=name)
    try:
        q = explorer.parse_query(request.GET)
        q.page = 1
    except explorer.ExplorerError as exc:
        return HttpResponse(str(exc) + "\n", status=400, content_type="text/plain; charset=utf-8")
    table, computing, row, stale = _table(dataset)
    if table is None or stale:
        if row is None:
            return HttpResponse("the example table could not be read\n", status=500, content_type="text/plain")
        return not_ready(row, "example table", as_json=False)
    try:
        rows = explorer.select(table, q)
        disagreement = table.disagreement(q.disagree) if q.disagree else None
    except explorer.ExplorerError as exc:
        return HttpResponse(str(exc) + "\n", status=400, content_type="text/plain; charset=utf-8")
    out = io.StringIO()
    csvsafe.writer(out).writerow(explorer.csv_header(table, q.disagree))
    out.write(explorer.csv_text(table, rows, disagreement))  # the rows as csv.writer writes them, cells neutralised
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{dataset.name}-examples.csv"'
    return response
