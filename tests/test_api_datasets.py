"""REST API datasets (api/datasets.py): list and detail as stored, uploads through the importers
(COCO files, a judgments file, an archive of an import_dataset folder) with the importers'
validation and one-line messages, nothing half-written, systems and captions with the privacy rule
of the public pages. Real data: the bundled COCO-format sets (tests/coco_sets.py) and Flickr8k."""
import io
import json
import tarfile
import time
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from crowd import engine
from crowd.kinds.description import system_name
from crowd.models import Caption, Dataset, HumanJudgment, Image, System
from crowd.privacy import publish_results

from .api_matrix import world  # noqa: F401 (a fixture)
from .conftest import run_command, write_subset


def auth(world, user="staff"):  # noqa: F811
    return {"HTTP_AUTHORIZATION": f"Token {world.tokens[user]}"}


def upload(world, fields, user="staff"):  # noqa: F811
    form = {k: SimpleUploadedFile(v[0], v[1]) if isinstance(v, tuple) else v for k, v in fields.items()}
    return Client().post("/api/datasets/", form, **auth(world, user))


def snapshot():
    """Row counts of the dataset tables (to show that a refused upload wrote nothing)."""
    return tuple(m.objects.count() for m in (Dataset, Image, System, Caption, HumanJudgment))


def test_list_and_detail_are_the_stored_datasets(world, db):  # noqa: F811
    c = Client()
    listed = c.get("/api/datasets/?limit=1000").json()
    assert listed["count"] == Dataset.objects.count()
    row = next(r for r in listed["results"] if r["name"] == world.dataset)
    dataset = Dataset.objects.get(name=world.dataset)
    assert row["kind"] == dataset.kind == "coco" and row["images"] == dataset.images.count()
    assert row["reference_system"] == dataset.reference_system.name
    detail = c.get(f"/api/datasets/{world.dataset}/").json()
    assert {s["name"]: s["captions"] for s in detail["systems"]} == {
        s.name: s.captions.count() for s in System.objects.filter(dataset=dataset)}


def test_coco_upload_creates_a_dataset_equal_to_its_files_and_is_idempotent(world, db):  # noqa: F811
    files = world.files
    fields = {"format": "coco", "name": "api-coco", "system": "thumb-models",
              "annotations": ("captions.json", (files / "captions.json").read_bytes()),
              "results": ("thumb_models.json", (files / "thumb_models.json").read_bytes())}
    response = upload(world, fields)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["created"] and body["dataset"]["name"] == "api-coco" and response["Location"] == "/api/datasets/api-coco/"
    results = json.loads((files / "thumb_models.json").read_bytes())
    stored = Caption.objects.filter(system__dataset__name="api-coco", system__name="thumb-models")
    assert stored.count() == len(results) == body["counts"]["captions of thumb-models"]
    by_image = {}
    for entry in results:
        by_image.setdefault(str(entry["image_id"]), []).append(entry["caption"])
    got = {}
    for cap in stored.order_by("image__key", "key").select_related("image"):
        got.setdefault(cap.image.key, []).append(cap.text)
    assert got == {k: [" ".join(t.split()) for t in v] for k, v in by_image.items()}
    refs = json.loads((files / "captions.json").read_bytes())["annotations"]
    assert Caption.objects.filter(system__dataset__name="api-coco", system__name="coco-references").count() == len(refs)
    before = snapshot()
    again = upload(world, fields)
    assert again.status_code == 200 and again.json()["created"] is False and snapshot() == before
    # the captions endpoint serves the same rows, filtered by system and image
    image = next(iter(by_image))
    one = Client().get(f"/api/datasets/api-coco/captions/?system=thumb-models&image={image}").json()
    assert [r["text"] for r in one["results"]] == got[image]


