"""The example explorer, the image page, and three facts the pages got wrong (issue 15), on the bundled
data (PostgreSQL): every expected row, order, count and statistic below is recomputed here from the
database rows (Python dicts, scipy), independently of analysis.explorer and analysis.benchmarks."""
import csv
import html
import io
import re
from unittest import mock

import numpy as np
import pytest
import scipy.stats as st
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from analysis.benchmarks import benchmark_report
from crowd.models import Caption, Dataset, HumanJudgment, Image, PairwiseJudgment
from metrics.models import MetricRun, MetricScore

from .conftest import ROOT, run_command, stale

THUMB = ROOT / "data" / "thumb"
PASCAL = ROOT / "data" / "pascal50s"
FLICKR8K = ROOT / "data" / "flickr8k"
METRICS = ("bleu_4", "rouge_l", "cider_d")


def import_thumb():
    run_command("import_dataset", "thumb", str(THUMB), "--name", "thumb")
    run_command("compute_metrics", "--dataset", "thumb", "--metric", *METRICS, "--wait")
    return Dataset.objects.get(name="thumb")


@pytest.fixture
def thumb(db):
    return import_thumb()


def db_rows(dataset):
    """One dict per candidate caption straight from the tables: id, image key, system, caption key,
    text, mean human score on the main criterion (None if unrated), its count, and each metric."""
    rows = {}
    for pk, image, system, key, text in Caption.objects.filter(image__dataset=dataset).exclude(
            system_id=dataset.reference_system_id).values_list("pk", "image__key", "system__name", "key", "text"):
        rows[pk] = {"id": pk, "image": image, "system": system, "key": key, "text": text, "ratings": []}
    for caption_id, score in HumanJudgment.objects.filter(image__dataset=dataset, campaign__isnull=True,
                                                           criterion=dataset.criterion).values_list("caption_id", "score"):
        rows[caption_id]["ratings"].append(score)
    for r in rows.values():
        r["human"] = sum(r["ratings"]) / len(r["ratings"]) if r["ratings"] else None
    for metric in METRICS:
        run = MetricRun.objects.get(dataset=dataset, metric=metric)
        for caption_id, value in MetricScore.objects.filter(run=run).values_list("caption_id", "value"):
            rows[caption_id][metric] = value
    return list(rows.values())


def table_order(r):
    return (r["image"], r["system"], r["key"])


def sort_desc(rows, column):
    """Largest first, missing last, ties in table order (image key, system, caption key)."""
    have = sorted((r for r in rows if r.get(column) is not None), key=lambda r: (-r[column], table_order(r)))
    return have + sorted((r for r in rows if r.get(column) is None), key=table_order)


def disagreement(rows, metric):
    """{caption id: pct(metric) - pct(human)}, pct = 100 (average rank - 1) / (n - 1) over the
    captions with both scores (scipy's rankdata)."""
    both = [r for r in rows if r["human"] is not None and r.get(metric) is not None]
    pm = st.rankdata([r[metric] for r in both])
    ph = st.rankdata([r["human"] for r in both])
    n = len(both)
    return {r["id"]: 100 * (a - 1) / (n - 1) - 100 * (b - 1) / (n - 1) for r, a, b in zip(both, pm, ph)}


def page_rows(body: str) -> list[int]:
    return [int(x) for x in re.findall(r'<tr data-caption="(\d+)">', body)]


def cells(body: str, caption_id: int) -> dict[str, str]:
    """{column id: shown text} of the row of ``caption_id`` (each cell names its column)."""
    row = re.search(rf'<tr data-caption="{caption_id}">(.*?)</tr>', body, re.S).group(1)
    return {column: html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for column, c in re.findall(r'<td[^>]*data-column="([^"]+)"[^>]*>(.*?)</td>', row, re.S)}


def header(body: str) -> list[str]:
    """The column ids of the explorer table's header, in the order shown."""
    head = re.search(r'<table id="explorer-table">\s*<tr>(.*?)</tr>', body, re.S).group(1)
    return re.findall(r'<th[^>]*data-column="([^"]+)"', head)


