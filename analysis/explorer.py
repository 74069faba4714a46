"""The example explorer: one row per candidate caption of a dataset with its human score(s) and every
metric's score, filtered, sorted and paged per request.

Building the table reads every candidate caption, judgment and metric score of the dataset (tens of
thousands of rows on Flickr8k-CrowdFlower), so it is done once by a Celery task
(:func:`build_table`, stored as an :class:`analysis.models.Report` of kind ``explorer`` under
:func:`analysis.cached_reports.explorer_key`); a request parses the stored columns once per process
(:func:`table_for`, kept in memory under the report's key) and filters and sorts them with numpy
(:func:`query`), in milliseconds.

Columns (ids used in the ``sort`` and ``disagree`` parameters):

* ``image`` (image key), ``system`` (system name), ``text`` (caption text);
* ``human``: the caption's human score on the dataset's main criterion: the mean of its imported
  ratings (rating benchmarks), or, on a forced-choice benchmark (PASCAL-50S), the share of the votes
  cast on the pairs the caption is in that went to it, in percent; ``n_human``: the number of
  ratings (votes) behind it; ``human:<criterion>``: the mean rating on each further criterion
  (THumB: precision, recall);
* one column per metric with a complete current run (:func:`analysis.reports.completed_runs`,
  uploads included), keyed by the metric key; shown x100 when the metric's range is [0, 1] (as the
  report tables show correlations), as stored otherwise (CIDEr-D, 0-10);
* ``disagreement`` (only with ``disagree=<metric>``): how differently people and the metric rank the
  caption. With pct(v) = 100 * (r(v) - 1) / (n - 1), r the average rank (ties share the mean rank)
  of v among the n captions that have both a human score and a score of the metric (pct = 50 when
  n = 1), the value is pct(metric) - pct(human), in percentile points (-100..100; > 0: the metric
  ranks the caption higher than people do). Metrics where lower is better are negated first, so
  "higher" always means "better". The mode sorts by its absolute value, largest first. Captions
  without both scores have no value and come last.

Only imported judgments count (``campaign`` empty), as in the correlation and benchmark reports;
the systems of unpublished campaigns (:func:`crowd.privacy.private_system_ids`) are left out.
"""
from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field

import numpy as np

from crowd import privacy
from crowd.models import Caption, Dataset, HumanJudgment, PairwiseJudgment
from metrics import uploads
from metrics.models import MetricScore
from captioneval.metrics.registry import METRICS

from .reports import ReportError, completed_runs, metric_name, protocol

#: version of the stored table: bump when its fields or numbers change
VERSION = "explorer/2"
PAGE_SIZE = 50
MAX_QUERY_CHARS = 200
#: columns every table has, in display order (metric columns follow)
BASE_COLUMNS = ("image", "system", "text", "human", "n_human")


class ExplorerError(ValueError):
    """A request parameter is not valid for this table; the message says which and why."""


# --- building (Celery) --------------------------------------------------------------------------------


def _float_list(values) -> list:
    """Floats with NaN/inf as None (JSON null)."""
    return [None if (v is None or not math.isfinite(v)) else float(v) for v in values]


def _mean_scores(dataset, caption_index: dict, criterion: str) -> tuple[np.ndarray, np.ndarray]:
    """(mean score (n,), count (n,)) of the imported ratings on ``criterion`` per caption of the table."""
    n = len(caption_index)
    total, count = np.zeros(n), np.zeros(n)
    rows = HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True, caption__isnull=False,
                                        criterion=criterion).values_list("caption_id", "score")
    for caption_id, score in rows.iterator(chunk_size=20000):
        i = caption_index.get(caption_id)
        if i is not None:
            total[i] += score
            count[i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan), count


def _vote_shares(dataset, caption_index: dict) -> tuple[np.ndarray, np.ndarray]:
    """(percent of the votes won (n,), votes cast (n,)) per caption over the imported forced-choice
    votes (PairwiseJudgment rows without a campaign) of the pairs it is in."""
    n = len(caption_index)
    won, cast = np.zeros(n), np.zeros(n)
    rows = PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset, campaign__isnull=True).values_list(
        "caption_b_id", "caption_c_id", "choice")
    for b, c, choice in rows.iterator(chunk_size=20000):
        for caption_id, mine in ((b, PairwiseJudgment.B), (c, PairwiseJudgment.C)):
            i = caption_index.get(caption_id)
            if i is not None:
                cast[i] += 1
                won[i] += choice == mine
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cast > 0, 100.0 * won / np.maximum(cast, 1), np.nan), cast


