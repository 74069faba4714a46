"""Query parameters of the dashboard pages (analysis/urls.py) holding a control character: every
page answers 400 naming the parameter before reading anything (PostgreSQL refuses NUL in a string,
so such a value once reached the database and answered 500), on a real Flickr8k-Expert subset."""
import re

import pytest

from analysis import urls as analysis_urls
from analysis.models import Report

from .conftest import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture
def sub(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")


def test_a_nul_in_a_report_setting_is_a_400_naming_it_not_a_500(sub, client):
    for url, name in (("/datasets/sub/leaderboard.json?criterion=x%00", "criterion"),
                      ("/datasets/sub/leaderboard/?baseline=a%00b", "baseline"),
                      ("/datasets/sub/benchmark.json?criterion=x%00", "criterion"),
                      ("/datasets/sub/benchmark/?criterion=expert%00", "criterion"),
                      ("/compare.json?dataset=x%00", "dataset"),
                      ("/compare.csv?dataset=sub&dataset=s%00ub", "dataset"),
                      ("/datasets/sub/correlations.json?weighting=gap:mtld%0A", "weighting"),
                      ("/datasets/sub/explorer/?system=x%00", "system")):
        response = client.get(url)
        assert response.status_code == 400, (url, response.status_code)
        text = response.content.decode()
        assert f"the query parameter {name} holds a control character" in text, (url, text)
    assert Report.objects.count() == 0  # refused before any report was requested
    # the same values without the control character are read as before
    assert client.get("/datasets/sub/benchmark.json?criterion=x").status_code == 400  # not judged: the page's message
    assert client.get("/compare.json?dataset=x").status_code == 400
    assert client.get("/datasets/sub/correlations.json?weighting=").status_code == 404  # nothing computed yet


def _sample(route: str) -> str:
    """``route`` with every converter replaced by a sample value (the check comes before any lookup)."""
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "1" if m.group(1) == "pk" else "sub", route)


def test_every_dashboard_page_refuses_a_control_character_in_any_parameter(sub, client):
    routes = [str(p.pattern) for p in analysis_urls.urlpatterns]
    assert len(routes) > 40
    for route in routes:
        for query in ("?q=%00", "?q%01=1", "?a=1&a=%7F"):
            url = _sample(route) + query
            response = client.get(url)
            assert response.status_code == 400, (url, response.status_code)
            assert b"holds a control character" in response.content, url
