"""Reports computed once and read by pages (analysis.cached_reports, analysis.tasks): a campaign
page, its JSON and its chart read the stored report instead of recomputing the bootstrap; a new or
released judgment gives a new report; the per-image diversity page reads its stored view instead of
tokenising captions and building document frequencies. Real data: the Flickr8k-Expert subset with
simulated raters, the COCO caption sets of the Self-CIDEr example."""
import json
import re
from unittest import mock

import pytest

from analysis.models import Report
from crowd import engine
from crowd.models import Campaign, HumanJudgment, Image, Worker
from crowd.simulate import simulate
from metrics.models import CaptionTokens

from .coco_sets import write_coco_files
from .conftest import run_command
from .test_campaign_pages import alice, scored  # noqa: F401 - fixtures

pytestmark = pytest.mark.django_db


def _boom(*args, **kwargs):
    raise AssertionError("computed during a page request")


def test_campaign_pages_read_the_cached_report_until_judgments_change(scored, alice, client):  # noqa: F811
    campaign = engine.create_campaign(scored, "rating", name="cached", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 5}, k=3)
    simulate(campaign, raters=2, seed=5, noise=0.05)
    client.force_login(alice)
    first = client.get("/campaigns/cached/report.json").json()
    n = HumanJudgment.objects.filter(campaign=campaign, criterion="relevance").count()
    items = campaign.items.filter(is_gold=False).count()  # the candidate captions of 5 images
    assert n == 2 * items
    assert first["agreement"]["relevance"]["ratings"] == n
    assert first["correlations"]["relevance"]["cider_d"]["n_ratings"] == n
    assert first["progress"]["judgments"] == n
    assert Report.objects.filter(campaign=campaign, status=Report.DONE).count() == 1

    with mock.patch("analysis.campaigns.campaign_report", _boom):
        page = client.get("/campaigns/cached/").content.decode()
        assert 'data-criterion="relevance"' in page and "CIDEr-D" in page and 'id="report-computing"' not in page
        chart = client.get("/campaigns/cached/correlations/relevance.png")
        assert chart.status_code == 200 and chart.content[:4] == b"\x89PNG"
        again = client.get("/campaigns/cached/report.json").json()
        assert again["correlations"] == first["correlations"] and again["ceiling"] == first["ceiling"]
        assert again["agreement"] == first["agreement"]
        # one more rater: new judgments, a new key, so the report must be computed again (here it cannot)
        simulate(campaign, raters=1, seed=6, noise=0.05)
        failed = client.get("/campaigns/cached/report.json")
        assert failed.status_code == 500 and failed.json()["status"] == Report.FAILED
        assert "computed during a page request" in failed.json()["error"]
        page = client.get("/campaigns/cached/").content.decode()
        assert "could not be computed" in page and 'data-criterion="relevance"' in page  # the previous report
        assert client.get("/campaigns/cached/correlations/relevance.png").status_code == 503

    # a blocked worker's judgments are released: the key changes again and the report follows
    rater = first["workers"][0]["worker"]  # one of the first two raters (the report had them)
    provider, _, external_id = rater.partition(":")
    released = engine.release_counted_work(campaign, Worker.objects.get(provider=provider, external_id=external_id))
    assert released > 0
    n_now = HumanJudgment.objects.filter(campaign=campaign, criterion="relevance").count()
    assert n_now == 3 * items - released  # every rater judged every item once
    after = client.get("/campaigns/cached/report.json").json()
    assert after["agreement"]["relevance"]["ratings"] == n_now
    assert after["correlations"]["relevance"]["cider_d"]["n_ratings"] == n_now
    assert after["progress"]["judgments"] == n_now
    # the worker table is cached too, and follows the release
    counted = {w["worker"]: w["counted"] for w in after["workers"]}
    assert counted[rater] == 0 and sorted(counted.values()) == [0, items, items]
    assert {w["worker"]: w["counted"] for w in first["workers"]}[rater] == items
    # the superseded reports are gone; the current one is stored once
    assert list(Report.objects.filter(campaign=campaign).values_list("status", flat=True)) == [Report.DONE]


