"""benchmarks/page_timing.py covers every URL pattern: each pattern's arguments are ones the script
fills from the demo data (so a new page cannot go untimed), and the charts and downloads a page links
to are found in its HTML. The timing run itself is a benchmark (minutes of set-up), not a test."""
import importlib.util
import sys

from .conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "page_timing.py"
_spec = importlib.util.spec_from_file_location("page_timing", SCRIPT)
page_timing = sys.modules.setdefault("page_timing", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(page_timing)


def test_every_url_pattern_has_an_example():
    patterns = page_timing.url_patterns()
    names = {name for name, _, _ in patterns}
    # the project's own pages are all there, the admin only by its index
    assert {"analysis:index", "analysis:explorer", "crowd:campaign", "crowd:image-check", "metrics:compute",
            "admin:index"} <= names
    assert not [n for n in names if n.startswith("admin:") and n != "admin:index"]
    assert not [n for n in names if n.startswith("api:") and n not in ("api:schema", "api:docs")]
    assert {"api:schema", "api:docs", "api-token"} <= names
    fake = {"base": {a: "x" for a in page_timing.ARGUMENTS}, "per_name": {}, "campaign": "c"}
    missing = [(name, route) for name, route, args in patterns
               if page_timing.kwargs_for(name, route, args, fake) is None]
    assert missing == []
    # and a pattern with an argument the script does not know is reported, not skipped silently
    assert page_timing.kwargs_for("x:new", "datasets/<slug:name>/<int:colour>/", ["name", "colour"], fake) is None


def test_linked_charts_and_downloads_are_found_in_a_page():
    html = ('<div data-vega-spec="/datasets/d/scatter/bleu_4.json"></div>'
            '<a href="/datasets/d/benchmark/chart/item/tau_c.svg?resamples=10&amp;seed=0">SVG</a>'
            '<img src="/datasets/d/diversity/scatter.png"><a href="/datasets/d/explorer/">explorer</a>'
            '<script src="/static/analysis/vendor/vega.min.js"></script><a href="https://example.org/x.csv">x</a>'
            '<a href="//evil.example/y.json">y</a>')
    assert page_timing.linked_urls(html) == [
        "/datasets/d/scatter/bleu_4.json", "/datasets/d/benchmark/chart/item/tau_c.svg?resamples=10&seed=0",
        "/datasets/d/diversity/scatter.png"]
