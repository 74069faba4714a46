"""The staff upload page of human-judgment files (/judgments/upload/) and the re-importable export
of a dataset (/datasets/<name>/export.jsonl|csv), through Django's test client on PostgreSQL and in
headless Chromium. Real data: rows of THumB 1.0 (data/thumb: Kasai et al. 2022), renamed to the
field names of other benchmark files (imgid, mt, refs, score) as a researcher's file would be;
expected counts and means are computed from those rows here, not from the code under test."""
import csv
import io
import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db.models import Avg
from django.test import Client
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from crowd import engine
from crowd.models import Campaign, Caption, Dataset, HumanJudgment, Image, System

from .conftest import ROOT, stale

pytestmark = pytest.mark.django_db

THUMB = ROOT / "data" / "thumb"
URL = "/judgments/upload/"


def thumb_rows(n_images: int) -> list[dict]:
    """The THumB 1.0 rows of its first ``n_images`` images (all five systems), each as a
    researcher's file would hold it: imgid, mt (the caption), refs (its image's COCO references
    from mscoco_references.json), P and R (precision and recall, 1-5), SYS."""
    refs = {r["seg_id"]: r["refs"] for r in map(json.loads, (THUMB / "mscoco_references.json").read_text().splitlines())}
    rows, images = [], []
    for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["image"] not in images:
            if len(images) == n_images:
                continue
            images.append(r["image"])
        rows.append({"imgid": r["image"], "mt": r["hyp"], "refs": refs[r["seg_id"]], "P": r["P"], "R": r["R"],
                     "SYS": r["SYS"]})
    return rows


def coco_key(file_name: str) -> str:
    """The image key of a COCO file name as the importers store it: the COCO image id
    (``COCO_val2014_000000000974.jpg`` -> ``974``; crowd.importers.base.image_key)."""
    return str(int(file_name.rsplit("_", 1)[1].split(".")[0]))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


#: the form fields that map the rows of :func:`thumb_rows`
FORM = {"name": "my-bench", "image_field": "imgid", "candidate_field": "mt", "references_field": "refs",
        "score_fields": "P, R", "criteria": "precision, recall", "system_field": "SYS", "rater_field": "",
        "rows": "mean", "headline": "kendall_tau_c", "format": "", "published_as": ""}


def crowd_state() -> dict:
    """Every row of the human-side tables (what an import could write)."""
    return {m.__name__: list(m.objects.order_by("pk").values()) for m in (Dataset, Image, System, Caption, HumanJudgment)}


def staff_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("sam", password="pw", is_staff=True))
    return client


def post_file(client, path: Path, **fields):
    with path.open("rb") as fh:
        return client.post(URL, {**FORM, **fields, "file": fh})


def expected_counts(rows):
    images = list(dict.fromkeys(r["imgid"] for r in rows))
    refs = {r["imgid"]: r["refs"] for r in rows}
    return {"images": len(images), "candidates": len(rows), "references": sum(len(refs[i]) for i in images),
            "systems": len({r["SYS"] for r in rows})}


def check_dataset(name: str, rows: list[dict]) -> Dataset:
    """The dataset ``name`` holds exactly ``rows``: counts, captions and per-system means per criterion."""
    dataset = Dataset.objects.get(name=name)
    want = expected_counts(rows)
    assert dataset.images.count() == want["images"]
    assert dataset.candidates().count() == want["candidates"]
    assert dataset.references().count() == want["references"]
    assert set(dataset.candidates().values_list("system__name", flat=True).distinct()) == {r["SYS"] for r in rows}
    judgments = HumanJudgment.objects.filter(image__dataset=dataset)
    assert judgments.count() == 2 * len(rows)  # one mean per caption and criterion
    assert sorted(dataset.candidates().values_list("image__key", "system__name", "text")) == \
        sorted((coco_key(r["imgid"]), r["SYS"], r["mt"]) for r in rows)
    for criterion, field in (("precision", "P"), ("recall", "R")):
        for system in {r["SYS"] for r in rows}:
            stored = judgments.filter(criterion=criterion, system__name=system).aggregate(m=Avg("score"))["m"]
            assert stored == pytest.approx(statistics.mean(r[field] for r in rows if r["SYS"] == system), abs=1e-12)
    return dataset


# --- access -------------------------------------------------------------------------------------------