def test_image_page_reads_its_cached_view_and_never_tokenises(tmp_path, client):
    d = write_coco_files(tmp_path)
    run_command(
        "import_coco", "--name", "div", "--annotations", str(d / "captions.json"), "--results", f"merge={d / 'merge.json'}",
        "--results", f"thumb-models={d / 'thumb_models.json'}", "--objects", str(d / "objects.csv"),
    )
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "lsa", "--wait")
    first_key, other_key = Image.objects.filter(dataset__name="div").order_by("key").values_list("key", flat=True)[:2]
    url = f"/datasets/div/images/{first_key}/"
    page = client.get(url).content.decode()  # computes the view (in-process task: no broker in tests)
    assert page.count('class="caption-set"') == 3 and 'id="mds"' in page
    # the page would have to tokenise again without the stored tokens, and rebuild document frequencies
    CaptionTokens.objects.filter(caption__image__dataset__name="div").delete()
    with mock.patch("metrics.pipeline.ptb_tokenize", _boom), \
            mock.patch("metrics.pipeline._document_frequency_for_sets", _boom):
        assert client.get(url).content.decode() == page
        for png in (f"{url}mds.png", f"{url}radar/merge.png", f"{url}radar/coco-references.png"):
            response = client.get(png)
            assert response.status_code == 200 and response.content[:4] == b"\x89PNG", png
        # an image whose view is not stored yet must be computed, which needs the tokenizer
        other = client.get(f"/datasets/div/images/{other_key}/").content.decode()
        assert "could not be computed" in other and "computed during a page request" in other
        assert client.get(f"/datasets/div/images/{other_key}/mds.png").status_code == 503


def test_with_a_broker_the_page_says_the_report_is_computing_and_a_worker_finishes_it(scored, alice, client):  # noqa: F811
    from analysis.tasks import compute_report

    campaign = engine.create_campaign(scored, "rating", name="queued", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 5}, k=3)
    simulate(campaign, raters=3, seed=2, noise=0.05)
    client.force_login(alice)
    queued = []
    with mock.patch.object(compute_report, "delay", side_effect=queued.append):  # a broker holds the message
        page = client.get("/campaigns/queued/").content.decode()
        assert 'id="report-computing" data-status="pending"' in page and "is queued" in page
        assert "window.location.reload()" in page and 'id="agreement"' not in page
        assert 'id="progress"' in page and f'id="p-judgments">{3 * campaign.items.filter(is_gold=False).count()}</span> / ' in page
        response = client.get("/campaigns/queued/report.json")
        assert response.status_code == 202 and response.json()["status"] == Report.PENDING
        assert response["Retry-After"] == "2"
        assert client.get("/campaigns/queued/correlations/relevance.png").status_code == 503
    assert len(queued) == 1  # queued once, not once per request
    assert compute_report(queued[0]) == Report.DONE  # what the worker runs
    page = client.get("/campaigns/queued/").content.decode()
    assert 'id="report-computing"' not in page and 'id="agreement"' in page and 'data-criterion="relevance"' in page
    report = client.get("/campaigns/queued/report.json").json()
    assert report["bootstrap"]["n_resamples"] == 1000
    assert report["agreement"]["relevance"]["ratings"] == HumanJudgment.objects.filter(
        campaign=campaign, criterion="relevance").count()


# --- the dataset page, the benchmark page and the cross-benchmark comparison -----------------------------------
BENCH = "?resamples=100&permutations=100&seed=3"


def _builders_raise():
    """Every function that builds a dataset, benchmark or comparison report made to fail."""
    return (mock.patch("analysis.cached_reports.correlation_report", _boom),
            mock.patch("analysis.reports.correlation_report", _boom),
            mock.patch("analysis.benchmarks.benchmark_report", _boom),
            mock.patch("analysis.benchmarks.comparison", _boom))


