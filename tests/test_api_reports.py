"""The report resources of the REST API (api/reports.py) on real data: a THumB 1.0 subset (60
images, 5 systems, real human scores) with CIDEr-D and BLEU-4 computed, and the COCO caption sets
of the Self-CIDEr example with the set-level diversity measures. Each resource answers the JSON of
the page's download, read from the same stored report (never recomputed by the API); 202 with a
status resource while a report is queued, 503 when its computation failed; parameters are checked
before any report is requested (400 naming the parameter, 404 for an unknown dataset, 409 for a
report the data cannot give)."""
from unittest import mock

import pytest

from analysis.models import Report
from crowd.models import Dataset

from .coco_sets import write_coco_files
from .conftest import run_command
from .test_leaderboard_pages import _import_thumb

pytestmark = pytest.mark.django_db

BENCH = "resamples=100&permutations=100&seed=3"
BOARD = "resamples=100&seed=1"
#: (API resource, the page download whose JSON it must equal), for the THumB subset
PAIRS = [
    ("/api/reports/correlation/thumb/", "/datasets/thumb/correlations.json"),
    (f"/api/reports/benchmark/thumb/?{BENCH}", f"/datasets/thumb/benchmark.json?{BENCH}"),
    (f"/api/reports/leaderboard/thumb/?{BOARD}", f"/datasets/thumb/leaderboard.json?{BOARD}"),
    (f"/api/reports/leaderboard/thumb/?{BOARD}&metric=cider_d&test=randomization",
     f"/datasets/thumb/leaderboard.json?{BOARD}&metric=cider_d&test=randomization"),
    (f"/api/reports/comparison/?{BENCH}&dataset=thumb", f"/compare.json?{BENCH}&dataset=thumb"),
]


@pytest.fixture
def thumb(tmp_path):
    return _import_thumb(tmp_path)


def _boom(*args, **kwargs):
    raise AssertionError("computed during an API request")


def _builders_raise():
    """Every function that builds one of these reports, made to fail."""
    return [mock.patch(target, _boom) for target in (
        "analysis.cached_reports.correlation_report", "analysis.reports.correlation_report",
        "analysis.benchmarks.benchmark_report", "analysis.benchmarks.comparison", "analysis.leaderboard.leaderboard")]


def _problem(response, status: int, field: str | None = None) -> dict:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status and body["type"].startswith("urn:captioneval:problem:") and body["detail"]
    if field is not None:
        assert [e["field"] for e in body["errors"]] == [field], body
    return body


def test_each_report_is_the_json_of_the_page_download_read_from_the_stored_report(thumb, client):
    pages = {}
    for api, page in PAIRS:  # the pages compute (in-process: no broker in tests) and store the reports
        response = client.get(page)
        assert response.status_code == 200, page
        pages[api] = response.json()
    n_reports = Report.objects.count()
    patches = _builders_raise()
    for p in patches:
        p.start()
    try:  # the API reads what the pages stored: nothing is computed again, nothing new is stored
        for api, _ in PAIRS:
            response = client.get(api)
            assert response.status_code == 200, (api, response.content[:300])
            assert response["Content-Type"] == "application/json"
            assert response.json() == pages[api], api
    finally:
        for p in patches:
            p.stop()
    assert Report.objects.count() == n_reports
    # what the JSON holds is the data's: five THumB systems, both metrics, the requested settings
    board = client.get(PAIRS[2][0]).json()
    assert len(board["systems"]) == 5 and {m["key"] for m in board["metrics"]} == {"cider_d", "bleu_4"}
    assert board["settings"]["n_resamples"] == 100 and board["settings"]["seed"] == 1
    assert [m["key"] for m in client.get(PAIRS[3][0]).json()["metrics"]] == ["cider_d"]
    bench = client.get(PAIRS[1][0]).json()
    assert bench["dataset"] == "thumb" and bench["settings"]["n_resamples"] == 100 and "published" in bench
    corr = client.get(PAIRS[0][0]).json()
    assert set(corr["metrics"]) == {"cider_d", "bleu_4"} and corr["n_images"] == 60


def test_a_report_first_asked_by_the_api_is_stored_for_the_page(thumb, client):
    api = client.get(f"/api/reports/leaderboard/thumb/?{BOARD}&metric=bleu_4")
    assert api.status_code == 200
    with _builders_raise()[4]:
        page = client.get(f"/datasets/thumb/leaderboard.json?{BOARD}&metric=bleu_4")
    assert page.status_code == 200 and page.json() == api.json()


