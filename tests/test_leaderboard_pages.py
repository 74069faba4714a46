"""The system leaderboard page (analysis.leaderboard_views) on real data: a THumB 1.0 subset (5
systems, real rows) with CIDEr-D and BLEU-4 computed. The page and its charts read the stored
report and never compute; a missing report shows the progress bar and downloads answer 202; bad
settings are a 400 naming the setting; the CSV / JSON / LaTeX downloads hold the stored report; the
dataset page links to it when there are at least 2 candidate systems. Per-system human means are
checked against the THumB file itself; a headless Chromium test checks that the charts are drawn
and the table sorts, with screenshots at 1400 and 390 px."""
import csv
import html
import io
import json
import statistics
import time
from collections import defaultdict
from unittest import mock

import pytest
from django.db import connection

from analysis import cached_reports
from analysis.leaderboard import leaderboard, leaderboard_csv_rows
from analysis.models import Report
from crowd.models import Dataset

from .conftest import run_command
from .test_benchmarks import write_thumb_subset

N_IMAGES = 60
QUERY = "resamples=100&seed=1"
SETTINGS = {"metrics": None, "criteria": None, "baseline": None, "resamples": 100, "seed": 1, "test": "bootstrap",
            "alpha": 0.05}


def _import_thumb(tmp_path) -> Dataset:
    directory = write_thumb_subset(tmp_path / "thumb", N_IMAGES)
    run_command("import_dataset", "thumb", str(directory), "--name", "thumb")
    run_command("compute_metrics", "--dataset", "thumb", "--metric", "cider_d", "bleu_4", "--wait")
    return Dataset.objects.get(name="thumb")


@pytest.fixture
def thumb(tmp_path, db):
    return _import_thumb(tmp_path)


def human_means_from_file(tmp_path) -> dict[str, float]:
    """Mean human_score per system, straight from the subset's THumB JSON Lines file."""
    sums = defaultdict(list)
    for line in (tmp_path / "thumb" / "mscoco_THumB-1.0.jsonl").read_text().splitlines():
        row = json.loads(line)
        sums[row["SYS"]].append(row["human_score"])
    return {s: sum(v) / len(v) for s, v in sums.items()}


def _boom(*args, **kwargs):
    raise AssertionError("computed during a page request")


def _cells(page: str, column: str) -> dict[str, str]:
    """{system: the shown value} of one column of the leaderboard table."""
    import re

    out = {}
    for system, row in re.findall(r'<tr data-system="([^"]+)"[^>]*>(.*?)</tr>', page, re.S):
        m = re.search(rf'data-column="{re.escape(column)}"[^>]*><span class="value">([^<]*)</span>', row)
        out[system] = m.group(1)
    return out


