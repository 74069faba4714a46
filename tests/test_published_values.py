"""Published Kendall correlations beside ours (issue 16, "Published values beside ours").

The table bundled in data/published_correlations/ (CaptionEvalKit for VLMs, BSD-3-Clause-Clear) is
read by analysis.published; every expected value here comes from the JSON files themselves (read
with the json module, independently of the loader) and ours from scipy's Kendall tau-c on the
database rows. Pages: the benchmark page and the comparison page of a Flickr8k-Expert subset and of
an imported benchmark mapped to Polaris, their JSON/CSV/LaTeX downloads, and the section in headless
Chromium (screenshots at 1400 and 390 px wide in the test's tmp_path).
"""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest
import scipy.stats as st

from analysis import published
from analysis.benchmarks import benchmark_report
from crowd.importers.judgments import JudgmentMapping, import_judgments
from crowd.models import Dataset

from .conftest import ROOT, run_command
from .test_benchmarks import rows_by_hand

TABLE = ROOT / "data" / "published_correlations"
SHARED = ROOT.parent / "shared" / "data" / "captionevalkit_expected_correlations"
THUMB = ROOT / "data" / "thumb"
Q = "resamples=100&permutations=100&seed=0&alpha=0.05"


def raw(metric: str, benchmark: str) -> dict:
    """A file of the bundled table, read directly."""
    return json.loads((TABLE / "expected" / metric / f"{benchmark}.json").read_text())


# --- the table ----------------------------------------------------------------------------------------------


def test_the_bundled_table_loads_every_file_with_provenance():
    files = sorted(TABLE.glob("expected/*/*.json"))
    assert len(files) == 67
    t = published.load_table(TABLE)
    assert t.n_files == len(files)
    # one value per statistic present in each file, equal to the file's number
    expected = {(f.parent.name, f.stem, s): v for f in files for s, v in json.loads(f.read_text())["correlations"].items()}
    got = {(v.metric, v.benchmark, v.statistic): v.value for v in t.values}
    assert got == expected and len(t.values) == len(expected)
    for v in t.values:
        data = raw(v.metric, v.benchmark)
        assert v.source == data["source"] and v.score_name == data["score_name"]
    assert {"composite", "flickr8k-ex", "flickr8k-cf", "nebula", "polaris"} <= set(t.benchmarks())
    # byte copies of the shared data, with the licence and the provenance
    if SHARED.is_dir():
        for f in files:
            assert f.read_bytes() == (SHARED / f.relative_to(TABLE)).read_bytes()
        assert (TABLE / "LICENSE").read_bytes() == (SHARED / "LICENSE").read_bytes()
    assert (TABLE / "LICENSE").read_text().startswith("BSD 3-Clause Clear License")
    source = (TABLE / "SOURCE.txt").read_text()
    assert t.repository == "github.com/YuigaWada/CaptionEvalKit-for-VLMs"
    assert t.commit == "23f154b924618cc257458291434c4b44e5bf7410" and t.commit in source
    assert "BSD-3-Clause-Clear" in source and (TABLE / "README.md").is_file()
    assert published.table() is published.table()  # read once per process


def test_every_metric_folder_is_named_and_ours_are_registered_keys():
    from captioneval.metrics.registry import METRICS, UNAVAILABLE

    t = published.table()
    assert {v.metric for v in t.values} <= set(published.METRICS)
    for folder, (key, name) in published.METRICS.items():
        if key:
            assert key in METRICS or key in UNAVAILABLE, key
            our_key, our_name, here = published.metric_info(folder)
            assert here == (key in METRICS)
    assert published.metric_info("spice")[2] is False  # SPICE: listed, not computed here
    assert published.metric_info("bleu") == ("bleu_4", "BLEU-4", True)
    assert published.metric_info("clipscore") == (None, "CLIPScore", False)


def _copy(tmp_path) -> Path:
    target = tmp_path / "table"
    shutil.copytree(TABLE, target)
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def _set(path: Path, text: str):
    path.write_text(text)


