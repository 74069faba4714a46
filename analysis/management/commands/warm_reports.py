"""python manage.py warm_reports [--dataset NAME ...] [--no-compare] [--no-campaigns]
                                 [--resamples N] [--permutations N] [--alpha A] [--seed S]

Compute now the reports the dashboard pages read (:mod:`analysis.cached_reports`), so that nobody's
first visit waits for one: for every dataset (or those named) its correlation report and the
interactive scatter of each computed metric (not for forced-choice benchmarks, whose page is the
benchmark page) and its benchmark report for each of
its protocol's criteria (the comparison page charts every one) and its example explorer table, the
cross-benchmark comparison, every campaign's report, and the dataset's bulk downloads
(``export.jsonl``/``export.csv``, stored per dataset version by :mod:`crowd.export_store`). Each report is requested exactly as a page
requests it (:func:`analysis.tasks.request_report`, same key): without a broker it is computed here,
in-process; with one it is queued for the Celery workers and this command only says so. Reports
already stored for the current inputs are left as they are. ``./run demo`` runs it before serving.

The settings are those of the pages' defaults unless given (the benchmark and compare pages take
the same ``?resamples=&permutations=&alpha=&seed=`` in their URL). Errors (an unknown dataset, a bad
setting) print one line and exit non-zero, with nothing requested.
"""
from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from analysis import cached_reports
from analysis.benchmarks import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, DEFAULT_RESAMPLES
from analysis.models import Report
from analysis.warm import reports_for, request_all
from crowd.dataset_export import EXPORT_FORMATS
from crowd.export_store import public_view, stored_export
from crowd.models import Dataset


class Command(BaseCommand):
    help = "Compute (or queue) the reports behind the dashboard pages, so no page waits for one."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", nargs="+", metavar="NAME", help="only these datasets (default: all)")
        parser.add_argument("--no-compare", action="store_true", help="skip the cross-benchmark comparison")
        parser.add_argument("--no-campaigns", action="store_true", help="skip the campaign reports")
        parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES)
        parser.add_argument("--permutations", type=int, default=DEFAULT_PERMUTATIONS)
        parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, **o):
        settings = {"resamples": o["resamples"], "seed": o["seed"], "permutations": o["permutations"],
                    "alpha": o["alpha"]}
        if not (0 <= settings["resamples"] <= 10000 and 0 <= settings["permutations"] <= 10000):
            raise CommandError("--resamples and --permutations must be between 0 and 10000")
        if not 0 < settings["alpha"] < 1:
            raise CommandError("--alpha must be between 0 and 1")
        if o["dataset"]:
            found = {d.name: d for d in Dataset.objects.filter(name__in=o["dataset"])}
            missing = [n for n in o["dataset"] if n not in found]
            if missing:
                raise CommandError(f"unknown dataset {missing[0]!r}")
            datasets = [found[n] for n in o["dataset"]]
        else:
            datasets = list(Dataset.objects.order_by("name"))
        todo = reports_for(datasets, settings, compare=not o["no_compare"],
                           compare_names=[d.name for d in datasets] if o["dataset"] else None,
                           campaigns=not o["no_campaigns"])
        for label, row, seconds in request_all(todo):
            state = row.status if row.status != Report.DONE else "ready"
            problem = cached_reports.problem(row.data) if row.status == Report.DONE else None
            note = f" (the page will say: {problem})" if problem else ""
            self.stdout.write(f"{label}: {state} in {seconds:.1f} s{note}")
        for dataset in datasets:  # the bulk downloads, stored per dataset version (crowd.export_store)
            for fmt in EXPORT_FORMATS:
                t0 = time.perf_counter()
                try:
                    stored_export(public_view(dataset), fmt)
                except ValueError:  # a format that cannot hold this dataset: the page offers no link
                    continue
                self.stdout.write(f"{dataset.name}: export.{fmt}: ready in {time.perf_counter() - t0:.1f} s")
