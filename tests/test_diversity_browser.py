"""The caption-set diversity pages in real headless Chromium: summary table with F-score, the
diversity-accuracy scatter, F-score bars, vocabulary curves, downloads with the same numbers, and
the per-image page (object labels, caption sets with Self-CIDEr / LSA, radar charts, MDS map)."""
import csv
import io
import json

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from analysis.diversity import diversity_summary
from crowd.models import ObjectLabel, System
from metrics.models import SetScore

from .coco_sets import write_coco_files
from .conftest import run_command
from .test_dashboard_browser import fetch_text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def import_div(tmp_path):
    d = write_coco_files(tmp_path)
    run_command(
        "import_coco", "--name", "div", "--annotations", str(d / "captions.json"), "--results", f"merge={d / 'merge.json'}",
        "--results", f"thumb-models={d / 'thumb_models.json'}", "--objects", str(d / "objects.csv"),
    )


def loaded(driver, element):
    """True when an <img> has finished loading a real image (not a broken one)."""
    return driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0;", element)


def test_diversity_page_plots_and_downloads(browser, live_server, import_div):
    run_command("compute_metrics", "--dataset", "div", "--metric", "diversity", "mtld", "--wait")
    summary = diversity_summary("div")
    browser.get(live_server.url + "/datasets/div/")
    browser.find_element(By.ID, "diversity-link").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "diversity"))
    rows = {r.get_attribute("data-system"): r for r in browser.find_elements(By.CSS_SELECTOR, "#diversity tr[data-system]")}
    assert set(rows) == {"coco-references", "merge", "thumb-models"}
    for s in summary["systems"]:
        row = rows[s["system"]]
        assert row.find_element(By.CSS_SELECTOR, "td.self-cider").text == f"{s['self_cider']:.4f}"
        assert row.find_element(By.CSS_SELECTOR, "td.f-score").text == f"{s['f_score']:.4f}"
        assert row.find_element(By.CSS_SELECTOR, "td.vocabulary").text == f"{s['vocabulary']:.0f}"
    for img_id in ("scatter", "fscore", "vocabulary"):
        img = browser.find_element(By.ID, img_id)
        WebDriverWait(browser, 20).until(lambda d: loaded(d, img))
        assert browser.execute_script("return arguments[0].naturalWidth;", img) > 300
    downloaded = json.loads(fetch_text(browser, browser.find_element(By.ID, "download-json").get_attribute("href")))
    assert downloaded["systems"] == summary["systems"] and downloaded["beta2"] == 5.0
    table = list(csv.DictReader(io.StringIO(fetch_text(browser, browser.find_element(By.ID, "download-csv").get_attribute("href")))))
    assert {r["system"]: float(r["self_cider"]) for r in table} == {s["system"]: s["self_cider"] for s in summary["systems"]}
    # beta^2 and m are options of the page
    browser.find_element(By.NAME, "beta2").clear()
    browser.find_element(By.NAME, "beta2").send_keys("1")
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    WebDriverWait(browser, 10, ignored_exceptions=(StaleElementReferenceException,)).until(
        lambda d: "beta2=1" in d.current_url and d.find_element(By.ID, "beta2").text == "1.0"
    )
    merge = next(s for s in diversity_summary("div", beta2=1.0)["systems"] if s["system"] == "merge")
    row = browser.find_element(By.CSS_SELECTOR, '#diversity tr[data-system="merge"]')
    assert row.find_element(By.CSS_SELECTOR, "td.f-score").text == f"{merge['f_score']:.4f}"
    assert merge["f_score"] != pytest.approx(next(s for s in summary["systems"] if s["system"] == "merge")["f_score"])
    # no run at m = 5 yet: the page says how to compute it
    browser.get(live_server.url + "/datasets/div/diversity/?m=5")
    assert "--m 5" in browser.find_element(By.ID, "no-diversity").text


def test_image_page_sets_radar_and_mds(browser, live_server, import_div):
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "lsa", "--wait")
    browser.get(live_server.url + "/datasets/div/diversity/")
    links = browser.find_elements(By.CSS_SELECTOR, "#images a.image-link")
    assert len(links) == 30
    key = links[0].text
    links[0].click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "section.caption-set"))
    objects = browser.find_element(By.ID, "objects").text
    expected = ObjectLabel.objects.filter(image__dataset__name="div", image__key=key).values_list("label", flat=True)
    assert expected and all(label in objects for label in expected)
    merge = System.objects.get(dataset__name="div", name="merge")
    value = SetScore.objects.get(run__metric="self_cider", image__key=key, system=merge).value
    section = browser.find_element(By.CSS_SELECTOR, 'section.caption-set[data-system="merge"]')
    assert section.find_element(By.CSS_SELECTOR, ".self-cider").text == f"{value:.4f}"
    assert len(section.find_elements(By.CSS_SELECTOR, "ol.captions li")) == 10
    radars = browser.find_elements(By.CSS_SELECTOR, "img.radar")
    assert len(radars) == 3  # references, merge, thumb-models
    for img in radars + [browser.find_element(By.ID, "mds")]:
        WebDriverWait(browser, 20).until(lambda d: loaded(d, img))
    # captions are escaped, never markup
    assert not browser.find_elements(By.CSS_SELECTOR, "ol.captions li script")


def test_without_the_accuracy_run_the_page_says_so_instead_of_empty_charts(client, import_div):
    """Self-CIDEr and LSA alone (a diversity campaign's runs): no system has an accuracy, so the page
    names the command instead of drawing an empty diversity-accuracy chart and empty F-score bars;
    once set_accuracy is computed both charts are there."""
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "lsa", "--wait")
    page = client.get("/datasets/div/diversity/").content.decode()
    assert 'id="diversity"' in page and 'id="no-accuracy"' in page and "--metric set_accuracy" in page
    assert 'id="scatter"' not in page and 'id="fscore"' not in page
    run_command("compute_metrics", "--dataset", "div", "--metric", "set_accuracy", "--wait")
    page = client.get("/datasets/div/diversity/").content.decode()
    assert 'id="no-accuracy"' not in page and 'id="scatter"' in page and 'id="fscore"' in page
