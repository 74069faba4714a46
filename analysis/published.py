"""Published Kendall correlations of caption metrics, shown beside the ones this platform computes.

The field compares new metrics with learned ones (CLIP-S, RefCLIP-S, PAC-S, Polos, SPICE...) that
this platform does not compute offline. Their published Kendall tau-b / tau-c values (x100) per
benchmark are bundled in ``data/published_correlations/`` (in the ``captioneval-server`` wheel:
``analysis/published_correlations/``, :data:`DATA_DIR`) (a copy of
github.com/YuigaWada/CaptionEvalKit-for-VLMs ``benchmarks/expected/**`` at the commit named in its
``SOURCE.txt``; BSD-3-Clause-Clear, LICENSE kept). Each file ``expected/<metric>/<benchmark>.json``
is ``{"source": str, "score_name": str, "correlations": {"kendall_tau_b"?: x100, "kendall_tau_c"?: x100}}``
and names the paper table its numbers are copied from.

A dataset is attached to one benchmark of the table (:func:`published_benchmark`): Flickr8k-Expert
(dataset kind ``flickr8k-expert``) to ``flickr8k-ex``, Flickr8k-CrowdFlower (``flickr8k-crowdflower``)
to ``flickr8k-cf``, and any dataset whose stored protocol has ``"published_as"`` (``composite``,
``nebula``, ``polaris``; ``import_dataset judgments ... --published-as polaris``) to that benchmark.
Where the platform computes the same metric (BLEU-4, CIDEr-D, METEOR, ROUGE-L; FLEUR and RefFLEUR where a
judge endpoint is configured, :mod:`metrics.judges`) the row carries our
item-level value of the same statistic from the benchmark report (``metrics[key]["item"]["values"]``),
so ours and the published number sit side by side; every other row is marked "published, not
computed here".

Loading needs no Django (the table is static data, read once per process: :func:`table`); a
malformed file raises :class:`PublishedTableError` naming the file and the field.
"""
from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from crowd.importers.judgments import PUBLISHED_AS, PUBLISHED_BY_KIND

#: the table: ``data/published_correlations`` of a source checkout, else the copy that the
#: ``captioneval-server`` wheel packages beside this module (server/pyproject.toml)
_CHECKOUT_TABLE = Path(__file__).resolve().parents[1] / "data" / "published_correlations"
DATA_DIR = _CHECKOUT_TABLE if _CHECKOUT_TABLE.is_dir() else Path(__file__).resolve().parent / "published_correlations"
NOTE = "published, not computed here"
LICENCE = "BSD-3-Clause-Clear"
STATISTICS = ("kendall_tau_b", "kendall_tau_c")
LABELS = {"kendall_tau_b": "Kendall tau-b", "kendall_tau_c": "Kendall tau-c"}
FIELDS = ("source", "score_name", "correlations")

#: metric folder of the table -> (our metric key or None, display name). Our key is given where the
#: platform implements the same metric (CaptionEvalKit's bleu is BLEU-4 and its cider is
#: pycocoevalcap's CIDEr, i.e. CIDEr-D; spice is SPICE, listed by the registry as unavailable; fleur and
#: reffleur are the LLM judges FLEUR and RefFLEUR, computed where a judge endpoint is configured).
METRICS: dict[str, tuple[str | None, str]] = {
    "bleu": ("bleu_4", "BLEU-4"),
    "cider": ("cider_d", "CIDEr-D"),
    "meteor": ("meteor", "METEOR"),
    "rouge": ("rouge_l", "ROUGE-L"),
    "spice": ("spice", "SPICE"),
    "clipscore": (None, "CLIPScore"),
    "refclipscore": (None, "RefCLIPScore"),
    "pacscore": (None, "PAC-S"),
    "refpacscore": (None, "RefPAC-S"),
    "polos": (None, "Polos"),
    "fleur": ("fleur", "FLEUR"),
    "reffleur": ("ref_fleur", "RefFLEUR"),
    "vela": (None, "VELA"),
    "expert": (None, "EXPERT"),
}

