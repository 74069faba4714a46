"""Page timing on the demo data: every dashboard page must answer in under 300 ms once its report is
cached (issue 14: reports are computed once by Celery tasks and read by pages).

Set-up (skipped for the parts already in the database, so a second run only times): the data of
``./run demo`` -- Flickr8k-Expert imported with every metric computed, Flickr8k-CrowdFlower, THumB and
PASCAL-50S with BLEU-4, ROUGE-L and CIDEr-D, and a diversity campaign over 100 Flickr8k-Expert images
rated by 20 simulated raters (2 spammers) owned by the user ``demo``; in addition, the caption-set
diversity metrics, vocabulary and lexical measures on Flickr8k-Expert (for the diversity pages).

Then each page is requested once to warm its caches (the cold time, which includes computing its
report in-process, is reported too), and ``--repeats`` more times with Django's test client in this
process (no network, no server: the figure is the view's own time, from URL resolution to the
rendered response, database queries included). Reported per page: the median and maximum
milliseconds, and the ratio of the median to the median of a reference page measured in the same
run (the dataset list, ``/``), which makes figures from different machines comparable.

Pages: the dataset list (reference), a dataset's correlation page and one scatter plot, the
meta-evaluation (benchmark) page of each benchmark, the cross-benchmark comparison, the diversity
page with its three charts, one per-image diversity page with its MDS map and a radar chart, and the
campaign owner page, its JSON report and its correlation chart.

Run: .venv/bin/python benchmarks/page_timing.py [--database-url URL] [--repeats 7] [--resamples N]
     [--limit-ms 300] [--json out.json]
``--database-url`` defaults to a SQLite file under /tmp (the quick-start database engine);
``--resamples`` is passed to the benchmark and comparison pages (default: the pages' own default).
Exit status 1 when a page's median is over ``--limit-ms`` (after warming), else 0.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=os.environ.get("DATABASE_URL") or "sqlite:////tmp/captioneval_page_timing.sqlite3")
    p.add_argument("--repeats", type=int, default=7, help="timed requests per page after the warm-up (default 7)")
    p.add_argument("--resamples", type=int, default=None, help="?resamples= of the benchmark and comparison pages")
    p.add_argument("--campaign-images", type=int, default=100, help="images of the demo diversity campaign (default 100)")
    p.add_argument("--limit-ms", type=float, default=300.0, help="the target: no page median above this (default 300)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return p.parse_args(argv)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def setup_demo(campaign_images: int) -> None:
    """The demo data of ``./run demo`` (each part skipped when it is already there)."""
    from django.contrib.auth.models import User
    from django.core.management import CommandError, call_command

    from crowd.models import Campaign, Dataset

    call_command("migrate", verbosity=0)
    data = ROOT / "data"
    if not Dataset.objects.filter(name="flickr8k-expert").exists():
        say("importing Flickr8k-Expert and computing every metric (several minutes)")
        call_command("import_dataset", "flickr8k-expert", str(data / "flickr8k"), "--name", "flickr8k-expert")
    call_command("compute_metrics", "--dataset", "flickr8k-expert", "--wait")
    # beyond ./run demo: caption-set diversity, so the diversity pages have something to show
    try:
        call_command("compute_metrics", "--dataset", "flickr8k-expert", "--metric", "diversity", "vocabulary", "lexical",
                     "--wait")
    except CommandError as exc:  # the pages without their runs are reported as such, not timed
        say(f"caption-set diversity not computed: {exc}")
    for kind, folder, name in [("flickr8k-crowdflower", "flickr8k", "flickr8k-cf"), ("thumb", "thumb", "thumb"),
                               ("pascal50s", "pascal50s", "pascal50s")]:
        if not Dataset.objects.filter(name=name).exists():
            say(f"importing {name}")
            call_command("import_dataset", kind, str(data / folder), "--name", name)
        call_command("compute_metrics", "--dataset", name, "--metric", "bleu_4", "rouge_l", "cider_d", "--wait")
    if not User.objects.filter(username="demo").exists():
        User.objects.create_superuser("demo", "demo@localhost", "demo")
    if not Campaign.objects.filter(name="demo-diversity").exists():
        say(f"a diversity campaign over {campaign_images} images, 20 simulated raters (2 spammers)")
        call_command("create_campaign", "diversity", "--dataset", "flickr8k-expert", "--name", "demo-diversity",
                     "--images", str(campaign_images), "--owner", "demo", "--gold-every", "4", "--live")
        call_command("simulate_raters", "--campaign", "demo-diversity", "--raters", "20", "--spammers", "2")


def pages(resamples: int | None) -> list[tuple[str, str, bool]]:
    """(label, URL, needs the demo login) of every page timed; the reference page first."""
    from django.urls import reverse

    from analysis.diversity import find_run
    from crowd.models import Caption, Dataset, Image
    from metrics.models import SetScore

    ds = Dataset.objects.get(name="flickr8k-expert")
    q = f"?resamples={resamples}&permutations={resamples}" if resamples is not None else ""
    out = [
        ("dataset list (reference)", reverse("analysis:index"), False),
        ("dataset", reverse("analysis:dataset", args=[ds.name]), False),
        ("dataset scatter PNG", reverse("analysis:scatter", args=[ds.name, "cider_d"]), False),
    ]
    for name in ("flickr8k-expert", "flickr8k-cf", "thumb", "pascal50s"):
        out.append((f"benchmark {name}", reverse("analysis:benchmark", args=[name]) + q, False))
    out.append(("compare", reverse("analysis:compare") + q, False))
    out += [
        ("diversity", reverse("analysis:diversity", args=[ds.name]), False),
        ("diversity scatter PNG", reverse("analysis:diversity-scatter", args=[ds.name]), False),
        ("diversity F-score PNG", reverse("analysis:diversity-fscore", args=[ds.name]), False),
        ("diversity vocabulary PNG", reverse("analysis:diversity-vocabulary", args=[ds.name]), False),
    ]
    run = find_run(ds, "self_cider") or find_run(ds, "lsa")
    if run is not None:
        image = Image.objects.filter(dataset=ds, id__in=SetScore.objects.filter(run=run).values("image_id")).order_by("key").first()
        system = Caption.objects.filter(image=image).order_by("system__name").values_list("system__name", flat=True).first()
        out += [
            ("per-image diversity", reverse("analysis:image", args=[ds.name, image.key]), False),
            ("per-image MDS PNG", reverse("analysis:image-mds", args=[ds.name, image.key]), False),
            ("per-image radar PNG", reverse("analysis:image-radar", args=[ds.name, image.key, system]), False),
        ]
    out += [
        ("campaign owner page", reverse("crowd:campaign", args=["demo-diversity"]), True),
        ("campaign report JSON", reverse("crowd:campaign-report", args=["demo-diversity"]), True),
        ("campaign chart PNG", reverse("crowd:campaign-chart", args=["demo-diversity", "diversity"]), True),
    ]
    return out


def time_pages(repeats: int, resamples: int | None) -> list[dict]:
    from django.contrib.auth.models import User
    from django.test import Client

    anonymous, owner = Client(), Client()
    owner.force_login(User.objects.get(username="demo"))
    results = []
    for label, url, login in pages(resamples):
        client = owner if login else anonymous
        t0 = time.perf_counter()
        response = client.get(url)
        cold = 1000 * (time.perf_counter() - t0)
        if response.status_code != 200:  # e.g. a diversity chart without its run: reported, not timed
            say(f"{label}: GET {url} answered {response.status_code}; not timed")
            results.append({"page": label, "url": url, "status": response.status_code})
            continue
        client.get(url)  # a second warm-up: a report queued by the first request is read now
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            response = client.get(url)
            times.append(1000 * (time.perf_counter() - t0))
            assert response.status_code == 200, (url, response.status_code)
        results.append({"page": label, "url": url, "status": 200, "cold_ms": round(cold, 1), "median_ms": round(statistics.median(times), 1),
                        "max_ms": round(max(times), 1), "bytes": len(response.content)})
        say(f"{label}: cold {cold:,.0f} ms, median {results[-1]['median_ms']} ms")
    reference = results[0]["median_ms"] or 1e-9
    for r in results:
        if r["status"] == 200:
            r["ratio_to_reference"] = round(r["median_ms"] / reference, 2)
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    import django
    from django.conf import settings

    django.setup()
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    say(f"database: {engine}; Celery: {'in-process' if settings.CELERY_TASK_ALWAYS_EAGER else settings.CELERY_BROKER_URL}")
    setup_demo(args.campaign_images)
    results = time_pages(args.repeats, args.resamples)
    width = max(len(r["page"]) for r in results)
    print(f"\n{'page':<{width}}  {'cold ms':>9}  {'median ms':>9}  {'max ms':>8}  {'x ref':>6}")
    for r in results:
        if r["status"] != 200:
            print(f"{r['page']:<{width}}  not timed: HTTP {r['status']}")
            continue
        flag = "  OVER" if r["median_ms"] > args.limit_ms else ""
        print(f"{r['page']:<{width}}  {r['cold_ms']:>9,.1f}  {r['median_ms']:>9.1f}  {r['max_ms']:>8.1f}  {r['ratio_to_reference']:>6.2f}{flag}")
    timed = [r for r in results if r["status"] == 200]
    over = [r["page"] for r in timed if r["median_ms"] > args.limit_ms]
    print(f"\n{len(timed)} pages timed ({len(results) - len(timed)} not), {args.repeats} timed requests each after warming; database {engine}; "
          f"limit {args.limit_ms:.0f} ms: {'all under' if not over else 'over: ' + ', '.join(over)}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "database": engine, "repeats": args.repeats, "resamples": args.resamples, "limit_ms": args.limit_ms,
            "reference": results[0]["page"], "pages": results, "over_limit": over,
        }, indent=2) + "\n")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
