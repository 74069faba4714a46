"""Interactive charts: the data behind them and their Vega-Lite specifications.

Two halves:

* :func:`scatter_data` computes, once per dataset, metric and input state, what the dataset page's
  metric-vs-human scatter shows (every caption's metric score and mean human rating, the
  least-squares fit, a density grid for large sets and a bounded random sample of captions with
  their text, references and individual ratings). It reads the database and runs in the Celery
  task of a stored report (:data:`SCATTER_KIND`, :func:`analysis.cached_reports.scatter_key`);
  a page request never calls it.
* The ``*_spec`` functions turn a stored report into a Vega-Lite 6 specification (a plain dict,
  serialised as JSON by :mod:`analysis.chart_views` and drawn in the browser by
  ``analysis/static/analysis/charts.js`` with the vendored vega-embed). They do no I/O.

Honest-figure rules shared with the matplotlib figures (:mod:`analysis.plots`):

* correlations and accuracies are shown x100, as in the tables;
* the human ceiling (leave-one-rater-out or split-half agreement of people with each other, in the
  benchmark's headline statistic) is drawn only on the chart of that same statistic at the item
  level (:func:`bar_entries`): a Kendall tau-c ceiling says nothing about a Pearson r;
* a least-squares line is drawn only over the data's own x range and clipped to the data's y range
  (:func:`clipped_fit`);
* pairwise/forced-choice accuracy charts carry the 50% chance line (two captions, a coin flip);
* legends sit below the plot, never over the marks.
"""
from __future__ import annotations

import numpy as np

#: the :class:`analysis.models.Report` kind of a stored scatter (dataset + metric)
SCATTER_KIND = "scatter"  # = analysis.models.Report.SCATTER
#: bump when :func:`scatter_data` changes its numbers or fields (part of the stored report's key)
SCATTER_FORMAT = 2  # 2: metric scores x100 for [0, 1] metrics, as every table
#: hoverable captions sent to the browser at most; above it a density layer shows every caption
MAX_POINTS = 2000
#: bins of the density layer along x
DENSITY_X_BINS = 40
#: at most this many distinct mean ratings count as a discrete human scale (jittered vertically)
DISCRETE_LEVELS = 60
#: reference captions shown per image in a tooltip
MAX_REFERENCES = 5
#: colours
BLUE, RED, GREY = "#2a7ae2", "#d62728", "#555555"


def _round(values, digits: int = 6) -> list:
    """Floats rounded for a compact JSON payload; NaN/inf become None."""
    return [None if not np.isfinite(v) else round(float(v), digits) for v in values]