#: dataset kind (the importer that made it) -> benchmark of the table
BENCHMARK_BY_KIND = PUBLISHED_BY_KIND
#: benchmarks an imported dataset may be mapped to with protocol["published_as"] (``import_dataset
#: judgments --published-as``; flickr8k-ex / flickr8k-cf for a re-imported export of those sets)
ATTACHABLE = PUBLISHED_AS
TITLES = {
    "flickr8k-ex": "Flickr8k-Expert", "flickr8k-cf": "Flickr8k-CrowdFlower", "composite": "Composite",
    "nebula": "Nebula", "polaris": "Polaris",
}

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class PublishedTableError(ValueError):
    """A file of the published table is missing or malformed; the message names the file and field."""


@dataclass(frozen=True)
class PublishedValue:
    """One published number: ``value`` is Kendall ``statistic`` x100 of metric folder ``metric`` on
    ``benchmark``, copied from ``source`` (the file ``path``, relative to the table's folder)."""

    metric: str
    benchmark: str
    score_name: str
    statistic: str
    value: float
    source: str
    path: str


@dataclass(frozen=True)
class PublishedTable:
    """The whole table: ``values`` in (metric folder, benchmark, statistic) order, ``n_files`` the
    number of JSON files read, ``repository`` ("github.com/owner/name") and ``commit`` (40 hex) from
    SOURCE.txt."""

    values: tuple[PublishedValue, ...]
    n_files: int
    repository: str
    commit: str

    @property
    def citation(self) -> str:
        return (f"Published values collected in {self.repository} (commit {self.commit[:12]}, "
                f"benchmarks/expected/; {LICENCE})")

    def benchmarks(self) -> list[str]:
        return sorted({v.benchmark for v in self.values})


def _fail(path: str, field: str | None, problem: str):
    where = f"{path}: field {field!r}" if field else path
    raise PublishedTableError(f"{where}: {problem}")