@pytest.mark.django_db
def test_page_reads_the_stored_report_fast(thumb, tmp_path, client):
    first = client.get(f"/datasets/thumb/leaderboard/?{QUERY}")  # no broker: computed in this first request
    assert first.status_code == 200
    stored = Report.objects.get(kind=Report.LEADERBOARD, dataset=thumb, status=Report.DONE).data
    assert stored == json.loads(json.dumps(leaderboard(thumb, n_resamples=100, seed=1)))
    assert set(stored["systems"]) == {"Up-Down", "Unified-VLP", "VinVL-base", "VinVL-large", "Human"}

    with mock.patch("analysis.leaderboard.leaderboard", _boom), mock.patch("analysis.cached_reports.compute", _boom):
        times = []
        for _ in range(5):
            queries = []
            started = time.perf_counter()
            with connection.execute_wrapper(lambda execute, sql, *args: queries.append(sql) or execute(sql, *args)):
                response = client.get(f"/datasets/thumb/leaderboard/?{QUERY}")
            times.append(time.perf_counter() - started)
        elapsed = statistics.median(times)
        page = response.content.decode()
        assert response.status_code == 200 and 'id="report-computing"' not in page
        assert 0 < len(queries) < 30, [q[:120] for q in queries]
        for kind, key in (("metric", "cider_d"), ("metric", "bleu_4"), ("human", "human_score")):
            spec = client.get(f"/datasets/thumb/leaderboard/intervals/{kind}/{key}.json?{QUERY}")
            assert spec.status_code == 200 and spec.json()["usermeta"]["kind"] == "leaderboard-intervals"
        heat = client.get(f"/datasets/thumb/leaderboard/p-values/cider_d.json?{QUERY}")
        assert heat.status_code == 200
    print(f"leaderboard page with a stored report: median {1000 * elapsed:.0f} ms, {len(queries)} queries, "
          f"each: {[round(1000 * t) for t in times]}")

    # the table: every system, CIDEr-D as stored (its own unit), BLEU-4 x100, human means as in the file
    cider = _cells(page, "metric:cider_d")
    bleu = _cells(page, "metric:bleu_4")
    human = _cells(page, "human:human_score")
    assert set(cider) == set(stored["systems"])
    for system, entry in stored["systems"].items():
        assert cider[system] == f"{entry['metrics']['cider_d']['score']:.3f}"
        assert bleu[system] == f"{100 * entry['metrics']['bleu_4']['score']:.1f}"
    for system, mean in human_means_from_file(tmp_path).items():
        assert human[system] == f"{mean:.3f}"
    # rows in rank order of the first metric, with the test, notes and agreement shown
    first_metric = stored["metrics"][0]["key"]
    order = sorted(stored["systems"], key=lambda s: stored["systems"][s]["metrics"][first_metric]["rank"])
    assert list(cider) == order
    assert "paired bootstrap resampling (Koehn 2004" in page and "CIDEr-D" in page and "BLEU-4 (x100)" in page
    assert stored["multiple_comparisons"] in html.unescape(page)
    assert 'id="agreement-table"' in page and 'class="notice lb-note caveat"' not in page  # 5 systems: no caveat
    for m in ("cider_d", "bleu_4"):
        tau = stored["system_agreement"][m]["human_score"]["kendall_tau"]
        assert f'<tr data-metric="{m}"><td class="name">' in page
        assert f'<td class="tau" data-criterion="human_score">{tau:.3f}</td>' in page

    # the specs carry the stored numbers in the table's unit
    usermeta = client.get(f"/datasets/thumb/leaderboard/intervals/metric/bleu_4.json?{QUERY}").json()["usermeta"]
    assert usermeta["systems"] == sorted(stored["systems"], key=lambda s: stored["systems"][s]["metrics"]["bleu_4"]["rank"])
    for s, v in usermeta["values"].items():
        assert v == pytest.approx(100 * stored["systems"][s]["metrics"]["bleu_4"]["score"], abs=1e-6)
    cells = heat.json()["usermeta"]["cells"]
    tests = [c for c in stored["comparisons"] if c["metric"] == "cider_d"]
    assert len(tests) == 10 and len(cells) == 20  # all pairs of 5 systems, both orientations
    for c in tests:
        assert cells[f"{c['a']}|{c['b']}"] == cells[f"{c['b']}|{c['a']}"] == c["p_value"]
    assert client.get(f"/datasets/thumb/leaderboard/p-values/nope.json?{QUERY}").status_code == 404


@pytest.mark.django_db
def test_baseline_and_randomization_are_new_reports(thumb, client):
    page = client.get("/datasets/thumb/leaderboard/?resamples=100&test=randomization&baseline=Up-Down").content.decode()
    assert "approximate randomization (Riezler and Maxwell 2005" in page and 'id="baseline">Up-Down<' in page
    assert '<tr data-system="Up-Down" class="baseline">' in page
    report = client.get("/datasets/thumb/leaderboard.json?resamples=100&test=randomization&baseline=Up-Down").json()
    assert report["baseline"] == "Up-Down" and {c["test"] for c in report["comparisons"]} == {"randomization"}
    assert all("Up-Down" in (c["a"], c["b"]) for c in report["comparisons"])
    assert len([c for c in report["comparisons"] if c["metric"] == "cider_d"]) == 4
    spec = client.get("/datasets/thumb/leaderboard/intervals/metric/cider_d.json?resamples=100&test=randomization&baseline=Up-Down").json()
    roles = {v["system"]: v["role"] for v in spec["layer"][1]["data"]["values"]}
    assert roles["Up-Down"] == "baseline: Up-Down" and roles["Human"] == "other systems"
    # one metric, one criterion: only those columns
    page = client.get("/datasets/thumb/leaderboard/?resamples=100&metric=cider_d&criterion=precision").content.decode()
    assert 'data-column="metric:cider_d"' in page and 'data-column="metric:bleu_4"' not in page
    assert 'data-column="human:precision"' in page and 'data-column="human:human_score"' not in page