def test_while_a_report_is_queued_the_api_answers_202_with_its_status_resource(thumb, client):
    from analysis.tasks import compute_report

    queued = []
    urls = [api for api, _ in PAIRS[:3]] + [PAIRS[4][0]]
    with mock.patch.object(compute_report, "delay", side_effect=queued.append):  # a broker holds the messages
        for url in urls:
            for _ in range(2):  # asked twice, queued once
                response = client.get(url)
                assert response.status_code == 202, (url, response.content[:300])
                assert response["Retry-After"] == "2"
                body = response.json()
                assert body["status"] == Report.PENDING and body["error"] == ""
                assert response["Location"] == body["status_url"] == f"http://testserver/api/reports/status/{body['id']}/"
                status = client.get(body["status_url"])
                assert status.status_code == 200
                assert status.json()["status"] == Report.PENDING and status.json()["refresh"] == 2
                page = client.get(f"/reports/{body['id']}/status.json").json()  # the page's JSON, a moment later
                assert status.json().pop("elapsed") <= page.pop("elapsed") and status.json() | {"elapsed": 0} == page | {"elapsed": 0}
    assert len(queued) == len(urls)  # one per report, not one per request
    assert [compute_report(pk) for pk in queued] == [Report.DONE] * len(urls)  # what the worker runs
    for pk in queued:
        done = client.get(f"/api/reports/status/{pk}/").json()
        assert done["status"] == Report.DONE and done["percent"] == 100.0 and done["refresh"] is None
    for api, page in PAIRS[:3] + PAIRS[4:]:
        response = client.get(api)
        assert response.status_code == 200 and response.json() == client.get(page).json(), api


def test_a_failed_computation_is_a_503_with_retry_after(thumb, client):
    with _builders_raise()[4]:
        response = client.get(f"/api/reports/leaderboard/thumb/?{BOARD}")
    body = _problem(response, 503)
    assert body["type"] == "urn:captioneval:problem:report_failed"
    assert "computed during an API request" in body["detail"]
    assert 290 <= int(response["Retry-After"]) <= 300  # it is queued again 5 minutes after it failed
    row = Report.objects.get(kind=Report.LEADERBOARD)
    assert row.status == Report.FAILED and response["Location"].endswith(f"/api/reports/status/{row.pk}/")
    assert client.get(f"/api/reports/status/{row.pk}/").json()["status"] == Report.FAILED


def test_parameters_are_checked_before_any_report_is_requested(thumb, client):
    for kind in ("correlation", "benchmark", "leaderboard", "diversity"):
        body = _problem(client.get(f"/api/reports/{kind}/no-such-dataset/"), 404)
        assert "no-such-dataset" in body["detail"]
    cases = [
        ("/api/reports/benchmark/thumb/?resamples=many", "resamples", "resamples must be a number"),
        ("/api/reports/benchmark/thumb/?resamples=10001", "resamples", "between 0 and 10000"),
        ("/api/reports/benchmark/thumb/?alpha=1.5", "alpha", "alpha must be between 0 and 1"),
        ("/api/reports/benchmark/thumb/?seed=-1", "seed", "seed must be between"),
        ("/api/reports/benchmark/thumb/?criterion=fluency", "criterion", "has no judgments on criterion 'fluency'"),
        ("/api/reports/leaderboard/thumb/?metric=no_such_metric", "metric", "unknown metric 'no_such_metric'"),
        ("/api/reports/leaderboard/thumb/?criterion=fluency", "criterion", "no judgments on criterion 'fluency'"),
        ("/api/reports/leaderboard/thumb/?test=t-test", "test", "test must be one of bootstrap, randomization"),
        ("/api/reports/leaderboard/thumb/?baseline=nobody", "baseline", "'nobody' is not a candidate system"),
        ("/api/reports/leaderboard/thumb/?resamples=0", "resamples", "resamples must be between 1 and 10000"),
        ("/api/reports/correlation/thumb/?weighting=gap:bleu_4", "weighting", "weighting must be gap:<measure>"),
        ("/api/reports/correlation/thumb/?weighting=gap:mtld", "weighting", "not available for thumb"),
        ("/api/reports/comparison/?dataset=thumb&dataset=missing", "dataset", "unknown dataset 'missing'"),
        ("/api/reports/comparison/?permutations=-3", "permutations", "between 0 and 10000"),
        ("/api/reports/diversity/thumb/?m=1", "m", "m must be >= 2"),
        ("/api/reports/diversity/thumb/?beta2=x", "beta2", "beta2 a number"),
    ]
    for url, field, message in cases:
        body = _problem(client.get(url), 400, field)
        assert message in body["detail"], (url, body["detail"])
    for url, field in (("/api/reports/benchmark/thumb/?criterion=human%00score", "criterion"),
                       ("/api/reports/leaderboard/thumb/?criterion=human_score&criterion=x%00", "criterion"),
                       ("/api/reports/leaderboard/thumb/?baseline=Human%0A", "baseline"),
                       ("/api/reports/comparison/?dataset=thumb&dataset=th%00umb", "dataset")):
        body = _problem(client.get(url), 400, field)  # PostgreSQL refuses NUL: never sent to it
        assert body["errors"][0]["detail"] == "control characters are not allowed"
    assert Report.objects.count() == 0  # refused before any report was requested
    # a report the data cannot give: the page's own message, 409
    body = _problem(client.get("/api/reports/diversity/thumb/"), 409)
    assert "no caption-set diversity has been computed on dataset 'thumb'" in body["detail"]
    assert body["type"] == "urn:captioneval:problem:report_unavailable"


