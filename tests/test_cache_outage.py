"""With the shared Redis cache unreachable, the dashboard still draws its charts (the cache is
skipped, with a warning) and the rate limit fails open; with Redis there, charts are cached."""
import logging

import pytest
from django.core.cache import cache
from django.test import override_settings

from .conftest import run_command

pytestmark = pytest.mark.django_db

DEAD = {"default": {"BACKEND": "evalsite.cache.FailOpenRedisCache", "LOCATION": "redis://127.0.0.1:6399/0",
                    "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}}


def scatter_url(client):
    run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_4")
    return "/datasets/sub/scatter/bleu_4.png"


def test_charts_render_while_the_cache_is_down(client, subset_dir, caplog, settings):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    url = scatter_url(client)
    settings.RATER_RATE_LIMIT = "2/m"
    with override_settings(CACHES=DEAD), caplog.at_level(logging.WARNING, logger="evalsite.cache"):
        r = client.get(url)
        assert r.status_code == 200 and r["Content-Type"] == "image/png" and r.content[:8] == b"\x89PNG\r\n\x1a\n"
        assert any("cache unavailable" in m for m in caplog.messages)
        assert cache.get("anything", "default") == "default"
        cache.set("k", 1)  # dropped, no exception
        # the rater pages keep answering (the rate limit fails open instead of 429 or 500)
        codes = {client.get("/rate/").status_code for _ in range(5)}
        assert codes == {403}  # no rater in this session: the page says so, and never 429 or 500


def test_charts_are_cached_when_redis_is_up(client, subset_dir, settings):
    import os

    broker = os.environ.get("TEST_BROKER_URL", "redis://127.0.0.1:6379/15")
    prefix = f"cache-outage-{os.getpid()}"
    live = {"default": {"BACKEND": "evalsite.cache.FailOpenRedisCache", "LOCATION": broker, "KEY_PREFIX": prefix}}
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    url = scatter_url(client)
    with override_settings(CACHES=live):
        redis = cache._cache.get_client()
        try:
            first = client.get(url)
            assert first.status_code == 200
            assert redis.keys(f"{prefix}:*"), "the chart was not written to Redis"
            assert client.get(url).content == first.content
        finally:
            for key in redis.keys(f"{prefix}:*"):  # only ours: this Redis database is the test broker's
                redis.delete(key)