def clipped_fit(x, y) -> dict | None:
    """Least-squares line y = slope x + intercept (``numpy.polyfit``, degree 1) over the points
    (x, y), as the segment drawn on a chart: from the smallest to the largest x of the data, cut
    where it leaves the data's y range [min y, max y] (so a line never reaches y = 7 on a 1-4
    scale). Returns {"slope", "intercept", "x": [x0, x1], "y": [y0, y1]}, or None with fewer
    than 2 points or no spread in x.

    x, y : 1-D arrays of equal length (NaN pairs are dropped).
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 2 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    x0, x1 = float(x.min()), float(x.max())
    y_lo, y_hi = float(y.min()), float(y.max())
    if slope != 0:
        # the x where the line crosses y_lo and y_hi; keep the part inside both ranges
        xa, xb = sorted(((y_lo - intercept) / slope, (y_hi - intercept) / slope))
        x0, x1 = max(x0, xa), min(x1, xb)
    elif not y_lo <= intercept <= y_hi:
        return None
    if x0 > x1:
        return None
    return {"slope": float(slope), "intercept": float(intercept), "x": [x0, x1],
            "y": [float(slope * x0 + intercept), float(slope * x1 + intercept)]}


def _jitter_width(levels: np.ndarray) -> float:
    """Half-width of the vertical jitter for a discrete scale: 35% of the smallest gap between
    its distinct values (points of two levels never overlap); 0 for a continuous scale."""
    if len(levels) < 2 or len(levels) > DISCRETE_LEVELS:
        return 0.0
    return float(0.35 * np.min(np.diff(np.sort(levels))))


def _density(x: np.ndarray, y: np.ndarray, levels: np.ndarray, jitter: float) -> list[dict]:
    """2-D histogram of the captions: :data:`DENSITY_X_BINS` equal bins over the x range; along y
    one bin per distinct level (discrete scale, each ``2 * jitter`` high, centred on the level)
    or 30 equal bins. Only non-empty cells: [{"x0", "x1", "y0", "y1", "count"}]."""
    x_edges = np.linspace(x.min(), x.max(), DENSITY_X_BINS + 1) if np.ptp(x) > 0 else np.array([x.min() - .5, x.min() + .5])
    cells = []
    if jitter > 0:
        xi = np.clip(np.searchsorted(x_edges, x, side="right") - 1, 0, len(x_edges) - 2)
        yi = np.clip(np.searchsorted(levels, np.round(y, 9)), 0, len(levels) - 1)
        counts = np.zeros((len(x_edges) - 1, len(levels)), dtype=int)
        np.add.at(counts, (xi, yi), 1)
        for i, j in zip(*np.nonzero(counts)):
            cells.append({"x0": float(x_edges[i]), "x1": float(x_edges[i + 1]), "y0": float(levels[j] - jitter),
                          "y1": float(levels[j] + jitter), "count": int(counts[i, j])})
        return cells
    y_edges = np.linspace(y.min(), y.max(), 31) if np.ptp(y) > 0 else np.array([y.min() - .5, y.min() + .5])
    counts, _, _ = np.histogram2d(x, y, bins=[x_edges, y_edges])
    for i, j in zip(*np.nonzero(counts)):
        cells.append({"x0": float(x_edges[i]), "x1": float(x_edges[i + 1]), "y0": float(y_edges[j]),
                      "y1": float(y_edges[j + 1]), "count": int(counts[i, j])})
    return cells


def scatter_data(dataset, metric: str, max_points: int = MAX_POINTS, seed: int = 0) -> dict:
    """What the scatter of ``metric`` against the human judgments of ``dataset`` shows (computed by
    the Celery task of the stored report; reads the database).

    One point per judged caption: x = its metric score (x100 for a metric whose range is [0, 1], as
    every table: ``scale``; negated for a lower-is-better metric, as every report; ``sign``), y = the mean of its ratings on the dataset's main criterion
    (:func:`analysis.reports.judgment_rows`, every rating kept). Every caption's (x, y) is kept in
    ``all`` (the matplotlib figure draws them all); at most ``max_points`` of them, drawn at random
    with ``seed`` when there are more, carry what a tooltip shows. With more captions than
    ``max_points`` a density grid (:func:`_density`) shows every caption under the sample.

    Shape::

        {"dataset": str, "metric": key, "name": display name (" x100" appended when scaled), "scale": 100 | 1,
         "sign": +1 | -1, "criterion": str,
         "n": captions, "n_shown": sampled captions, "seed": int,
         "x_domain": [min, max], "y_domain": [min rating, max rating],
         "levels": [distinct mean ratings] | None (continuous), "jitter": half-width (0 = none),
         "fit": clipped_fit(...) | None, "density": [{"x0", "x1", "y0", "y1", "count"}] | None,
         "all": {"x": [...], "y": [...]},
         "points": [{"caption": id, "x", "y", "yj" (jittered y), "ratings": [scores], "text",
                     "system", "image": image id, "image_key", "references": [texts]}]}

    Raises :class:`analysis.reports.ReportError` (metric not computed, no judgments) or
    ``metrics.pipeline.PipelineError`` (unknown metric), stored as the report's problem.
    """
    from crowd.models import Caption
    from metrics import uploads

    from .reports import completed_runs, judgment_rows, metric_name

    if max_points < 1:
        raise ValueError("max_points must be >= 1")
    runs = completed_runs(dataset, [metric])
    run = runs[metric]
    rows = judgment_rows(dataset, runs, collapse=False)
    captions, inverse = np.unique(rows.caption, return_inverse=True)
    counts = np.bincount(inverse)
    y = np.bincount(inverse, weights=rows.human) / counts
    from .explorer import metric_scale

    scale = metric_scale(metric)  # 100 for a [0, 1] metric: one scale (x100) on every chart and table
    x = np.zeros(len(captions))
    x[inverse] = rows.metric[metric] * scale
    image_of = np.zeros(len(captions), dtype=np.int64)
    image_of[inverse] = rows.image
    order = np.argsort(inverse, kind="stable")
    ratings = np.split(rows.human[order], np.cumsum(counts)[:-1])

    n = len(captions)
    rng = np.random.default_rng(seed)
    shown = np.arange(n) if n <= max_points else np.sort(rng.choice(n, size=max_points, replace=False))
    levels = np.unique(np.round(y, 9))
    jitter = _jitter_width(levels)
    yj = y[shown] + (rng.uniform(-jitter, jitter, size=len(shown)) if jitter > 0 else 0.0)

    shown_ids = [int(c) for c in captions[shown]]
    info = {cid: (text, system, key) for cid, text, system, key in Caption.objects.filter(pk__in=shown_ids)
            .values_list("pk", "text", "system__name", "image__key")}
    image_ids = sorted({int(i) for i in image_of[shown]})
    references: dict[int, list[str]] = {}
    if dataset.reference_system_id:
        for image_id, text in (dataset.references().filter(image_id__in=image_ids).order_by("image_id", "key")
                               .values_list("image_id", "text")):
            refs = references.setdefault(image_id, [])
            if len(refs) < MAX_REFERENCES:
                refs.append(text)
    points = []
    for pos, i in enumerate(shown):
        cid = int(captions[i])
        text, system, key = info.get(cid, ("", "", ""))
        points.append({
            "caption": cid, "x": round(float(x[i]), 6), "y": round(float(y[i]), 6), "yj": round(float(yj[pos]), 6),
            "ratings": _round(ratings[i], 4), "text": text, "system": system, "image": int(image_of[i]),
            "image_key": key, "references": references.get(int(image_of[i]), []),
        })
    all_ratings = rows.human[np.isfinite(rows.human)]
    return {
        "dataset": dataset.name, "metric": metric, "name": metric_name(metric, run) + (" x100" if scale == 100 else ""),
        "scale": scale,
        "sign": uploads.metric_sign(metric, run), "criterion": dataset.criterion or "rating",
        "n": int(n), "n_shown": len(points), "seed": seed,
        "x_domain": [float(x.min()), float(x.max())],
        "y_domain": [float(all_ratings.min()), float(all_ratings.max())],
        "levels": _round(levels) if jitter > 0 else None, "jitter": jitter,
        "fit": clipped_fit(x, y),
        "density": _density(x, y, levels, jitter) if n > max_points else None,
        "all": {"x": _round(x), "y": _round(y)},
        "points": points,
    }


# --------------------------------------------------------------------------------------------
# Vega-Lite specifications (pure functions of stored reports)
# --------------------------------------------------------------------------------------------
SCHEMA = "https://vega.github.io/schema/vega-lite/v6.json"  # an identifier only: never fetched


def _base(title: str, subtitle: str = "", width="container", height: int = 260) -> dict:
    """The frame of a chart: as wide as its box (``width`` "container", autosize "fit-x": the axes,
    labels and legends fit inside the box's width), ``height`` px of plot (title and legends below it
    add to it, so a title wrapped on a phone does not squeeze the plot), the title at the left."""
    spec = {"$schema": SCHEMA, "width": width, "height": height, "autosize": {"type": "fit-x", "contains": "padding"},
            "title": {"text": title, "anchor": "start", "fontSize": 13}}
    if subtitle:
        spec["title"]["subtitle"] = subtitle
    return spec


def scatter_spec(data: dict, image_urls: dict | None = None) -> dict:
    """Vega-Lite spec of a stored scatter (:func:`scatter_data`): a density layer (grey rectangles,
    darker = more captions) when the set was sampled, the sampled captions as points (jittered
    vertically on a discrete scale) whose tooltip shows the caption (as its title), its image
    (``image_urls``: {image id: URL}, from :func:`crowd.images.image_url`; none when missing),
    its references, each rating, the mean rating and the metric score, and the least-squares fit
    clipped to the data (:func:`clipped_fit`). The subtitle says "showing N of M captions" when
    sampled. ``usermeta`` carries the counts for the page."""
    image_urls = image_urls or {}
    criterion = data["criterion"]
    x_title = data["name"] + (" (negated: lower is better)" if data.get("sign", 1) < 0 else "")
    y_title = f"mean human {criterion}"
    sampled = data["n_shown"] < data["n"]
    subtitle = (f"showing {data['n_shown']:,} of {data['n']:,} captions (random sample, seed {data['seed']}); "
                "grey cells: every caption" if sampled else f"{data['n']:,} captions")
    if data.get("jitter"):
        subtitle += "; points jittered vertically"
    x_scale = {"domain": data["x_domain"], "nice": False, "zero": False}
    lo, hi = data["y_domain"]
    pad = max(data.get("jitter") or 0, 0.02 * (hi - lo))
    y_scale = {"domain": [lo - pad, hi + pad], "nice": False, "zero": False}
    values = []
    for p in data["points"]:
        # the tooltip (vega-tooltip): "title" is its heading, "image" a picture, the rest a table
        tip = {"title": p["text"]}
        if image_urls.get(p["image"]):
            tip["image"] = image_urls[p["image"]]
        tip.update({
            "image key": p["image_key"], "system": p["system"],
            "references": " | ".join(p["references"]) if p["references"] else "(none)",
            f"human {criterion} (each rater)": ", ".join(f"{r:g}" for r in p["ratings"] if r is not None),
            f"mean human {criterion}": f"{p['y']:.3f}".rstrip("0").rstrip("."),
            data["name"]: f"{p['x']:.4f}".rstrip("0").rstrip(".") if p["x"] != 0 else "0",
        })
        values.append({"id": p["caption"], "x": p["x"], "y": p["y"], "yj": p["yj"], "tip": tip})
    layers = []
    if data.get("density"):
        layers.append({
            "data": {"values": data["density"]}, "mark": {"type": "rect", "tooltip": False},
            "encoding": {
                "x": {"field": "x0", "type": "quantitative", "scale": x_scale, "title": x_title},
                "x2": {"field": "x1"}, "y": {"field": "y0", "type": "quantitative", "scale": y_scale, "title": y_title},
                "y2": {"field": "y1"},
                "color": {"field": "count", "type": "quantitative", "title": "captions per cell",
                          "scale": {"scheme": "greys", "type": "log"}, "legend": {"orient": "bottom"}},
            },
        })
    layers.append({
        "data": {"name": "captions", "values": values},  # view.data("captions") in the browser
        "mark": {"type": "circle", "size": 22, "opacity": 0.55, "color": BLUE, "tooltip": {"expr": "datum.tip"}},
        "encoding": {
            "x": {"field": "x", "type": "quantitative", "scale": x_scale, "title": x_title},
            "y": {"field": "yj", "type": "quantitative", "scale": y_scale, "title": y_title},
        },
    })
    fit = data.get("fit")
    if fit:
        label = f"least-squares fit: y = {fit['slope']:.3g}x + {fit['intercept']:.3g}"
        layers.append({
            "data": {"values": [{"x": fit["x"][0], "y": fit["y"][0], "line": label},
                                {"x": fit["x"][1], "y": fit["y"][1], "line": label}]},
            "mark": {"type": "line", "strokeWidth": 2, "tooltip": False},
            "encoding": {
                "x": {"field": "x", "type": "quantitative", "scale": x_scale},
                "y": {"field": "y", "type": "quantitative", "scale": y_scale},
                "color": {"field": "line", "type": "nominal", "scale": {"range": [RED]},
                          "legend": {"orient": "bottom", "title": None, "labelLimit": 400}},
            },
        })
    spec = _base(f"{data['name']} vs human {criterion}", subtitle)
    spec.update({"layer": layers, "resolve": {"scale": {"color": "independent"}},
                 "usermeta": {"n": data["n"], "n_shown": data["n_shown"], "kind": "scatter",
                              "fit": fit, "x_domain": data["x_domain"], "y_domain": data["y_domain"]}})
    return spec


def _same_statistic(report: dict, level: str, statistic: str, ceiling: dict) -> bool:
    """Whether ``ceiling`` is in the unit of the bars: forced choice (accuracy against accuracy),
    or the item level of the ceiling's own statistic."""
    if report["task"] == "forced_choice":
        return True
    return level == "item" and ceiling.get("statistic") == statistic