def metric_scale(key: str) -> float:
    """100 for a metric whose range is [0, 1] (shown x100, as the report tables), else 1."""
    spec = METRICS.get(key)
    return 100.0 if spec is not None and tuple(spec.range) == (0.0, 1.0) else 1.0


def build_table(dataset: Dataset) -> dict:
    """The explorer table of ``dataset`` as a JSON-serialisable dict (stored by the Celery task)::

        {"version", "dataset", "task": "rating" | "forced_choice", "criterion",
         "human": {"label", "unit", "criteria": [further criteria]},
         "systems": [names], "rows": n,
         "columns": {"caption": [id], "image": [key], "system": [index into systems], "text": [str],
                     "human": [float | null], "n_human": [int], "human:<criterion>": [float | null]},
         "metrics": [{"key", "name", "scale": 100 | 1, "sign": 1 | -1, "values": [float | null]}]}

    Rows are the candidate captions (not the reference system's) of public systems, ordered by
    image key, system name and caption key. Metric values are as stored (not x100, not negated).
    A dataset without any complete metric run has an empty ``metrics`` list.
    """
    proto = protocol(dataset)
    private = privacy.private_system_ids(dataset)
    captions = list(dataset.candidates().exclude(system_id__in=private)
                    .order_by("image__key", "system__name", "key")
                    .values_list("pk", "image__key", "system__name", "text"))
    systems = sorted({c[2] for c in captions})
    system_index = {name: i for i, name in enumerate(systems)}
    caption_index = {c[0]: i for i, c in enumerate(captions)}
    columns = {
        "caption": [c[0] for c in captions], "image": [c[1] for c in captions],
        "system": [system_index[c[2]] for c in captions], "text": [c[3] for c in captions],
    }
    forced = proto["task"] == Dataset.TASK_FORCED_CHOICE
    criterion = None if forced else (dataset.criterion or None)
    further = []
    if forced:
        human, n_human = _vote_shares(dataset, caption_index)
        label, unit = "votes won (%)", "percent of the forced-choice votes on its pairs"
    else:
        criteria = [c for c in (proto.get("criteria") or []) if c]
        if criterion is None:
            known = sorted(set(HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True,
                                                            caption__isnull=False)
                               .order_by().values_list("criterion", flat=True).distinct()))
            criterion = (criteria or known or [None])[0]
        human, n_human = _mean_scores(dataset, caption_index, criterion) if criterion else (
            np.full(len(captions), np.nan), np.zeros(len(captions)))
        label = criterion if criterion and "human" in criterion else f"human {criterion or 'score'}"
        unit = f"mean of the imported ratings ({criterion})" if criterion else "mean of the imported ratings"
        for c in criteria:
            if c != criterion:
                columns[f"human:{c}"] = _float_list(_mean_scores(dataset, caption_index, c)[0])
                further.append(c)
    columns["human"] = _float_list(human)
    columns["n_human"] = [int(v) for v in n_human]
    try:
        runs = completed_runs(dataset)
    except ReportError:
        runs = {}
    metrics = []
    for key, run in runs.items():
        values = np.full(len(captions), np.nan)
        for caption_id, value in MetricScore.objects.filter(run=run).values_list("caption_id", "value").iterator(chunk_size=20000):
            i = caption_index.get(caption_id)
            if i is not None:
                values[i] = value
        metrics.append({"key": key, "name": metric_name(key, run), "scale": metric_scale(key),
                        "sign": int(uploads.metric_sign(key, run)), "values": _float_list(values)})
    return {
        "version": VERSION, "dataset": dataset.name, "task": proto["task"], "criterion": criterion,
        "human": {"label": label, "unit": unit, "criteria": further},
        "systems": systems, "rows": len(captions), "columns": columns, "metrics": metrics,
    }


# --- reading (per request) ----------------------------------------------------------------------------


