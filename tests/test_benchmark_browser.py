"""The meta-evaluation pages in real headless Chromium: the comparison matrix with intervals, cluster
ranks and the human ceiling; its CSV/JSON/LaTeX downloads parsed and compared with the page; a
benchmark page with every level, clusters, charts (each with the ceiling) and a criterion switch."""
import csv
import io
import json

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from analysis.benchmarks import benchmark_report, comparison

from .conftest import run_command, stale
from .test_benchmarks import write_thumb_subset
from .test_dashboard_browser import fetch_text

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = "seed=0&resamples=100&permutations=100&alpha=0.05"


@pytest.fixture
def benchmarks(subset_dir, tmp_path, monkeypatch):
    """Two benchmarks with three metrics each and their comparison report with the tests' SETTINGS.

    The pages' defaults (1,000 resamples and permutations, analysis.benchmarks) are lowered to the
    tests' 100 for the live server (same process): a page opened from a link, without settings in
    its query, then reads the report the tests compare with instead of computing one ten times
    larger (about 30 s on two cores) whose numbers no assertion reads. That absent settings take
    the real defaults is checked here first, without a browser."""
    from django.test import RequestFactory

    from analysis import benchmark_views, benchmarks as bm

    assert benchmark_views.benchmark_settings(RequestFactory().get("/compare/")) == {
        "resamples": bm.DEFAULT_RESAMPLES, "seed": 0, "permutations": bm.DEFAULT_PERMUTATIONS, "alpha": bm.DEFAULT_ALPHA}
    assert bm.DEFAULT_RESAMPLES == bm.DEFAULT_PERMUTATIONS == 1000
    monkeypatch.setattr(benchmark_views, "DEFAULT_RESAMPLES", 100)
    monkeypatch.setattr(benchmark_views, "DEFAULT_PERMUTATIONS", 100)
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "rouge_l", "cider_d", "--wait")
    run_command("import_dataset", "thumb", str(write_thumb_subset(tmp_path / "thumb", 60)), "--name", "thumb")
    run_command("compute_metrics", "--dataset", "thumb", "--metric", "bleu_4", "rouge_l", "cider_d", "--wait")
    return comparison(n_resamples=100, n_permutations=100)


def images_loaded(driver):
    """Every chart of the page is drawn: the interactive ones (figure.chart, analysis/charts.js) and
    the images (img.chart: the significance map)."""
    return driver.execute_script(
        "const imgs = [...document.querySelectorAll('img.chart')], charts = [...document.querySelectorAll('figure.chart')];"
        "return imgs.length + charts.length > 0 && imgs.every(i => i.complete && i.naturalWidth > 300)"
        " && charts.every(c => c.dataset.ready === '1');"
    )