@pytest.mark.django_db
def test_explorer_sort_filter_paging_disagreement_csv_and_bad_parameters(thumb, client):
    rows = db_rows(thumb)
    url = "/datasets/thumb/explorer/"
    assert len(rows) == 2500
    # default: table order, 50 a page, 50 pages
    body = client.get(url).content.decode()
    assert page_rows(body) == [r["id"] for r in sorted(rows, key=table_order)[:50]]
    assert 'id="total">2500<' in body and "page 1 of 50" in body
    # the dataset page links here
    assert 'id="explorer-link" href="/datasets/thumb/explorer/"' in client.get("/datasets/thumb/").content.decode()

    # sorted by CIDEr-D, largest first, page 2; shown as stored (range 0-10), BLEU-4 x100
    body = client.get(url, {"sort": "cider_d", "order": "desc", "page": "2"}).content.decode()
    expected = sort_desc(rows, "cider_d")[50:100]
    assert page_rows(body) == [r["id"] for r in expected]
    first = cells(body, expected[0]["id"])
    assert first["image"] == expected[0]["image"] and first["system"] == expected[0]["system"]
    assert first["text"] == expected[0]["text"]
    assert first["human"] == f"{expected[0]['human']:.2f}" and first["n_human"] == "1"
    assert [first["bleu_4"], first["rouge_l"], first["cider_d"]] == [
        f"{100 * expected[0]['bleu_4']:.1f}", f"{100 * expected[0]['rouge_l']:.1f}", f"{expected[0]['cider_d']:.3f}"]
    # columns: image, caption, human, then the sorted column (in view beside the caption however many
    # metrics there are), then system, n, precision, recall and the other metrics in registry order
    assert header(body) == ["image", "text", "human", "cider_d", "system", "n_human", "human:precision",
                            "human:recall", "bleu_4", "rouge_l"]
    assert list(first) == header(body)
    assert header(client.get(url).content.decode()) == ["image", "text", "human", "system", "n_human", "human:precision",
                                                        "human:recall", "bleu_4", "rouge_l", "cider_d"]

    # text columns sort by their text; equal texts (and systems) keep the table order
    body = client.get(url, {"sort": "text"}).content.decode()
    assert page_rows(body) == [r["id"] for r in sorted(rows, key=lambda r: (r["text"], table_order(r)))[:50]]
    body = client.get(url, {"sort": "system", "order": "desc", "page": "3"}).content.decode()
    by_system = sorted(sorted(rows, key=table_order), key=lambda r: r["system"], reverse=True)  # stable: ties in table order
    assert page_rows(body) == [r["id"] for r in by_system[100:150]]

    # filters: text contained (any case), one system, human score range; ascending BLEU-4
    params = {"q": "DOG", "system": "Up-Down", "hmin": "3", "hmax": "4.5", "sort": "bleu_4", "order": "asc"}
    body = client.get(url, params).content.decode()
    match = [r for r in rows if "dog" in r["text"].lower() and r["system"] == "Up-Down" and r["human"] is not None
             and 3 <= r["human"] <= 4.5]
    expected = sorted(match, key=lambda r: (r["bleu_4"], table_order(r)))
    assert match and f'id="total">{len(match)}<' in body
    assert page_rows(body) == [r["id"] for r in expected[:50]]

    # the CSV holds every matching row in the same order, x100 where the page shows x100
    response = client.get("/datasets/thumb/explorer.csv", params)
    assert response.status_code == 200
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [int(r["caption_id"]) for r in table] == [r["id"] for r in expected]
    for got, want in zip(table, expected):
        assert float(got["bleu_4 (x100)"]) == pytest.approx(100 * want["bleu_4"])
        assert float(got["cider_d"]) == pytest.approx(want["cider_d"])
        assert float(got["human"]) == pytest.approx(want["human"])

    # largest disagreements with CIDEr-D: |pct(metric) - pct(human)|, largest first
    dis = disagreement(rows, "cider_d")
    body = client.get(url, {"disagree": "cider_d"}).content.decode()
    expected = sorted(dis, key=lambda c: (-abs(dis[c]), table_order(next(r for r in rows if r["id"] == c))))
    shown = page_rows(body)
    assert shown == expected[:50]
    for caption_id in shown[:10]:
        assert cells(body, caption_id)["disagreement"] == f"{dis[caption_id]:+.1f}"
    # the metric and the disagreement come right after the caption and its human score
    assert header(body)[:5] == ["image", "text", "human", "cider_d", "disagreement"]

    # the CSV's rows are built column-wise (explorer.csv_rows): the same bytes as csv_row through SafeWriter,
    # formula-looking cells neutralised and missing values empty
    from analysis import explorer
    from analysis.explorer_views import _table
    from captioneval.utils import csvsafe

    stored, *_ = _table(Dataset.objects.get(name="thumb"))
    stored.text = stored.text.copy()
    stored.text[0] = '=HYPERLINK("http://evil.example")'
    stored.numeric["cider_d"] = stored.numeric["cider_d"].copy()
    stored.numeric["cider_d"][1] = float("nan")
    order = explorer.select(stored, explorer.parse_query({"sort": "cider_d"}))
    for dis in (None, stored.disagreement("cider_d")):
        rowwise, columnwise = io.StringIO(), io.StringIO()
        for i in order:
            csvsafe.writer(rowwise).writerow(explorer.csv_row(stored, int(i), dis))
        csv.writer(columnwise).writerows(explorer.csv_rows(stored, order, dis))
        assert columnwise.getvalue() == rowwise.getvalue()
        assert explorer.csv_text(stored, order, dis) == rowwise.getvalue()  # what the download writes
        parsed = {int(r[0]): r for r in csv.reader(io.StringIO(columnwise.getvalue()))}
        assert parsed[int(stored.caption[0])][3] == "'" + stored.text[0]
        cider_column = explorer.csv_header(stored).index("cider_d")
        assert parsed[int(stored.caption[1])][cider_column] == ""

    # bad parameters: a clear 400, never a 500
    for bad, words in [({"sort": "nope"}, "unknown column"), ({"disagree": "spice"}, "unknown metric"),
                       ({"system": "Nobody"}, "unknown system"), ({"hmin": "abc"}, "hmin must be a number"),
                       ({"hmin": "nan"}, "finite"), ({"hmin": "5", "hmax": "1"}, "above hmax"),
                       ({"order": "up"}, "order must be asc or desc"), ({"page": "0"}, "page must be"),
                       ({"page": "-3"}, "page must be"), ({"page": "\u00b2"}, "page must be"), ({"page": "51"}, "past the last page"),
                       ({"sort": "disagreement"}, "needs disagree"), ({"colour": "red"}, "unknown parameter"),
                       ({"q": "x" * 201}, "at most 200")]:
        response = client.get(url, bad)
        assert response.status_code == 400, bad
        assert words in html.unescape(response.content.decode()), bad
        if bad != {"page": "51"}:  # the CSV has every page
            assert client.get("/datasets/thumb/explorer.csv", bad).status_code == 400, bad
    assert client.get("/datasets/nope/explorer/").status_code == 404
    # a filter that matches nothing is a page, not an error
    body = client.get(url, {"q": "zzzxq"}).content.decode()
    assert 'id="no-rows"' in body and 'id="total">0<' in body


