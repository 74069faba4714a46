"""REST API metric runs (api/runs.py): list and detail as stored with progress, filters, the stored
scores as JSON and as CSV (captioneval.utils.csvsafe: no formula cells, exact way back), and runs started over
the API through the compute form's path (plan, queue, progress to done; METEOR without Java
skipped with its reason). Real data: the bundled COCO-format sets and a Flickr8k-Expert subset."""
import csv
import io
import math
import time

import pytest
from django.test import Client

from crowd.models import Caption, Dataset, System
from captioneval.utils import csvsafe
from metrics.models import MetricRun, MetricScore

from .api_matrix import world  # noqa: F401 (a fixture)
from .conftest import run_command


def auth(world, user="staff"):  # noqa: F811
    return {"HTTP_AUTHORIZATION": f"Token {world.tokens[user]}"}


def test_list_and_detail_show_the_stored_runs(world, db):  # noqa: F811
    c = Client()
    run = MetricRun.objects.get(pk=world.run)
    detail = c.get(f"/api/runs/{run.pk}/").json()
    assert (detail["metric"], detail["dataset"], detail["status"]) == (run.metric, world.dataset, run.status)
    assert detail["completed"] == run.completed == detail["total"] == run.total > 0 and detail["percent"] == 100.0
    assert detail["version"] == run.version and detail["params"] == run.params
    assert detail["url"] == f"/api/runs/{run.pk}/" and detail["scores_url"] == f"/api/runs/{run.pk}/scores/"
    listed = c.get(f"/api/runs/?dataset={world.dataset}&metric=bleu_1&status=done").json()
    assert [r["id"] for r in listed["results"]] == [run.pk]
    assert c.get(f"/api/runs/?dataset={world.dataset}&status=failed").json()["count"] == 0
    assert c.get("/api/runs/?status=finished").status_code == 400
    assert c.get("/api/runs/999999999/").status_code == 404
    assert c.get("/api/runs/999999999/scores/").status_code == 404


def test_scores_json_and_csv_are_the_stored_scores(world, db):  # noqa: F811
    c = Client()
    run = MetricRun.objects.get(pk=world.run)
    stored = {s.caption_id: s.value for s in MetricScore.objects.filter(run=run)}
    # an undefined score (NaN) and a system whose name a spreadsheet would run as a formula
    dataset = Dataset.objects.get(name=world.dataset)
    evil = System.objects.create(dataset=dataset, name="=HYPERLINK(\"http://x\")", kind=System.MODEL)
    caption = Caption.objects.create(image=dataset.images.first(), system=evil, key="+cmd", text="@SUM(A1)")
    MetricScore.objects.create(run=run, caption=caption, value=float("nan"))
    stored[caption.pk] = float("nan")
    rows, url = [], f"/api/runs/{run.pk}/scores/?limit=200"
    while url:
        page = c.get(url).json()
        rows += page["results"]
        url = page["next"]
    assert len(rows) == len(stored)
    for row in rows:
        value = stored[row["caption"]]
        assert (row["value"] is None) if math.isnan(value) else row["value"] == value
    nan_row = next(r for r in rows if r["caption"] == caption.pk)
    assert nan_row["system"] == evil.name and nan_row["key"] == "+cmd"
    response = c.get(f"/api/runs/{run.pk}/scores/csv/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    text = b"".join(response.streaming_content).decode()
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed[0] == ["caption", "image", "system", "key", "value", "raw"] and len(parsed) == len(rows) + 1
    evil_cells = next(r for r in parsed[1:] if r[0] == str(caption.pk))
    assert evil_cells[2].startswith("'") and evil_cells[3] == "'+cmd" and evil_cells[4] == ""
    for cells, row in zip(parsed[1:], rows):
        back = csvsafe.restore_row(cells)
        assert back[:4] == [str(row["caption"]), row["image"], row["system"], row["key"]]
        assert (back[4] == "") if row["value"] is None else float(back[4]) == row["value"]


def test_runs_are_started_by_staff_only_with_the_forms_rules(world, db, monkeypatch, tmp_path):  # noqa: F811
    c = Client()
    body = {"dataset": world.dataset, "metrics": ["bleu_1"]}
    assert c.post("/api/runs/", body, content_type="application/json", **auth(world, "owner")).status_code == 403
    done = c.post("/api/runs/", body, content_type="application/json", **auth(world))
    assert done.status_code == 202
    data = done.json()
    assert data["up_to_date"] == [world.run] and data["started"] == [] and data["skipped"] == []
    not_offered = c.post("/api/runs/", {"dataset": world.dataset, "metrics": ["vifidel"]},
                         content_type="application/json", **auth(world))
    assert not_offered.status_code == 400 and "not offered" in not_offered.json()["detail"]
    missing = c.post("/api/runs/", {"dataset": "no-such", "metrics": ["bleu_1"]}, content_type="application/json",
                     **auth(world))
    assert missing.status_code == 404
    # METEOR of the jar without Java on this server: skipped with its reason; alone, refused with it
    empty = tmp_path / "bin-without-java"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    from captioneval.metrics import base, registry

    assert registry.unavailable_now(["meteor"]) == {}  # the default, pure-Python METEOR needs no Java
    # CAPTIONEVAL_METEOR=java: the jar's METEOR needs a JVM (captioneval.metrics.builtin.meteor)
    monkeypatch.setattr(registry.METRICS["meteor"], "needs", frozenset({base.REFERENCES, base.JVM}))
    alone = c.post("/api/runs/", {"dataset": world.dataset, "metrics": ["meteor"]}, content_type="application/json",
                   **auth(world))
    assert alone.status_code == 400 and "Java is not installed" in alone.json()["detail"]
    assert not MetricRun.objects.filter(dataset__name=world.dataset, metric="meteor").exists()
    mixed = c.post("/api/runs/", {"dataset": world.dataset, "metrics": ["meteor", "bleu_1"]},
                   content_type="application/json", **auth(world))
    assert mixed.status_code == 202
    assert [s["metric"] for s in mixed.json()["skipped"]] == ["meteor"]
    assert "Java is not installed" in mixed.json()["skipped"][0]["reason"]
    assert mixed.json()["up_to_date"] == [world.run]


@pytest.mark.django_db(transaction=True)
def test_a_run_started_over_the_api_progresses_to_done(subset_dir):
    """Without a broker (the quick start), as the compute form: 202 at once, the run is computed in a
    background thread of the web process, its progress is visible until it is done, and its scores
    are every candidate caption's."""
    from django.contrib.auth.models import User
    from api.account import create_token

    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "api-sub")
    staff = User.objects.create_user("api-runner", password="pw", is_staff=True)
    headers = {"HTTP_AUTHORIZATION": f"Token {create_token(staff)}"}
    c = Client()
    response = c.post("/api/runs/", {"dataset": "api-sub", "metrics": ["bleu_4", "rouge_l"]},
                      content_type="application/json", **headers)
    assert response.status_code == 202, response.content
    body = response.json()
    assert len(body["started"]) == 2 and {r["metric"] for r in body["runs"]} == {"bleu_4", "rouge_l"}
    deadline = time.monotonic() + 120
    for run_id in body["started"]:
        while True:
            run = c.get(f"/api/runs/{run_id}/").json()
            assert 0 <= run["completed"] <= run["total"]
            if run["status"] in ("done", "failed"):
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.2)
        assert run["status"] == "done" and run["completed"] == run["total"]
        n = Dataset.objects.get(name="api-sub").candidates().count()
        assert run["total"] == n and c.get(f"/api/runs/{run_id}/scores/").json()["count"] == n