def _read_file(file: Path, rel: str) -> dict:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        _fail(rel, None, "not UTF-8 text")
    except json.JSONDecodeError as exc:
        _fail(rel, None, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})")
    if not isinstance(data, dict):
        _fail(rel, None, f"must be a JSON object, got {type(data).__name__}")
    for field in FIELDS:
        if field not in data:
            _fail(rel, field, "missing")
    extra = sorted(set(data) - set(FIELDS))
    if extra:
        _fail(rel, extra[0], f"unknown field (expected {', '.join(FIELDS)})")
    for field in ("source", "score_name"):
        if not isinstance(data[field], str) or not data[field].strip():
            _fail(rel, field, f"must be a non-empty string, got {data[field]!r}")
    corr = data["correlations"]
    if not isinstance(corr, dict) or not corr:
        _fail(rel, "correlations", "must be a non-empty object of Kendall statistics")
    for stat, value in corr.items():
        if stat not in STATISTICS:
            _fail(rel, f"correlations.{stat}", f"unknown statistic (expected {' or '.join(STATISTICS)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            _fail(rel, f"correlations.{stat}", f"must be a finite number, got {value!r}")
        if not -100 <= value <= 100:
            _fail(rel, f"correlations.{stat}", f"must be a correlation x100 in [-100, 100], got {value!r}")
    return data


def _read_source(root: Path) -> tuple[str, str]:
    path = root / "SOURCE.txt"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PublishedTableError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    repo = re.search(r"\brepo (github\.com/[\w.-]+/[\w.-]+)", text)
    commit = re.search(r"\bcommit ([0-9a-f]{40})\b", text)
    if not repo or not commit:
        raise PublishedTableError(f"{path}: must name the repository ('repo github.com/OWNER/NAME') and its 40-digit commit")
    return repo.group(1), commit.group(1)


def load_table(root: Path | str = DATA_DIR) -> PublishedTable:
    """Read and validate every ``expected/<metric>/<benchmark>.json`` under ``root`` and SOURCE.txt.

    Every file must be a JSON object with exactly ``source`` and ``score_name`` (non-empty strings)
    and ``correlations`` (a non-empty object whose keys are ``kendall_tau_b`` / ``kendall_tau_c`` and
    whose values are finite numbers in [-100, 100], correlations x100); folder and file names are
    lower-case slugs. Raises :class:`PublishedTableError` ("expected/bleu/x.json: field
    'correlations.kendall_tau_c': must be a finite number, got 'high'") on the first problem; nothing
    is returned half-read.
    """
    root = Path(root)
    expected = root / "expected"
    if not expected.is_dir():
        raise PublishedTableError(f"{expected}: folder missing (the published table is bundled in data/published_correlations/)")
    repository, commit = _read_source(root)
    values: list[PublishedValue] = []
    n_files = 0
    for folder in sorted(expected.iterdir()):
        rel_folder = folder.relative_to(root).as_posix()
        if not folder.is_dir():
            _fail(rel_folder, None, "expected only metric folders under expected/")
        if not _NAME.match(folder.name):
            _fail(rel_folder, None, "metric folder names are lower-case letters, digits and '-'")
        for file in sorted(folder.iterdir()):
            rel = file.relative_to(root).as_posix()
            if file.suffix != ".json" or not file.is_file():
                _fail(rel, None, "expected only <benchmark>.json files in a metric folder")
            if not _NAME.match(file.stem):
                _fail(rel, None, "benchmark file names are lower-case letters, digits and '-'")
            data = _read_file(file, rel)
            n_files += 1
            for stat in STATISTICS:
                if stat in data["correlations"]:
                    values.append(PublishedValue(folder.name, file.stem, data["score_name"].strip(), stat,
                                                 float(data["correlations"][stat]), data["source"].strip(), rel))
    if not n_files:
        raise PublishedTableError(f"{expected}: no published values found")
    return PublishedTable(tuple(values), n_files, repository, commit)


@functools.lru_cache(maxsize=1)
def table() -> PublishedTable:
    """The bundled table (:data:`DATA_DIR`), read and validated once per process."""
    return load_table(DATA_DIR)


def published_benchmark(dataset) -> str | None:
    """The benchmark of the table ``dataset`` is attached to, or None.

    ``dataset``: anything with ``kind`` and ``protocol`` (a :class:`crowd.models.Dataset`).
    ``protocol["published_as"]`` wins (one of :data:`ATTACHABLE`, or any benchmark of the table);
    otherwise the dataset kind (:data:`BENCHMARK_BY_KIND`)."""
    proto = getattr(dataset, "protocol", None) or {}
    mapped = proto.get("published_as") if isinstance(proto, dict) else None
    if mapped:
        return mapped if mapped in ATTACHABLE or mapped in table().benchmarks() else None
    return BENCHMARK_BY_KIND.get(getattr(dataset, "kind", None))


def metric_info(folder: str) -> tuple[str | None, str, bool]:
    """(our metric key or None, display name, computed here) of a metric folder of the table;
    computed here = the key is a metric this platform can compute (not one the registry lists as
    unavailable, like SPICE)."""
    from captioneval.metrics.registry import METRICS as REGISTERED

    key, name = METRICS.get(folder, (None, None))
    return key, name or folder, bool(key and key in REGISTERED)


def report_values(report: dict | None, dataset=None) -> dict[str, dict[str, float]]:
    """{metric key: {kendall_tau_b/tau_c: value x1}} of a rating benchmark report's item level
    (:func:`analysis.benchmarks.benchmark_report`), for the metrics of the table we compute. Empty
    for no report, a forced-choice report, or a report of another criterion than the dataset's main
    one (published values are on the main judgment)."""
    if not report or report.get("task") != "rating":
        return {}
    criteria = (report.get("protocol") or {}).get("criteria") or [None]
    main = getattr(dataset, "criterion", None) or criteria[0]
    if main and report.get("criterion") and report["criterion"] != main:
        return {}
    keys = {k for k, _ in METRICS.values() if k}
    out = {}
    for key, entry in (report.get("metrics") or {}).items():
        values = (entry.get("item") or {}).get("values") or {}
        if key in keys:
            out[key] = {s: values[s] for s in STATISTICS if values.get(s) is not None}
    return out


def published_rows(dataset, report: dict | None = None, *, ours: dict | None = None,
                   headline: str | None = None) -> list[dict]:
    """The published values of the benchmark ``dataset`` is attached to, one row per metric and statistic.

    Row: ``{"benchmark", "metric" (table folder), "name", "published_name", "statistic", "label",
    "value" (published, x100), "our_key", "ours" (our item-level value of the same statistic x100, or
    None), "difference" (ours - published, x100, or None), "computed_here" (bool: the platform computes this metric), "source" (the paper table),
    "citation" (source + repository and commit), "file"}``. ``ours`` comes from ``report`` (a
    benchmark report, :func:`report_values`) or is given as {key: {statistic: x1}}. Rows computed
    here come first; within a metric, ``headline`` (default the dataset protocol's) first.
    Empty when the dataset is attached to no benchmark.
    """
    bench = published_benchmark(dataset)
    if bench is None:
        return []
    t = table()
    if ours is None:
        ours = report_values(report, dataset)
    proto = getattr(dataset, "protocol", None) or {}
    headline = headline or (proto.get("headline") if isinstance(proto, dict) else None)
    rows = []
    for v in t.values:
        if v.benchmark != bench:
            continue
        key, name, here = metric_info(v.metric)
        mine = (ours.get(key) or {}).get(v.statistic) if key else None
        rows.append({
            "benchmark": bench, "metric": v.metric, "name": name, "published_name": v.score_name,
            "statistic": v.statistic, "label": LABELS[v.statistic], "value": v.value, "our_key": key,
            "ours": None if mine is None else 100 * mine,
            "difference": None if mine is None else 100 * mine - v.value, "computed_here": here, "source": v.source,
            "citation": f"{v.source}; {t.citation}", "file": v.path,
        })
    order = list(METRICS)
    rows.sort(key=lambda r: (not r["computed_here"], order.index(r["metric"]) if r["metric"] in order else len(order),
                             r["metric"], r["statistic"] != headline, r["statistic"]))
    return rows


def block(dataset, report: dict | None = None, *, ours: dict | None = None) -> dict | None:
    """The ``"published"`` entry of a benchmark report or comparison for ``dataset``, or None when it
    is attached to no benchmark::

        {"benchmark", "title", "dataset", "note": "published, not computed here", "repository",
         "commit", "licence", "citation", "ours": {key: {statistic: x1}}, "rows": [published_rows]}
    """
    bench = published_benchmark(dataset)
    if bench is None:
        return None
    t = table()
    if ours is None:
        ours = report_values(report, dataset)
    return {
        "benchmark": bench, "title": TITLES.get(bench, bench), "dataset": dataset.name, "note": NOTE,
        "repository": t.repository, "commit": t.commit, "licence": LICENCE, "citation": t.citation,
        "ours": ours, "rows": published_rows(dataset, ours=ours),
    }


def attach(dataset, report: dict) -> dict:
    """``report`` (a benchmark report) with its ``"published"`` entry made now from the bundled table
    (:func:`block`); the rest unchanged (a new dict)."""
    return dict(report, published=block(dataset, report))


def attach_comparison(matrix: dict) -> dict:
    """``matrix`` (a comparison) with its ``"published"`` list remade now from the bundled table: one
    :func:`block` per dataset of the stored list that still exists and is attached, with the ``ours``
    values stored in it (so a stored comparison shows the current table without a recomputation)."""
    from crowd.models import Dataset

    if "published" not in matrix:  # stored before the table was shown: ours from the headline cells
        return dict(matrix, published=_blocks_from_cells(matrix))
    stored = matrix["published"] or []
    by_name = {d.name: d for d in Dataset.objects.filter(name__in=[b["dataset"] for b in stored])}
    fresh = [block(by_name[b["dataset"]], ours=b.get("ours") or {}) for b in stored if b["dataset"] in by_name]
    return dict(matrix, published=[b for b in fresh if b is not None])


def comparison_blocks(reports: list[tuple[object, dict]]) -> list[dict]:
    """The comparison's ``"published"`` list: one :func:`block` per (dataset, benchmark report of its
    main criterion) attached to a benchmark, in the given order."""
    out = []
    for dataset, report in reports:
        b = block(dataset, report)
        if b is not None:
            out.append(b)
    return out


def _blocks_from_cells(matrix: dict) -> list[dict]:
    from crowd.models import Dataset

    out = []
    for column in matrix.get("columns", []):
        if column.get("category") or any(b["dataset"] == column["dataset"] for b in out):
            continue
        dataset = Dataset.objects.filter(name=column["dataset"]).first()
        if dataset is None or column.get("statistic") not in STATISTICS:
            continue
        ours = {r["metric"]: {column["statistic"]: r["cells"][column["id"]]["value"]} for r in matrix.get("rows", [])
                if (r["cells"].get(column["id"]) or {}).get("value") is not None}
        b = block(dataset, ours=ours)
        if b is not None:
            out.append(b)
    return out
