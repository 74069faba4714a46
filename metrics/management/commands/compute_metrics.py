"""``manage.py compute_metrics --dataset <name> [--metric M ...] [--m N] [--vectors FILE] [--model KEY=SPEC] [--wait]``.

Queues one metric run per metric on Celery and, with ``--wait`` (or when tasks run in-process
because no broker is configured), shows a progress bar until every run is done or failed. When the
broker is unreachable the command says so within seconds and leaves the runs recorded as queued
(``pending``); workers start them when they connect to the broker again.

A metric that cannot run on this machine right now (METEOR without ``java`` on PATH:
:func:`captioneval.metrics.registry.unavailable_now`) is skipped with its reason on stderr and the
others are computed (exit status 0); when every requested metric is skipped the command fails
(exit status 1) with the reasons.

The learned metrics (``--metric clip_s ref_clip_s pac_s ref_pac_s``, or the group ``learned``; the
``learned`` extra) score every candidate caption against its picture from the dataset's image source
(``set_image_source``); ``--model KEY=SPEC`` names a metric's weights on local disk (default:
``LEARNED_MODELS``, then the metric's default file in ``$CAPTIONEVAL_MODELS_DIR``). Their runs go to
the ``CELERY_GPU_QUEUE`` queue when one is configured (:mod:`metrics.learned`).
"""
import time

from celery import current_app as celery_app  # evalsite.celery's app (wiring layer: not imported)
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from metrics import judges, pipeline, tasks
from metrics.models import MetricRun
from captioneval.metrics.registry import DEFAULT_METRICS, GROUPS, METRICS, expand, unavailable_now
from metrics.signals import run_progress


