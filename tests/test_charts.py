"""Interactive charts and honest figures, on the bundled Flickr8k-Expert subset (and PASCAL-50S for
the forced-choice accuracy charts): the Vega-Lite specs the chart endpoints build from stored
reports (fit lines clipped to the data, the human ceiling only on its own statistic, x100, the 50%
chance line on accuracies), the PNG/SVG/PDF figures, and the dataset page in headless Chromium
(the vendored libraries served locally, a hover on a scatter point showing the caption and both
scores, a sortable table)."""
import re

import numpy as np
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from analysis import cached_reports, charts
from analysis.benchmarks import benchmark_report
from analysis.models import Report
from crowd.images import image_url
from crowd.models import Caption, Dataset, HumanJudgment
from metrics.models import MetricRun, MetricScore

from .conftest import run_command
from .test_benchmarks import PASCAL

pytestmark = pytest.mark.django_db(transaction=True)

SETTINGS = "seed=0&resamples=100&permutations=100&alpha=0.05"
METRICS = ("bleu_4", "rouge_l", "cider_d")


@pytest.fixture
def expert(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", *METRICS, "--wait")
    return Dataset.objects.get(name="sub")


def by_hand(dataset, metric):
    """{caption id: (metric score, [ratings])} straight from the database."""
    run = MetricRun.objects.get(dataset=dataset, metric=metric, status=MetricRun.DONE)
    scores = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    ratings = {}
    for caption, score in HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True,
                                                       criterion=dataset.criterion).values_list("caption_id", "score"):
        ratings.setdefault(caption, []).append(score)
    return {c: (scores[c], r) for c, r in ratings.items()}


def layer(spec, mark):
    return [lay for lay in spec["layer"] if (lay["mark"]["type"] if isinstance(lay["mark"], dict) else lay["mark"]) == mark]


def test_scatter_spec_from_the_stored_report(client, expert):
    truth = by_hand(expert, "bleu_4")
    response = client.get("/datasets/sub/scatter/bleu_4.json")
    assert response.status_code == 200
    spec = response.json()
    # read from a stored report of its own kind, computed once
    key, _ = cached_reports.scatter_key(expert, "bleu_4")
    assert Report.objects.get(key=key).status == Report.DONE
    points = layer(spec, "circle")[0]["data"]["values"]
    assert len(points) == len(truth) == spec["usermeta"]["n"] == spec["usermeta"]["n_shown"]
    texts = dict(Caption.objects.filter(pk__in=list(truth)).values_list("pk", "text"))
    for p in points:
        score, ratings = truth[p["id"]]
        tip = p["tip"]
        assert tip["title"] == texts[p["id"]]  # the caption, as the tooltip's heading
        assert float(tip["BLEU-4 x100"]) == pytest.approx(100 * score, abs=1e-2)  # x100, as every table
        assert float(tip["mean human quality"]) == pytest.approx(np.mean(ratings), abs=1e-3)
        assert tip["human quality (each rater)"] == ", ".join(f"{r:g}" for r in ratings)
        assert tip["references"] and tip["references"] != "(none)"
        # the picture from the dataset's image source; none (never a broken one) without a URL
        url = image_url(Caption.objects.select_related("image__dataset").get(pk=p["id"]).image)
        assert tip.get("image") == url
        assert p["x"] == pytest.approx(100 * score, abs=1e-4)
        assert p["y"] == pytest.approx(np.mean(ratings), abs=1e-6)
        # the jitter stays within 35% of the gap between two mean ratings (1/3 with three raters)
        assert abs(p["yj"] - p["y"]) <= 0.35 / 3 + 1e-9
    # the fit: least squares over all captions, drawn from the smallest to the largest score only
    x = 100 * np.array([v[0] for v in truth.values()])  # BLEU-4 x100 on the axis
    y = np.array([np.mean(v[1]) for v in truth.values()])
    slope, intercept = np.polyfit(x, y, 1)
    line = layer(spec, "line")[0]["data"]["values"]
    assert x.min() - 1e-9 <= line[0]["x"] < line[1]["x"] <= x.max() + 1e-9
    assert all(y.min() - 1e-9 <= pt["y"] <= y.max() + 1e-9 for pt in line)
    assert line[0]["y"] == pytest.approx(slope * line[0]["x"] + intercept)
    assert spec["usermeta"]["fit"]["slope"] == pytest.approx(slope)
    # the axes: scores on their own range, the rating scale 1-4 (padded by the jitter)
    enc = layer(spec, "circle")[0]["encoding"]
    assert enc["x"]["scale"]["domain"] == pytest.approx([x.min(), x.max()])
    lo, hi = enc["y"]["scale"]["domain"]
    assert 0.5 < lo < 1 and 4 < hi < 4.5

    # the same stored report, every caption, as figures for papers
    png = client.get("/datasets/sub/scatter/bleu_4.png")
    assert png.status_code == 200 and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    svg = client.get("/datasets/sub/scatter/bleu_4.svg")
    assert svg["Content-Type"] == "image/svg+xml" and b"<svg" in svg.content[:500]
    pdf = client.get("/datasets/sub/scatter/bleu_4.pdf")
    assert pdf["Content-Type"] == "application/pdf" and pdf.content[:5] == b"%PDF-"
    assert client.get("/datasets/sub/scatter/nonsense.json").status_code == 404
    assert client.get("/datasets/sub/scatter/spice.json").status_code == 404  # not computed: the message
    assert "has not been computed" in client.get("/datasets/sub/scatter/meteor.json").json()["problem"]