@pytest.mark.django_db
def test_image_page_shows_the_picture_and_every_caption_with_its_ratings_and_scores(thumb, client):
    from crowd.images import image_url

    thumb.image_source, thumb.image_location = "url", "https://images.example.org/coco/{key}.jpg"
    thumb.save(update_fields=["image_source", "image_location"])
    image = Image.objects.get(dataset=thumb, key="105052")
    src = image_url(image)
    assert src and "105052" in src
    body = client.get(f"/datasets/thumb/images/{image.key}/").content.decode()
    assert re.search(r'<img id="picture-img" src="([^"]+)"', body).group(1) == html.escape(src)
    assert 'id="no-picture"' not in body
    captions = Caption.objects.filter(image=image)
    assert sorted(int(c) for c in re.findall(r'<tr data-caption="(\d+)"', body)) == sorted(c.pk for c in captions)
    runs = {m: MetricRun.objects.get(dataset=thumb, metric=m) for m in METRICS}
    for caption in captions.exclude(system_id=thumb.reference_system_id):
        row = re.search(rf'<tr data-caption="{caption.pk}"[^>]*>(.*?)</tr>', body, re.S).group(1)
        assert html.escape(caption.text) in row
        for j in HumanJudgment.objects.filter(caption=caption):
            assert re.search(rf'data-criterion="{j.criterion}">{j.criterion}: {j.score:g}', row), (caption.text, j.criterion)
        metric_cells = re.findall(r'<td class="metric">([^<]*)</td>', row)
        want = [MetricScore.objects.get(run=runs[m], caption=caption).value for m in METRICS]
        assert metric_cells == [f"{100 * want[0]:.1f}", f"{100 * want[1]:.1f}", f"{want[2]:.3f}"]
    # the diversity content of the page still renders
    assert "<h2>Caption sets</h2>" in body
    # without a source (and no URL of its own) there is no picture, and the page says how to give one
    thumb.image_source, thumb.image_location = "", ""
    thumb.save(update_fields=["image_source", "image_location"])
    Image.objects.filter(pk=image.pk).update(url="")
    body = client.get(f"/datasets/thumb/images/{image.key}/").content.decode()
    assert 'id="no-picture"' in body and "<img id=\"picture-img\"" not in body