def test_anonymous_visitors_go_to_the_login_page_and_other_users_get_403(tmp_path):
    path = write_jsonl(tmp_path / "thumb.jsonl", thumb_rows(3))
    before = crowd_state()
    anonymous = Client()
    for response in (anonymous.get(URL), post_file(anonymous, path)):
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    owner = Client()
    owner.force_login(User.objects.create_user("alice", password="pw"))
    assert owner.get(URL).status_code == 403 and post_file(owner, path).status_code == 403
    inactive = User.objects.create_user("old", password="pw", is_staff=True, is_active=False)
    gone = Client()
    gone.force_login(inactive)
    assert post_file(gone, path).status_code in (302, 403)
    assert crowd_state() == before
    # the index links the page for staff only
    assert b'id="judgments-upload-link"' not in anonymous.get("/").content
    assert b'id="judgments-upload-link"' not in owner.get("/").content
    assert b'id="judgments-upload-link"' in staff_client().get("/").content


def test_a_post_without_the_csrf_token_is_refused(tmp_path):
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("sam", password="pw", is_staff=True))
    response = post_file(client, write_jsonl(tmp_path / "thumb.jsonl", thumb_rows(2)))
    assert response.status_code == 403 and b"CSRF verification failed" in response.content
    assert not Dataset.objects.exists()


# --- upload ---------------------------------------------------------------------------------------------

def test_staff_upload_creates_the_dataset_and_lands_on_its_page(tmp_path):
    rows = thumb_rows(12)
    client = staff_client()
    page = client.get(URL)
    assert page.status_code == 200 and b'enctype="multipart/form-data"' in page.content
    response = post_file(client, write_jsonl(tmp_path / "thumb-mine.jsonl", rows))
    assert response.status_code == 302 and response["Location"] == "/datasets/my-bench/"
    dataset = check_dataset("my-bench", rows)
    assert dataset.protocol["file"] == "thumb-mine.jsonl"  # the uploaded file's name, not a temporary path
    assert dataset.protocol["rows"] == "mean" and dataset.protocol["headline"] == "kendall_tau_c"
    assert dataset.protocol["criteria"] == ["precision", "recall"]
    # the summary is the message on the dataset page; COCO file names give the COCO image source
    landed = client.get(response["Location"])
    shown = [str(m) for m in landed.context["messages"]]
    want = expected_counts(rows)
    assert shown[0].startswith("Dataset 'my-bench' imported")
    for count, noun in ((want["images"], "images"), (want["candidates"], "candidate captions"),
                        (want["references"], "reference captions"), (2 * len(rows), "judgments")):
        assert f"{count:,} {noun}" in shown[0], shown
    assert any("references per image" in m for m in shown[1:])
    from django.utils.html import escape

    assert f'<li class="success" role="status">{escape(shown[0])}</li>' in landed.content.decode()
    # the same file again changes nothing and says so
    before = crowd_state()
    again = post_file(client, write_jsonl(tmp_path / "thumb-mine.jsonl", rows))
    assert again.status_code == 302 and crowd_state() == before
    assert "nothing changed" in client.get(again["Location"]).content.decode()


def test_csv_upload_with_repeated_score_fields_and_forced_format(tmp_path):
    """A TSV-shaped choice made explicit: a CSV file named .txt, references in columns refs.1..refs.5,
    the score fields sent as repeated form values."""
    rows = thumb_rows(6)
    n_refs = max(len(r["refs"]) for r in rows)
    path = tmp_path / "judgments.txt"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["imgid", "mt", *(f"refs.{i + 1}" for i in range(n_refs)), "P", "R", "SYS"])
        for r in rows:
            w.writerow([r["imgid"], r["mt"], *r["refs"], *[""] * (n_refs - len(r["refs"])), r["P"], r["R"], r["SYS"]])
    client = staff_client()
    refused = post_file(client, path)  # .txt: the format must be chosen
    assert refused.status_code == 400 and b"choose the format" in refused.content
    assert not Dataset.objects.exists()
    with path.open("rb") as fh:
        response = client.post(URL, {**FORM, "score_fields": ["P", "R"], "format": "csv", "file": fh})
    assert response.status_code == 302, response.content.decode()[-3000:]
    check_dataset("my-bench", rows)


