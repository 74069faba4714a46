"""The home page's counts (analysis.views.index_counts): counted once, read from the cache while the
datasets and the largest ids stay the same, counted again when a new import adds rows. Real data:
the 40-image Flickr8k-Expert subset."""
from unittest import mock

import pytest
from django.core.cache import cache

from analysis import views
from crowd.models import Dataset

from .conftest import run_command

pytestmark = pytest.mark.django_db


def _boom(*args, **kwargs):
    raise AssertionError("counted again")


def test_home_counts_are_cached_until_an_import_adds_rows(subset_dir, client, tmp_path):
    cache.clear()
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    dataset = Dataset.objects.get(name="sub")
    n_candidates = dataset.candidates().count()
    n_ratings = views.human_data(dataset)[0]
    page = client.get("/").content.decode()
    assert f"<td>{n_candidates}</td>" in page, page
    assert n_ratings in page

    with mock.patch.object(views, "human_data", _boom):
        again = client.get("/")
        assert again.status_code == 200 and n_ratings in again.content.decode()

    run_command("import_dataset", "thumb", "data/thumb", "--name", "thumb")  # new datasets and rows: counted again
    thumb = Dataset.objects.get(name="thumb")
    page = client.get("/").content.decode()
    assert views.human_data(thumb)[0] in page and n_ratings in page
    assert f"<td>{thumb.candidates().count()}</td>" in page
