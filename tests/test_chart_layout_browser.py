"""Every dashboard page with a chart, in headless Chromium at a phone's width (390 px) and a
desktop's (1400 px), on real data: the 40-image Flickr8k-Expert subset (scatters, benchmark bars,
the significance map, diversity figures, the image page, the explorer), PASCAL-50S (the accuracy
charts of its subsets HC, HI, HM, MM), a 60-image THumB 1.0 subset (the leaderboard's interval
charts and p-value maps) and the comparison of the three.

At 390 px: the page never scrolls sideways (``document.documentElement.scrollWidth`` is at most the
window's width; a wide table scrolls inside its own box) and every chart is drawn at least 300 px
wide. At 1400 px: no chart is cut, its drawing inside its box and every text of it (title,
subtitle, axis titles, legend labels) inside the drawing. The explorer keeps the sorted column and
the disagreement in view beside the caption at 1400 px, with the pictures as thumbnails. Screenshots
of each page at both widths go to the test's tmp_path. Beside the charts: the owner's task preview
draws no empty notice box under its Submit button."""
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from analysis import charts
from crowd.models import Caption

from .conftest import run_command
from .test_benchmarks import PASCAL, write_thumb_subset

pytestmark = pytest.mark.django_db(transaction=True)

PHONE, DESKTOP = 390, 1400
SETTINGS = "seed=0&resamples=100&permutations=100&alpha=0.05"

#: the page's width, and per chart: its drawing's width, its plot's width (Vega's view.width()),
#: whether it lies inside its box, the texts of the drawing that stick out of it
MEASURE = """
const inside = (r, box) => r.left >= box.left - 1 && r.right <= box.right + 1;
const charts = [];
for (const f of document.querySelectorAll('figure.chart')) {
  const drawing = f.querySelector('.chart-view svg, .chart-view canvas');
  const box = f.getBoundingClientRect(), d = drawing.getBoundingClientRect();
  const cut = [...drawing.querySelectorAll('text')].filter(t => t.textContent.trim() && !inside(t.getBoundingClientRect(), d))
    .map(t => t.textContent.trim());
  charts.push({id: f.id, width: d.width, plot: f.vegaView.width(), inBox: inside(d, box), cut: cut});
}
for (const img of document.querySelectorAll('main img.chart, .plots figure img, figure.figure-img img, #mds')) {
  charts.push({id: img.id || img.getAttribute('src'), width: img.getBoundingClientRect().width, natural: img.naturalWidth,
               inBox: img.getBoundingClientRect().right <= document.documentElement.clientWidth + 1, cut: []});
}
return {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth, charts: charts};
"""


def _ready(driver) -> bool:
    """Every interactive chart drawn and every picture loaded (or failed; a lazy one below the fold
    is not asked for)."""
    return driver.execute_script(
        "return document.readyState === 'complete'"
        " && [...document.querySelectorAll('figure.chart')].every(f => f.dataset.ready === '1')"
        " && [...document.querySelectorAll('main img')].every(i => i.complete || i.loading === 'lazy');")


def _open(driver, url: str, width: int) -> dict:
    driver.set_window_size(width, 1000)
    driver.get(url)
    WebDriverWait(driver, 240).until(_ready)
    return driver.execute_script(MEASURE)


def _screenshot(driver, path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight;")
    driver.set_window_size(driver.get_window_size()["width"], min(height + 140, 8000))
    driver.save_screenshot(str(path))


@pytest.fixture
def chart_data(subset_dir, tmp_path, monkeypatch):
    # scatters sampled as a large set's are (a density layer of every caption under 100 sampled
    # points, two legends, a long subtitle): the layout that squeezed a phone's scatter to 50 px
    monkeypatch.setattr(charts, "MAX_POINTS", 100)
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "rouge_l", "cider_d", "self_cider", "lsa",
                "mbleu_4", "set_accuracy", "--wait")
    run_command("placeholder_images", "sub", str(tmp_path / "pictures"), "--set-source")  # the explorer's thumbnails
    run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "pascal")
    run_command("compute_metrics", "--dataset", "pascal", "--metric", "bleu_4", "cider_d", "--wait")
    run_command("import_dataset", "thumb", str(write_thumb_subset(tmp_path / "thumb", 60)), "--name", "thumb")
    run_command("compute_metrics", "--dataset", "thumb", "--metric", "bleu_4", "cider_d", "--wait")
    image = Caption.objects.filter(image__dataset__name="sub").order_by("image__key").first().image
    return {"image": image.key}