def test_large_scatter_samples_points_over_a_density_layer(client, expert):
    """Sampling and density, with a small cap: every caption is counted by the grey cells."""
    truth = by_hand(expert, "cider_d")
    data = charts.scatter_data(expert, "cider_d", max_points=50, seed=3)
    assert data["n"] == len(truth) > 50 and data["n_shown"] == len(data["points"]) == 50
    assert sum(c["count"] for c in data["density"]) == len(truth)
    assert len({p["caption"] for p in data["points"]}) == 50
    for p in data["points"]:
        assert p["x"] == pytest.approx(truth[p["caption"]][0], abs=1e-6)
        assert p["ratings"] == pytest.approx(truth[p["caption"]][1])
    assert data == charts.scatter_data(expert, "cider_d", max_points=50, seed=3)  # reproducible
    spec = charts.scatter_spec(data)
    assert f"showing 50 of {len(truth)} captions" in spec["title"]["subtitle"]
    assert layer(spec, "rect")[0]["data"]["values"] == data["density"]


def test_benchmark_bar_specs_ceiling_scale_and_figures(client, expert):
    report = benchmark_report("sub", list(METRICS), n_resamples=100, seed=0, n_permutations=100)
    ceiling = report["ceiling"]["item"]
    assert ceiling["statistic"] == report["headline"] == "kendall_tau_c"
    statistics = report["settings"]["statistics"]
    assert {"pearson", "spearman", "kendall_tau_c"} <= set(statistics)
    for statistic in statistics:
        r = client.get(f"/datasets/sub/benchmark/chart/item/{statistic}.json?{SETTINGS}")
        assert r.status_code == 200
        spec = r.json()
        meta = spec["usermeta"]
        assert meta["unit"] == "x100" and meta["chance"] is None
        for key, m in report["metrics"].items():
            assert meta["values"][key] == pytest.approx(100 * m["item"]["values"][statistic], abs=1e-3)
        rules = [v["line"] for lay in layer(spec, "rule") for v in lay["data"]["values"] if "line" in v]
        if statistic == "kendall_tau_c":
            assert meta["ceiling"]["value"] == pytest.approx(100 * ceiling["value"], abs=1e-3)
            assert any("human ceiling" in line for line in rules)
        else:  # a tau-c ceiling is not drawn on a Pearson or Spearman chart
            assert meta["ceiling"] is None and not any("ceiling" in line for line in rules)
            assert "on the item-level Kendall tau-c chart only" in spec["title"]["subtitle"]
        assert "(x100)" in layer(spec, "bar")[0]["encoding"]["y"]["title"]
    # no ceiling on the image or system levels either, and the legend never sits on the bars
    spec = client.get(f"/datasets/sub/benchmark/chart/image/kendall_tau_c.json?{SETTINGS}").json()
    assert spec["usermeta"]["ceiling"] is None
    assert client.get(f"/datasets/sub/benchmark/chart/galaxy/pearson.json?{SETTINGS}").status_code == 404
    assert client.get(f"/datasets/sub/benchmark/chart/item/nonsense.json?{SETTINGS}").status_code == 404
    assert client.get("/datasets/sub/benchmark/chart/item/pearson.json?resamples=-1").status_code == 400
    for fmt, magic in (("png", b"\x89PNG"), ("svg", b"<?xml"), ("pdf", b"%PDF-")):
        r = client.get(f"/datasets/sub/benchmark/chart/item/pearson.{fmt}?{SETTINGS}")
        assert r.status_code == 200 and r.content.startswith(magic), fmt
        r = client.get(f"/datasets/sub/benchmark/significance.{fmt}?{SETTINGS}")
        assert r.status_code == 200 and r.content.startswith(magic), fmt


def test_forced_choice_accuracy_charts_have_the_chance_line(client):
    run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "pascal")
    run_command("compute_metrics", "--dataset", "pascal", "--metric", "bleu_4", "--wait")
    report = benchmark_report("pascal", n_resamples=100, n_permutations=100)
    for statistic in ("accuracy", "HC", "HI", "HM", "MM"):
        spec = client.get(f"/datasets/pascal/benchmark/chart/item/{statistic}.json?{SETTINGS}").json()
        meta = spec["usermeta"]
        assert meta["chance"] == 50.0
        lines = {v["line"]: v["y"] for lay in layer(spec, "rule") for v in lay["data"]["values"] if "line" in v}
        assert lines["chance (50%)"] == 50.0
        expected = report["ceiling"]["item"] if statistic == "accuracy" else report["ceiling"]["per_category"][statistic]
        assert meta["ceiling"]["value"] == pytest.approx(100 * expected["value"], abs=1e-3)
        m = report["metrics"]["bleu_4"]
        value = m["accuracy"] if statistic == "accuracy" else m["per_category"][statistic]["accuracy"]
        assert meta["values"]["bleu_4"] == pytest.approx(100 * value, abs=1e-3)
        # the legend of the lines is below the plot, never over the bars
        legend = [lay for lay in layer(spec, "rule") if "color" in lay["encoding"]][0]["encoding"]["color"]["legend"]
        assert legend["orient"] == "bottom"
        # each subset's chart is titled by its subset, the chart of every pair says so
        assert (f"{statistic} subset" if statistic != "accuracy" else "all pairs") in spec["title"]["text"]
        figure = client.get(f"/datasets/pascal/benchmark/chart/item/{statistic}.png?{SETTINGS}")
        assert figure.status_code == 200 and figure.content[:4] == b"\x89PNG"