def test_a_refused_upload_names_the_uploaded_file_and_writes_nothing(world, db, settings):  # noqa: F811
    before = snapshot()
    broken = (world.files / "thumb_models.json").read_bytes()[:-40]
    response = upload(world, {"format": "coco", "name": "api-broken", "system": "m", "results": ("mine.json", broken)})
    assert response.status_code == 400 and response["Content-Type"] == "application/problem+json"
    detail = response.json()["detail"]
    assert detail.startswith("mine.json") and "/tmp" not in detail and "api-upload-" not in detail
    assert snapshot() == before
    # the same system name with other captions: the name holds other data (409), nothing written
    changed = json.loads((world.files / "thumb_models.json").read_bytes())
    changed[0]["caption"] = "a different caption"
    clash = upload(world, {"format": "coco", "name": world.dataset, "system": world.system,
                           "results": ("r.json", json.dumps(changed).encode())})
    assert clash.status_code == 409 and clash.json()["type"].endswith(":dataset_exists") and snapshot() == before
    # a file over the import cap is refused from its declared size
    settings.IMPORT_MAX_FILE_BYTES = 100
    big = upload(world, {"format": "coco", "name": "api-big", "system": "m",
                         "results": ("big.json", (world.files / "thumb_models.json").read_bytes())})
    assert big.status_code == 400 and "IMPORT_MAX_FILE_BYTES" in big.json()["detail"] and snapshot() == before


def test_fields_must_be_those_of_the_format(world, db):  # noqa: F811
    ann = ("captions.json", (world.files / "captions.json").read_bytes())
    cases = [
        ({"format": "judgments", "name": "x", "annotations": ann}, {"annotations", "file"}),
        ({"format": "coco", "name": "x", "results": ann}, {"system"}),
        ({"format": "coco", "name": "x"}, {"results"}),
        ({"format": "thumb", "name": "x", "annotations": ann}, {"annotations", "archive"}),
        ({"format": "xml", "name": "x"}, {"format"}),
        ({"format": "coco", "name": "bad name!", "annotations": ann}, {"name"}),
        ({"format": "thumb", "name": "x", "archive": ("a.rar", b"x")}, {"archive"}),
    ]
    before = snapshot()
    for fields, expected in cases:
        response = upload(world, fields)
        assert response.status_code == 400, fields
        assert {e["field"] for e in response.json()["errors"]} == expected, (fields, response.json())
    assert snapshot() == before
    assert upload(world, {"format": "coco", "name": "x", "annotations": ann}, user="owner").status_code == 403


def _zip(folder, prefix=""):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, prefix + path.name)
    return buffer.getvalue()


def test_archive_uploads_import_like_the_command(world, db, tmp_path):  # noqa: F811
    subset = write_subset(tmp_path / "subset", 5)
    run_command("import_dataset", "flickr8k-expert", str(subset), "--name", "api-cmd")
    expected = {m: (Image.objects.filter(dataset__name="api-cmd").count(),
                    Caption.objects.filter(system__dataset__name="api-cmd").count(),
                    HumanJudgment.objects.filter(system__dataset__name="api-cmd").count())
                for m in ("zip", "tgz")}
    zipped = upload(world, {"format": "flickr8k-expert", "name": "api-zip",
                            "archive": ("flickr8k.zip", _zip(subset, "Flickr8k/"))})
    assert zipped.status_code == 201, zipped.content
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for path in sorted(subset.iterdir()):
            tf.add(path, path.name)
    tarred = upload(world, {"format": "flickr8k-expert", "name": "api-tgz", "archive": ("f.tar.gz", buffer.getvalue())})
    assert tarred.status_code == 201, tarred.content
    for name, m in (("api-zip", "zip"), ("api-tgz", "tgz")):
        got = (Image.objects.filter(dataset__name=name).count(),
               Caption.objects.filter(system__dataset__name=name).count(),
               HumanJudgment.objects.filter(system__dataset__name=name).count())
        assert got == expected[m] and got[2] > 0