def test_every_chart_page_fits_a_phone_and_is_not_cut_on_a_desktop(browser, live_server, chart_data, tmp_path):
    base = live_server.url
    pages = {
        "dataset": f"{base}/datasets/sub/",
        "benchmark": f"{base}/datasets/sub/benchmark/?{SETTINGS}",
        "pascal": f"{base}/datasets/pascal/benchmark/?{SETTINGS}",
        "compare": f"{base}/compare/?{SETTINGS}",
        "leaderboard": f"{base}/datasets/thumb/leaderboard/?resamples=100&seed=1",
        "diversity": f"{base}/datasets/sub/diversity/",
        "image": f"{base}/datasets/sub/images/{chart_data['image']}/",
        "explorer": f"{base}/datasets/sub/explorer/?disagree=cider_d",
    }
    chart_pages = {"dataset", "benchmark", "pascal", "compare", "leaderboard", "diversity", "image"}
    for name, url in pages.items():
        for width in (PHONE, DESKTOP):
            got = _open(browser, url, width)
            _screenshot(browser, tmp_path / f"{name}-{width}.png")
            assert got["scrollWidth"] <= got["innerWidth"], (name, width, got["scrollWidth"])
            if name in chart_pages:
                assert got["charts"], (name, "no chart on the page")
            if name == "dataset":  # sampled: the large-set layout (see chart_data)
                assert browser.find_element(By.CSS_SELECTOR, "figure.chart .chart-note").text.startswith("showing 100 of")
            for chart in got["charts"]:
                assert chart["inBox"], (name, width, chart)
                assert not chart["cut"], (name, width, chart["id"], chart["cut"])
                if width == PHONE and chart.get("natural", 1000) >= 300:
                    assert chart["width"] >= 300, (name, chart)
                if width == PHONE and "plot" in chart and not chart["id"].startswith("pvalues-"):
                    # the plot itself, not only its drawing: legends side by side once squeezed a
                    # phone's scatter to 50 px inside a 316 px drawing (the p-value maps have fixed cells)
                    assert chart["plot"] >= 250, (name, chart)

    # PASCAL-50S: one chart per subset, each titled by its subset
    browser.set_window_size(DESKTOP, 1000)
    browser.get(pages["pascal"])
    WebDriverWait(browser, 120).until(_ready)
    for subset in ("HC", "HI", "HM", "MM"):
        title = browser.execute_script(
            f"return [...document.querySelectorAll('#chart-category-{subset} .role-title text')].map(t => t.textContent).join(' ');")
        assert f"{subset} subset" in title, (subset, title)
    assert "all pairs" in browser.execute_script(
        "return [...document.querySelectorAll('#chart-accuracy .role-title text')].map(t => t.textContent).join(' ');")

    # the explorer: the sorted column (the disagreement) and its metric in view beside the caption
    browser.get(pages["explorer"])
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "explorer-table"))
    edges = browser.execute_script(
        "const wrap = document.querySelector('.table-wrap').getBoundingClientRect();"
        "return ['text', 'cider_d', 'disagreement'].map(c => document.querySelector("
        "`#explorer-table th[data-column='${c}']`).getBoundingClientRect().right - wrap.right);")
    assert all(edge <= 0 for edge in edges), edges
    assert browser.find_element(By.CSS_SELECTOR, "#explorer-table th.sorted").get_attribute("data-column") == "disagreement"
    rows = browser.find_elements(By.CSS_SELECTOR, "#explorer-table tr[data-caption]")
    thumbs = browser.find_elements(By.CSS_SELECTOR, "#explorer-table tr[data-caption] td.image img.thumb")
    assert rows and len(thumbs) == len(rows)  # every row's picture as a thumbnail (the placeholders)
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(  # the first rows' pictures (lazy below the fold)
        "return [...document.querySelectorAll('img.thumb')].slice(0, 3).every(i => i.complete && i.naturalWidth > 0);"))


def test_the_preview_shows_no_empty_notice_under_submit(browser, live_server, subset_dir):
    """The owner's preview of a task: the notice under its Submit button (the result of a tried
    answer) is marked hidden until there is something to say, and stays hidden whatever its class
    displays it as (the .notice box once drew an empty yellow frame there); at 390 px the page does
    not scroll sideways."""
    from django.contrib.auth.models import User

    from crowd.models import Dataset

    from .test_campaign_console import login, rating

    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    alice = User.objects.create_user("alice", password="pw")
    rating(Dataset.objects.get(name="sub"), alice, name="preview-study")
    login(browser, live_server, "alice")
    for width in (PHONE, DESKTOP):
        browser.set_window_size(width, 1000)
        browser.get(f"{live_server.url}/campaigns/preview-study/preview/")
        WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "submit"))
        notice = browser.find_element(By.ID, "preview-result")
        assert notice.get_attribute("hidden") is not None and not notice.is_displayed()
        assert browser.execute_script("return getComputedStyle(arguments[0]).display", notice) == "none"
        assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