def percentile_ranks(values: np.ndarray) -> np.ndarray:
    """pct(v) = 100 * (r - 1) / (n - 1) with r the average rank of v among the finite entries
    (ties share their mean rank), 50 when n = 1; NaN where ``values`` is not finite. (n,) -> (n,)."""
    from scipy.stats import rankdata

    out = np.full(len(values), np.nan)
    ok = np.isfinite(values)
    n = int(ok.sum())
    if n == 1:
        out[ok] = 50.0
    elif n > 1:
        out[ok] = 100.0 * (rankdata(values[ok], method="average") - 1.0) / (n - 1.0)
    return out


@dataclass
class Table:
    """A stored explorer table as numpy columns (see :func:`build_table` for the fields)."""

    key: str
    dataset: str
    task: str
    criterion: str | None
    human_label: str
    human_unit: str
    systems: list
    caption: np.ndarray  # (n,) int64 caption ids
    image: np.ndarray  # (n,) object: image keys
    system: np.ndarray  # (n,) int32 index into systems
    text: np.ndarray  # (n,) object
    lower: list  # (n,) lower-cased texts for the text filter
    numeric: dict  # column id -> (n,) float64 (human, n_human, human:<c>, metric keys: stored values)
    metrics: list  # [{"key", "name", "scale", "sign"}] in table order
    further: list  # further criteria
    _codes: dict = field(default_factory=dict)
    _disagreement: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.caption)

    def columns(self) -> list[dict]:
        """Displayed columns in order: [{"id", "label", "kind": "text" | "number" | "metric"}]."""
        cols = [{"id": "image", "label": "image", "kind": "text"}, {"id": "system", "label": "system", "kind": "text"},
                {"id": "text", "label": "caption", "kind": "text"}, {"id": "human", "label": self.human_label, "kind": "number"},
                {"id": "n_human", "label": "votes" if self.task == Dataset.TASK_FORCED_CHOICE else "ratings", "kind": "number"}]
        cols += [{"id": f"human:{c}", "label": c, "kind": "number"} for c in self.further]
        cols += [{"id": m["key"], "label": m["name"] + (" x100" if m["scale"] == 100 else ""), "kind": "metric"}
                 for m in self.metrics]
        return cols

    def sort_key(self, column: str) -> np.ndarray:
        """(n,) float64 to sort ``column`` by (strings: their lexicographic rank)."""
        if column in self.numeric:
            return self.numeric[column]
        if column == "disagreement":
            raise ExplorerError("sorting by disagreement needs disagree=<metric>")
        if column not in ("image", "system", "text"):
            raise ExplorerError(f"unknown column {column!r}; columns: {', '.join(c['id'] for c in self.columns())}")
        if column not in self._codes:
            if column == "system":  # systems are sorted by name already: the index is the rank
                self._codes[column] = self.system.astype(float)
            else:  # rank of each string, equal strings sharing one (so ties keep the table order)
                values = self.image if column == "image" else self.text
                order = sorted(range(self.n), key=values.__getitem__)
                codes = np.empty(self.n)
                rank, previous = -1, None
                for i in order:
                    if rank < 0 or values[i] != previous:
                        rank, previous = rank + 1, values[i]
                    codes[i] = rank
                self._codes[column] = codes
        return self._codes[column]

    def disagreement(self, metric: str) -> np.ndarray:
        """(n,) pct(sign * metric) - pct(human) over the captions with both scores (module docstring)."""
        if metric not in {m["key"] for m in self.metrics}:
            raise ExplorerError(f"unknown metric {metric!r}; metrics of this dataset: "
                                f"{', '.join(m['key'] for m in self.metrics) or 'none computed'}")
        if metric not in self._disagreement:
            sign = next(m["sign"] for m in self.metrics if m["key"] == metric)
            x, h = sign * self.numeric[metric], self.numeric["human"]
            both = np.isfinite(x) & np.isfinite(h)
            out = np.full(self.n, np.nan)
            out[both] = percentile_ranks(x[both]) - percentile_ranks(h[both])
            self._disagreement[metric] = out
        return self._disagreement[metric]