def test_hostile_archives_are_refused(world, db, tmp_path):  # noqa: F811
    before = snapshot()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("../../escaped.txt", "x")
    outside = upload(world, {"format": "thumb", "name": "api-evil", "archive": ("evil.zip", buffer.getvalue())})
    assert outside.status_code == 400 and "outside the archive" in outside.json()["detail"]
    garbage = upload(world, {"format": "thumb", "name": "api-evil", "archive": ("x.zip", b"not a zip at all")})
    assert garbage.status_code == 400 and "not a readable archive" in garbage.json()["detail"]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tf:
        link = tarfile.TarInfo("mscoco_references.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
    linked = upload(world, {"format": "thumb", "name": "api-evil", "archive": ("l.tar", buffer.getvalue())})
    assert linked.status_code == 400 and "links" in linked.json()["detail"]
    missing = upload(world, {"format": "thumb", "name": "api-evil", "archive": ("e.zip", _zip(tmp_path))})
    assert missing.status_code == 400 and missing.json()["detail"].startswith("e.zip/")
    assert "file not found" in missing.json()["detail"]
    assert "/tmp" not in missing.json()["detail"] and snapshot() == before


def test_judgments_file_upload_with_a_mapping(world, db, tmp_path):  # noqa: F811
    rows = [{"img": "i1", "cap": "a dog runs on the grass", "refs": ["a dog running", "a brown dog on grass"], "q": 4},
            {"img": "i1", "cap": "a cat", "refs": ["a dog running", "a brown dog on grass"], "q": 1},
            {"img": "i2", "cap": "two men ride bikes", "refs": ["two people cycling"], "q": 5}]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    fields = {"format": "judgments", "name": "api-judged", "file": ("mine.jsonl", text.encode()),
              "mapping": json.dumps({"image": "img", "candidate": "cap", "references": "refs", "scores": ["q"]})}
    response = upload(world, fields)
    assert response.status_code == 201, response.content
    stored = HumanJudgment.objects.filter(system__dataset__name="api-judged")
    assert sorted(stored.values_list("score", flat=True)) == sorted(float(r["q"]) for r in rows)
    bad = upload(world, {**fields, "name": "api-judged2", "mapping": json.dumps({"no_such_field": 1})})
    assert bad.status_code == 400 and "mapping" in bad.json()["detail"]
    wrong_column = upload(world, {**fields, "name": "api-judged3", "mapping": json.dumps({"scores": ["zzz"]})})
    assert wrong_column.status_code == 400 and wrong_column.json()["detail"].startswith("mine.jsonl")
    assert not Dataset.objects.filter(name__in=["api-judged2", "api-judged3"]).exists()


def test_systems_of_unpublished_campaigns_stay_hidden(world, db):  # noqa: F811
    dataset = Dataset.objects.get(name=world.dataset)
    campaign = engine.create_campaign(dataset, "description", name="api-secret", owners=[world.users["owner"]],
                                      options={"images": 2})
    secret = System.objects.get(dataset=dataset, name=system_name(campaign))
    image = dataset.images.first()
    Caption.objects.create(image=image, system=secret, key="s1", text="a private description")
    c = Client()
    names = lambda: {s["name"] for s in c.get(f"/api/datasets/{world.dataset}/systems/").json()["results"]}  # noqa: E731
    assert secret.name not in names()
    assert secret.name not in {s["name"] for s in c.get(f"/api/datasets/{world.dataset}/").json()["systems"]}
    as_owner = c.get(f"/api/datasets/{world.dataset}/captions/?system={secret.name}", **auth(world, "owner")).json()
    assert as_owner["count"] == 0
    publish_results(campaign)
    assert secret.name in names()
    assert c.get(f"/api/datasets/{world.dataset}/captions/?system={secret.name}").json()["count"] == 1


def test_an_import_job_whose_broker_is_unreachable_fails_with_that_reason(world, db, settings, monkeypatch):  # noqa: F811
    """With a broker configured but unreachable, the upload is still answered at once: its job is
    recorded as failed with the reason, and nothing is imported."""
    from kombu.exceptions import OperationalError

    from api import imports, tasks

    def unreachable(*args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(imports.jobs, "in_process", lambda: False)
    monkeypatch.setattr(tasks.import_dataset_job, "delay", unreachable)
    settings.API_INLINE_IMPORT_BYTES = 1000
    before = snapshot()
    response = upload(world, {"format": "coco", "name": "api-nobroker", "system": "m",
                              "results": ("r.json", (world.files / "thumb_models.json").read_bytes())})
    assert response.status_code == 202
    job = response.json()
    assert job["status"] == "failed" and "CELERY_BROKER_URL" in job["message"] and "nothing was imported" in job["message"]
    assert snapshot() == before


def _wait_for_job(client, url, headers, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(url, **headers).json()
        if job["status"] in ("done", "failed"):
            return job
        assert time.monotonic() < deadline, job
        time.sleep(0.2)


@pytest.mark.django_db(transaction=True)
def test_a_large_upload_is_imported_by_a_background_job(settings, tmp_path):
    """Over API_INLINE_IMPORT_BYTES the upload answers 202 with its job at once; without a broker
    (the quick start) a background thread imports it; the job ends done with the inline answer, or
    failed with the importer's message and nothing written; a job is its uploader's and staff's."""
    from django.contrib.auth.models import User
    from api.account import create_token

    from .coco_sets import write_coco_files

    files = write_coco_files(tmp_path)
    settings.API_INLINE_IMPORT_BYTES = 1000
    staff = User.objects.create_user("api-importer", password="pw", is_staff=True)
    other = User.objects.create_user("api-curious", password="pw", is_staff=False)
    headers = {"HTTP_AUTHORIZATION": f"Token {create_token(staff)}"}
    c = Client()
    fields = {"format": "coco", "name": "api-big", "system": "thumb-models",
              "annotations": SimpleUploadedFile("captions.json", (files / "captions.json").read_bytes()),
              "results": SimpleUploadedFile("thumb_models.json", (files / "thumb_models.json").read_bytes())}
    response = c.post("/api/datasets/", fields, **headers)
    assert response.status_code == 202, response.content
    job = response.json()
    assert response["Location"] == job["url"] == f"/api/imports/{job['id']}/" and job["dataset"] == "api-big"
    done = _wait_for_job(c, job["url"], headers)
    assert done["status"] == "done" and done["result_status"] == 201 and done["result"]["created"] is True
    results = json.loads((files / "thumb_models.json").read_bytes())
    assert Caption.objects.filter(system__dataset__name="api-big", system__name="thumb-models").count() == len(results)
    assert done["result"]["counts"]["captions of thumb-models"] == len(results)
    other_key = create_token(other)
    assert c.get(job["url"], HTTP_AUTHORIZATION=f"Token {other_key}").status_code == 404
    assert c.get(job["url"]).status_code == 401
    from api.models import ImportJob

    listed = [j["id"] for j in c.get("/api/imports/", **headers).json()["results"]]  # staff: every job
    assert job["id"] in listed and listed == list(ImportJob.objects.values_list("pk", flat=True))
    mine = Client().get("/api/imports/", HTTP_AUTHORIZATION=f"Token {other_key}").json()
    assert mine["count"] == 0  # a user who uploaded nothing sees no job

    before = snapshot()
    broken = (files / "thumb_models.json").read_bytes()[:-40]
    failed = c.post("/api/datasets/", {"format": "coco", "name": "api-big2", "system": "m",
                                       "results": SimpleUploadedFile("mine.json", broken)}, **headers)
    assert failed.status_code == 202
    ended = _wait_for_job(c, failed.json()["url"], headers)
    assert ended["status"] == "failed" and ended["message"].startswith("mine.json") and "/tmp" not in ended["message"]
    assert ended["result"] is None and snapshot() == before
    from api.models import ImportFile

    assert all(len(bytes(f.content)) == 0 for f in ImportFile.objects.all())  # bytes emptied at the end
