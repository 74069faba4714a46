"""Issue 15, images: datasets carry an image source (a URL template, a local folder, uploaded files),
the platform serves local pictures safely, COCO-based datasets get the public COCO URL pattern, and a
campaign whose kind shows images is published only with pictures (create_campaign --live, the
engine's set_state). Real data: the 40-image Flickr8k-Expert subset and the bundled THumB; real
JPEG/PNG files drawn with Pillow; real headless Chromium for the rater and the owner's image check."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client
from PIL import Image as PILImage
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from crowd import engine, images
from crowd.kinds import KINDS
from crowd.models import Campaign, Dataset, Image, Item

from .conftest import ROOT, run_command

THUMB = ROOT / "data" / "thumb"

pytestmark = pytest.mark.real_image_sources


def picture(fmt: str, color=(200, 40, 40), size=(64, 48)) -> bytes:
    """A real small picture in ``fmt`` (JPEG, PNG, GIF...) drawn by Pillow."""
    out = io.BytesIO()
    PILImage.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


@pytest.fixture
def folder(tmp_path, dataset):
    """A folder with a JPEG of every image of ``dataset`` (file name = key), one PNG, and hostile
    files: a text file named .jpg, a PNG named .jpg, an HTML file, a symlink to a JPEG outside."""
    root = tmp_path / "pictures"
    root.mkdir()
    keys = list(dataset.images.order_by("key").values_list("key", flat=True))
    for i, key in enumerate(keys):
        (root / key).write_bytes(picture("JPEG", color=(10 * i % 255, 80, 160)))
    (root / "plain.png").write_bytes(picture("PNG"))
    (root / "fake.jpg").write_text("<script>alert(1)</script>")
    (root / "png-as.jpg").write_bytes(picture("PNG"))
    (root / "page.html").write_text("<html><script>alert(1)</script></html>")
    outside = tmp_path / "secret.jpg"
    outside.write_bytes(picture("JPEG"))
    (root / "link-out.jpg").symlink_to(outside)
    return root


# --- serving ------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_local_folder_is_served_safely(dataset, folder, tmp_path):
    images.set_source(dataset, images_dir=str(folder))
    key = dataset.images.order_by("key").first().key
    # the hostile files carry image keys of the dataset, so what refuses them is the file check itself
    for name in ("plain.png", "link-out.jpg", "fake.jpg", "png-as.jpg", "page.html"):
        Image.objects.create(dataset=dataset, key=name)
    (folder / "stray.jpg").write_bytes(picture("JPEG"))  # a real picture, but not one of the dataset's
    client = Client()
    ok = client.get(f"/datasets/sub/image-files/{key}")
    assert ok.status_code == 200
    assert ok["Content-Type"] == "image/jpeg" and ok["X-Content-Type-Options"] == "nosniff"
    assert b"".join(ok.streaming_content) == (folder / key).read_bytes()
    png = client.get("/datasets/sub/image-files/plain.png")
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    assert b"".join(png.streaming_content) == (folder / "plain.png").read_bytes()
    # the URL the source gives an image is this view's
    image = dataset.images.get(key=key)
    assert images.image_url(image) == f"/datasets/sub/image-files/{key}"

    refused = [
        "../secret.jpg", "%2e%2e/secret.jpg", "..%2fsecret.jpg", "%2E%2E%2Fsecret.jpg",  # climbing, encoded or not
        "/" + str(tmp_path / "secret.jpg").lstrip("/"), "%2F" + str(tmp_path / "secret.jpg").lstrip("/"),  # absolute
        "x%00.jpg", "..%5csecret.jpg",  # NUL, backslash
        "link-out.jpg",  # a symlink resolving outside the folder
        "fake.jpg", "png-as.jpg",  # content that is not the extension's image type
        "page.html",  # not an image extension
        "missing.jpg",
        "stray.jpg",  # in the folder, but not an image of the dataset
    ]
    for bad in refused:
        response = client.get(f"/datasets/sub/image-files/{bad}")
        assert response.status_code == 404, bad
    assert (folder / "link-out.jpg").resolve().read_bytes()[:3] == b"\xff\xd8\xff"  # the target is a real JPEG
    for bad in ("../secret.jpg", "/etc/passwd", "a/../../secret.jpg", "x\x00.jpg", ""):
        with pytest.raises(images.ImageSourceError):
            images.check_key(bad)
        assert images.FolderSource(folder).file(bad) is None
    # without a local source nothing is served
    images.set_source(dataset, none=True)
    assert client.get(f"/datasets/sub/image-files/{key}").status_code == 404


def test_sniffing_reads_magic_bytes():
    for fmt, ctype in (("JPEG", "image/jpeg"), ("PNG", "image/png"), ("GIF", "image/gif"),
                       ("WEBP", "image/webp"), ("BMP", "image/bmp")):
        assert images.sniff_image_type(picture(fmt)[:16]) == ctype
    for data in (b"<svg xmlns='http://www.w3.org/2000/svg'/>", b"<html>", b"%PDF-1.4", b"", b"\xff\xd8"):
        assert images.sniff_image_type(data) is None


# --- uploads ------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_staff_upload_accepts_pictures_and_lists_refusals(dataset, tmp_path, settings, monkeypatch):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.IMAGES_ROOT = tmp_path / "media"
    keys = list(dataset.images.order_by("key").values_list("key", flat=True))
    User.objects.create_user("bob", password="pw")
    staff = User.objects.create_user("sam", password="pw", is_staff=True)
    client = Client()
    client.force_login(User.objects.get(username="bob"))
    assert client.get("/datasets/sub/image-upload/").status_code == 404  # not staff
    client.force_login(staff)
    assert client.get("/datasets/sub/image-upload/").status_code == 200

    monkeypatch.setattr(images, "MAX_UPLOAD_BYTES", 50_000)
    good_jpeg, good_png = picture("JPEG"), picture("PNG")
    big = picture("PNG", size=(800, 800)) + b"\0" * 60_000
    files = [
        SimpleUploadedFile(keys[0], good_jpeg, "image/jpeg"),
        SimpleUploadedFile(keys[1], b"GIF89a not really", "image/jpeg"),  # magic bytes of another type
        SimpleUploadedFile("not-a-key.jpg", good_jpeg, "image/jpeg"),
        SimpleUploadedFile(keys[2].replace(".jpg", ".html"), b"<html>", "text/html"),
        SimpleUploadedFile(keys[3], big, "image/jpeg"),
    ]
    response = client.post("/datasets/sub/image-upload/", {"files": files})
    assert response.status_code == 200
    page = response.content.decode()
    assert "1 picture stored" in page and "4 files refused" in page
    for name in (keys[1], "not-a-key.jpg", keys[2].replace(".jpg", ".html"), keys[3]):
        assert f"<code>{name}</code>" in page
    folder = Path(settings.IMAGES_ROOT) / "sub"
    assert sorted(p.name for p in folder.iterdir()) == [keys[0]]  # nothing else, no temporary files
    assert (folder / keys[0]).read_bytes() == good_jpeg
    dataset.refresh_from_db()
    assert dataset.image_source == images.UPLOAD
    served = Client().get(f"/datasets/sub/image-files/{keys[0]}")
    assert served.status_code == 200 and b"".join(served.streaming_content) == good_jpeg
    # a PNG picture uploaded under a .png name is refused: the name must be a key (keys are .jpg)
    response = client.post("/datasets/sub/image-upload/", {"files": [SimpleUploadedFile("x.png", good_png)]})
    assert "no image of this dataset has this key" in response.content.decode()


# --- defaults and commands ----------------------------------------------------------------------
@pytest.mark.django_db
def test_thumb_gets_the_public_coco_url_pattern():
    out = run_command("import_dataset", "thumb", str(THUMB), "--name", "thumb")
    dataset = Dataset.objects.get(name="thumb")
    assert (dataset.image_source, dataset.image_location) == (images.COCO, "val2014")
    assert "image source: public COCO server, val2014" in out
    # every stored key's URL ends in the file name THumB's own file gives for that image
    file_names = {}
    for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines():
        row = json.loads(line)
        file_names[row["seg_id"]] = row["image"]
    stored = list(dataset.images.all())
    assert len(stored) == len(set(file_names)) == 500
    for image in stored:
        assert images.image_url(image) == f"http://images.cocodataset.org/val2014/{file_names[image.key]}"
    # a rating campaign on it goes live at once, each item with its COCO URL
    run_command("create_campaign", "rating", "--dataset", "thumb", "--name", "th", "--images", "3", "--live")
    campaign = Campaign.objects.get(name="th")
    assert campaign.state == Campaign.LIVE
    payloads = list(Item.objects.filter(campaign=campaign).values_list("payload", flat=True))
    assert payloads and all(
        p["image_url"] == f"http://images.cocodataset.org/val2014/{file_names[p['image_key']]}" for p in payloads)
    # keys that are not COCO ids or file names get no default; file names give their own split
    assert images.coco_split(["1000268201_693b08cb0e.jpg"], "val2014") is None
    assert images.coco_split(["COCO_val2014_000000000974.jpg", "COCO_train2014_000000000009.jpg"]) is None
    assert images.coco_split(["COCO_train2014_000000000009.jpg"]) == "train2014"
    assert images.coco_split(["974", "9"]) is None  # ids without a known split
    assert images.coco_split(["974"], "captions_val2017.json") == "val2017"
    assert images.CocoSource("val2017").url(None, "974") == "http://images.cocodataset.org/val2017/000000000974.jpg"
    with pytest.raises(images.ImageSourceError):
        images.CocoSource("val2014").url(None, "../974")


@pytest.mark.django_db
def test_import_coco_takes_the_split_from_the_annotation_file_name(tmp_path):
    """THumB's references are real COCO val2014 captions; written as a COCO annotation file named
    captions_val2014.json they give the dataset the val2014 server, named otherwise no source."""
    refs = [json.loads(line) for line in (THUMB / "mscoco_references.json").read_text().splitlines()[:20]]
    annotations = {
        "images": [{"id": int(r["seg_id"]), "file_name": f"COCO_val2014_{int(r['seg_id']):012d}.jpg"} for r in refs],
        "annotations": [{"id": 100 * i + j, "image_id": int(r["seg_id"]), "caption": c}
                        for i, r in enumerate(refs) for j, c in enumerate(r["refs"])],
    }
    for name, expected in (("captions_val2014.json", ("coco", "val2014")), ("refs.json", ("", ""))):
        path = tmp_path / name
        path.write_text(json.dumps(annotations))
        run_command("import_coco", "--name", f"c-{name[:4]}", "--annotations", str(path))
        dataset = Dataset.objects.get(name=f"c-{name[:4]}")
        assert (dataset.image_source, dataset.image_location) == expected
    image = Dataset.objects.get(name="c-capt").images.get(key=refs[0]["seg_id"])
    assert images.image_url(image) == f"http://images.cocodataset.org/val2014/COCO_val2014_{int(image.key):012d}.jpg"


@pytest.mark.django_db
def test_set_image_source_command(dataset, folder):
    assert run_command("set_image_source", "sub").strip() == "sub: no image source"
    out = run_command("set_image_source", "sub", "--image-url", "https://img.example/f/{key}")
    assert out.strip() == "sub: URL template https://img.example/f/{key}"
    for args, message in (
        (["--image-url", "javascript:alert(1)//{key}"], "must start with http:// or https://"),
        (["--images-dir", str(folder / "nope")], "is not an existing folder"),
    ):
        with pytest.raises(CommandError) as exc:
            run_command("set_image_source", "sub", *args)
        assert message in str(exc.value) and "\n" not in str(exc.value)
    dataset.refresh_from_db()
    assert dataset.image_location == "https://img.example/f/{key}"  # unchanged by the refused calls
    out = run_command("set_image_source", "sub", "--images-dir", str(folder))
    assert out.strip() == f"sub: local folder {folder.resolve()}"
    assert run_command("set_image_source", "sub", "--none").strip() == "sub: no image source"
    with pytest.raises(CommandError, match="unknown dataset"):
        run_command("set_image_source", "nope", "--none")


@pytest.mark.django_db
def test_publishing_needs_pictures(dataset, folder):
    shows = {name for name, kind in KINDS.items() if kind.shows_images}
    assert shows == {"rating", "diversity", "description"}
    with pytest.raises(CommandError) as exc:
        run_command("create_campaign", "rating", "--dataset", "sub", "--name", "r1", "--images", "2", "--live")
    message = str(exc.value)
    assert "\n" not in message and "no image source" in message
    assert "set_image_source sub --image-url TEMPLATE" in message and "--images-dir" in message
    assert not Campaign.objects.filter(name="r1").exists()
    # a kind that does not show images is published without pictures
    run_command("create_campaign", "forced_choice", "--dataset", "sub", "--name", "fc", "--images", "2", "--live")
    assert Campaign.objects.get(name="fc").state == Campaign.LIVE

    # --image-url: this campaign's template
    run_command("create_campaign", "rating", "--dataset", "sub", "--name", "r2", "--images", "2", "--live",
                "--image-url", "https://img.example/p/{key}")
    payload = Item.objects.filter(campaign__name="r2").first().payload
    assert payload["image_url"] == f"https://img.example/p/{payload['image_key']}"
    dataset.refresh_from_db()
    assert dataset.image_source == ""  # the dataset is unchanged

    # a draft created without pictures is refused by set_state, then published once a source exists
    draft = engine.create_campaign(dataset, "description", name="d1", options={"images": 2})
    with pytest.raises(engine.Conflict) as exc:
        engine.set_state(draft, Campaign.LIVE)
    assert "no image source" in str(exc.value)
    assert Campaign.objects.get(name="d1").state == Campaign.DRAFT
    root = Client()
    root.force_login(User.objects.create_superuser("root", "root@localhost", "pw"))
    page = root.get("/campaigns/d1/images/").content.decode()
    assert 'id="image-missing"' in page and "2 of 2 pictures have no URL" in page and "set_image_source sub" in page

    # --images-dir: becomes the dataset's source; the draft's items then get their URLs at publishing
    run_command("create_campaign", "diversity", "--dataset", "sub", "--name", "r3", "--images", "2", "--live",
                "--images-dir", str(folder))
    dataset.refresh_from_db()
    assert (dataset.image_source, dataset.image_location) == (images.FOLDER, str(folder.resolve()))
    page = root.get("/campaigns/d1/images/").content.decode()  # the URLs the draft will get
    assert 'id="image-missing"' not in page and page.count('class="image-sample"') == 2
    assert page.count('src="/datasets/sub/image-files/') == 2
    engine.set_state(draft, Campaign.LIVE)
    for name in ("r3", "d1"):
        for payload in Item.objects.filter(campaign__name=name).values_list("payload", flat=True):
            assert payload["image_url"] == f"/datasets/sub/image-files/{payload['image_key']}"
            assert Client().get(payload["image_url"]).status_code == 200

    # a local folder missing pictures is not a working source
    missing = dataset.images.order_by("key").first().key
    (folder / missing).unlink()
    with pytest.raises(CommandError) as exc:
        run_command("create_campaign", "rating", "--dataset", "sub", "--name", "r4", "--live")
    assert "are not servable files" in str(exc.value) and missing in str(exc.value)
    assert not Campaign.objects.filter(name="r4").exists()


@pytest.mark.django_db(transaction=True)
def test_create_campaign_live_exit_code(dataset, folder):
    """The real command line: exit status and the one line on stderr."""
    db = os.environ.get("DATABASE_URL", "")
    from django.db import connection

    env = {**os.environ, "DATABASE_URL": db.rsplit("/", 1)[0] + "/" + connection.settings_dict["NAME"]}
    base = [sys.executable, "manage.py", "create_campaign", "rating", "--dataset", "sub", "--images", "2", "--live"]
    refused = subprocess.run(base + ["--name", "x1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no image source" in lines[0] and "--images-dir" in lines[0], refused.stderr
    for name, extra in (("x2", ["--image-url", "https://img.example/{key}"]), ("x3", ["--images-dir", str(folder)])):
        done = subprocess.run(base + ["--name", name, *extra], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert "live" in done.stdout
    assert sorted(Campaign.objects.filter(state=Campaign.LIVE).values_list("name", flat=True)) == ["x2", "x3"]


# --- the browser --------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_rater_sees_the_picture_and_owner_checks_urls(dataset, folder, live_server, browser):
    from .test_xss_browser import login

    run_command("create_campaign", "rating", "--dataset", "sub", "--name", "pics", "--images", "2", "--live",
                "--images-dir", str(folder), "--gold-every", "0", "--k", "1")
    campaign = Campaign.objects.get(name="pics")
    worker = engine.invite_workers(1, campaign=campaign)[0]
    browser.get(f"{live_server.url}/rate/join/{worker.token}/?next=/rate/{campaign.name}/")
    wait = WebDriverWait(browser, 15)
    img = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, ".image-box img"))
    wait.until(lambda d: d.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img))
    assert browser.execute_script("return arguments[0].naturalWidth", img) == 64
    src = img.get_attribute("src")
    assert src.startswith(f"{live_server.url}/datasets/sub/image-files/")
    assert not browser.find_elements(By.CSS_SELECTOR, ".no-image")

    # the owner's check: a campaign whose pictures are partly missing counts OK and failed in the browser
    owner = User.objects.create_user("olga", password="pw")
    campaign.owners.add(owner)
    keys = sorted({p["image_key"] for p in Item.objects.filter(campaign=campaign).values_list("payload", flat=True)})
    gone = next(k for k in keys if not src.endswith("/" + k))  # one the browser has not cached
    (folder / gone).unlink()
    login(browser, live_server, "olga")
    browser.get(f"{live_server.url}/campaigns/pics/images/")
    summary = browser.find_element(By.ID, "image-summary")
    wait.until(lambda d: "checking" not in summary.text)
    assert summary.text == f"{len(keys) - 1} OK, 1 failed of {len(keys)}"
    statuses = {f.get_attribute("data-key"): f.get_attribute("data-status")
                for f in browser.find_elements(By.CSS_SELECTOR, ".image-sample")}
    assert statuses == {k: ("failed" if k == gone else "ok") for k in keys}
    # another user does not see the page
    User.objects.create_user("eve", password="pw")
    client = Client()
    client.force_login(User.objects.get(username="eve"))
    assert client.get("/campaigns/pics/images/").status_code == 404