@pytest.mark.django_db
def test_thumb_system_level_without_the_human_system_matches_scipy(thumb):
    report = benchmark_report("thumb", n_resamples=20, n_permutations=0, significance=False)
    for metric in METRICS:
        entry = report["metrics"][metric]["system"]
        assert entry["n_systems"] == 5
        without = entry["without_human"]
        assert without["left_out"] == "Human" and without["n_systems"] == 4
        # by hand: every rating is a row (THumB), a system's score is the mean over its rows
        per_system = {}
        run = MetricRun.objects.get(dataset=thumb, metric=metric)
        score = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
        for caption_id, system, human in HumanJudgment.objects.filter(
                image__dataset=thumb, criterion="human_score", campaign__isnull=True).values_list(
                "caption_id", "system__name", "score"):
            per_system.setdefault(system, []).append((score[caption_id], human))
        assert set(per_system) == {"Up-Down", "Unified-VLP", "VinVL-base", "VinVL-large", "Human"}
        names = sorted(s for s in per_system if s != "Human")
        x = [np.mean([p[0] for p in per_system[s]]) for s in names]
        y = [np.mean([p[1] for p in per_system[s]]) for s in names]
        values = without["values"]
        assert values["pearson"] == pytest.approx(st.pearsonr(x, y)[0], abs=1e-9)
        assert values["spearman"] == pytest.approx(st.spearmanr(x, y)[0], abs=1e-9)
        assert values["kendall_tau_b"] == pytest.approx(st.kendalltau(x, y)[0], abs=1e-9)
        assert values["kendall_tau_c"] == pytest.approx(st.kendalltau(x, y, variant="c")[0], abs=1e-9)
        # and the with-Human value is a different number from a different set of systems
        names5 = sorted(per_system)
        x5 = [np.mean([p[0] for p in per_system[s]]) for s in names5]
        y5 = [np.mean([p[1] for p in per_system[s]]) for s in names5]
        assert entry["values"]["pearson"] == pytest.approx(st.pearsonr(x5, y5)[0], abs=1e-9)
        lo, hi = without["ci95"]["pearson"]
        assert lo <= hi