def _errors(response) -> list[str]:
    import html as html_module
    import re

    html = response.content.decode()
    block = re.search(r'<div id="upload-errors".*?</div>', html, re.S)
    assert block, html[-2000:]
    return [html_module.unescape(re.sub(r"<[^>]+>", "", li)).strip() for li in re.findall(r"<li>(.*?)</li>", block.group(0), re.S)]


@pytest.mark.parametrize("corrupt, where", [
    (lambda rows: rows[4].update(P="very good"), ("bad.jsonl:5", "P")),
    (lambda rows: rows[2].update(mt="  "), ("bad.jsonl:3",)),
    (lambda rows: rows[7].pop("refs"), ("bad.jsonl:8", "refs")),
    (lambda rows: rows.append(dict(rows[0])), ("bad.jsonl:",)),  # duplicate (image, candidate, system)
])
def test_a_malformed_file_shows_one_line_and_writes_nothing(tmp_path, corrupt, where):
    rows = thumb_rows(4)
    corrupt(rows)
    client = staff_client()
    before = crowd_state()
    response = post_file(client, write_jsonl(tmp_path / "bad.jsonl", rows))
    assert response.status_code == 400
    errors = _errors(response)
    assert len(errors) == 1 and "\n" not in errors[0]
    assert all(w in errors[0] for w in where), errors
    assert str(tmp_path) not in response.content.decode() and "/tmp/" not in errors[0]
    assert crowd_state() == before


def test_invalid_form_values_are_refused_before_the_file_is_imported(tmp_path, settings):
    path = write_jsonl(tmp_path / "thumb.jsonl", thumb_rows(2))
    client = staff_client()
    before = crowd_state()
    cases = [
        ({"criteria": "precision"}, "1 given for 2 score field(s)"),
        ({"score_fields": "P, P"}, "'P' is given twice"),
        ({"score_fields": "P,,R"}, "an empty name"),
        ({"name": "not a slug!"}, "dataset name"),
        ({"image_field": ""}, "image field"),
        ({"candidate_field": "imgid"}, "named for two different fields"),
        ({"rows": "median"}, "correlation rows"),
        ({"headline": "accuracy"}, "headline statistic"),
        ({"published_as": "flickr"}, "published values"),
    ]
    for change, message in cases:
        response = post_file(client, path, **change)
        assert response.status_code == 400, change
        assert any(message in e for e in _errors(response)), (change, _errors(response))
    # larger than IMPORT_MAX_FILE_BYTES: refused from the declared size
    settings.IMPORT_MAX_FILE_BYTES = path.stat().st_size - 1
    response = post_file(client, path)
    assert response.status_code == 400 and any("IMPORT_MAX_FILE_BYTES" in e for e in _errors(response))
    assert crowd_state() == before


def test_references_from_a_coco_annotations_file(tmp_path):
    """No references column: the references come from an uploaded COCO caption annotations file."""
    rows = thumb_rows(5)
    images = list(dict.fromkeys(r["imgid"] for r in rows))
    refs = {r["imgid"]: r["refs"] for r in rows}
    ids = {key: int(key.rsplit("_", 1)[1].split(".")[0]) for key in images}
    coco = {"images": [{"id": ids[k], "file_name": k} for k in images],
            "annotations": [{"id": 1000 * ids[k] + i, "image_id": ids[k], "caption": c}
                            for k in images for i, c in enumerate(refs[k])]}
    (tmp_path / "captions_val2014.json").write_text(json.dumps(coco))
    for r in rows:
        del r["refs"]
    path = write_jsonl(tmp_path / "norefs.jsonl", rows)
    client = staff_client()
    with path.open("rb") as fh, (tmp_path / "captions_val2014.json").open("rb") as refs_fh:
        response = client.post(URL, {**FORM, "file": fh, "references_file": refs_fh})
    assert response.status_code == 302, _errors(response)
    dataset = Dataset.objects.get(name="my-bench")
    assert sorted(dataset.references().values_list("image__key", "text")) == \
        sorted((coco_key(k), c) for k in images for c in refs[k])


# --- export ---------------------------------------------------------------------------------------------