def bar_entries(report: dict, level: str, statistic: str) -> dict:
    """The bars of one level/statistic of a stored benchmark report
    (:func:`analysis.benchmarks.benchmark_report`), in the tables' unit (x100):

        {"entries": [{"name", "metric", "value", "lo", "hi", "rank"}] (x100; None when undefined),
         "ceiling": {"value", "lo", "hi", "label"} | None, "note": str, "chance": 50.0 | None,
         "label": statistic label, "accuracy": bool}

    The human ceiling is returned only for the chart of its own statistic (:func:`_same_statistic`);
    otherwise ``note`` says which chart has it. ``chance`` is 50 on accuracy charts (forced choice
    and the pairwise acc_23 / acc_eq statistics). Raises KeyError for a level absent from the report.
    """
    from .benchmarks import LABELS

    forced = report["task"] == "forced_choice"
    ranks = (report.get("significance", {}).get("permutation") or {}).get("ranks", {}) \
        if statistic == report.get("headline") or (forced and statistic in ("accuracy", "all")) else {}
    entries = []

    def x100(v):
        return None if v is None else round(100 * float(v), 4)

    for key, m in report["metrics"].items():
        if forced:
            if statistic in ("accuracy", "all"):
                value, ci, rank = m.get("accuracy"), m.get("ci95") or [None, None], ranks.get(key)
            else:
                cat = (m.get("per_category") or {}).get(statistic, {})
                value, ci, rank = cat.get("accuracy"), cat.get("ci95") or [None, None], None
        else:
            block = m.get(level) or {}
            if "values" not in block:
                continue
            value = block["values"].get(statistic)
            ci = block.get("ci95", {}).get(statistic) or [None, None]
            rank = ranks.get(key) if level == "item" else None
        entries.append({"name": m["name"], "metric": key, "value": x100(value), "lo": x100(ci[0]), "hi": x100(ci[1]),
                        "rank": rank})
    ceiling = report["ceiling"]["item"]
    if forced and statistic not in ("accuracy", "all"):
        ceiling = report["ceiling"].get("per_category", {}).get(statistic, {"error": "no ceiling for this category"})
    label = LABELS.get(statistic, statistic)
    accuracy = forced or statistic in ("pairwise_accuracy", "acc_eq", "accuracy")
    out = {"entries": entries, "ceiling": None, "note": "", "chance": 50.0 if accuracy else None,
           "label": ("accuracy" if forced else label) + " (x100)", "accuracy": accuracy}
    if "error" in ceiling:
        out["note"] = f"no human ceiling: {ceiling['error']}"
    elif _same_statistic(report, level, statistic, ceiling):
        stat = "accuracy" if forced else LABELS.get(ceiling.get("statistic"), ceiling.get("statistic"))
        ci = ceiling.get("ci95") or [None, None]
        out["ceiling"] = {"value": x100(ceiling["value"]), "lo": x100(ci[0]), "hi": x100(ci[1]),
                          "label": f"human ceiling ({str(ceiling.get('method', 'agreement')).replace('_', ' ')}, {stat}) "
                                   f"{100 * ceiling['value']:.1f}"}
    else:
        stat = LABELS.get(ceiling.get("statistic"), ceiling.get("statistic"))
        out["note"] = f"human ceiling ({stat}): on the item-level {stat} chart only"
    return out