def table_from_payload(key: str, data: dict) -> Table:
    """A :class:`Table` from a stored :func:`build_table` payload."""
    cols = data["columns"]
    numeric = {"human": np.array(cols["human"], dtype=float), "n_human": np.array(cols["n_human"], dtype=float)}
    for c in data["human"]["criteria"]:
        numeric[f"human:{c}"] = np.array(cols[f"human:{c}"], dtype=float)
    for m in data["metrics"]:
        numeric[m["key"]] = np.array(m["values"], dtype=float)
    text = np.array(cols["text"], dtype=object)
    return Table(
        key=key, dataset=data["dataset"], task=data["task"], criterion=data["criterion"],
        human_label=data["human"]["label"], human_unit=data["human"]["unit"], systems=data["systems"],
        caption=np.array(cols["caption"], dtype=np.int64), image=np.array(cols["image"], dtype=object),
        system=np.array(cols["system"], dtype=np.int32), text=text, lower=[t.lower() for t in cols["text"]],
        numeric=numeric, metrics=[{k: m[k] for k in ("key", "name", "scale", "sign")} for m in data["metrics"]],
        further=list(data["human"]["criteria"]),
    )


_TABLES: dict[str, Table] = {}
_LOCK = threading.Lock()
#: parsed tables kept per process (one per dataset state)
MAX_TABLES = 6


def table_for(key: str, payload_text) -> Table | None:
    """The parsed table of the stored report ``key``, from this process's memory or, the first
    time, from ``payload_text()`` (a callable returning the report's JSON text). None when the
    payload is a stored problem."""
    with _LOCK:
        table = _TABLES.get(key)
    if table is not None:
        return table
    data = json.loads(payload_text())
    if set(data) == {"problem"}:
        return None
    table = table_from_payload(key, data)
    with _LOCK:
        if len(_TABLES) >= MAX_TABLES:
            _TABLES.pop(next(iter(_TABLES)))
        _TABLES[key] = table
    return table


@dataclass
class Query:
    """A validated explorer request (see :func:`parse_query`)."""

    q: str = ""
    system: str = ""
    hmin: float | None = None
    hmax: float | None = None
    sort: str = ""
    order: str = "asc"
    disagree: str = ""
    page: int = 1

    def params(self, **changes) -> dict:
        """The GET parameters of this query (defaults left out), with ``changes`` applied."""
        values = {"q": self.q, "system": self.system, "hmin": self.hmin, "hmax": self.hmax, "sort": self.sort,
                  "order": self.order, "disagree": self.disagree, "page": self.page, **changes}
        defaults = {"order": "asc", "page": 1}
        return {k: ("" if v is None else v) for k, v in values.items()
                if v not in (None, "") and defaults.get(k) != v}