@pytest.mark.django_db
def test_missing_report_shows_progress_and_downloads_wait(thumb, client):
    from analysis.tasks import compute_report

    queued = []
    with mock.patch.object(compute_report, "delay", side_effect=queued.append):  # a broker holds the message
        page = client.get(f"/datasets/thumb/leaderboard/?{QUERY}").content.decode()
        assert 'id="report-computing" data-status="pending"' in page and "is queued" in page
        assert "window.location.reload()" in page and 'id="leaderboard"' not in page
        assert "/reports/" in page and "/status.json" in page
        for url in ("leaderboard.json", "leaderboard.csv", "leaderboard.tex", "leaderboard/intervals/metric/cider_d.json",
                    "leaderboard/p-values/cider_d.json"):
            response = client.get(f"/datasets/thumb/{url}?{QUERY}")
            assert response.status_code == 202 and response["Retry-After"] == "2", url
    assert len(queued) == 1
    assert compute_report(queued[0]) == Report.DONE  # what the worker runs
    page = client.get(f"/datasets/thumb/leaderboard/?{QUERY}").content.decode()
    assert 'id="report-computing"' not in page and 'id="leaderboard"' in page
    status = client.get(f"/reports/{queued[0]}/status.json").json()
    assert status["status"] == Report.DONE


BAD_SETTINGS = [
    ("resamples=abc", "resamples"), ("resamples=0", "resamples"), ("resamples=20000", "resamples"),
    ("seed=-1", "seed"), ("seed=x", "seed"), ("alpha=1.5", "alpha"), ("test=t-test", "test"),
    ("metric=nope", "metric"), ("criterion=nope", "criterion"), ("baseline=Nobody", "baseline"),
]


@pytest.mark.django_db
def test_bad_settings_are_a_400_naming_the_setting(thumb, client):
    with mock.patch("analysis.cached_reports.compute", _boom):
        for query, word in BAD_SETTINGS:
            for url in ("leaderboard/", "leaderboard.json", "leaderboard.csv", "leaderboard.tex",
                        "leaderboard/intervals/metric/cider_d.json", "leaderboard/p-values/cider_d.json"):
                response = client.get(f"/datasets/thumb/{url}?{query}")
                assert response.status_code == 400, (url, query)
                assert f"<p id='problem'>{word}" in response.content.decode(), (url, query)
    assert not Report.objects.filter(kind=Report.LEADERBOARD).exists()  # nothing requested
    assert client.get("/datasets/nope/leaderboard/").status_code == 404
    assert client.get(f"/datasets/thumb/leaderboard/intervals/other/cider_d.json?{QUERY}").status_code == 404
    assert client.get(f"/datasets/thumb/leaderboard/intervals/human/nope.json?{QUERY}").status_code == 404


