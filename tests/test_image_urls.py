"""Issue 21, reproduction 6: image URL templates accept only http:// and https:// (create_campaign,
the owner's form, the engine), and the image key is percent-encoded, so that a key cannot climb out
of the template's path ('..' segments and absolute keys are refused) nor cut it ('?', '#', '%').
Checked through the command, real HTTP requests (Django's test client) and the rater's task page,
on the 40-image Flickr8k-Expert subset with some image keys made hostile."""
import posixpath
import re
from html import unescape
from urllib.parse import unquote, urlsplit

import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client

from crowd import engine
from crowd.kinds import CampaignSpecError
from crowd.kinds.base import check_url_template, image_url
from crowd.models import Assignment, Campaign, Dataset, Image

from .conftest import run_command

pytestmark = pytest.mark.django_db

TEMPLATE = "https://img.example/photos/{key}"
HOSTILE_KEYS = ["a?b#c.jpg", "val2014/x y.jpg", "100%.jpg", "q&x=1;<b>.jpg"]
REFUSED_TEMPLATES = [
    "javascript:alert(document.domain)//{key}",
    "JavaScript:alert(1)//{key}",
    "data:image/svg+xml,<svg onload=alert(1)>{key}",
    "file:///etc/{key}",
    "//img.example/{key}",
    "/static/{key}",
    " https://img.example/{key}",
    "java\tscript:alert(1)//{key}",
    "https://{key}/x.jpg",
    "https://img.example{key}",
]


@pytest.fixture
def dataset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    ds = Dataset.objects.get(name="sub")
    images = list(Image.objects.filter(dataset=ds).order_by("pk"))
    for image, key in zip(images, HOSTILE_KEYS):
        image.key = key
        image.save(update_fields=["key"])
    return ds


@pytest.fixture
def alice():
    return User.objects.create_user("alice")


def test_create_campaign_refuses_a_template_that_is_not_http(dataset):
    for template in REFUSED_TEMPLATES:
        with pytest.raises(CommandError) as exc:
            run_command("create_campaign", "description", "--dataset", "sub", "--name", "js", "--image-url", template)
        message = str(exc.value)
        assert message.startswith("--image-url: the image URL template"), message
        assert re.search(r"must start with http:// or https://|needs a fixed host|spaces or control characters",
                         message), message
    assert not Campaign.objects.exists()
    with pytest.raises(CampaignSpecError, match="must start with http:// or https://"):  # the engine refuses it too
        engine.create_campaign(dataset, "description", name="js", options={"image_url": REFUSED_TEMPLATES[0]})
    assert not Campaign.objects.exists()


def test_the_owner_form_refuses_a_javascript_template(dataset, alice):
    client = Client()
    client.force_login(alice)
    for template in REFUSED_TEMPLATES[:3]:
        response = client.post("/campaigns/new/", {
            "name": "js", "dataset": "sub", "kind": "description", "k": 3, "assignment_minutes": 10, "reward": "0",
            "seed": 0, "image_url": template,
        })
        assert response.status_code == 400
        page = unescape(response.content.decode())
        assert "must start with http:// or https://" in page or "may not contain spaces" in page
        assert "<svg onload" not in response.content.decode()  # echoed escaped, never as markup
    assert not Campaign.objects.exists()


def test_a_traversal_key_is_refused_with_the_key_named(dataset, alice):
    image = Image.objects.filter(dataset=dataset).order_by("pk")[len(HOSTILE_KEYS)]
    for bad in ("../../etc/passwd", "/etc/passwd", "a/../../b.jpg", "a//b.jpg", "./x.jpg", ".."):
        image.key = bad
        image.save(update_fields=["key"])
        with pytest.raises(CommandError, match=re.escape(f"the image key {bad!r} cannot be put into an image URL")):
            run_command("create_campaign", "description", "--dataset", "sub", "--name", "trav", "--image-url", TEMPLATE)
    client = Client()
    client.force_login(alice)
    response = client.post("/campaigns/new/", {
        "name": "trav", "dataset": "sub", "kind": "description", "k": 3, "assignment_minutes": 10, "reward": "0",
        "seed": 0, "image_url": TEMPLATE,
    })
    assert response.status_code == 400 and "cannot be put into an image URL" in unescape(response.content.decode())
    assert not Campaign.objects.exists()


def test_keys_are_percent_encoded_inside_the_templates_path(dataset):
    out = run_command("create_campaign", "description", "--dataset", "sub", "--name", "enc", "--image-url", TEMPLATE,
                      "--live", "--gold-every", "0")
    assert "campaign 'enc'" in out
    campaign = Campaign.objects.get(name="enc")
    urls = {i.payload["image_key"]: i.payload["image_url"] for i in campaign.items.all()}
    assert urls["a?b#c.jpg"] == "https://img.example/photos/a%3Fb%23c.jpg"
    assert urls["val2014/x y.jpg"] == "https://img.example/photos/val2014/x%20y.jpg"  # sub-folders keep working
    assert urls["100%.jpg"] == "https://img.example/photos/100%25.jpg"
    assert urls["q&x=1;<b>.jpg"] == "https://img.example/photos/q%26x%3D1%3B%3Cb%3E.jpg"
    for key, url in urls.items():
        parts = urlsplit(url)
        assert (parts.scheme, parts.netloc, parts.query, parts.fragment) == ("https", "img.example", "", "")
        assert posixpath.normpath(parts.path) == parts.path and unquote(parts.path) == f"/photos/{key}"

    # the rater's task page shows exactly that URL in the <img>
    worker = engine.invite_workers(1, campaign=campaign)[0]
    client = Client()
    assert client.get(f"/rate/join/{worker.token}/").status_code == 302
    seen = {}
    while len(seen) < len(HOSTILE_KEYS):
        r = client.post("/rate/enc/accept/")
        assert r.status_code == 302, r.content[:300]
        a = Assignment.objects.select_related("item").get(pk=int(r["Location"].rstrip("/").rsplit("/", 1)[1]))
        key = a.item.payload["image_key"]
        if key in HOSTILE_KEYS:
            page = client.get(r["Location"]).content.decode()
            src = re.search(r'<div class="image-box"><img src="([^"]*)"', page).group(1)
            seen[key] = unescape(src)
        assert client.post(f"/rate/enc/task/{a.pk}/return/").status_code == 302
    assert seen == {k: urls[k] for k in HOSTILE_KEYS}


@pytest.mark.real_image_sources  # a dataset without an image source (crowd.images): the image's own URL
def test_an_images_own_url_is_shown_only_when_it_is_http(dataset):
    first, second = Image.objects.filter(dataset=dataset).order_by("pk")[:2]
    Image.objects.filter(pk=first.pk).update(url="javascript:alert(1)")
    Image.objects.filter(pk=second.pk).update(url="https://img.example/own.jpg")
    campaign = engine.create_campaign(dataset, "description", name="own", gold_every=0)
    urls = {i.payload["image"]: i.payload["image_url"] for i in campaign.items.all()}
    assert urls[first.pk] == "" and urls[second.pk] == "https://img.example/own.jpg"


def test_the_template_rules_one_by_one():
    assert check_url_template("HTTPS://img.example/{key}.jpg?size={{large}}") == "HTTPS://img.example/{key}.jpg?size={{large}}"
    assert image_url("http://img.example/i?id={key}", "a b&c") == "http://img.example/i?id=a%20b%26c"
    for template in REFUSED_TEMPLATES:
        with pytest.raises(CampaignSpecError):
            check_url_template(template)
    with pytest.raises(CampaignSpecError, match="only use the placeholder"):
        check_url_template("https://img.example/{key.__class__}")