def bar_title(report: dict, level: str, statistic: str) -> str:
    """The title of one benchmark chart (the interactive chart and its PNG/SVG/PDF figures):
    "<dataset> (<criterion or task>), <level> level: <label>"; on a forced-choice benchmark a
    category's chart is titled by its subset (PASCAL-50S: "pascal50s, HC subset: accuracy (x100)"),
    the chart of every pair "pascal50s, all pairs: accuracy (x100)", so charts of the same
    statistic are told apart. ``report`` is a stored benchmark report
    (:func:`analysis.benchmarks.benchmark_report`)."""
    from .benchmarks import LABELS

    if report["task"] == "forced_choice":
        categories = (report.get("protocol") or {}).get("categories") or []
        subset = f"{statistic} subset" if statistic in categories else "all pairs"
        return f"{report['dataset']}, {subset}: accuracy (x100)"
    what = report.get("criterion") or report["task"]
    return f"{report['dataset']} ({what}), {level} level: {LABELS.get(statistic, statistic)} (x100)"


def bar_spec(bars: dict, title: str) -> dict:
    """Vega-Lite spec of one benchmark chart from :func:`bar_entries`: a bar per metric (x100) with
    its 95% interval as an error bar, the significance-cluster rank as a text label, the human
    ceiling (red line, its interval as a band) and the 50% chance line (grey dashes) when given,
    the legend of those lines below the plot. ``usermeta`` names what is drawn (for the page and
    tests)."""
    entries = [e for e in bars["entries"]]
    y_title = bars["label"]
    sort = [e["name"] for e in entries]
    x = {"field": "name", "type": "nominal", "sort": sort, "title": None, "axis": {"labelAngle": -30, "labelLimit": 140}}
    bar_tooltip = [{"field": "name", "title": "metric"}, {"field": "value", "title": y_title, "format": ".1f"},
                   {"field": "lo", "title": "95% CI low", "format": ".1f"}, {"field": "hi", "title": "95% CI high", "format": ".1f"},
                   {"field": "rank", "title": "cluster"}]
    layers = [
        {"data": {"values": entries}, "mark": {"type": "bar", "color": BLUE, "tooltip": True},
         "encoding": {"x": x, "y": {"field": "value", "type": "quantitative", "title": y_title}, "tooltip": bar_tooltip}},
    ]
    intervals = [e for e in entries if e["lo"] is not None and e["hi"] is not None]
    if intervals:  # 95% bootstrap intervals
        layers.append({"data": {"values": intervals}, "mark": {"type": "rule", "color": "#222"},
                       "encoding": {"x": x, "y": {"field": "lo", "type": "quantitative"}, "y2": {"field": "hi"}}})
    ranked = [dict(e, top=e["hi"] if e["hi"] is not None else e["value"]) for e in entries if e["rank"] and e["value"] is not None]
    if ranked:  # the significance-cluster rank above each bar's interval
        layers.append({"data": {"values": ranked},
                       "mark": {"type": "text", "dy": -4, "fontSize": 10, "color": "#222", "baseline": "bottom"},
                       "transform": [{"calculate": "'#' + datum.rank", "as": "rank_label"}],
                       "encoding": {"x": x, "y": {"field": "top", "type": "quantitative"}, "text": {"field": "rank_label"}}})
    lines = []
    if bars.get("ceiling"):
        c = bars["ceiling"]
        lines.append({"y": c["value"], "line": c["label"]})
        if c["lo"] is not None and c["hi"] is not None:
            layers.append({"data": {"values": [{"lo": c["lo"], "hi": c["hi"]}]},
                           "mark": {"type": "rect", "color": RED, "opacity": 0.12, "tooltip": False},
                           "encoding": {"y": {"field": "lo", "type": "quantitative"}, "y2": {"field": "hi"}}})
    if bars.get("chance") is not None:
        lines.append({"y": bars["chance"], "line": f"chance ({bars['chance']:g}%)"})
    if lines:
        layers.append({
            "data": {"values": lines},
            "mark": {"type": "rule", "strokeWidth": 2},
            "encoding": {
                "y": {"field": "y", "type": "quantitative"},
                "color": {"field": "line", "type": "nominal", "title": None,
                          "scale": {"domain": [ln["line"] for ln in lines],
                                    "range": [RED if "ceiling" in ln["line"] else GREY for ln in lines]},
                          "legend": {"orient": "bottom", "labelLimit": 400, "direction": "vertical"}},
                "strokeDash": {"field": "line", "type": "nominal",
                               "scale": {"domain": [ln["line"] for ln in lines],
                                         "range": [[1, 0] if "ceiling" in ln["line"] else [6, 4] for ln in lines]}},
                "tooltip": [{"field": "line", "title": "line"}, {"field": "y", "title": y_title, "format": ".1f"}],
            },
        })
    spec = _base(title, bars.get("note", ""), height=220)
    spec.update({"layer": layers, "usermeta": {
        "kind": "bars", "ceiling": bars.get("ceiling"), "chance": bars.get("chance"), "note": bars.get("note", ""),
        "unit": "x100", "values": {e["metric"]: e["value"] for e in entries}}})
    return spec