def test_a_report_the_data_cannot_give_is_a_409_with_the_pages_message(thumb, client, subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    # nothing computed on sub yet: the stored problem of its correlation report
    body = _problem(client.get("/api/reports/correlation/sub/"), 409)
    assert "sub" in body["detail"]
    assert client.get("/datasets/sub/correlations.json").status_code == 404  # the page: the same problem
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "--wait")
    # one candidate system: no leaderboard (the page's message says how to add systems)
    body = _problem(client.get(f"/api/reports/leaderboard/sub/?{BOARD}"), 409)
    assert "a leaderboard needs at least 2" in body["detail"]
    assert client.get(f"/datasets/sub/leaderboard.json?{BOARD}").status_code == 400


def test_diversity_is_the_json_of_the_page_download(tmp_path, client):
    files = write_coco_files(tmp_path)
    run_command("import_coco", "--name", "div", "--annotations", str(files / "captions.json"),
                "--results", f"merge={files / 'merge.json'}", "--results", f"thumb-models={files / 'thumb_models.json'}")
    run_command("compute_metrics", "--dataset", "div", "--metric", "diversity", "lexical", "--wait")
    for query in ("", "?beta2=2", "?m=all&beta2=0.5"):
        api = client.get(f"/api/reports/diversity/div/{query}")
        page = client.get(f"/datasets/div/diversity.json{query}")
        assert api.status_code == page.status_code == 200, query
        assert api.json() == page.json(), query
    summary = client.get("/api/reports/diversity/div/?beta2=2").json()
    assert summary["beta2"] == 2 and {r["system"] for r in summary["systems"]} == {"coco-references", "merge", "thumb-models"}
    # set scores of m = 5 were never computed: the page's message, 409
    body = _problem(client.get("/api/reports/diversity/div/?m=5"), 409)
    assert "--m 5" in body["detail"]
    assert Dataset.objects.filter(name="div").exists()


def test_the_status_of_a_campaign_report_is_its_owners(thumb, client, django_user_model):
    from crowd import engine
    from crowd.simulate import simulate

    alice = django_user_model.objects.create_user("alice", password="pw")
    bob = django_user_model.objects.create_user("bob", password="pw")
    campaign = engine.create_campaign(thumb, "rating", name="st", owners=[alice], options={"images": 4}, k=2,
                                      state="live")
    simulate(campaign, raters=2, seed=1)
    client.force_login(alice)
    assert client.get("/api/campaigns/st/report/").status_code == 200
    row = Report.objects.get(campaign=campaign)
    assert client.get(f"/api/reports/status/{row.pk}/").json()["status"] == Report.DONE
    client.force_login(bob)
    _problem(client.get(f"/api/reports/status/{row.pk}/"), 404)
    client.logout()
    _problem(client.get(f"/api/reports/status/{row.pk}/"), 404)
    _problem(client.get("/api/reports/status/999999/"), 404)


def test_a_forced_choice_benchmark_has_no_correlation_report(client):
    from .test_benchmarks import PASCAL

    run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "pascal")
    for query in ("", "?weighting=gap:mtld"):
        body = _problem(client.get(f"/api/reports/correlation/pascal/{query}"), 409)
        assert "pascal is a forced-choice benchmark" in body["detail"] and "meta-evaluation page" in body["detail"]
    assert Report.objects.count() == 0  # decided before any report was requested
    # its benchmark report needs a computed metric: the stored problem, as the page's download says it
    body = _problem(client.get(f"/api/reports/benchmark/pascal/?{BENCH}"), 409)
    assert body["detail"] == client.get(f"/datasets/pascal/benchmark.json?{BENCH}").content.decode().split(
        "<p id='problem'>")[1].split("</p>")[0].replace("&#x27;", "'")