def test_export_downloads_round_trip_through_the_importer(tmp_path):
    from crowd.dataset_export import export_dataset
    from crowd.importers.judgments import import_judgments

    rows = thumb_rows(10)
    rows[3]["mt"] = "=HYPERLINK(\"http://evil.example\", \"a dog\")"  # a formula-looking caption
    client = staff_client()
    assert post_file(client, write_jsonl(tmp_path / "bench.jsonl", rows)).status_code == 302
    dataset = Dataset.objects.get(name="my-bench")
    page = client.get("/datasets/my-bench/").content.decode()
    assert 'href="/datasets/my-bench/export.jsonl"' in page and 'href="/datasets/my-bench/export.csv"' in page
    anonymous = Client()  # dataset pages are public: so is the export
    for fmt in ("jsonl", "csv"):
        response = anonymous.get(f"/datasets/my-bench/export.{fmt}")
        assert response.status_code == 200
        assert response["Content-Disposition"] == f'attachment; filename="my-bench.{fmt}"'
        body = b"".join(response.streaming_content)  # streamed from the stored file (crowd.export_store)
        mapping = export_dataset(dataset, fmt, io.StringIO())
        path = tmp_path / f"download.{fmt}"
        path.write_bytes(body)
        if fmt == "csv":
            formula_cells = [c for row in csv.reader(io.StringIO(body.decode())) for c in row if c[:1] in "=+@"]
            assert not formula_cells  # the CSV guard: no cell a spreadsheet would run
        summary = import_judgments(path, f"again-{fmt}", mapping)
        assert summary.created
        again = Dataset.objects.get(name=f"again-{fmt}")
        assert sorted(again.candidates().values_list("image__key", "system__name", "text")) == \
            sorted(dataset.candidates().values_list("image__key", "system__name", "text"))
        assert sorted(again.references().values_list("image__key", "text")) == \
            sorted(dataset.references().values_list("image__key", "text"))

        def judged(d):
            return sorted((j.image.key, j.system.name, j.caption.text, j.criterion, j.score)
                          for j in HumanJudgment.objects.filter(image__dataset=d).select_related("image", "system", "caption"))
        assert judged(again) == judged(dataset)
    assert Caption.objects.filter(image__dataset__name="again-csv", text=rows[3]["mt"]).exists()


def test_export_leaves_out_an_unpublished_campaign(tmp_path):
    """A description campaign's system and a rating campaign's judgments are private until published
    (crowd.privacy): the export, like the public pages, leaves them out."""
    rows = thumb_rows(4)
    client = staff_client()
    assert post_file(client, write_jsonl(tmp_path / "bench.jsonl", rows)).status_code == 302
    dataset = Dataset.objects.get(name="my-bench")
    alice = User.objects.create_user("alice", password="pw")
    campaign = engine.create_campaign(dataset, "description", name="secret", owners=[alice], state=Campaign.LIVE,
                                      options={"images": 1}, k=1, gold_every=0)
    worker = engine.invite_workers(1, campaign=campaign)[0]
    assignment = engine.accept(campaign, worker)
    engine.submit(assignment.pk, worker, {"description": "a purple zebrafish only the campaign has seen"})
    assert Caption.objects.filter(text__contains="purple zebrafish").exists()
    for fmt in ("jsonl", "csv"):
        body = b"".join(Client().get(f"/datasets/my-bench/export.{fmt}").streaming_content).decode()
        assert "zebrafish" not in body and "campaign-secret" not in body
        assert rows[0]["mt"].split()[1] in body


def test_export_is_built_once_per_dataset_version_and_streamed_from_disk(tmp_path, settings):
    """The stored file (crowd.export_store) serves every download until what it reads changes: a new
    imported rating gives a new version, built once, and the old version's file is deleted."""
    from unittest import mock

    from crowd import export_store

    rows = thumb_rows(6)
    client = staff_client()
    assert post_file(client, write_jsonl(tmp_path / "bench.jsonl", rows)).status_code == 302
    dataset = Dataset.objects.get(name="my-bench")
    with mock.patch.object(export_store, "export_dataset", wraps=export_store.export_dataset) as built:
        first = b"".join(Client().get("/datasets/my-bench/export.csv").streaming_content)
        second = b"".join(Client().get("/datasets/my-bench/export.csv").streaming_content)
        assert built.call_count == 1 and first == second
        stored = sorted(p.name for p in settings.EXPORTS_ROOT.iterdir())
        assert len(stored) == 2 and stored[0].endswith(".csv") and stored[1].endswith(".csv.command")
        assert (settings.EXPORTS_ROOT / stored[0]).read_bytes() == first
        judgment = HumanJudgment.objects.filter(image__dataset=dataset).first()
        HumanJudgment.objects.create(image=judgment.image, system=judgment.system, caption=judgment.caption,
                                     criterion=judgment.criterion, score=0.125, rater="late-rater")
        third = b"".join(Client().get("/datasets/my-bench/export.csv").streaming_content)
        assert built.call_count == 2 and b"late-rater" in third and b"late-rater" not in first
        assert len(list(settings.EXPORTS_ROOT.iterdir())) == 2  # the older version's files are gone
        assert not list(settings.EXPORTS_ROOT.glob(".building-*"))