MALFORMED = [
    ("not JSON", lambda r: _set(r / "expected/bleu/composite.json", "{'source': 1"), "expected/bleu/composite.json", "not valid JSON"),
    ("a list", lambda r: _set(r / "expected/bleu/composite.json", "[1, 2]"), "expected/bleu/composite.json", "must be a JSON object"),
    ("no correlations", lambda r: _set(r / "expected/cider/nebula.json", '{"source": "x", "score_name": "CIDEr"}'),
     "expected/cider/nebula.json: field 'correlations'", "missing"),
    ("unknown statistic", lambda r: _set(r / "expected/cider/nebula.json",
                                         '{"source": "x", "score_name": "CIDEr", "correlations": {"pearson": 40.1}}'),
     "field 'correlations.pearson'", "unknown statistic"),
    ("text value", lambda r: _set(r / "expected/pacscore/polaris.json",
                                  '{"source": "x", "score_name": "PAC-S", "correlations": {"kendall_tau_c": "high"}}'),
     "expected/pacscore/polaris.json: field 'correlations.kendall_tau_c'", "must be a finite number, got 'high'"),
    ("NaN", lambda r: _set(r / "expected/pacscore/polaris.json",
                           '{"source": "x", "score_name": "PAC-S", "correlations": {"kendall_tau_c": NaN}}'),
     "field 'correlations.kendall_tau_c'", "must be a finite number"),
    ("a fraction, not x100", lambda r: _set(r / "expected/polos/polaris.json",
                                            '{"source": "x", "score_name": "Polos", "correlations": {"kendall_tau_c": 5700}}'),
     "field 'correlations.kendall_tau_c'", "in [-100, 100]"),
    ("empty source", lambda r: _set(r / "expected/polos/polaris.json",
                                    '{"source": " ", "score_name": "Polos", "correlations": {"kendall_tau_c": 57}}'),
     "field 'source'", "non-empty string"),
    ("extra field", lambda r: _set(r / "expected/polos/polaris.json",
                                   '{"source": "s", "score_name": "Polos", "correlations": {"kendall_tau_c": 57}, "x": 1}'),
     "field 'x'", "unknown field"),
    ("empty correlations", lambda r: _set(r / "expected/polos/polaris.json",
                                          '{"source": "s", "score_name": "Polos", "correlations": {}}'),
     "field 'correlations'", "non-empty object"),
    ("stray file", lambda r: _set(r / "expected/polos/notes.txt", "x"), "expected/polos/notes.txt", "only <benchmark>.json"),
    ("no commit", lambda r: _set(r / "SOURCE.txt", "repo github.com/a/b, no commit here"), "SOURCE.txt", "40-digit commit"),
]