# --------------------------------------------------------------------------------------------
# System leaderboard (analysis.leaderboard): interval bars and the p-value heat map
# --------------------------------------------------------------------------------------------
ORANGE = "#e8710a"


def leaderboard_interval_spec(entries: list[dict], axis_title: str, title: str, subtitle: str = "",
                              baseline: str | None = None) -> dict:
    """Vega-Lite spec of one leaderboard column: one row per system (in the order of ``entries``,
    best first), its score as a dot and its 95% bootstrap interval (resampling images) as a
    horizontal bar, the rank as a label right of the interval; the ``baseline`` system in orange,
    with a legend below the plot saying so.

    entries : [{"system", "value", "lo", "hi", "rank", "cluster"}] in the unit of the page's table
        (x100 for a metric whose range is [0, 1]); ``lo``/``hi`` None when the interval is undefined.
    ``usermeta`` names what is drawn (for the page and tests)."""
    base_label = f"baseline: {baseline}"
    values = [dict(e, role=base_label if e["system"] == baseline else "other systems") for e in entries if e["value"] is not None]
    order = [e["system"] for e in values]
    y = {"field": "system", "type": "nominal", "sort": order, "title": None, "axis": {"labelLimit": 160}}
    x_title = axis_title
    lows = [e["lo"] if e["lo"] is not None else e["value"] for e in values]
    highs = [e["hi"] if e["hi"] is not None else e["value"] for e in values]
    pad = 0.08 * ((max(highs) - min(lows)) if values and max(highs) > min(lows) else 1.0)
    domain = [min(lows) - pad, max(highs) + pad] if values else [0, 1]
    x_scale = {"domain": domain, "nice": False, "zero": False}
    if baseline in order:
        color = {"field": "role", "type": "nominal", "title": None,
                 "scale": {"domain": ["other systems", base_label], "range": [BLUE, ORANGE]},
                 "legend": {"orient": "bottom", "labelLimit": 300}}
    else:
        color = {"value": BLUE}
    tooltip = [{"field": "system", "title": "system"}, {"field": "value", "title": axis_title, "format": ".3~f"},
               {"field": "lo", "title": "95% CI low", "format": ".3~f"}, {"field": "hi", "title": "95% CI high", "format": ".3~f"},
               {"field": "rank", "title": "rank"}, {"field": "cluster", "title": "significance cluster"}]
    with_ci = [e for e in values if e["lo"] is not None and e["hi"] is not None]
    layers = [
        {"data": {"values": with_ci}, "mark": {"type": "rule", "strokeWidth": 3, "opacity": 0.55},
         "encoding": {"y": y, "x": {"field": "lo", "type": "quantitative", "scale": x_scale, "title": x_title},
                      "x2": {"field": "hi"}, "color": color, "tooltip": tooltip}},
        {"data": {"name": "systems", "values": values}, "mark": {"type": "point", "filled": True, "size": 70, "opacity": 1},
         "encoding": {"y": y, "x": {"field": "value", "type": "quantitative", "scale": x_scale, "title": x_title},
                      "color": color, "tooltip": tooltip}},
        {"data": {"values": [dict(e, top=e["hi"] if e["hi"] is not None else e["value"]) for e in values if e.get("rank")]},
         "transform": [{"calculate": "'#' + datum.rank", "as": "rank_label"}],
         "mark": {"type": "text", "align": "left", "dx": 5, "fontSize": 10, "color": "#222"},
         "encoding": {"y": y, "x": {"field": "top", "type": "quantitative", "scale": x_scale}, "text": {"field": "rank_label"}}},
    ]
    spec = _base(title, subtitle, height=max(90, 30 * len(values)))
    spec.update({"layer": layers, "usermeta": {
        "kind": "leaderboard-intervals", "systems": order, "baseline": baseline,
        "values": {e["system"]: e["value"] for e in values}}})
    return spec