def test_comparison_page_matrix_and_downloads(browser, live_server, benchmarks, tmp_path):
    browser.get(live_server.url + "/")
    browser.find_element(By.ID, "nav-compare").click()
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "matrix"))
    # The page ran with the default settings (lowered to SETTINGS' by the fixture); reload with the
    # settings in the query to compare numbers.
    browser.get(f"{live_server.url}/compare/?{SETTINGS}")
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "matrix"))
    heads = [th.get_attribute("data-column") for th in browser.find_elements(By.CSS_SELECTOR, "#matrix th[data-column]")]
    assert heads == [c["id"] for c in benchmarks["columns"]] == ["sub", "thumb:human_score", "thumb:precision", "thumb:recall"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#matrix tr[data-metric]")
    assert [r.get_attribute("data-metric") for r in rows] == [r["metric"] for r in benchmarks["rows"]]
    for row, expected in zip(rows, benchmarks["rows"]):
        for col in benchmarks["columns"]:
            cell = expected["cells"][col["id"]]
            td = row.find_element(By.CSS_SELECTOR, f'td[data-column="{col["id"]}"]')
            assert td.find_element(By.CSS_SELECTOR, ".value").text == f"{100 * cell['value']:.1f}"
            assert td.find_element(By.CSS_SELECTOR, ".ci").text == f"[{100 * cell['ci95'][0]:.1f}, {100 * cell['ci95'][1]:.1f}]"
            assert td.find_element(By.CSS_SELECTOR, ".rank").text == str(cell["rank"])
    ceiling = browser.find_element(By.CSS_SELECTOR, '#ceiling-row td[data-column="sub"] .value').text
    assert ceiling == f"{100 * benchmarks['columns'][0]['ceiling']['value']:.1f}"
    assert browser.find_element(By.CSS_SELECTOR, '#ceiling-row td[data-column="thumb:precision"]').text == "–"
    WebDriverWait(browser, 120).until(images_loaded)
    assert len(browser.find_elements(By.CSS_SELECTOR, "figure.chart")) == 4
    browser.save_screenshot(str(tmp_path / "compare.png"))

    # Downloads: parsed, and equal to the page's numbers.
    downloaded = json.loads(fetch_text(browser, browser.find_element(By.ID, "download-json").get_attribute("href")))
    assert downloaded == benchmarks
    table = list(csv.DictReader(io.StringIO(fetch_text(browser, browser.find_element(By.ID, "download-csv").get_attribute("href")))))
    by_cell = {(r["metric"], r["benchmark"]): r for r in table}
    for expected in benchmarks["rows"]:
        for col_id, cell in expected["cells"].items():
            r = by_cell[(expected["metric"], col_id)]
            assert float(r["value"]) == pytest.approx(cell["value"], abs=1e-12)
            assert float(r["ci95_lo"]) == pytest.approx(cell["ci95"][0], abs=1e-12)
            assert int(r["rank"]) == cell["rank"]
    assert float(by_cell[("human_ceiling", "sub")]["value"]) == pytest.approx(benchmarks["columns"][0]["ceiling"]["value"])
    latex = fetch_text(browser, browser.find_element(By.ID, "download-latex").get_attribute("href"))
    assert latex.startswith("% Generated by captioneval") and "\\begin{tabular}{lcccc}" in latex
    cider = next(line for line in latex.splitlines() if line.startswith("CIDEr-D &"))
    cell = next(r for r in benchmarks["rows"] if r["metric"] == "cider_d")["cells"]["sub"]
    assert cider.split("&")[1].strip().startswith(f"{100 * cell['value']:.1f}$^{{{cell['rank']}}}$")
    assert cider.count("&") == 4 and cider.endswith("\\\\")

    # A bad setting is a clear 400, not a crash.
    text = fetch_text(browser, f"{live_server.url}/compare.csv?resamples=lots")
    assert "resamples must be a number" in text


def test_benchmark_page_levels_clusters_charts_and_criterion(browser, live_server, benchmarks, tmp_path):
    browser.get(f"{live_server.url}/datasets/thumb/")
    browser.find_element(By.ID, "benchmark-link").click()
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "item-table"))
    browser.get(f"{live_server.url}/datasets/thumb/benchmark/?{SETTINGS}")
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "item-table"))
    report = benchmark_report("thumb", n_resamples=100, n_permutations=100)
    assert browser.find_element(By.ID, "criterion").text == "human_score"
    for row in browser.find_elements(By.CSS_SELECTOR, "#item-table tr[data-metric]"):
        m = report["metrics"][row.get_attribute("data-metric")]["item"]
        assert row.find_element(By.CSS_SELECTOR, "td.stat-pearson").text.startswith(f"{100 * m['values']['pearson']:.1f} [")
        assert row.find_element(By.CSS_SELECTOR, "td.acc23").text == f"{100 * m['pairwise']['pairwise_accuracy']:.1f}"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#system-table tr[data-metric]")) == 3
    clusters = browser.find_elements(By.CSS_SELECTOR, "#clusters li")
    sig = report["significance"]["permutation"]
    assert [li.get_attribute("data-metric") for li in clusters] == sig["names"]
    assert clusters[0].text.startswith("cluster 1:")
    assert "one rating per caption" in browser.find_element(By.ID, "ceiling-none").text
    WebDriverWait(browser, 120).until(images_loaded)
    assert browser.find_element(By.ID, "significance-map").get_attribute("naturalWidth") not in ("0", None)
    browser.save_screenshot(str(tmp_path / "benchmark.png"))

    # Switch to the precision criterion: the page reloads with its own numbers.
    old = browser.find_element(By.ID, "item-table")
    form = browser.find_element(By.ID, "criterion-form")
    form.find_element(By.CSS_SELECTOR, "select option[value='precision']").click()
    form.find_element(By.CSS_SELECTOR, "button").click()
    WebDriverWait(browser, 120).until(stale(old))
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "criterion"))
    assert browser.find_element(By.ID, "criterion").text == "precision"
    precision = benchmark_report("thumb", criterion="precision", n_resamples=100, n_permutations=100)
    row = browser.find_element(By.CSS_SELECTOR, '#item-table tr[data-metric="cider_d"]')
    value = precision["metrics"]["cider_d"]["item"]["values"]["pearson"]
    assert row.find_element(By.CSS_SELECTOR, "td.stat-pearson").text.startswith(f"{100 * value:.1f} [")

    # The Expert benchmark has a leave-one-rater-out ceiling, shown in numbers and on its charts.
    browser.get(f"{live_server.url}/datasets/sub/benchmark/?{SETTINGS}")
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "ceiling-value"))
    expert = benchmark_report("sub", n_resamples=100, n_permutations=100)
    assert browser.find_element(By.ID, "ceiling-value").text == f"{100 * expert['ceiling']['item']['value']:.1f}"
    assert "at least 3" in browser.find_element(By.ID, "system-none").text
    WebDriverWait(browser, 120).until(images_loaded)
    downloaded = json.loads(fetch_text(browser, browser.find_element(By.ID, "download-json").get_attribute("href")))
    assert downloaded == expert