def test_export_of_a_dataset_the_format_cannot_hold_answers_400_with_the_reason():
    """PASCAL-50S-like: forced-choice votes, no graded score to write; unknown formats are 404."""
    from crowd.dataset_export import export_dataset

    dataset = Dataset.objects.create(name="votes", kind="pascal50s",
                                     protocol={"task": "forced_choice", "headline": "accuracy"})
    try:
        export_dataset(dataset, "jsonl", io.StringIO())
    except ValueError as exc:
        reason = str(exc)
    else:
        pytest.fail("a forced-choice dataset has no graded judgments to export")
    response = Client().get("/datasets/votes/export.jsonl")
    assert response.status_code == 400 and response.content.decode().strip() == reason.splitlines()[0]
    page = Client().get("/datasets/votes/")
    assert page.status_code == 200 and b'id="export-jsonl"' not in page.content  # no link to a refused export
    assert Client().get("/datasets/votes/export.xlsx").status_code == 404
    assert Client().get("/datasets/nothing/export.csv").status_code == 404


# --- the browser --------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_upload_in_chromium(browser, live_server, tmp_path):
    User.objects.create_user("sam", password="pw", is_staff=True)
    rows = thumb_rows(8)
    path = write_jsonl(tmp_path / "thumb-browser.jsonl", rows)
    wait = WebDriverWait(browser, 20)
    browser.get(live_server.url + "/accounts/login/")
    browser.find_element(By.NAME, "username").send_keys("sam")
    browser.find_element(By.NAME, "password").send_keys("pw")
    form = browser.find_element(By.CSS_SELECTOR, "main form")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(stale(form))
    browser.get(live_server.url + "/")
    browser.find_element(By.ID, "judgments-upload-link").click()
    wait.until(lambda d: d.find_elements(By.ID, "judgments-form"))
    # the page at desktop and phone widths: nothing runs off the side
    browser.save_screenshot("/tmp/h2_upload_1400.png")
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    browser.refresh()
    wait.until(lambda d: d.find_elements(By.ID, "judgments-form"))
    assert browser.execute_script("return document.documentElement.scrollWidth") <= 390
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",  # the whole page in one picture
                            {"width": 390, "height": height, "deviceScaleFactor": 1, "mobile": True})
    browser.save_screenshot("/tmp/h2_upload_390.png")
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    browser.refresh()
    wait.until(lambda d: d.find_elements(By.ID, "judgments-form"))

    def fill(name, value):
        box = browser.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)

    browser.find_element(By.NAME, "file").send_keys(str(path))
    for name in ("name", "image_field", "candidate_field", "references_field", "score_fields", "criteria", "system_field"):
        fill(name, FORM[name])
    browser.find_element(By.CSS_SELECTOR, "select[name=rows] option[value=mean]").click()
    browser.find_element(By.CSS_SELECTOR, "select[name=published_as] option[value=composite]").click()
    form = browser.find_element(By.ID, "judgments-form")
    browser.find_element(By.ID, "judgments-submit").click()
    wait.until(stale(form))
    wait.until(lambda d: d.current_url == live_server.url + "/datasets/my-bench/")
    message = browser.find_element(By.CSS_SELECTOR, ".messages li.success").text
    assert "my-bench" in message and f"{expected_counts(rows)['images']} images" in message
    assert browser.find_element(By.ID, "export-jsonl").get_attribute("href").endswith("/datasets/my-bench/export.jsonl")
    browser.save_screenshot("/tmp/h2_dataset_1400.png")
    dataset = check_dataset("my-bench", rows)
    assert dataset.protocol.get("published_as") == "composite"