def test_dataset_page_hover_shows_caption_and_scores(browser, live_server, expert, tmp_path):
    truth = by_hand(expert, "cider_d")
    browser.set_window_size(1400, 1000)
    browser.get(f"{live_server.url}/datasets/sub/")
    html = browser.page_source
    # every script is ours: no CDN, no external URL in a script src
    sources = [s.get_attribute("src") for s in browser.find_elements(By.CSS_SELECTOR, "script[src]")]
    assert sources and all(s.startswith(live_server.url + "/static/") for s in sources), sources
    assert not re.search(r"<script[^>]+src=[\"']https?://(?!127\.0\.0\.1|localhost)", html)
    for name in ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js"):
        r = browser.execute_async_script(
            "const done = arguments[1]; fetch(arguments[0]).then(r => done([r.status, r.headers.get('content-type')]))",
            f"{live_server.url}/static/analysis/vendor/{name}")
        assert r[0] == 200 and "javascript" in r[1]
    chart = "scatter-cider_d"
    WebDriverWait(browser, 30).until(lambda d: d.execute_script(f"return document.getElementById('{chart}').dataset.ready === '1'"))
    assert browser.execute_script("return Object.keys(window.captionevalCharts).length") == len(METRICS)
    note = browser.find_element(By.CSS_SELECTOR, f"#{chart} .chart-note").text
    assert f"{len(truth)} captions" in note
    browser.execute_script(f"document.getElementById('{chart}').scrollIntoView()")
    # hover: move the mouse onto the pixel of a point (Vega's own scales) and read the tooltip
    hover = """
      const el = document.getElementById(arguments[0]), view = el.vegaView, i = arguments[1];
      const d = view.data('captions').filter(p => p.x > 0)[i];
      const box = el.querySelector('canvas, svg').getBoundingClientRect();
      const [ox, oy] = view.origin(), pad = view.padding();  // the plot's corner, inside the padding
      const cx = box.left + pad.left + ox + view.scale('x')(d.x), cy = box.top + pad.top + oy + view.scale('y')(d.yj);
      const target = document.elementFromPoint(cx, cy);
      for (const type of ['pointerover', 'pointermove'])  // what Vega 6 listens to
        target.dispatchEvent(new PointerEvent(type, {clientX: cx, clientY: cy, bubbles: true}));
      return [d.tip.title, d.id];
    """
    shown = None
    for i in range(0, 40):
        caption, caption_id = browser.execute_script(hover, chart, i)
        WebDriverWait(browser, 5).until(lambda d: d.execute_script(
            "const t = document.getElementById('vg-tooltip-element'); return t && t.classList.contains('visible')"))
        tip = browser.find_element(By.ID, "vg-tooltip-element")
        if tip.find_element(By.TAG_NAME, "h2").text == caption:
            shown = (caption_id, tip.text)
            break
    assert shown is not None, "no hovered point showed its own caption"
    caption_id, text = shown
    score, ratings = truth[caption_id]
    assert f"{score:.4f}".rstrip("0").rstrip(".") in text  # the metric score (format .4~f)
    assert f"{np.mean(ratings):.3f}".rstrip("0").rstrip(".") in text  # the mean human score (.3~f)
    assert ", ".join(f"{r:g}" for r in ratings) in text  # each rater's score
    assert "references" in text
    browser.save_screenshot(str(tmp_path / "hover.png"))
    # the export links of every scatter: PNG, SVG, PDF of the same chart
    links = browser.find_elements(By.CSS_SELECTOR, f"#{chart} .chart-exports a")
    assert [a.text for a in links] == ["PNG", "SVG", "PDF"]
    # the correlation table sorts by a click on a header (numbers as numbers), and says so
    header = browser.find_element(By.CSS_SELECTOR, "#correlations th[data-statistic='pearson']")
    column = browser.execute_script("return arguments[0].cellIndex + 1", header)
    cells = f"#correlations tr[data-metric] td:nth-child({column})"

    def shown():
        return [float(td.text.split()[0]) for td in browser.find_elements(By.CSS_SELECTOR, cells)]

    before = shown()
    header.click()
    assert header.get_attribute("aria-sort") == "ascending"
    assert shown() == sorted(before) and len(before) == len(METRICS)
    header.click()
    assert header.get_attribute("aria-sort") == "descending"
    assert shown() == sorted(before, reverse=True)