def test_dataset_benchmark_and_compare_pages_read_the_stored_report(scored, client):  # noqa: F811
    from django.http import JsonResponse

    from analysis.benchmarks import benchmark_report, comparison
    from analysis.reports import correlation_report

    urls = ["/datasets/sub/", "/datasets/sub/correlations.json", "/datasets/sub/correlations.csv",
            f"/datasets/sub/benchmark/{BENCH}", f"/datasets/sub/benchmark.json{BENCH}",
            f"/datasets/sub/benchmark/significance.png{BENCH}", f"/compare/{BENCH}", f"/compare.json{BENCH}",
            f"/compare.csv{BENCH}", f"/compare.tex{BENCH}"]
    first = {url: client.get(url) for url in urls}  # computed in-process (no broker in tests)
    assert all(r.status_code == 200 for r in first.values()), {u: r.status_code for u, r in first.items()}
    page = first["/datasets/sub/"].content.decode()
    assert 'data-metric="cider_d"' in page and 'id="report-computing"' not in page
    # the downloads are the documented formats, byte for byte those of the report computed directly
    direct = correlation_report("sub", use_cache=False)
    assert first["/datasets/sub/correlations.json"].content == JsonResponse(direct, json_dumps_params={"indent": 2}).content
    bench = benchmark_report("sub", n_resamples=100, seed=3, n_permutations=100, use_cache=False)
    assert first[f"/datasets/sub/benchmark.json{BENCH}"].content == JsonResponse(bench, json_dumps_params={"indent": 2}).content
    assert first[f"/compare.json{BENCH}"].json() == json.loads(json.dumps(
        comparison(None, n_resamples=100, seed=3, n_permutations=100)))
    assert {r.kind for r in Report.objects.filter(status=Report.DONE)} == {
        Report.CORRELATIONS, Report.BENCHMARK, Report.COMPARISON}
    patches = _builders_raise()
    with patches[0], patches[1], patches[2], patches[3]:
        for url in urls:
            again = client.get(url)
            assert again.status_code == 200 and again.content == first[url].content, url
        # settings are validated before any report is read or requested, with the same messages as before
        bad = client.get("/datasets/sub/benchmark.json?resamples=lots")
        assert bad.status_code == 400 and "resamples must be a number" in bad.content.decode()
        assert client.get("/compare.csv?alpha=2").status_code == 400
        assert "weighting must be gap:" in client.get("/datasets/sub/?weighting=bogus").content.decode()
        assert client.get("/datasets/sub/correlations.json?weighting=bogus").status_code == 404
        assert Report.objects.count() == 3
        # a new metric run is a new input: the report must be computed again (here it cannot), and the
        # page says so over the previous report
        run_command("compute_metrics", "--dataset", "sub", "--metric", "rouge_l", "--wait")
        failed = client.get("/datasets/sub/correlations.json")
        assert failed.status_code == 500 and "computed during a page request" in failed.json()["error"]
        page = client.get("/datasets/sub/").content.decode()
        assert "could not be computed" in page and 'data-metric="cider_d"' in page and 'data-metric="rouge_l"' not in page
    # a report that cannot be made is stored as its problem and shown as before
    page = client.get("/datasets/sub/benchmark/?criterion=nope").content.decode()
    assert 'id="no-report"' in page and "has no judgments on criterion &#x27;nope&#x27;" in page
    assert client.get("/compare.json?dataset=missing").status_code == 400


def test_with_a_broker_dataset_benchmark_and_compare_gets_only_queue_the_reports(scored, client):  # noqa: F811
    from analysis.tasks import compute_report

    queued = []
    patches = _builders_raise()
    with mock.patch.object(compute_report, "delay", side_effect=queued.append), \
            patches[0], patches[1], patches[2], patches[3]:
        for url in ("/datasets/sub/", f"/datasets/sub/benchmark/{BENCH}", f"/compare/{BENCH}"):
            page = client.get(url).content.decode()
            assert 'id="report-computing" data-status="pending"' in page and "is queued" in page, url
            assert "window.location.reload()" in page and 'id="no-report"' not in page, url
        assert 'id="correlations"' not in client.get("/datasets/sub/").content.decode()
        for url in ("/datasets/sub/correlations.json", f"/datasets/sub/benchmark.json{BENCH}", f"/compare.json{BENCH}"):
            response = client.get(url)
            assert response.status_code == 202 and response.json()["status"] == Report.PENDING, url
            assert response["Retry-After"] == "2"
        for url in ("/datasets/sub/correlations.csv", f"/compare.csv{BENCH}", f"/compare.tex{BENCH}"):
            response = client.get(url)
            assert response.status_code == 202 and response["Retry-After"] == "2", url
        assert client.get(f"/datasets/sub/benchmark/chart/item/kendall_tau_c.png{BENCH}").status_code == 503
    assert len(queued) == 3  # one per report, not one per request
    assert [compute_report(pk) for pk in queued] == [Report.DONE] * 3  # what the worker runs
    page = client.get("/datasets/sub/").content.decode()
    assert 'id="report-computing"' not in page and 'data-metric="cider_d"' in page and 'data-metric="bleu_4"' in page
    assert client.get("/datasets/sub/correlations.json").json()["bootstrap"]["n_resamples"] == 1000
    bench = client.get(f"/datasets/sub/benchmark.json{BENCH}").json()
    assert bench["settings"]["n_resamples"] == 100 and bench["settings"]["seed"] == 3
    matrix = client.get(f"/compare.json{BENCH}").json()
    assert [c["dataset"] for c in matrix["columns"]] == ["sub"] and {r["metric"] for r in matrix["rows"]} == {"bleu_4", "cider_d"}