class Command(BaseCommand):
    help = "Compute caption metrics for every candidate caption of a dataset (in Celery workers)."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True, help="dataset name")
        parser.add_argument(
            "--metric", nargs="+", action="extend", dest="metrics", metavar="M",
            help=f"metrics or groups to compute (default: coco). Groups: "
            + "; ".join(f"{g} = {' '.join(k)}" for g, k in GROUPS.items()) + f". Metrics: {', '.join(METRICS)}",
        )
        parser.add_argument(
            "--m", type=int, default=None,
            help="set-level metrics: use the first M captions of each caption set (default: all; the official "
            "Self-CIDEr script used 5)",
        )
        parser.add_argument(
            "--vectors", metavar="FILE", default=None,
            help="VIFIDEL: word2vec (.bin/.txt) or GloVe text file (default: settings.VIFIDEL_VECTORS, else the "
            "bundled GloVe 6B 50-d)",
        )
        parser.add_argument(
            "--model", action="append", default=[], metavar="KEY=SPEC", dest="models",
            help="weights of a learned metric on local disk, e.g. clip_s=/models/ViT-B-32.pt (repeat per metric; "
            "default: settings.LEARNED_MODELS, then the metric's default file in $CAPTIONEVAL_MODELS_DIR)",
        )
        parser.add_argument("--wait", action="store_true", help="wait for the workers and show progress")
        parser.add_argument("--force", action="store_true", help="discard stored scores and compute again")
        parser.add_argument(
            "--cider-df", metavar="FILE",
            help="CIDEr-D document-frequency table (JSON: {\"n_documents\": N, \"counts\": {\"w1 w2\": df}}); "
            "default: the dataset's own references",
        )
        parser.add_argument("--timeout", type=float, default=None, help="with --wait: give up after this many seconds")
        parser.add_argument("--judge-max-requests", type=int, default=None, metavar="N",
                            help="LLM judges (clair, fleur, ref_fleur): at most N HTTP requests per run, retries "
                            "included, answers read from the reply cache not counted (default: unlimited); a spent "
                            "budget stops the run with its progress kept")
        parser.add_argument("--judge-max-tokens", type=int, default=None, metavar="N",
                            help="LLM judges: at most N tokens per run, as the server reports them (usage.total_tokens)")
        parser.add_argument("--judge-failure", choices=("nan", "reference"), default="nan",
                            help="LLM judges: a caption whose answer cannot be parsed scores NaN, left out of means "
                            "(default), or as the reference code scores it (CLAIR: 0; refused by FLEUR)")

    def handle(self, *args, dataset, metrics, wait, force, timeout, cider_df, m, vectors, models=(), judge_max_requests=None,
               judge_max_tokens=None, judge_failure="nan", **options):
        chosen_models = {}
        for item in models or ():
            key, sep, spec = item.partition("=")
            if not sep or not key or not spec:
                raise CommandError(f"--model: expected KEY=SPEC (e.g. clip_s=/models/ViT-B-32.pt), got {item!r}")
            chosen_models[key] = spec
        skipped = unavailable_now(metrics or DEFAULT_METRICS)
        if skipped:
            rest = [k for k in expand(metrics or DEFAULT_METRICS) if k not in skipped]
            if not rest:
                raise CommandError("; ".join(skipped.values()))
            for reason in skipped.values():
                self.stderr.write(reason)
            metrics = rest
        try:
            runs = pipeline.plan_runs(dataset, metrics, force=force, cider_df=cider_df, m=m, vectors=vectors,
                                      models=chosen_models, judge={"failure": judge_failure,
                                                                   "max_requests": judge_max_requests,
                                                                   "max_tokens": judge_max_tokens})
        except pipeline.PipelineError as exc:
            raise CommandError(str(exc)) from None
        todo = [r for r in runs if r.status != MetricRun.DONE]
        for run in runs:
            if run.status == MetricRun.DONE:
                self.stdout.write(f"{run.metric}: up to date ({run.completed:,} scores, run {run.pk})")
        if not todo:
            return
        eager = bool(celery_app.conf.task_always_eager)
        show = eager or wait
        bar = tqdm(
            total=sum(r.total for r in todo), initial=sum(r.completed for r in todo), unit="unit",
            desc="scoring", disable=not show, dynamic_ncols=True,
        )
        done_by_run = {r.pk: r.completed for r in todo}

        def on_progress(sender, run, **kwargs):
            if run.pk in done_by_run:
                done_by_run[run.pk] = run.completed
                bar.n = sum(done_by_run.values())
                bar.set_postfix_str(run.metric, refresh=False)
                bar.refresh()

        run_progress.connect(on_progress, weak=False)
        try:
            pending = tasks.start_runs(todo)
            if pending:
                bar.clear()
                ids = ", ".join(str(r.pk) for r in pending)
                self.stdout.write(self.style.WARNING(
                    f"the message broker (CELERY_BROKER_URL) is unreachable: {len(pending)} metric run(s) (ids {ids}) "
                    "recorded as queued; they will start when the broker is back and a worker connects "
                    "(workers resume unfinished runs), no need to run this command again"))
            if not eager and not wait:
                bar.close()
                queued = [r for r in todo if r not in pending]
                if queued:
                    ids = ", ".join(str(r.pk) for r in queued)
                    self.stdout.write(
                        f"queued {len(queued)} metric run(s) (ids {ids}); follow them on the dashboard or use --wait")
                return
            if not eager:
                self._poll(todo, bar, timeout)
        finally:
            run_progress.disconnect(on_progress)
            bar.close()
        self._report([MetricRun.objects.get(pk=r.pk) for r in todo])

    def _poll(self, runs, bar, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        ids = [r.pk for r in runs]
        while True:
            fresh = list(MetricRun.objects.filter(pk__in=ids))
            bar.n = sum(r.completed for r in fresh)
            bar.refresh()
            if all(r.status in (MetricRun.DONE, MetricRun.FAILED) for r in fresh):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise CommandError(f"timed out after {timeout:g} s; runs continue in the workers")
            time.sleep(0.5)

    def _report(self, runs):
        failed = []
        for run in runs:
            took = f"{run.wall_seconds:.1f} s" if run.wall_seconds is not None else "-"
            self.stdout.write(f"{run.metric}: {run.status}, {run.completed:,}/{run.total:,} scores, {took}")
            if judges.is_judge(run.metric):
                self.stdout.write(f"  {judges.describe(judges.summary(run))}")
            if run.status != MetricRun.DONE:
                failed.append(run)
        if failed:
            errors = "; ".join(f"{r.metric}: {r.error or r.status}" for r in failed)
            raise CommandError(f"{len(failed)} metric run(s) did not finish: {errors}")