@pytest.mark.django_db
def test_benchmark_pages_put_the_headline_statistic_first_and_show_thumb_without_human(thumb, client):
    body = client.get("/datasets/thumb/benchmark/", {"resamples": "100", "permutations": "100"}).content.decode()
    heads = re.findall(r'<th data-statistic="([a-z_]+)"', re.search(r'<table id="item-table"[^>]*>.*?</tr>', body, re.S).group(0))
    assert heads[0] == thumb.protocol["headline"] == "pearson"
    table = re.search(r'<table id="system-table-without-human"[^>]*>(.*?)</table>', body, re.S).group(1)
    report = benchmark_report("thumb", n_resamples=100, n_permutations=100, seed=0)
    for metric in METRICS:
        row = re.search(rf'<tr data-metric="{metric}">(.*?)</tr>', table, re.S).group(1)
        value = report["metrics"][metric]["system"]["without_human"]["values"]["pearson"]
        assert re.search(r'class="stat-pearson">([^ ]+) ', row).group(1) == f"{100 * value:.1f}"


@pytest.mark.django_db
def test_home_page_counts_pascal_votes_and_explorer_reads_forced_choice(client):
    run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "pascal50s")
    dataset = Dataset.objects.get(name="pascal50s")
    votes = PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset).count()
    body = client.get("/").content.decode()
    row = re.search(r'<a href="/datasets/pascal50s/">pascal50s</a>.*?</tr>', body, re.S).group(0)
    cell = re.search(r'class="human-data">(.*?)</td>', row, re.S).group(1)
    assert cell == f"{votes:,} forced-choice votes" and "0 human ratings" not in body
    # the explorer's human score of a forced-choice benchmark: the share of its pairs' votes it won
    body = client.get("/datasets/pascal50s/explorer/", {"sort": "human", "order": "desc"}).content.decode()
    won, cast = {}, {}
    for b, c, choice in PairwiseJudgment.objects.filter(caption_b__image__dataset=dataset).values_list(
            "caption_b_id", "caption_c_id", "choice"):
        for caption, mine in ((b, "b"), (c, "c")):
            cast[caption] = cast.get(caption, 0) + 1
            won[caption] = won.get(caption, 0) + (choice == mine)
    shown = page_rows(body)
    assert len(shown) == 50
    shares = [100 * won[c] / cast[c] for c in shown]
    assert shares == sorted(shares, reverse=True) and shares[0] == max(100 * won[c] / cast[c] for c in cast)
    for caption in shown[:5]:
        got = cells(body, caption)
        assert got["human"] == f"{100 * won[caption] / cast[caption]:.1f}" and got["n_human"] == str(cast[caption])
    # the image page lists each caption's votes
    image = Caption.objects.get(pk=shown[0]).image
    page = client.get(f"/datasets/pascal50s/images/{image.key}/").content.decode()
    assert f"{won[shown[0]]} of {cast[shown[0]]} forced-choice votes" in page