def test_warm_reports_computes_what_the_pages_read(scored, alice, client):  # noqa: F811
    """``warm_reports`` requests every report exactly as the pages do: afterwards no page of the
    dataset, its benchmark, the comparison or the campaign computes anything."""
    campaign = engine.create_campaign(scored, "rating", name="warm", owners=[alice], k=2, options={"images": 3},
                                      state=Campaign.LIVE)
    simulate(campaign, raters=4, spammers=0, seed=1)
    out = run_command("warm_reports", "--resamples", "100", "--permutations", "100", "--seed", "3")
    assert "sub: correlations: ready" in out and "sub: benchmark (quality): ready" in out
    assert "comparison: ready" in out and "campaign warm: ready" in out
    assert {r.kind for r in Report.objects.filter(status=Report.DONE)} == {
        Report.CORRELATIONS, Report.BENCHMARK, Report.COMPARISON, Report.CAMPAIGN, "scatter", Report.EXPLORER}
    scatters = out.count(": scatter ")
    assert scatters == Report.objects.filter(kind="scatter", status=Report.DONE).count() > 0
    client.force_login(alice)
    patches = _builders_raise()
    with patches[0], patches[1], patches[2], patches[3], mock.patch("analysis.campaigns.campaign_report", _boom), \
            mock.patch("analysis.charts.scatter_data", _boom), mock.patch("analysis.explorer.build_table", _boom):
        for url in ["/datasets/sub/", f"/datasets/sub/benchmark/{BENCH}", f"/compare/{BENCH}", "/campaigns/warm/",
                    "/datasets/sub/explorer/"]:
            page = client.get(url)
            assert page.status_code == 200 and 'id="report-computing"' not in page.content.decode(), url
        # the dataset page's interactive scatters: stored too
        specs = re.findall(r'data-vega-spec="(/datasets/sub/scatter/[^"]+)"', client.get("/datasets/sub/").content.decode())
        assert len(specs) == scatters
        for url in specs:
            assert client.get(url).status_code == 200, url
        # the comparison's charts (specs and figures) name each benchmark's criterion: the same stored reports
        charts = re.findall(r'(?:data-vega-spec|href)="(/datasets/[^"]+/benchmark/chart/[^"]+)"',
                            client.get(f"/compare/{BENCH}").content.decode())
        assert charts
        # every spec, and one figure per format (each figure is a matplotlib drawing of the same report)
        specs = [u for u in charts if ".json" in u]
        figures = [next(u for u in charts if f".{fmt}" in u) for fmt in ("png", "svg", "pdf")]
        assert specs
        for url in specs + figures:
            assert client.get(url.replace("&amp;", "&")).status_code == 200, url
    # a second run finds everything stored and computes nothing
    with patches[0], patches[1], patches[2], patches[3], mock.patch("analysis.campaigns.campaign_report", _boom), \
            mock.patch("crowd.export_store.export_dataset", _boom):  # the stored bulk downloads are read, not rebuilt
        again = run_command("warm_reports", "--resamples", "100", "--permutations", "100", "--seed", "3")
    assert again.count(": ready") == 5 + scatters + 2
    assert "sub: export.jsonl: ready" in again and "sub: export.csv: ready" in again
    with pytest.raises(Exception, match="unknown dataset 'nope'"):
        run_command("warm_reports", "--dataset", "nope")


def test_with_a_broker_the_last_finished_metric_run_queues_the_dataset_reports(scored, settings,  # noqa: F811
                                                                              django_capture_on_commit_callbacks):
    """Reports are computed by Celery after metric runs finish (issue 15): with a broker, the run
    that completes a dataset's computation queues every report its pages read, once; a run that
    finishes while another of the dataset is still running queues nothing yet."""
    from analysis.tasks import compute_report
    from analysis.warm import PAGE_DEFAULTS, reports_for
    from metrics.models import MetricRun
    from metrics.pipeline import report_progress

    settings.CELERY_TASK_ALWAYS_EAGER, settings.REPORTS_AFTER_METRIC_RUNS = False, True
    runs = list(MetricRun.objects.filter(dataset=scored).order_by("pk"))
    assert len(runs) >= 2 and all(r.status == MetricRun.DONE for r in runs)
    queued = []
    with mock.patch.object(compute_report, "delay", side_effect=queued.append):
        MetricRun.objects.filter(pk=runs[1].pk).update(status=MetricRun.RUNNING)  # another run still going
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            report_progress(runs[0])
        assert callbacks == [] and queued == [] and not Report.objects.exists()
        MetricRun.objects.filter(pk=runs[1].pk).update(status=MetricRun.DONE)
        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            report_progress(runs[1])
        assert len(callbacks) == 1
        expected = reports_for([scored], PAGE_DEFAULTS)
        assert {r.key for r in Report.objects.all()} == {key for _, _, (key, _), _ in expected}
        assert len(queued) == len(expected) and all(
            Report.objects.get(pk=pk).status == Report.PENDING for pk in queued)
        kinds = {kind for _, kind, _, _ in expected}
        assert {Report.CORRELATIONS, Report.BENCHMARK, Report.COMPARISON, Report.EXPLORER, "scatter"} <= kinds
        # the same run reported again: the stored rows are found, nothing is queued twice
        with django_capture_on_commit_callbacks(execute=True):
            report_progress(runs[1])
        assert len(queued) == len(expected)