@pytest.mark.django_db
def test_downloads_hold_the_stored_report(thumb, client):
    stored = client.get(f"/datasets/thumb/leaderboard.json?{QUERY}")
    assert stored.status_code == 200 and 'filename="thumb-leaderboard.json"' in stored["Content-Disposition"]
    report = stored.json()
    assert {"dataset", "settings", "systems", "metrics", "criteria", "comparisons", "clusters", "system_agreement",
            "multiple_comparisons", "baseline", "notes"} <= set(report)
    for entry in report["systems"].values():
        assert set(entry["metrics"]) == {"cider_d", "bleu_4"}
        for m in entry["metrics"].values():
            assert {"score", "ci95", "rank"} <= set(m) and m["ci95"][0] <= m["score"] <= m["ci95"][1]
    assert {"a", "b", "metric", "delta", "ci95", "p_value", "test"} <= set(report["comparisons"][0])
    assert report == Report.objects.get(kind=Report.LEADERBOARD, status=Report.DONE).data

    response = client.get(f"/datasets/thumb/leaderboard.csv?{QUERY}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    expected = [["" if v is None else str(v) for v in row] for row in leaderboard_csv_rows(report)]
    assert rows[0] == expected[0] and "system" in rows[0]
    assert len(rows) == len(expected) and {r[rows[0].index("system")] for r in rows[1:]} >= set(report["systems"])

    latex = client.get(f"/datasets/thumb/leaderboard.tex?{QUERY}")
    assert latex.status_code == 200 and 'filename="thumb-leaderboard.tex"' in latex["Content-Disposition"]
    text = latex.content.decode()
    assert "\\begin{tabular}" in text and "\\end{tabular}" in text and "CIDEr-D" in text
    for system in report["systems"]:
        assert system in text


@pytest.mark.django_db
def test_dataset_page_links_the_leaderboard_with_two_systems(thumb, subset_dir, client):
    page = client.get("/datasets/thumb/").content.decode()
    assert 'id="leaderboard-link" href="/datasets/thumb/leaderboard/"' in page
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")  # one candidate system
    assert 'id="leaderboard-link"' not in client.get("/datasets/sub/").content.decode()
    page = client.get("/datasets/sub/leaderboard/").content.decode()  # reachable anyway: says why not
    assert 'id="no-report"' in page and "needs at least 2" in page


@pytest.mark.django_db
def test_fewer_than_five_systems_prints_the_caveat(tmp_path, client):
    directory = write_thumb_subset(tmp_path / "thumb", N_IMAGES)
    path = directory / "mscoco_THumB-1.0.jsonl"
    keep = {"Up-Down", "VinVL-large", "Human"}
    path.write_text("".join(l + "\n" for l in path.read_text().splitlines() if json.loads(l)["SYS"] in keep))
    run_command("import_dataset", "thumb", str(directory), "--name", "thumb3")
    run_command("compute_metrics", "--dataset", "thumb3", "--metric", "cider_d", "--wait")
    page = client.get("/datasets/thumb3/leaderboard/?resamples=100").content.decode()
    report = client.get("/datasets/thumb3/leaderboard.json?resamples=100").json()
    caveat = report["system_agreement"]["cider_d"]["human_score"]["caveat"]
    assert set(report["systems"]) == keep and caveat
    assert f'<p class="notice lb-note caveat">{caveat}</p>' in html.unescape(page)


# --- headless Chromium ----------------------------------------------------------------------------

def _charts_drawn(driver):
    return driver.execute_script(
        "const c = [...document.querySelectorAll('figure.chart')];"
        "return c.length > 0 && c.every(f => f.dataset.ready === '1' && f.querySelector('.chart-view svg, .chart-view canvas'));")


def _screenshot(driver, width: int, path: str):
    """The whole page at ``width`` px (the window as tall as the page)."""
    height = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.set_window_size(width, min(height + 140, 8000))
    driver.save_screenshot(path)


@pytest.mark.django_db(transaction=True)
def test_leaderboard_in_chromium_charts_sort_and_fit(browser, live_server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _import_thumb(tmp_path)
    browser.get(f"{live_server.url}/datasets/thumb/")
    browser.find_element(By.ID, "leaderboard-link").click()
    WebDriverWait(browser, 240).until(lambda d: d.find_elements(By.ID, "leaderboard"))
    browser.get(f"{live_server.url}/datasets/thumb/leaderboard/?{QUERY}")
    WebDriverWait(browser, 240).until(lambda d: d.find_elements(By.ID, "leaderboard"))
    WebDriverWait(browser, 60).until(_charts_drawn)
    report = Report.objects.filter(kind=Report.LEADERBOARD, status=Report.DONE, params__resamples=100).get().data
    n_metrics, n_criteria = len(report["metrics"]), len(report["criteria"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#intervals figure.chart")) == n_metrics + n_criteria
    assert len(browser.find_elements(By.CSS_SELECTOR, "#significance figure.chart")) == n_metrics
    # the heat map's cells are the stored p-values
    cells = browser.execute_script("return window.captionevalCharts['pvalues-cider_d'].data('cells');")
    tests = {(c["a"], c["b"]): c["p_value"] for c in report["comparisons"] if c["metric"] == "cider_d"}
    assert len(cells) == 2 * len(tests)
    for c in cells:
        assert c["p"] == tests.get((c["a"], c["b"]), tests.get((c["b"], c["a"])))

    def column(col):
        return [r.get_attribute("data-system") for r in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr")], \
               [float(td.get_attribute("data-sort")) for td in
                browser.find_elements(By.CSS_SELECTOR, f'#leaderboard tbody td[data-column="{col}"]')]

    header = browser.find_element(By.CSS_SELECTOR, '#leaderboard th[data-column="human:human_score"]')
    header.click()
    systems, values = column("human:human_score")
    assert values == sorted(values) and header.get_attribute("aria-sort") == "ascending"
    header.click()
    systems, values = column("human:human_score")
    assert values == sorted(values, reverse=True) and header.get_attribute("aria-sort") == "descending"
    by_mean = sorted(report["systems"], key=lambda s: -report["systems"][s]["human"]["human_score"]["mean"])
    assert systems == by_mean
    _screenshot(browser, 1400, str(tmp_path / "leaderboard_1400.png"))

    browser.set_window_size(390, 2400)
    browser.get(f"{live_server.url}/datasets/thumb/leaderboard/?{QUERY}")
    WebDriverWait(browser, 60).until(_charts_drawn)
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
        " Math.max(...[...document.querySelectorAll('figure.chart')].map(f => f.getBoundingClientRect().right))];")
    assert widths[0] <= widths[1] and widths[2] <= widths[1], widths  # nothing sideways: tables scroll in their box
    _screenshot(browser, 390, str(tmp_path / "leaderboard_390.png"))
