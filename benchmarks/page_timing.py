"""Page timing over every URL pattern on the demo data (issue 15: no page or chart over 1 s once the
reports are computed; reports are computed by Celery tasks and read by pages, issue 14).

What it does, in order:

1. Prepares the demo data on a throw-away database (a new SQLite file in a temporary folder, the
   quick-start engine, deleted at the end; ``--database-url`` uses a database you give instead and
   keeps it, and a second run on it skips what is already there): the data of ``./run demo`` --
   Flickr8k-Expert imported with every metric computed, Flickr8k-CrowdFlower, THumB and PASCAL-50S
   with BLEU-4, ROUGE-L and CIDEr-D, the caption-set diversity measures on Flickr8k-Expert, and a
   diversity campaign over 100 Flickr8k-Expert images rated by 20 simulated raters (2 spammers)
   owned by the superuser ``demo``.
2. Computes the reports the pages read (``python manage.py warm_reports``), as ``./run demo`` does.
3. Requests every URL pattern of the project (Django's admin only by its index) as the owner ``demo``,
   with arguments taken from the demo data (:func:`examples`), and every same-site chart or download
   the HTML pages link to (``src``, ``href`` and ``data-*`` attributes ending in .png, .svg, .pdf,
   .json, .csv, .tex, or containing ``/chart``). A pattern this script has no example for is
   reported and makes it exit 1, so a new page cannot go untimed. The explorer is also timed with
   the filters, sorts and pages of :data:`QUERY_VARIANTS` on every benchmark, Flickr8k-CrowdFlower's
   47,830 candidates the largest.

Each URL is requested once to warm caches (its time is the ``cold`` column), then ``--repeats`` more
times with Django's test client in this process (no network, no server: the figure is the view's own
time, from URL resolution to the rendered response, database queries included). Reported per URL:
the HTTP status, the median and maximum seconds, and the ratio of the median to the median of a
reference page measured in the same run (the dataset list, ``/``), which makes figures from different
machines comparable. A GET on a POST-only URL is timed like any other (its status is 405).

Run: .venv/bin/python benchmarks/page_timing.py [--database-url URL] [--repeats 5] [--limit-s 1.0]
     [--json FILE]
JSON: ``{"pages": [{"url", "status", "seconds", "cold_seconds", "max_seconds", "ratio_to_reference",
"pattern"}], "database", "repeats", "limit_seconds", "over_limit", "no_example"}``.
Exit status 1 when a URL's median is over ``--limit-s``, or a pattern has no example; else 0.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEMO_CAMPAIGN = "demo-diversity"
BENCHMARKS = ("flickr8k-expert", "flickr8k-cf", "thumb", "pascal50s")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=None,
                   help="use (and keep) this database instead of a throw-away SQLite file")
    p.add_argument("--repeats", type=int, default=5, help="timed requests per URL after the warm-up (default 5)")
    p.add_argument("--campaign-images", type=int, default=100, help="images of the demo diversity campaign (default 100)")
    p.add_argument("--limit-s", type=float, default=1.0, help="the target: no URL's median above this (default 1.0 s)")
    p.add_argument("--max-linked", type=int, default=400, help="at most this many linked charts/downloads (default 400)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    return p.parse_args(argv)


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def setup_demo(campaign_images: int) -> None:
    """The demo data of ``./run demo`` and the reports its pages read (each part skipped when it is
    already there)."""
    from django.contrib.auth.models import User
    from django.core.management import CommandError, call_command

    from crowd.models import Campaign, Dataset

    call_command("migrate", verbosity=0)
    data = ROOT / "data"
    if not Dataset.objects.filter(name="flickr8k-expert").exists():
        say("importing Flickr8k-Expert and computing every metric (several minutes)")
        call_command("import_dataset", "flickr8k-expert", str(data / "flickr8k"), "--name", "flickr8k-expert")
    call_command("compute_metrics", "--dataset", "flickr8k-expert", "--wait")
    try:  # beyond ./run demo: caption-set diversity, so the diversity pages have something to show
        call_command("compute_metrics", "--dataset", "flickr8k-expert", "--metric", "diversity", "vocabulary", "lexical",
                     "--wait")
    except CommandError as exc:
        say(f"caption-set diversity not computed: {exc}")
    for kind, folder, name in [("flickr8k-crowdflower", "flickr8k", "flickr8k-cf"), ("thumb", "thumb", "thumb"),
                               ("pascal50s", "pascal50s", "pascal50s")]:
        if not Dataset.objects.filter(name=name).exists():
            say(f"importing {name}")
            call_command("import_dataset", kind, str(data / folder), "--name", name)
        call_command("compute_metrics", "--dataset", name, "--metric", "bleu_4", "rouge_l", "cider_d", "--wait")
    if not User.objects.filter(username="demo").exists():
        User.objects.create_superuser("demo", "demo@localhost", "demo")
    if not Dataset.objects.get(name="flickr8k-expert").image_source:  # as ./run demo: labelled placeholders
        call_command("placeholder_images", "flickr8k-expert", str(ROOT / "var" / "demo-images" / "flickr8k"),
                     "--set-source")
    if not Campaign.objects.filter(name=DEMO_CAMPAIGN).exists():
        say(f"a diversity campaign over {campaign_images} images, 20 simulated raters (2 spammers)")
        call_command("create_campaign", "diversity", "--dataset", "flickr8k-expert", "--name", DEMO_CAMPAIGN,
                     "--images", str(campaign_images), "--owner", "demo", "--gold-every", "4", "--live")
        call_command("simulate_raters", "--campaign", DEMO_CAMPAIGN, "--raters", "20", "--spammers", "2")
    say("computing the reports the pages read (warm_reports)")
    t0 = time.perf_counter()
    call_command("warm_reports")
    say(f"reports computed in {time.perf_counter() - t0:,.0f} s")


def url_patterns():
    """Every URL pattern of the project as (reverse name, route, [argument names]); Django's admin
    only by its index (``admin:index``), the REST API (``/api/``, tested by tests/test_api_*.py,
    its reports the pages' stored reports timed here) only by its schema and its docs page
    (``api:schema``, ``api:docs``)."""
    from django.urls import URLResolver, get_resolver

    def walk(patterns, prefix, namespace):
        for p in patterns:
            if isinstance(p, URLResolver):
                if p.app_name == "admin":
                    yield "admin:index", prefix + str(p.pattern), []
                    continue
                if p.app_name == "api":
                    yield "api:schema", prefix + str(p.pattern) + "schema/", []
                    yield "api:docs", prefix + str(p.pattern) + "docs/", []
                    continue
                yield from walk(p.url_patterns, prefix + str(p.pattern), p.namespace or namespace)
            elif p.name:
                yield (f"{namespace}:{p.name}" if namespace else p.name), prefix + str(p.pattern), list(p.pattern.converters)

    return list(walk(get_resolver().url_patterns, "", None))


#: the URL arguments :func:`examples` gives a value for (tests/test_page_timing_script.py checks that
#: every URL pattern's arguments are among them, so a new page cannot go untimed)
ARGUMENTS = frozenset({"name", "level", "statistic", "id", "key", "system", "metric", "pk", "item_pk", "token",
                       "criterion", "fmt", "slug", "uidb64", "action", "filename"})


def examples() -> dict:
    """Argument values from the demo data: a dict from argument name to a value, and from
    ``"<reverse name>"`` to a list of kwargs dicts for the patterns that need specific ones."""
    from django.contrib.auth.models import User
    from django.contrib.auth.tokens import default_token_generator
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    from django.urls import reverse

    from analysis.diversity import find_run
    from crowd import engine
    from crowd.models import Assignment, Campaign, Caption, Dataset, Image
    from metrics.models import SetScore

    demo = User.objects.get(username="demo")
    ds = Dataset.objects.get(name="flickr8k-expert")
    campaign = Campaign.objects.get(name=DEMO_CAMPAIGN)
    run = find_run(ds, "self_cider") or find_run(ds, "lsa")
    images = Image.objects.filter(dataset=ds)
    if run is not None:
        images = images.filter(id__in=SetScore.objects.filter(run=run).values("image_id"))
    image = images.order_by("key").first()
    system = Caption.objects.filter(image=image).order_by("system__name").values_list("system__name", flat=True).first()
    assignment = Assignment.objects.filter(item__campaign=campaign).order_by("pk").first()
    token = engine.invite_workers(1, label="page timing", campaign=campaign)[0].token
    item = campaign.items.order_by("pk").first()
    from django.test import Client
    from analysis.models import Report

    owner = Client()
    owner.force_login(demo)
    page = owner.get(reverse("analysis:benchmark", args=[ds.name])).content.decode()
    chart = re.search(r"/benchmark/chart/([\w-]+)/([^/\"'?]+)\.(?:png|json)", page)
    level, statistic = chart.groups() if chart else ("item", "tau_c")
    report = Report.objects.filter(status=Report.DONE).order_by("-pk").first()
    base = {"name": ds.name, "level": level, "statistic": statistic, "id": report.pk if report else 1, "key": image.key, "system": system, "metric": "cider_d", "pk": assignment.pk,
            "item_pk": item.pk, "token": token, "criterion": "diversity", "fmt": "csv", "slug": ds.name,
            "uidb64": urlsafe_base64_encode(force_bytes(demo.pk)), "action": "status", "filename": "items.csv"}
    assert set(base) == ARGUMENTS, sorted(set(base) ^ ARGUMENTS)
    per_name = {
        "analysis:benchmark": [{"name": n} for n in BENCHMARKS],
        "analysis:benchmark-json": [{"name": n} for n in BENCHMARKS],
        "analysis:benchmark-significance": [{"name": n} for n in BENCHMARKS],
        "analysis:dataset": [{"name": n} for n in BENCHMARKS],
        "analysis:explorer": [{"name": n} for n in BENCHMARKS],
        "crowd:campaign-export": [{"name": DEMO_CAMPAIGN, "fmt": f} for f in ("csv", "jsonl")],
        "crowd:dataset-export": [{"name": n, "fmt": f} for n in BENCHMARKS for f in ("csv", "jsonl")],
        "password_reset_confirm": [{"uidb64": base["uidb64"], "token": default_token_generator.make_token(demo)}],
    }
    return {"base": base, "per_name": per_name, "campaign": campaign.name}


def kwargs_for(name: str, route: str, args: list[str], ex: dict) -> list[dict] | None:
    """The argument sets to request ``name`` with, or None when there is no example for an argument."""
    if name in ex["per_name"]:
        return ex["per_name"][name]
    if not args:
        return [{}]
    kwargs = {}
    for a in args:
        if a not in ex["base"]:
            return None
        kwargs[a] = ex["base"][a]
    if "name" in kwargs and route.startswith(("campaigns/", "rate/", "mturk/")):
        kwargs["name"] = ex["campaign"]
    if route.startswith("reports/"):  # a stored report's status
        kwargs["pk"] = ex["base"]["id"]
    return [kwargs]


# Query strings timed on top of the bare URL: the explorer filters, sorts and pages a stored table
# of every candidate caption (47,830 on Flickr8k-CrowdFlower) in the request.
QUERY_VARIANTS = {
    "analysis:explorer": ({"sort": "cider_d", "order": "desc", "page": "7"}, {"q": "dog", "sort": "text"},
                          {"disagree": "cider_d", "page": "3"}, {"hmin": "0.5", "sort": "bleu_4", "order": "desc"},
                          {"q": "a", "disagree": "bleu_4", "sort": "image", "order": "desc"}),
}


LINK = re.compile(r"""(?:src|href|data-[a-z-]+)\s*=\s*["']([^"'#]+)["']""")


def linked_urls(html: str) -> list[str]:
    """Same-site charts and downloads a page links to."""
    from html import unescape

    out = []
    for raw in LINK.findall(html):
        url = unescape(raw)
        if not url.startswith("/") or url.startswith(("//", "/static/", "/admin/")):
            continue
        path = url.split("?", 1)[0]
        if path.endswith((".png", ".svg", ".pdf", ".json", ".csv", ".tex")) or "/chart" in path:
            out.append(url)
    return out


def _get(client, url: str):
    """GET ``url`` and read the whole body (a streamed download included: its time is the transfer's),
    returning (response, body bytes)."""
    response = client.get(url)
    body = b"".join(response.streaming_content) if getattr(response, "streaming", False) else response.content
    return response, body


def time_url(client, url: str, repeats: int) -> dict:
    t0 = time.perf_counter()
    response, body = _get(client, url)
    cold = time.perf_counter() - t0
    _get(client, url)  # a second warm-up: a report queued by the first request is read now
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        response, body = _get(client, url)
        times.append(time.perf_counter() - t0)
    return {"url": url, "status": response.status_code, "seconds": round(statistics.median(times), 4),
            "cold_seconds": round(cold, 4), "max_seconds": round(max(times), 4), "bytes": len(body),
            "html": body.decode("utf-8", "replace") if "html" in response.get("Content-Type", "") else ""}


def time_everything(repeats: int, max_linked: int) -> tuple[list[dict], list[str]]:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    owner = Client()
    owner.force_login(User.objects.get(username="demo"))
    ex = examples()
    results, no_example, seen = [], [], set()
    patterns = sorted(url_patterns(), key=lambda p: p[0] != "analysis:index")  # the reference first
    for name, route, args in patterns:
        sets = kwargs_for(name, route, args, ex)
        if sets is None:
            no_example.append(f"{name} ({route})")
            say(f"NO EXAMPLE for {name} ({route})")
            continue
        for kwargs in sets:
            bare = reverse(name, kwargs=kwargs)
            for query in ({}, *QUERY_VARIANTS.get(name, ())):
                url = f"{bare}?{urlencode(query)}" if query else bare
                if url in seen:
                    continue
                seen.add(url)
                r = time_url(owner, url, repeats) | {"pattern": name}
                results.append(r)
                say(f"{r['status']} {url}: median {1000 * r['seconds']:,.1f} ms (cold {1000 * r['cold_seconds']:,.0f} ms)")
    linked = []
    for r in list(results):
        for url in linked_urls(r.pop("html", "")):
            if url not in seen and len(linked) < max_linked:
                seen.add(url)
                linked.append(url)
    for url in linked:
        r = time_url(owner, url, repeats) | {"pattern": "(linked from a page)"}
        r.pop("html", None)
        results.append(r)
        say(f"{r['status']} {url}: median {1000 * r['seconds']:,.1f} ms (cold {1000 * r['cold_seconds']:,.0f} ms)")
    reference = results[0]["seconds"] or 1e-9
    for r in results:
        r.pop("html", None)
        r["ratio_to_reference"] = round(r["seconds"] / reference, 2)
    return results, no_example


def main(argv=None) -> int:
    args = parse_args(argv)
    scratch = None
    if args.database_url is None:
        scratch = Path(tempfile.mkdtemp(prefix="captioneval_page_timing_"))
        args.database_url = f"sqlite:///{scratch / 'db.sqlite3'}"
    os.environ["DATABASE_URL"] = args.database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "evalsite.settings")
    try:
        import django
        from django.conf import settings

        django.setup()
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        settings.RATER_RATE_LIMIT = "100000/m"  # the script requests rater pages many times
        settings.REPORT_RATE_LIMIT = "0"  # and every report page, download and chart, from one client
        engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        say(f"database: {engine} ({'throw-away' if scratch else args.database_url}); "
            f"Celery: {'in-process' if settings.CELERY_TASK_ALWAYS_EAGER else settings.CELERY_BROKER_URL}")
        setup_demo(args.campaign_images)
        results, no_example = time_everything(args.repeats, args.max_linked)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    width = min(90, max(len(r["url"]) for r in results))
    print(f"\n{'URL':<{width}}  {'status':>6}  {'cold s':>7}  {'median s':>8}  {'max s':>6}  {'x ref':>6}")
    for r in results:
        flag = "  OVER" if r["seconds"] > args.limit_s else ""
        print(f"{r['url'][:width]:<{width}}  {r['status']:>6}  {r['cold_seconds']:>7.3f}  {r['seconds']:>8.4f}  "
              f"{r['max_seconds']:>6.3f}  {r['ratio_to_reference']:>6.2f}{flag}")
    over = [r["url"] for r in results if r["seconds"] > args.limit_s]
    errors = [r["url"] for r in results if r["status"] >= 500]
    slowest = max(results, key=lambda r: r["seconds"])
    print(f"\n{len(results)} URLs ({len(results) - sum(r['pattern'] == '(linked from a page)' for r in results)} from "
          f"URL patterns, the rest linked from pages), {args.repeats} timed requests each after warming; database "
          f"{engine}; slowest median {slowest['seconds']:.3f} s ({slowest['url']}); limit {args.limit_s:g} s: "
          f"{'all under' if not over else 'over: ' + ', '.join(over)}; server errors: {len(errors)}; "
          f"patterns without an example: {len(no_example)}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "database": engine, "repeats": args.repeats, "limit_seconds": args.limit_s, "reference": results[0]["url"],
            "pages": results, "over_limit": over, "server_errors": errors, "no_example": no_example,
        }, indent=2) + "\n")
    return 1 if over or no_example or errors else 0


if __name__ == "__main__":
    sys.exit(main())
