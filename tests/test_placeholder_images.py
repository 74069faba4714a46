"""``placeholder_images``: the labelled stand-in pictures ``./run demo`` gives Flickr8k-Expert (whose
photographs are not redistributable), so its diversity campaign can go live and raters see a picture
that says what it is. Real data: the 40-image Flickr8k-Expert subset."""
import pytest
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.test import Client
from django.urls import reverse
from PIL import Image as PILImage

from crowd import images
from crowd.models import Dataset

from .conftest import run_command

pytestmark = pytest.mark.real_image_sources


@pytest.mark.django_db
def test_placeholders_make_the_demo_campaign_publishable_and_are_served(subset_dir, tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    dataset = Dataset.objects.get(name="sub")
    with pytest.raises(CommandError, match="shows images but dataset 'sub' has no image source"):
        run_command("create_campaign", "diversity", "--dataset", "sub", "--name", "before", "--images", "5", "--live")

    folder = tmp_path / "pictures"
    out = run_command("placeholder_images", "sub", str(folder), "--set-source")
    keys = sorted(dataset.images.values_list("key", flat=True))
    assert out.startswith(f"{len(keys)} placeholder pictures written")
    assert sorted(p.name for p in folder.iterdir()) == keys  # one file per key, nothing else
    for key in keys[:3]:
        head = (folder / key).read_bytes()[:12]
        assert images.sniff_image_type(head) == "image/jpeg"  # .jpg keys get real JPEGs
        with PILImage.open(folder / key) as picture:
            assert picture.size == (480, 320)
    dataset.refresh_from_db()
    assert (dataset.image_source, dataset.image_location) == ("folder", str(folder.resolve()))

    again = run_command("placeholder_images", "sub", str(folder))  # idempotent: nothing rewritten
    assert again.startswith("0 placeholder pictures written")

    run_command("create_campaign", "diversity", "--dataset", "sub", "--name", "demo", "--images", "5", "--live")
    key = keys[0]
    client = Client()
    client.force_login(User.objects.create_superuser("owner", "o@example.org", "pw"))
    response = client.get(reverse("crowd:image-file", args=["sub", key]))
    assert response.status_code == 200 and response["Content-Type"] == "image/jpeg"
    assert b"".join(response.streaming_content) == (folder / key).read_bytes()


@pytest.mark.django_db
def test_bad_arguments_write_nothing(subset_dir, tmp_path):
    with pytest.raises(CommandError, match="no dataset named 'nope'"):
        run_command("placeholder_images", "nope", str(tmp_path / "x"))
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    with pytest.raises(CommandError, match="between 16 and 4000"):
        run_command("placeholder_images", "sub", str(tmp_path / "y"), "--width", "5")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