@pytest.mark.parametrize("kind, corrupt, where, problem", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_one_clear_error(tmp_path, kind, corrupt, where, problem):
    root = _copy(tmp_path)
    corrupt(root)
    with pytest.raises(published.PublishedTableError) as info:
        published.load_table(root)
    message = str(info.value)
    assert where in message and problem in message and "\n" not in message, message


def test_missing_table_folder(tmp_path):
    with pytest.raises(published.PublishedTableError, match="expected: folder missing"):
        published.load_table(tmp_path)


# --- attached to benchmarks ---------------------------------------------------------------------------------


class _Fake:
    def __init__(self, kind, protocol, name="x", criterion="c"):
        self.kind, self.protocol, self.name, self.criterion = kind, protocol, name, criterion


def test_datasets_are_attached_by_kind_or_published_as():
    assert published.published_benchmark(_Fake("flickr8k-expert", {})) == "flickr8k-ex"
    assert published.published_benchmark(_Fake("flickr8k-crowdflower", {})) == "flickr8k-cf"
    assert published.published_benchmark(_Fake("judgments", {"published_as": "nebula"})) == "nebula"
    assert published.published_benchmark(_Fake("thumb", {})) is None
    assert published.published_benchmark(_Fake("judgments", {"published_as": "no-such"})) is None
    assert published.published_rows(_Fake("thumb", {})) == []
    rows = published.published_rows(_Fake("flickr8k-crowdflower", {"headline": "kendall_tau_b"}))
    files = sorted((TABLE / "expected").glob("*/flickr8k-cf.json"))
    assert len(rows) == sum(len(json.loads(f.read_text())["correlations"]) for f in files)
    bleu = [r for r in rows if r["metric"] == "bleu"]
    assert [r["statistic"] for r in bleu] == ["kendall_tau_b", "kendall_tau_c"]  # the headline first
    assert bleu[0]["value"] == raw("bleu", "flickr8k-cf")["correlations"]["kendall_tau_b"]
    assert bleu[0]["ours"] is None and bleu[0]["computed_here"] and bleu[0]["name"] == "BLEU-4"
    assert all(r["computed_here"] for r in rows[:8]) and not any(r["computed_here"] for r in rows[8:])
    assert all("github.com/YuigaWada/CaptionEvalKit-for-VLMs" in r["citation"] and r["source"] in r["citation"] for r in rows)


# --- pages and downloads ------------------------------------------------------------------------------------


@pytest.fixture
def expert(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4", "cider_d", "--wait")
    return Dataset.objects.get(name="sub")


def _ours(dataset, key, statistic="kendall_tau_c"):
    x, y, *_ = rows_by_hand(dataset, key)
    variant = statistic[-1]
    return 100 * st.kendalltau(x, y, variant=variant).statistic


@pytest.mark.django_db
def test_expert_benchmark_page_json_csv_latex(expert, client):
    ours = {k: _ours(expert, k) for k in ("bleu_4", "cider_d")}
    page = client.get(f"/datasets/sub/benchmark/?{Q}").content.decode()
    assert 'id="published"' in page and "Published values, not computed here" in page
    assert "published, not computed here" in page and "github.com/YuigaWada/CaptionEvalKit-for-VLMs" in page
    section = page[page.index('id="published"'):]
    section = section[:section.index("</section>")]
    for folder, name in (("clipscore", "CLIPScore"), ("pacscore", "PAC-S")):
        data = raw(folder, "flickr8k-ex")
        row = section[section.index(f'data-published="{folder}" data-statistic="kendall_tau_c"'):]
        row = row[:row.index("</tr>")]
        assert name in row and f'{data["correlations"]["kendall_tau_c"]:.1f}' in row and data["source"] in row
    for key, folder in (("bleu_4", "bleu"), ("cider_d", "cider")):
        row = section[section.index(f'data-metric="{key}" data-published="{folder}" data-statistic="kendall_tau_c"'):]
        row = row[:row.index("</tr>")]
        published_value = raw(folder, "flickr8k-ex")["correlations"]["kendall_tau_c"]
        assert f'<td class="ours">{ours[key]:.1f}</td>' in row
        assert f'<td class="published">{published_value:.1f}</td>' in row

    # JSON: the report with a "published" block, ours = scipy's tau-c on the rows, x100
    bench = client.get(f"/datasets/sub/benchmark.json?{Q}").json()
    block = bench["published"]
    assert block["benchmark"] == "flickr8k-ex" and block["note"] == "published, not computed here"
    assert block["licence"] == "BSD-3-Clause-Clear" and block["commit"] == published.table().commit
    rows = {(r["metric"], r["statistic"]): r for r in block["rows"]}
    for key, folder in (("bleu_4", "bleu"), ("cider_d", "cider")):
        for stat in ("kendall_tau_b", "kendall_tau_c"):
            r = rows[(folder, stat)]
            assert r["value"] == raw(folder, "flickr8k-ex")["correlations"][stat]
            assert r["ours"] == pytest.approx(_ours(expert, key, stat), abs=1e-9) and r["computed_here"]
            assert r["ours"] == pytest.approx(100 * bench["metrics"][key]["item"]["values"][stat], abs=1e-9)
    assert rows[("clipscore", "kendall_tau_c")]["ours"] is None and not rows[("clipscore", "kendall_tau_c")]["computed_here"]
    assert rows[("meteor", "kendall_tau_c")]["ours"] is None  # computed here, not on this dataset
    assert len(block["rows"]) == sum(len(json.loads(f.read_text())["correlations"])
                                     for f in (TABLE / "expected").glob("*/flickr8k-ex.json"))
    direct = benchmark_report("sub", n_resamples=100, n_permutations=100)
    assert direct["published"] == bench["published"]

    # Comparison JSON / CSV / LaTeX of this benchmark
    matrix = client.get(f"/compare.json?dataset=sub&{Q}").json()
    assert [b["dataset"] for b in matrix["published"]] == ["sub"]
    assert matrix["published"][0]["rows"] == block["rows"]
    table = list(csv.DictReader(io.StringIO(client.get(f"/compare.csv?dataset=sub&{Q}").content.decode())))
    pub = {(r["metric"], r["statistic"]): r for r in table if r["source"] == "published, not computed here"}
    assert len(pub) == len(block["rows"])
    clip = pub[("published:clipscore", "kendall_tau_c")]
    assert float(clip["value"]) == pytest.approx(raw("clipscore", "flickr8k-ex")["correlations"]["kendall_tau_c"] / 100)
    assert clip["benchmark"] == "sub" and raw("clipscore", "flickr8k-ex")["source"] in clip["citation"]
    assert "CaptionEvalKit-for-VLMs" in clip["citation"] and clip["rank"] == "" and clip["ci95_lo"] == ""
    ours_rows = {r["metric"]: r for r in table if r["source"] == "computed here"}
    assert float(ours_rows["bleu_4"]["value"]) == pytest.approx(ours["bleu_4"] / 100, abs=1e-12)
    latex = client.get(f"/compare.tex?dataset=sub&{Q}").content.decode()
    main, extra = latex.split("% Published values, not computed here", 1)
    assert "\\label{tab:metric-human-agreement}" in main and "CLIPScore" not in main
    assert "\\label{tab:published-agreement}" in extra and "published, not computed here" in extra
    pac = raw("pacscore", "flickr8k-ex")
    line = next(l for l in extra.splitlines() if l.startswith("Flickr8k-Expert (sub) & PAC-S & Kendall tau-c"))
    assert f"{pac['correlations']['kendall_tau_c']:.1f}$^{{" in line and "not computed here" in line
    mark = line.split("$^{")[1].split("}")[0]
    assert f"$^{{{mark}}}$ {published_latex_text(pac['source'])}." in extra
    line = next(l for l in extra.splitlines() if l.startswith("Flickr8k-Expert (sub) & CIDEr-D & Kendall tau-c"))
    assert line.endswith(f"& {ours['cider_d']:.1f} \\\\")
    assert "github.com/YuigaWada/CaptionEvalKit-for-VLMs" in extra

    # The comparison page
    page = client.get(f"/compare/?dataset=sub&{Q}").content.decode()
    assert 'id="published-table"' in page and "PAC-S" in page and "published, not computed here" in page


def published_latex_text(text):
    from analysis.benchmarks import latex_escape

    return latex_escape(text)


def write_polaris_style(path: Path, n_images: int) -> Path:
    """Real THumB 1.0 rows (first ``n_images`` images, 5 systems each) in the generic judgment format."""
    refs = {}
    for line in (THUMB / "mscoco_references.json").read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            refs[d["seg_id"]] = d["refs"]
    keep, rows = [], []
    for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["seg_id"] not in keep:
            if len(keep) == n_images:
                continue
            keep.append(d["seg_id"])
        rows.append({"image": d["seg_id"], "candidate": d["hyp"], "references": refs[d["seg_id"]],
                     "score": d["human_score"], "system": d["SYS"]})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.mark.django_db
def test_an_imported_benchmark_mapped_to_polaris_shows_the_polaris_rows(tmp_path, client):
    import_judgments(write_polaris_style(tmp_path / "pol.jsonl", 30), "pol",
                     JudgmentMapping(system="system", published_as="polaris"))
    dataset = Dataset.objects.get(name="pol")
    assert dataset.protocol["published_as"] == "polaris"
    run_command("compute_metrics", "--dataset", "pol", "--metric", "bleu_4", "--wait")
    bench = client.get(f"/datasets/pol/benchmark.json?{Q}").json()
    rows = {(r["metric"], r["statistic"]): r for r in bench["published"]["rows"]}
    files = sorted((TABLE / "expected").glob("*/polaris.json"))
    assert {(f.parent.name, s) for f in files for s in json.loads(f.read_text())["correlations"]} == set(rows)
    bleu = rows[("bleu", "kendall_tau_c")]
    assert bleu["value"] == raw("bleu", "polaris")["correlations"]["kendall_tau_c"]
    x, y, *_ = rows_by_hand(dataset, "bleu_4", mean=True)
    assert bleu["ours"] == pytest.approx(100 * st.kendalltau(x, y, variant="c").statistic, abs=1e-9)
    page = client.get(f"/datasets/pol/benchmark/?{Q}").content.decode()
    assert 'id="published-benchmark">Polaris<' in page
    for folder in ("clipscore", "polos", "refpacscore"):
        data = raw(folder, "polaris")
        assert f'data-published="{folder}" data-statistic="kendall_tau_c"' in page and data["source"] in page
    # A dataset attached to nothing has no published block and no section.
    run_command("import_dataset", "thumb", str(_thumb_subset(tmp_path / "thumb", 20)), "--name", "thumb")
    run_command("compute_metrics", "--dataset", "thumb", "--metric", "bleu_4", "--wait")
    assert client.get(f"/datasets/thumb/benchmark.json?{Q}").json()["published"] is None
    assert 'id="published"' not in client.get(f"/datasets/thumb/benchmark/?{Q}").content.decode()
    matrix = client.get(f"/compare.json?{Q}").json()
    assert [b["dataset"] for b in matrix["published"]] == ["pol"]


def _thumb_subset(directory, n):
    from .test_benchmarks import write_thumb_subset

    return write_thumb_subset(directory, n)


# --- headless Chromium --------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_published_section_in_chromium(browser, live_server, expert, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{live_server.url}/datasets/sub/benchmark/?{Q}")
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "published"))
    section = browser.find_element(By.ID, "published")
    assert "published, not computed here" in section.text
    assert "github.com/YuigaWada/CaptionEvalKit-for-VLMs" in browser.find_element(By.ID, "published-citation").text
    side = browser.find_elements(By.CSS_SELECTOR, "#published-side-by-side tr[data-metric]")
    by = {(r.get_attribute("data-metric"), r.get_attribute("data-statistic")): r for r in side}
    for key, folder in (("bleu_4", "bleu"), ("cider_d", "cider")):
        r = by[(key, "kendall_tau_c")]
        assert r.find_element(By.CSS_SELECTOR, "td.ours").text == f"{_ours(expert, key):.1f}"
        assert r.find_element(By.CSS_SELECTOR, "td.published").text == f"{raw(folder, 'flickr8k-ex')['correlations']['kendall_tau_c']:.1f}"
    others = browser.find_elements(By.CSS_SELECTOR, "#published-table tr.published-row")
    names = {(r.get_attribute("data-published"), r.get_attribute("data-statistic")): r for r in others}
    clip = names[("clipscore", "kendall_tau_c")]
    assert clip.find_element(By.CSS_SELECTOR, "td.published").text == f"{raw('clipscore', 'flickr8k-ex')['correlations']['kendall_tau_c']:.1f}"
    assert clip.find_element(By.CSS_SELECTOR, "td.source").text == raw("clipscore", "flickr8k-ex")["source"]
    assert ("spice", "kendall_tau_c") in names  # listed by the registry, not computed here
    for width in (1400, 390):
        browser.set_window_size(width, 2200)
        browser.execute_script("document.getElementById('published').scrollIntoView()")
        # the section fits the page: no horizontal scroll of the whole document beyond its tables
        browser.save_screenshot(str(tmp_path / f"benchmark_{width}.png"))
    browser.set_window_size(1400, 2200)
    browser.get(f"{live_server.url}/compare/?{Q}")
    WebDriverWait(browser, 120).until(lambda d: d.find_elements(By.ID, "published-table"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#published-table tr[data-published]")
    assert len(rows) == sum(len(json.loads(f.read_text())["correlations"]) for f in (TABLE / "expected").glob("*/flickr8k-ex.json"))
    browser.execute_script("document.getElementById('published').scrollIntoView()")
    browser.save_screenshot(str(tmp_path / "compare_1400.png"))
