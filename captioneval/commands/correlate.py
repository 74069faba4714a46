"""``captioneval correlate --scores S.csv --human H.csv``: agreement of metric scores with people.

S.csv: a key column (``--key``; default ``id``, else ``image_id``: what ``captioneval evaluate
--csv`` writes) and one column per metric (every column but the key, ``caption``, ``n_captions``
and ``group``, or those named with ``--metric``); one row per item; an empty cell leaves the item
out for that metric. H.csv: the same key column, a ``score`` column (``--human-column``) and
optionally a ``group`` column (``--group-column``: the bootstrap's resampling unit, e.g. the
image; default each item is its own group); one row per rating (an item rated 3 times has 3 rows).
Prints Pearson, Spearman, Kendall tau-b and tau-c of each metric with percentile bootstrap
intervals; ``--json`` / ``--out`` for the full report.
"""
from __future__ import annotations

import math
import sys

from ..correlate import correlate
from ..errors import InputError
from . import _io

NOT_METRICS = ("caption", "n_captions", "group")


def add_parser(sub) -> None:
    """Register the subcommand."""
    p = sub.add_parser("correlate", help="correlations of metric scores with human scores, with intervals",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--scores", required=True, metavar="S.csv", help="key column + one column per metric")
    p.add_argument("--human", required=True, metavar="H.csv", help="key column + score (+ group); a row per rating")
    p.add_argument("--key", metavar="COLUMN", help="the key column of both files (default: id, else image_id)")
    p.add_argument("--metric", nargs="+", action="extend", metavar="COLUMN", help="metric columns of S.csv (default all)")
    p.add_argument("--human-column", default="score", metavar="COLUMN", help="human score column of H.csv (default score)")
    p.add_argument("--group-column", default=None, metavar="COLUMN",
                   help="group column of H.csv (default: group, when present)")
    p.add_argument("--statistic", nargs="+", action="extend", metavar="NAME",
                   choices=("pearson", "spearman", "kendall_tau_b", "kendall_tau_c"),
                   help="statistics (default all four)")
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000; 0: none)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval coverage (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="the full report as JSON (to --out, else stdout)")
    p.add_argument("--out", metavar="FILE", help="write the JSON report here; the table still goes to stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=run)


def _key_column(header: list[str], path: str, key: str | None) -> str:
    if key:
        if key not in header:
            raise InputError(path, f"has no column {key!r} (columns: {', '.join(header)})")
        return key
    for name in ("id", "image_id"):
        if name in header:
            return name
    raise InputError(path, f"has no id or image_id column (columns: {', '.join(header)}); name the key with --key")


def _number(text: str, path: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(path, f"line {line}: column {column}: {text[:40]!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(path, f"line {line}: column {column}: {text!r} is not a finite number")
    return value


def read_scores(path: str, key: str | None, metrics: list[str] | None):
    """``(key column, {metric: {id: score}}, empty cells)`` of S.csv. Raises :class:`InputError`."""
    header, rows = _io.read_csv(path)
    key = _key_column(header, path, key)
    if metrics:
        missing = [m for m in metrics if m not in header]
        if missing:
            raise InputError(path, f"has no column {missing[0]!r} (columns: {', '.join(header)})")
        columns = list(metrics)
    else:
        columns = [h for h in header if h != key and h not in NOT_METRICS]
    if not columns:
        raise InputError(path, "has no metric column (a column per metric beside the key)")
    scores = {c: {} for c in columns}
    seen, empty = set(), 0
    for line, row in rows:
        ident = row.get(key, "")
        if not ident:
            raise InputError(path, f"line {line}: the {key} cell is empty")
        if ident in seen:
            raise InputError(path, f"line {line}: {key} {ident!r} appears twice (one row per item)")
        seen.add(ident)
        for c in columns:
            cell = row.get(c, "")
            if cell == "":
                empty += 1
                continue
            scores[c][ident] = _number(cell, path, line, c)
    if not seen:
        raise InputError(path, "has no row")
    return key, scores, empty


def read_human(path: str, key: str, column: str, group_column: str | None):
    """``({id: [ratings]}, {id: group} or None)`` of H.csv. Raises :class:`InputError`."""
    header, rows = _io.read_csv(path)
    if key not in header:
        raise InputError(path, f"has no {key} column, the key column of the scores file (columns: {', '.join(header)})")
    if column not in header:
        raise InputError(path, f"has no {column!r} column (columns: {', '.join(header)}); name it with --human-column")
    if group_column is not None and group_column not in header:
        raise InputError(path, f"has no {group_column!r} column (columns: {', '.join(header)})")
    if group_column is None and "group" in header:
        group_column = "group"
    human: dict = {}
    groups: dict | None = {} if group_column else None
    for line, row in rows:
        ident = row.get(key, "")
        if not ident:
            raise InputError(path, f"line {line}: the {key} cell is empty")
        human.setdefault(ident, []).append(_number(row.get(column, ""), path, line, column))
        if groups is not None:
            g = row.get(group_column, "")
            if not g:
                raise InputError(path, f"line {line}: the {group_column} cell is empty")
            if groups.setdefault(ident, g) != g:
                raise InputError(path, f"line {line}: {key} {ident!r} is in group {groups[ident]!r} on an earlier "
                                 f"line and {g!r} here")
    if not human:
        raise InputError(path, "has no row")
    return human, groups


def run(args) -> int:
    """Read both files, correlate, print (and write) the report; return 0."""
    _io.check_output(args.out)
    key, scores, empty = read_scores(args.scores, args.key, args.metric)
    human, groups = read_human(args.human, key, args.human_column, args.group_column)
    if not any(k in human for k in set().union(*scores.values())):
        raise InputError(args.human, f"no {key} of it has a score in {args.scores} (do the keys match?)")
    if args.resamples < 0:
        raise InputError("--resamples", f"must be 0 or more, got {args.resamples}")
    if not 0 < args.confidence < 1:
        raise InputError("--confidence", f"must be between 0 and 1, got {args.confidence}")
    try:
        result = correlate(scores, human, groups, statistics=args.statistic, n_resamples=args.resamples,
                           confidence=args.confidence, seed=args.seed, progress=_io.progress_enabled(args))
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(args.human, str(exc)) from None
    if empty:
        print(f"captioneval: {empty} empty score cell(s) in {args.scores}: those items are left out for that metric",
              file=sys.stderr)
    if result.unmatched_human:
        print(f"captioneval: {len(result.unmatched_human)} {key}(s) of {args.human} have no score in {args.scores}",
              file=sys.stderr)
    if result.unmatched_metric:
        print(f"captioneval: {len(result.unmatched_metric)} {key}(s) of {args.scores} have no human score",
              file=sys.stderr)
    text = _io.json_text(result.to_dict())
    _io.deliver(args.out, text, args.json, result.table(), "report")
    return 0
