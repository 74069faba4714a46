"""The dashboard in real headless Chromium: correlation table with CIs, scatter plots, CSV/JSON
downloads that carry the same numbers, and a live progress percentage."""
import csv
import io
import json

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from metrics.models import MetricRun

from .conftest import run_command

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def computed(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--wait")
    return json.loads(run_command("correlate", "--dataset", "sub", "--json"))


def fetch_text(driver, url):
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0]).then(r => r.text()).then(done, e => done('ERROR ' + e));", url
    )


def test_dashboard_table_plots_and_downloads(browser, live_server, computed, tmp_path):
    browser.get(live_server.url + "/")
    browser.find_element(By.LINK_TEXT, "sub").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "correlations"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#correlations tr[data-metric]")
    assert [r.get_attribute("data-metric") for r in rows] == list(computed["metrics"])
    for row in rows:
        m = computed["metrics"][row.get_attribute("data-metric")]
        cell = row.find_element(By.CSS_SELECTOR, "td.tau-c").text
        lo, hi = m["ci95"]["kendall_tau_c"]
        assert cell == f"{100 * m['kendall_tau_c']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"
    # Every scatter is an interactive chart, drawn, with its figures for papers (PNG, SVG, PDF).
    WebDriverWait(browser, 60).until(
        lambda d: d.execute_script(
            "const c = [...document.querySelectorAll('#scatters figure.chart')];"
            "return c.length > 0 && c.every(f => f.dataset.ready === '1')"
        )
    )
    assert len(browser.find_elements(By.CSS_SELECTOR, "#scatters figure.chart")) == 7
    png = browser.find_element(By.CSS_SELECTOR, "#scatters figure.chart a.export-png").get_attribute("href")
    assert browser.execute_async_script(
        "const done = arguments[1]; fetch(arguments[0]).then(r => r.arrayBuffer()).then(b => done([...new Uint8Array(b.slice(0, 4))]))",
        png) == [0x89, 0x50, 0x4E, 0x47]
    browser.save_screenshot(str(tmp_path / "dashboard.png"))
    # On a 390 px phone the page never scrolls sideways: wide tables scroll inside their own box.
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    for url in ["/", "/datasets/sub/"]:
        browser.get(live_server.url + url)
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390, url
        assert browser.execute_script("return getComputedStyle(document.querySelector('main table')).overflowX") == "auto"
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    browser.get(live_server.url + "/datasets/sub/")
    # Downloads carry the same numbers as the table.
    downloaded = json.loads(fetch_text(browser, browser.find_element(By.ID, "download-json").get_attribute("href")))
    assert downloaded == computed
    table = list(csv.DictReader(io.StringIO(fetch_text(browser, browser.find_element(By.ID, "download-csv").get_attribute("href")))))
    assert [r["metric"] for r in table] == list(computed["metrics"])
    for r in table:
        m = computed["metrics"][r["metric"]]
        assert float(r["kendall_tau_c"]) == pytest.approx(m["kendall_tau_c"], abs=1e-12)
        assert float(r["kendall_tau_c_ci95_lo"]) == pytest.approx(m["ci95"]["kendall_tau_c"][0], abs=1e-12)
        assert int(r["n_ratings"]) == computed["n_ratings"]


def test_live_progress_percentage(browser, live_server, computed):
    run = MetricRun.objects.get(dataset__name="sub", metric="bleu_2")
    MetricRun.objects.filter(pk=run.pk).update(status=MetricRun.RUNNING, completed=run.total // 4)
    browser.get(f"{live_server.url}/datasets/sub/")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.pk}"]')
    assert row.find_element(By.CSS_SELECTOR, ".percent").text == f"{round(100 * (run.total // 4) / run.total, 1)}%"
    MetricRun.objects.filter(pk=run.pk).update(completed=run.total // 2)
    expected = f"{round(100 * (run.total // 2) / run.total, 1)}%"
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.pk}"] .percent').text == expected
    )
    MetricRun.objects.filter(pk=run.pk).update(status=MetricRun.DONE, completed=run.total)
    WebDriverWait(browser, 10).until(
        lambda d: d.find_element(By.CSS_SELECTOR, f'tr[data-run="{run.pk}"] .status').text == "done"
    )


def test_dataset_without_metrics_says_what_to_run(browser, live_server, subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "fresh")
    browser.get(f"{live_server.url}/datasets/fresh/")
    text = browser.find_element(By.ID, "no-report").text
    assert "no metric has been computed" in text and "compute_metrics --dataset fresh" in text
