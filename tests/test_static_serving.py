"""The interactive charts' library is ours and is served in production settings too (issue 15: a
charting library served from our own static files, no CDN): WhiteNoise answers /static/ with DEBUG
off, the files are byte for byte the vendored ones whose sha256 VERSIONS.txt records."""
import hashlib
import re

from django.test import Client, override_settings

from .conftest import ROOT

VENDOR = ROOT / "analysis" / "static" / "analysis" / "vendor"


@override_settings(DEBUG=False)
def test_vendored_chart_library_is_served_with_debug_off_and_matches_its_recorded_hash():
    versions = (VENDOR / "VERSIONS.txt").read_text()
    files = sorted(p.name for p in VENDOR.glob("*.min.js"))
    assert files == ["vega-embed.min.js", "vega-lite.min.js", "vega.min.js"]
    client = Client()
    for name in files:
        response = client.get(f"/static/analysis/vendor/{name}")
        assert response.status_code == 200, name
        assert "javascript" in response["Content-Type"]
        body = b"".join(response.streaming_content)
        assert body == (VENDOR / name).read_bytes()
        assert hashlib.sha256(body).hexdigest() in versions, f"{name}: sha256 not in VERSIONS.txt"
        assert not re.search(rb"<script[^>]+src=[\"']https?://", body)
    assert client.get("/static/analysis/vendor/nope.js").status_code == 404