@pytest.mark.django_db(transaction=True)
def test_explorer_in_chromium_sorts_by_a_metric_and_filters_by_text(browser, live_server, tmp_path):
    dataset = import_thumb()
    rows = db_rows(dataset)
    browser.set_window_size(1400, 1000)
    browser.get(f"{live_server.url}/datasets/thumb/")
    browser.find_element(By.ID, "explorer-link").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "explorer-table"))

    def shown():
        return [int(tr.get_attribute("data-caption")) for tr in browser.find_elements(By.CSS_SELECTOR, "#explorer-table tr[data-caption]")]

    assert shown() == [r["id"] for r in sorted(rows, key=table_order)[:50]]
    header = browser.find_element(By.CSS_SELECTOR, '#explorer-table th[data-column="cider_d"] a')
    header.click()  # first click: largest first
    WebDriverWait(browser, 30).until(stale(header))
    assert browser.find_element(By.CSS_SELECTOR, 'th[data-column="cider_d"]').get_attribute("aria-sort") == "descending"
    assert shown() == [r["id"] for r in sort_desc(rows, "cider_d")[:50]]
    box = browser.find_element(By.ID, "f-q")
    box.send_keys("dog")
    browser.find_element(By.ID, "f-submit").click()
    WebDriverWait(browser, 30).until(stale(box))
    match = [r for r in rows if "dog" in r["text"].lower()]
    assert browser.find_element(By.ID, "total").text == str(len(match))
    assert shown() == [r["id"] for r in sort_desc(match, "cider_d")[:50]]
    texts = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#explorer-table td.text")]
    assert texts and all("dog" in t.lower() for t in texts)
    browser.save_screenshot(str(tmp_path / "explorer.png"))
    # the image key opens the image page with that caption on it
    first = browser.find_element(By.CSS_SELECTOR, "#explorer-table tr[data-caption] td.image a")
    caption_id = shown()[0]
    first.click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "image-captions"))
    assert browser.find_elements(By.CSS_SELECTOR, f'#image-captions tr[data-caption="{caption_id}"]')
    # a phone-width window shows the table without widening the page (the table scrolls in its box)
    browser.set_window_size(390, 844)
    browser.back()
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "explorer-table"))
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.mark.slow
@pytest.mark.django_db
def test_explorer_reads_the_stored_table_on_flickr8k_crowdflower(client):
    """Every filter, sort and page is answered from the table the Celery task stored: no request
    computes a report, and each costs a few queries. The time of these requests is measured by
    benchmarks/page_timing.py (QUERY_VARIANTS), not here: a timed test fails on a loaded machine."""
    from django.db import connection

    from analysis import cached_reports
    from analysis.models import Report
    from analysis.tasks import request_report

    run_command("import_dataset", "flickr8k-crowdflower", str(FLICKR8K), "--name", "cf")
    run_command("compute_metrics", "--dataset", "cf", "--metric", "bleu_4", "cider_d", "--wait")
    dataset = Dataset.objects.get(name="cf")
    key, params = cached_reports.explorer_key(dataset)
    assert request_report(Report.EXPLORER, key, params, dataset=dataset).status == Report.DONE  # the Celery task
    n = dataset.candidates().count()
    assert n > 40000
    client.get("/datasets/cf/explorer/")  # this process parses the stored table once

    def boom(*args, **kwargs):
        raise AssertionError("a page computed a report")

    with mock.patch("analysis.cached_reports.compute", boom), mock.patch("analysis.explorer_views.request_report", boom):
        for params in ({}, {"sort": "cider_d", "order": "desc", "page": "7"}, {"q": "dog", "sort": "text"},
                       {"disagree": "cider_d", "page": "3"}, {"hmin": "0.5", "sort": "bleu_4", "order": "desc"},
                       {"q": "a", "disagree": "bleu_4", "sort": "image", "order": "desc"}):
            queries = []
            with connection.execute_wrapper(lambda execute, sql, *args: queries.append(sql) or execute(sql, *args)):
                response = client.get("/datasets/cf/explorer/", params)
            assert response.status_code == 200 and len(page_rows(response.content.decode())) == 50
            assert 0 < len(queries) <= 12, (params, [q[:120] for q in queries])
    body = client.get("/datasets/cf/explorer/").content.decode()
    assert f'id="total">{n}<' in body
    # the download's rows, joined column by column, are the csv module's bytes on all 47,830 rows
    from analysis import explorer
    from analysis.explorer_views import _table

    stored, *_ = _table(dataset)
    order = explorer.select(stored, explorer.parse_query({"sort": "disagreement", "disagree": "cider_d"}))
    dis = stored.disagreement("cider_d")
    reference = io.StringIO()
    csv.writer(reference).writerows(explorer.csv_rows(stored, order, dis))
    assert explorer.csv_text(stored, order, dis) == reference.getvalue()
    download = client.get("/datasets/cf/explorer.csv", {"sort": "disagreement", "disagree": "cider_d"}).content.decode()
    assert download.split("\r\n", 1)[1] == reference.getvalue()