def _number(params, name: str) -> float | None:
    raw = (params.get(name) or "").strip()
    if raw == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ExplorerError(f"{name} must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise ExplorerError(f"{name} must be a finite number, got {raw[:40]!r}")
    return value


KNOWN_PARAMS = ("q", "system", "hmin", "hmax", "sort", "order", "disagree", "page")


def parse_query(params) -> Query:
    """A :class:`Query` from GET ``params`` (a QueryDict or dict), checked for form only (columns and
    systems are checked against the table by :func:`query`): ``q`` text contained (case-insensitive,
    at most 200 characters), ``system`` a system name, ``hmin``/``hmax`` finite numbers (human score
    range, inclusive, in the units of the human column), ``sort`` a column id, ``order`` asc|desc,
    ``disagree`` a metric key, ``page`` an integer >= 1. Raises ExplorerError."""
    unknown = sorted(set(params) - set(KNOWN_PARAMS))
    if unknown:
        raise ExplorerError(f"unknown parameter {unknown[0][:40]!r}; parameters: {', '.join(KNOWN_PARAMS)}")
    q = params.get("q") or ""
    if len(q) > MAX_QUERY_CHARS:
        raise ExplorerError(f"q must be at most {MAX_QUERY_CHARS} characters")
    order = params.get("order") or ""
    disagree = (params.get("disagree") or "").strip()
    if order not in ("", "asc", "desc"):
        raise ExplorerError(f"order must be asc or desc, got {order[:40]!r}")
    raw_page = (params.get("page") or "1").strip()
    if not re.fullmatch(r"[0-9]{1,9}", raw_page) or int(raw_page) < 1:
        raise ExplorerError(f"page must be a whole number from 1, got {raw_page[:40]!r}")
    hmin, hmax = _number(params, "hmin"), _number(params, "hmax")
    if hmin is not None and hmax is not None and hmin > hmax:
        raise ExplorerError(f"hmin ({hmin:g}) is above hmax ({hmax:g})")
    sort = (params.get("sort") or "").strip() or ("disagreement" if disagree else "")
    return Query(q=q.strip(), system=(params.get("system") or "").strip(), hmin=hmin, hmax=hmax, sort=sort,
                 order=order or ("desc" if sort == "disagreement" else "asc"), disagree=disagree, page=int(raw_page))


@dataclass
class Result:
    """Rows of one page: ``indices`` (into the table), ``total`` matching rows, ``page``, ``pages``,
    ``disagreement`` (n,) or None."""

    indices: np.ndarray
    total: int
    page: int
    pages: int
    disagreement: np.ndarray | None


def select(table: Table, query: Query) -> np.ndarray:
    """Indices of every row matching ``query``'s filters, in its sort order (ties and the default:
    table order = image key, system, caption key). Values that are missing (NaN) come last in both
    directions; ``disagreement`` sorts by its absolute value. Raises ExplorerError for an unknown
    system, column or metric."""
    mask = np.ones(table.n, dtype=bool)
    if query.system:
        if query.system not in table.systems:
            raise ExplorerError(f"unknown system {query.system[:60]!r}; systems: {', '.join(table.systems)}")
        mask &= table.system == table.systems.index(query.system)
    if query.q:
        needle = query.q.lower()
        mask &= np.fromiter((needle in t for t in table.lower), dtype=bool, count=table.n)
    human = table.numeric["human"]
    with np.errstate(invalid="ignore"):
        if query.hmin is not None:
            mask &= human >= query.hmin
        if query.hmax is not None:
            mask &= human <= query.hmax
    disagreement = table.disagreement(query.disagree) if query.disagree else None
    rows = np.flatnonzero(mask)
    if not query.sort:
        return rows
    if query.sort == "disagreement":
        if disagreement is None:
            raise ExplorerError("sorting by disagreement needs disagree=<metric>")
        key = np.abs(disagreement)[rows]
    else:
        key = table.sort_key(query.sort)[rows]
    missing = np.isnan(key)
    present = rows[~missing]
    values = key[~missing]
    order = np.argsort(-values if query.order == "desc" else values, kind="stable")
    return np.concatenate([present[order], rows[missing]])


def query(table: Table, q: Query, page_size: int = PAGE_SIZE) -> Result:
    """One page of :func:`select`: ExplorerError for a page past the last one."""
    rows = select(table, q)
    pages = max(1, -(-len(rows) // page_size))
    if q.page > pages:
        raise ExplorerError(f"page {q.page} is past the last page ({pages})")
    start = (q.page - 1) * page_size
    return Result(rows[start:start + page_size], int(len(rows)), q.page, pages,
                  table.disagreement(q.disagree) if q.disagree else None)


def fmt(value: float, scale: float = 1.0, digits: int | None = None) -> str:
    """A score for display: x ``scale``, one decimal when scaled x100, else three; "" when missing."""
    if value is None or not math.isfinite(value):
        return ""
    digits = digits if digits is not None else (1 if scale == 100 else 3)
    return f"{value * scale:.{digits}f}"


def row_values(table: Table, i: int, disagreement: np.ndarray | None = None) -> dict:
    """Display values of row ``i``: {"caption", "image", "system", "text", "human", "n_human",
    "further": [str], "metrics": [str], "disagreement": str | None}."""
    forced = table.task == Dataset.TASK_FORCED_CHOICE
    return {
        "caption": int(table.caption[i]), "image": table.image[i], "system": table.systems[table.system[i]],
        "text": table.text[i], "human": fmt(table.numeric["human"][i], digits=1 if forced else 2),
        "n_human": int(table.numeric["n_human"][i]),
        "further": [fmt(table.numeric[f"human:{c}"][i], digits=2) for c in table.further],
        "metrics": [fmt(table.numeric[m["key"]][i], m["scale"]) for m in table.metrics],
        "disagreement": None if disagreement is None else (
            "" if not math.isfinite(disagreement[i]) else f"{disagreement[i]:+.1f}"),
    }


def csv_header(table: Table, disagree: str = "") -> list[str]:
    """Header of the CSV download: ids as in the page, metric columns with "(x100)" where scaled."""
    head = ["caption_id", "image", "system", "text", "human", "n_human"] + [f"human:{c}" for c in table.further]
    head += [m["key"] + (" (x100)" if m["scale"] == 100 else "") for m in table.metrics]
    return head + ([f"disagreement:{disagree}"] if disagree else [])


def csv_row(table: Table, i: int, disagreement: np.ndarray | None = None) -> list:
    """One CSV row (numbers unrounded except the x100 scaling; "" when missing)."""
    def num(v, scale=1.0):
        return "" if not math.isfinite(v) else float(v) * scale
    row = [int(table.caption[i]), table.image[i], table.systems[table.system[i]], table.text[i],
           num(table.numeric["human"][i]), int(table.numeric["n_human"][i])]
    row += [num(table.numeric[f"human:{c}"][i]) for c in table.further]
    row += [num(table.numeric[m["key"]][i], m["scale"]) for m in table.metrics]
    if disagreement is not None:
        row.append(num(disagreement[i]))
    return row


def csv_rows(table: Table, rows, disagreement: np.ndarray | None = None) -> list[tuple]:
    """The CSV rows of ``rows`` (indices into the table, in order): the same cells as :func:`csv_row`
    row by row, built column by column with numpy (47,830 rows of Flickr8k-CrowdFlower in a few tenths
    of a second instead of a second). Text cells are already :func:`captioneval.utils.csvsafe.neutralise` d,
    so a plain ``csv.writer`` (excel dialect) writes exactly what :class:`~captioneval.utils.csvsafe.SafeWriter`
    writes for :func:`csv_row`'s rows (``tests/test_explorer.py`` compares them)."""
    from captioneval.utils.csvsafe import neutralise

    idx = np.asarray(rows, dtype=np.int64)

    def num(values: np.ndarray, scale: float = 1.0) -> list:
        picked = values[idx]
        out = (picked * scale if scale != 1.0 else picked).tolist()
        for p in np.flatnonzero(~np.isfinite(picked)).tolist():
            out[p] = ""
        return out

    names = [neutralise(n) for n in table.systems]
    cols = [table.caption[idx].tolist(), [neutralise(k) for k in table.image[idx]],
            [names[k] for k in table.system[idx].tolist()], [neutralise(t) for t in table.text[idx]],
            num(table.numeric["human"]), table.numeric["n_human"][idx].astype(np.int64).tolist()]
    cols += [num(table.numeric[f"human:{c}"]) for c in table.further]
    cols += [num(table.numeric[m["key"]], m["scale"]) for m in table.metrics]
    if disagreement is not None:
        cols.append(num(disagreement))
    return list(zip(*cols))


def _csv_cell(text: str) -> str:
    """``text`` as ``csv.writer`` (excel dialect, QUOTE_MINIMAL) writes it: quoted, with doubled
    quotes, when it holds a comma, a quote, CR or LF."""
    if "," in text or '"' in text or "\r" in text or "\n" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_text(table: Table, rows, disagreement: np.ndarray | None = None) -> str:
    """The body of the CSV download (every row of ``rows`` after the header): exactly the text that
    ``csv.writer(out).writerows(csv_rows(table, rows, disagreement))`` writes (excel dialect: CRLF
    line ends, minimal quoting; numbers as ``str``), built column by column and joined once, which
    takes a quarter of the csv module's time on Flickr8k-CrowdFlower's 47,830 rows
    (``tests/test_explorer.py`` compares the two byte for byte)."""
    from captioneval.utils.csvsafe import neutralise

    idx = np.asarray(rows, dtype=np.int64)
    if idx.size == 0:
        return ""

    def num(values: np.ndarray, scale: float = 1.0) -> list[str]:
        picked = values[idx]
        out = [str(v) for v in (picked * scale if scale != 1.0 else picked).tolist()]
        for p in np.flatnonzero(~np.isfinite(picked)).tolist():
            out[p] = ""
        return out

    def text(values) -> list[str]:
        return [_csv_cell(neutralise(v)) for v in values]

    names = text(table.systems)
    cols = [[str(v) for v in table.caption[idx].tolist()], text(table.image[idx]),
            [names[k] for k in table.system[idx].tolist()], text(table.text[idx]),
            num(table.numeric["human"]), [str(v) for v in table.numeric["n_human"][idx].astype(np.int64).tolist()]]
    cols += [num(table.numeric[f"human:{c}"]) for c in table.further]
    cols += [num(table.numeric[m["key"]], m["scale"]) for m in table.metrics]
    if disagreement is not None:
        cols.append(num(disagreement))
    return "\r\n".join(map(",".join, zip(*cols))) + "\r\n"


def caption_count(dataset: Dataset) -> list:
    """(count, max id) of the dataset's captions: part of the table's key (captions added by a
    campaign, a re-import)."""
    from django.db.models import Count, Max

    agg = Caption.objects.filter(system__dataset=dataset).aggregate(n=Count("pk"), top=Max("pk"))  # the smaller join
    return [agg["n"], agg["top"]]


# --- the image page -----------------------------------------------------------------------------------


def image_captions(dataset: Dataset, image) -> dict:
    """Every public caption of ``image`` with its public human judgments and its metric scores, for
    the image page (a few queries on one image's rows; nothing is computed)::

        {"metrics": [{"key", "name", "x100": bool}],
         "captions": [{"id", "system", "is_reference", "key", "text",
                       "ratings": [{"criterion", "source", "scores": [str ("%g")], "mean": float}],
                       "votes": {"won", "cast", "percent"} | None, "metrics": [str]}]}

    Public judgments: the imported ones and those of campaigns whose results are published
    (:mod:`crowd.privacy`); the captions of unpublished campaigns' systems are left out. ``source``
    is "imported" or "campaign <name>". Metric scores are those of the current complete runs
    (:func:`analysis.reports.completed_runs`), formatted as in the explorer (x100 for 0-1 metrics).
    Captions are ordered candidates first (by system name, key), then references.
    """
    from django.db.models import Q

    private = privacy.private_system_ids(dataset)
    rows = list(Caption.objects.filter(image=image).exclude(system_id__in=private)
                .values_list("pk", "system__name", "system_id", "key", "text"))
    rows.sort(key=lambda r: (r[2] == dataset.reference_system_id, r[1], r[3]))
    ids = [r[0] for r in rows]
    id_set = set(ids)
    public = Q(campaign__isnull=True) | Q(campaign__results_published_at__isnull=False)
    ratings: dict[int, dict] = {}
    for caption_id, criterion, score, campaign in (
            HumanJudgment.objects.filter(public, caption_id__in=ids)
            .order_by("criterion", "campaign__name", "rater").values_list("caption_id", "criterion", "score", "campaign__name")):
        source = f"campaign {campaign}" if campaign else "imported"
        ratings.setdefault(caption_id, {}).setdefault((criterion, source), []).append(score)
    votes: dict[int, list] = {}
    for b, c, choice in PairwiseJudgment.objects.filter(public).filter(Q(caption_b_id__in=ids) | Q(caption_c_id__in=ids)) \
            .values_list("caption_b_id", "caption_c_id", "choice"):
        for caption_id, mine in ((b, PairwiseJudgment.B), (c, PairwiseJudgment.C)):
            if caption_id in id_set:
                entry = votes.setdefault(caption_id, [0, 0])
                entry[1] += 1
                entry[0] += choice == mine
    try:
        runs = completed_runs(dataset)
    except ReportError:
        runs = {}
    scores: dict[tuple[str, int], float] = {}
    run_keys = {run.pk: key for key, run in runs.items()}
    for run_id, caption_id, value in MetricScore.objects.filter(run_id__in=list(run_keys), caption_id__in=ids) \
            .values_list("run_id", "caption_id", "value"):
        scores[(run_keys[run_id], caption_id)] = value
    metrics = [{"key": k, "name": metric_name(k, r), "x100": metric_scale(k) == 100} for k, r in runs.items()]
    captions = []
    for pk, system, system_id, key, text in rows:
        won_cast = votes.get(pk)
        captions.append({
            "id": pk, "system": system, "is_reference": system_id == dataset.reference_system_id, "key": key, "text": text,
            "ratings": [{"criterion": crit, "source": source, "scores": [f"{v:g}" for v in s], "mean": float(np.mean(s))}
                        for (crit, source), s in ratings.get(pk, {}).items()],
            "votes": None if won_cast is None else {"won": won_cast[0], "cast": won_cast[1],
                                                    "percent": 100.0 * won_cast[0] / won_cast[1]},
            "metrics": [fmt(scores.get((m["key"], pk), float("nan")), metric_scale(m["key"])) for m in metrics],
        })
    return {"metrics": metrics, "captions": captions}