def leaderboard_pvalue_spec(systems: list[str], cells: list[dict], alpha: float, title: str, subtitle: str = "",
                            delta_title: str = "delta") -> dict:
    """Vega-Lite spec of the pairwise p-value matrix of one metric as a heat map: row system a,
    column system b (both in the order of ``systems``, best first), the cell coloured by the
    p-value of the paired test of a against b (blue below ``alpha``, pale above: the colour scale breaks there)
    and labelled with it, a star when significant at ``alpha``; the tooltip gives the difference
    a - b in the table's unit with its 95% interval, the Holm-adjusted p-value, the test and the
    number of images. Cells have a fixed size (44 x 30 px), so a phone shows the matrix scaled down,
    not squeezed.

    cells : [{"a", "b", "p", "delta", "lo", "hi", "significant": bool, "test": str}] (both
        orientations of a pair when the page wants a symmetric matrix; the diagonal is left empty).
    """
    def label(c):
        p = c["p"]
        text = "<.001" if p is not None and p < 0.001 else ("" if p is None else f"{p:.3f}".lstrip("0") if p < 1 else "1")
        return text + ("*" if c["significant"] else "")

    values = [dict(c, label=label(c), dark=bool(c["p"] is not None and c["p"] < alpha)) for c in cells]
    axis = {"labelLimit": 120}
    x = {"field": "b", "type": "nominal", "sort": systems, "scale": {"domain": systems}, "title": "system b",
         "axis": dict(axis, labelAngle=-30, orient="top")}
    y = {"field": "a", "type": "nominal", "sort": systems, "scale": {"domain": systems}, "title": "system a", "axis": axis}
    tooltip = [{"field": "a", "title": "system a"}, {"field": "b", "title": "system b"},
               {"field": "delta", "title": delta_title, "format": "+.3~f"},
               {"field": "lo", "title": "95% CI low", "format": "+.3~f"}, {"field": "hi", "title": "95% CI high", "format": "+.3~f"},
               {"field": "p", "title": "p-value", "format": ".4~f"}, {"field": "significant", "title": f"significant at {alpha:g}"},
               {"field": "p_holm", "title": "p (Holm-adjusted)", "format": ".4~f"}, {"field": "test", "title": "test"},
               {"field": "n_images", "title": "images"}]
    layers = [
        {"data": {"name": "cells", "values": values}, "mark": {"type": "rect", "stroke": "#fff", "strokeWidth": 1},
         "encoding": {"x": x, "y": y, "tooltip": tooltip,
                      "color": {"field": "p", "type": "quantitative", "title": "p-value",
                                # blues below alpha (significant), pale sand to white above it
                                "scale": {"domain": [0, alpha, alpha * 1.0001, 1],
                                          "range": ["#08306b", "#3a7fc0", "#f3e6c4", "#ffffff"], "clamp": True},
                                "legend": {"orient": "bottom", "direction": "horizontal", "gradientLength": 160}}}},
        {"data": {"values": values}, "mark": {"type": "text", "fontSize": 11},
         "encoding": {"x": x, "y": y, "text": {"field": "label"}, "tooltip": tooltip,
                      "color": {"condition": {"test": "datum.dark", "value": "#fff"}, "value": "#222"}}},
    ]
    # fixed cells (not the container's width): on a phone the matrix keeps its cells and the page's
    # CSS scales the drawing down, instead of the labels squeezing the plot to nothing
    spec = _base(title, subtitle, width={"step": 44}, height={"step": 30})
    spec["autosize"] = {"type": "pad"}
    spec.update({"layer": layers, "usermeta": {
        "kind": "leaderboard-pvalues", "systems": systems, "alpha": alpha,
        "cells": {f"{c['a']}|{c['b']}": c["p"] for c in cells}}})
    return spec
