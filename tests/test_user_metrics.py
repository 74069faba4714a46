"""A researcher's own metric, without forking: uploaded per-caption scores (CSV, command, web page)
and entry-point plugins (``captioneval.metrics``), on the Flickr8k-Expert subset in PostgreSQL."""
from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.urls import reverse

from crowd.models import Dataset
from metrics.models import MetricRun, MetricScore
from captioneval.metrics import plugins, registry
from captioneval.text.tokenizer import ptb_tokenize
from captioneval.metrics.builtin.learned import UNAVAILABLE as LEARNED  # the learned metrics not computed here
from captioneval.metrics.builtin.judges import UNAVAILABLE as JUDGES  # the LLM judges without an endpoint
from metrics.uploads import (
    UploadError,
    metric_display_name,
    metric_key,
    metric_sign,
    oriented_value,
    upload_scores,
    uploaded_runs,
)

from .conftest import ROOT, run_command

EXAMPLE_PLUGIN = Path(__file__).resolve().parent / "plugin_example"


# --- helpers -------------------------------------------------------------------------------------

@pytest.fixture
def subset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    return Dataset.objects.get(name="sub")


def candidates(dataset):
    """[(caption id, image key, caption key, text)] of the dataset's candidates, in id order."""
    return list(dataset.candidates().order_by("id").values_list("id", "image__key", "key", "text"))


def length_scores(dataset):
    """A toy metric the test computes itself: words in the caption, plus a fraction to exercise floats."""
    return [(image, key, len(text.split()) + 1 / 3) for _, image, key, text in candidates(dataset)]


def write_csv(path: Path, rows, header=("image", "caption", "score")) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    if header:
        writer.writerow(header)
    writer.writerows(rows)
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def state():
    """Everything an upload could change, to compare before and after a refused one."""
    return (
        sorted(MetricRun.objects.values_list("pk", "metric", "version", "params_key", "status", "total", "params")),
        sorted(MetricScore.objects.values_list("run_id", "caption_id", "value")),
    )


def stored(run):
    return dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))


def independent_inputs(dataset):
    """Candidates, and their and their references' texts tokenised afresh (not from the cache)."""
    cands = list(dataset.candidates().order_by("id"))
    refs_by_image = {}
    for ref in dataset.references().order_by("image_id", "key"):
        refs_by_image.setdefault(ref.image_id, []).append(ref.text)
    tokens = ptb_tokenize([c.text for c in cands] + [t for c in cands for t in refs_by_image[c.image_id]])
    cand_tok, pos, ref_tok = tokens[: len(cands)], len(cands), []
    for c in cands:
        n = len(refs_by_image[c.image_id])
        ref_tok.append(tokens[pos : pos + n])
        pos += n
    return cands, cand_tok, ref_tok


# --- uploads: storage, idempotence, replacement ---------------------------------------------------

@pytest.mark.django_db
def test_upload_stores_the_file_values_with_its_identity(subset, tmp_path):
    rows = length_scores(subset)
    path = write_csv(tmp_path / "lengths.csv", rows)
    summary = upload_scores("sub", path, "Caption Length")
    assert summary.changed and summary.key == "user_caption_length" and summary.rows == len(rows)
    assert summary.n_judged == len(rows) and summary.replaced == []

    run = MetricRun.objects.get(pk=summary.run)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (run.dataset_id, run.metric, run.version) == (subset.pk, "user_caption_length", "upload:" + sha[:12])
    assert run.params == {
        "kind": "upload", "name": "Caption Length", "higher": "better", "file": "lengths.csv", "sha256": sha, "rows": len(rows),
    }
    assert run.status == MetricRun.DONE and run.total == run.completed == len(rows)
    assert run.refresh_progress().status == MetricRun.DONE  # the pipeline's own recount agrees

    expected = {cid: len(text.split()) + 1 / 3 for cid, _, _, text in candidates(subset)}
    assert stored(run) == expected  # exactly the file's values (repr round trip), nothing negated
    assert not MetricScore.objects.filter(run=run, raw__isnull=False).exists()

    assert uploaded_runs(subset) == {"user_caption_length": run}
    assert metric_display_name("user_caption_length", run) == "Caption Length"
    assert metric_display_name("user_caption_length") == "Caption Length"
    assert metric_display_name("cider_d") == "CIDEr-D" and metric_display_name("no_such") == "no_such"
    assert metric_sign("user_caption_length", run) == 1 and oriented_value(2.5, "user_caption_length", run) == 2.5


@pytest.mark.django_db
def test_identical_reupload_changes_nothing_and_a_different_file_replaces_atomically(subset, tmp_path):
    rows = length_scores(subset)
    first = upload_scores("sub", write_csv(tmp_path / "a.csv", rows), "My Metric")
    before = state()
    copy = write_csv(tmp_path / "same-content-other-name.csv", rows)
    again = upload_scores("sub", copy, "My Metric")
    assert not again.changed and again.run == first.run and str(again).startswith("unchanged")
    assert state() == before

    doubled = [(image, key, 2 * score) for image, key, score in rows]
    second = upload_scores("sub", write_csv(tmp_path / "b.csv", doubled), "My Metric")
    assert second.changed and second.replaced == [first.run] and second.run != first.run
    assert not MetricRun.objects.filter(pk=first.run).exists()
    assert not MetricScore.objects.filter(run_id=first.run).exists()
    assert list(MetricRun.objects.filter(metric="user_my_metric").values_list("pk", flat=True)) == [second.run]
    run = uploaded_runs(subset)["user_my_metric"]
    assert run.pk == second.run and run.params["file"] == "b.csv"
    by_key = {(image, key): score for image, key, score in doubled}
    assert {(i, k): v for i, k, v in MetricScore.objects.filter(run=run).values_list(
        "caption__image__key", "caption__key", "value")} == by_key

    # replace=False refuses and keeps the stored upload
    before = state()
    with pytest.raises(UploadError, match="already has an upload named 'My Metric'"):
        upload_scores("sub", write_csv(tmp_path / "c.csv", rows), "My Metric", replace=False)
    assert state() == before
    # the same file with the other direction is a change: replaced, direction recorded
    worse = upload_scores("sub", tmp_path / "b.csv", "My Metric", higher="worse")
    assert worse.changed and worse.replaced == [second.run]
    assert uploaded_runs(subset)["user_my_metric"].params["higher"] == "worse"


@pytest.mark.django_db
def test_caption_id_column_and_direction_worse(subset, tmp_path):
    rows = [(cid, -float(len(text))) for cid, _, _, text in candidates(subset)]
    summary = upload_scores("sub", write_csv(tmp_path / "ids.csv", rows, header=("caption_id", "score")),
                            "Edit Distance", higher="worse")
    run = MetricRun.objects.get(pk=summary.run)
    assert run.params["higher"] == "worse" and summary.key == "user_edit_distance"
    assert stored(run) == {cid: value for cid, value in rows}
    assert metric_sign("user_edit_distance", run) == -1
    assert oriented_value(-3.0, "user_edit_distance", run) == 3.0


@pytest.mark.django_db
def test_a_file_object_and_unjudged_candidates_may_be_left_out(subset, tmp_path):
    """Django's uploaded files are file objects; columns may come in any order with a BOM first; only
    candidates with human judgments need a score."""
    from crowd.models import HumanJudgment

    cands = candidates(subset)
    HumanJudgment.objects.filter(caption_id__in=[c[0] for c in cands[:3]]).delete()
    rows = length_scores(subset)[3:]
    text = "\ufeffscore,caption,image\n" + "".join(f"{s!r},{k},{i}\n" for i, k, s in rows)
    summary = upload_scores("sub", io.BytesIO(text.encode("utf-8")), "Lengths", filename="/some/dir/lengths.csv")
    run = MetricRun.objects.get(pk=summary.run)
    assert run.params["file"] == "lengths.csv" and len(stored(run)) == len(rows) == len(cands) - 3
    assert summary.n_judged == len(cands) - 3


@pytest.mark.django_db
def test_system_column_resolves_caption_keys_shared_by_systems(subset, tmp_path):
    from crowd.models import Caption, System

    other = System.objects.create(dataset=subset, name="other-model", kind=System.MODEL)
    first = subset.candidates().order_by("id").first()
    twin = Caption.objects.create(image=first.image, system=other, key=first.key, text="a different caption")
    rows = length_scores(subset)  # includes the twin (a candidate too), under the same image and key
    assert sum(1 for image, key, _ in rows if (image, key) == (first.image.key, first.key)) == 2
    plain = [r for r in rows if (r[0], r[1]) != (first.image.key, first.key)] + [(first.image.key, first.key, 1.0)]
    before = state()
    with pytest.raises(UploadError, match=rf"^line {len(plain) + 1}: caption '{re.escape(first.key)}' of image "
                                          r".* exists for several systems \(expert-candidates, other-model\); add a system column$"):
        upload_scores("sub", write_csv(tmp_path / "plain.csv", plain), "Sys Metric")
    assert state() == before
    systems = dict(subset.candidates().values_list("id", "system__name"))
    with_system = [(image, key, systems[cid], 0.5 if cid == twin.pk else 1.0)
                   for (cid, image, key, _) in candidates(subset)]
    summary = upload_scores("sub", write_csv(tmp_path / "sys.csv", with_system, header=("image", "caption", "system", "score")),
                            "Sys Metric")
    values = stored(MetricRun.objects.get(pk=summary.run))
    assert values[twin.pk] == 0.5 and values[first.pk] == 1.0 and len(values) == len(rows)


# --- uploads: every refusal leaves the database unchanged ------------------------------------------

def _bad_files(dataset, tmp_path):
    rows = length_scores(dataset)
    image0, key0, _ = rows[0]
    reference = dataset.references().order_by("id").values_list("image__key", "key").first()
    unknown = list(rows)
    unknown[3] = (rows[3][0], "nope.jpg#9", 1.0)
    unknown[6] = (rows[6][0], "also-unknown#1", 1.0)
    return {
        "unknown caption (line of the first)": (
            write_csv(tmp_path / "unknown.csv", unknown),
            rf"^line 5: image '{re.escape(rows[3][0])}' has no candidate caption 'nope\.jpg#9'$",
        ),
        "unknown image": (
            write_csv(tmp_path / "img.csv", [("missing.jpg", key0, 1.0)] + rows[1:]),
            r"^line 2: unknown image 'missing\.jpg' \(not an image of dataset 'sub'\)$",
        ),
        "reference caption": (
            write_csv(tmp_path / "ref.csv", rows + [(reference[0], reference[1], 1.0)]),
            rf"^line {len(rows) + 2}: caption '{re.escape(reference[1])}' of image .* is a reference caption",
        ),
        "duplicate caption": (
            write_csv(tmp_path / "dup.csv", rows + [(image0, key0, 0.5)]),
            rf"^line {len(rows) + 2}: caption '{re.escape(key0)}' of image '{re.escape(image0)}' already has a score on line 2$",
        ),
        "NaN": (
            write_csv(tmp_path / "nan.csv", rows[:4] + [(rows[4][0], rows[4][1], "nan")] + rows[5:]),
            r"^line 6: score 'nan' is not a finite number$",
        ),
        "infinity": (
            write_csv(tmp_path / "inf.csv", rows[:1] + [(rows[1][0], rows[1][1], "-inf")] + rows[2:]),
            r"^line 3: score '-inf' is not a finite number$",
        ),
        "not a number": (
            write_csv(tmp_path / "text.csv", [(image0, key0, "high")] + rows[1:]),
            r"^line 2: score 'high' is not a number$",
        ),
        "missing scores": (
            write_csv(tmp_path / "missing.csv", rows[3:]),
            rf"^3 of the {len(rows)} candidate captions with human judgments have no score, e\.g\. "
            rf"image '{re.escape(image0)}' caption '{re.escape(key0)}'; image ",
        ),
        "no header": (
            write_csv(tmp_path / "noheader.csv", rows, header=None),
            r"^the first line is not a header \(it looks like a data row\): expected a header row image,caption,score",
        ),
        "misspelt header": (
            write_csv(tmp_path / "hdr.csv", rows, header=("img", "caption", "score")),
            r"^unknown column 'img' in the header",
        ),
        "short row": (
            write_csv(tmp_path / "short.csv", rows[:2] + [(rows[2][0], rows[2][1])] + rows[3:]),
            r"^line 4: 2 fields, but the header has 3 columns$",
        ),
        "empty file": (write_csv(tmp_path / "empty.csv", [], header=None), r"^the file is empty"),
        "header only": (write_csv(tmp_path / "header.csv", []), r"^the file has a header but no score rows$"),
    }


BAD_CASES = [
    "unknown caption (line of the first)", "unknown image", "reference caption", "duplicate caption", "NaN", "infinity",
    "not a number", "missing scores", "no header", "misspelt header", "short row", "empty file", "header only",
]


@pytest.mark.django_db
@pytest.mark.parametrize("case", BAD_CASES)
def test_invalid_file_is_refused_with_a_clear_message_and_nothing_changes(subset, tmp_path, case):
    upload_scores("sub", write_csv(tmp_path / "good.csv", length_scores(subset)), "My Metric")
    path, message = _bad_files(subset, tmp_path)[case]
    before = state()
    with pytest.raises(UploadError, match=message):
        upload_scores("sub", path, "My Metric")
    assert state() == before
    # the command line says the same in one line and changes nothing either
    with pytest.raises(CommandError, match=message):
        run_command("upload_scores", "--dataset", "sub", "--name", "Other Metric", "--file", str(path))
    assert state() == before


@pytest.mark.django_db
def test_non_utf8_file_is_refused(subset, tmp_path):
    rows = length_scores(subset)
    text = "image,caption,score\n" + "".join(f"{i},{k},{s!r}\n" for i, k, s in rows[:2])
    body = text.encode("utf-8") + "caf\u00e9,x,1\n".encode("latin-1")
    path = tmp_path / "latin1.csv"
    path.write_bytes(body)
    before = state()
    with pytest.raises(UploadError, match=r"^the file is not UTF-8 text: byte 0xe9 on line 4 cannot be decoded"):
        upload_scores("sub", path, "My Metric")
    assert state() == before


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name, higher, dataset, message",
    [
        ("cider_d", "better", "sub", r"clashes with the platform's metric or group 'cider_d'"),
        ("CIDEr-D", "better", "sub", r"clashes with the platform's metric or group 'cider_d'"),
        ("METEOR", "better", "sub", r"clashes with the platform's metric or group 'meteor'"),
        ("diversity", "better", "sub", r"clashes with the platform's metric or group 'diversity'"),
        ("1 - mBLEU-1", "better", "sub", r"is the name of the platform's metric 'mbleu_1'"),
        ("   ", "better", "sub", r"a metric name is required"),
        ("!!!", "better", "sub", r"has no letters or digits"),
        ("x" * 60, "better", "sub", r"too long"),
        ("My Metric", "sideways", "sub", r"higher must be 'better' or 'worse', got 'sideways'"),
        ("My Metric", "better", "nope", r"unknown dataset 'nope' \(known: sub\)"),
    ],
)
def test_bad_name_direction_or_dataset_is_refused(subset, tmp_path, name, higher, dataset, message):
    path = write_csv(tmp_path / "good.csv", length_scores(subset))
    before = state()
    with pytest.raises(UploadError, match=message):
        upload_scores(dataset, path, name, higher=higher)
    assert state() == before


def test_metric_keys_are_slugs_with_the_upload_prefix():
    assert metric_key("My Metric") == "user_my_metric"
    assert metric_key("  CLIP-S (ViT-B/32) ") == "user_clip_s_vit_b32"
    assert metric_key("bleu_4 mine") == "user_bleu_4_mine"


@pytest.mark.django_db
def test_upload_command_prints_what_it_stored(subset, tmp_path):
    path = write_csv(tmp_path / "scores.csv", length_scores(subset))
    out = run_command("upload_scores", "--dataset", "sub", "--name", "My Metric", "--file", str(path), "--higher", "worse")
    run = uploaded_runs(subset)["user_my_metric"]
    assert out.startswith(f"stored 'My Metric' (user_my_metric) on dataset 'sub': {run.total:,} scores from scores.csv")
    assert f"higher is worse), run {run.pk}" in out and run.params["higher"] == "worse"
    assert "unchanged: 'My Metric'" in run_command(
        "upload_scores", "--dataset", "sub", "--name", "My Metric", "--file", str(path), "--higher", "worse")
    with pytest.raises(CommandError, match="already has an upload named 'My Metric'"):
        run_command("upload_scores", "--dataset", "sub", "--name", "My Metric", "--file", str(path), "--no-replace")
    with pytest.raises(CommandError, match="file not found"):
        run_command("upload_scores", "--dataset", "sub", "--name", "Other", "--file", str(tmp_path / "none.csv"))


# --- the web page ---------------------------------------------------------------------------------

@pytest.fixture
def staff():
    return User.objects.create_user("curator", password="pw", is_staff=True)


def csrf_client(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def page_token(client, url):
    response = client.get(url)
    assert response.status_code == 200
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.content.decode()).group(1)


@pytest.mark.django_db
def test_upload_page_stores_and_redirects_to_the_dashboard(subset, staff):
    url = reverse("metrics:upload-scores", args=["sub"])
    assert url == "/datasets/sub/upload-scores/"
    client = csrf_client(staff)
    page = client.get(url).content.decode()
    for needle in ('enctype="multipart/form-data"', 'type="file" name="file"', 'name="name"', 'name="higher"',
                   "csrfmiddlewaretoken", "image,caption,score"):
        assert needle in page
    assert 'id="upload-errors"' not in page
    rows = length_scores(subset)
    body = "image,caption,score\n" + "".join(f"{i},{k},{s!r}\n" for i, k, s in rows)
    response = client.post(url, {
        "csrfmiddlewaretoken": page_token(client, url), "name": "Web Metric", "higher": "better",
        "file": SimpleUploadedFile("web.csv", body.encode(), content_type="text/csv"),
    })
    assert response.status_code == 302 and response["Location"] == reverse("analysis:dataset", args=["sub"])
    run = uploaded_runs(subset)["user_web_metric"]
    assert run.params["file"] == "web.csv" and run.params["name"] == "Web Metric" and len(stored(run)) == len(rows)
    listing = client.get(url).content.decode()
    assert 'data-metric="user_web_metric"' in listing and "web.csv" in listing


@pytest.mark.django_db
def test_upload_page_shows_errors_with_400_and_stores_nothing(subset, staff):
    url = reverse("metrics:upload-scores", args=["sub"])
    client = csrf_client(staff)
    rows = length_scores(subset)
    body = "image,caption,score\n" + "".join(f"{i},{k},{s!r}\n" for i, k, s in rows[:5]) + f"{rows[5][0]},{rows[5][1]},nan\n"
    before = state()
    response = client.post(url, {
        "csrfmiddlewaretoken": page_token(client, url), "name": "Web Metric", "higher": "better",
        "file": SimpleUploadedFile("bad.csv", body.encode(), content_type="text/csv"),
    })
    assert response.status_code == 400
    html = response.content.decode()
    errors = html[html.index('id="upload-errors"'):]
    assert "line 7: score &#x27;nan&#x27; is not a finite number" in errors[: errors.index("</div>")]
    assert state() == before
    # a missing file and a clashing name are form errors in the same place
    response = client.post(url, {"csrfmiddlewaretoken": page_token(client, url), "name": "cider_d", "higher": "better"})
    assert response.status_code == 400 and 'id="upload-errors"' in response.content.decode()
    assert "CSV file: This field is required." in response.content.decode()
    response = client.post(url, {
        "csrfmiddlewaretoken": page_token(client, url), "name": "CIDEr-D", "higher": "better",
        "file": SimpleUploadedFile("ok.csv", ("image,caption,score\n" + "".join(
            f"{i},{k},{s!r}\n" for i, k, s in rows)).encode()),
    })
    assert response.status_code == 400 and "clashes with the platform&#x27;s metric or group &#x27;cider_d&#x27;" in (
        response.content.decode())
    assert state() == before


@pytest.mark.django_db
def test_upload_page_access_rules(subset, staff):
    url = reverse("metrics:upload-scores", args=["sub"])
    anonymous = Client()
    response = anonymous.get(url)
    assert response.status_code == 302 and response["Location"].startswith(reverse("login") + "?next=")
    response = anonymous.post(url, {"name": "x"})
    assert response.status_code == 302 and MetricRun.objects.count() == 0
    rater = User.objects.create_user("rater", password="pw")
    client = Client()
    client.force_login(rater)
    assert client.get(url).status_code == 403
    superuser = User.objects.create_superuser("root", password="pw")
    client.force_login(superuser)
    assert client.get(url).status_code == 200
    assert client.get(reverse("metrics:upload-scores", args=["nope"])).status_code == 404
    # without the CSRF token the post is refused
    strict = csrf_client(staff)
    response = strict.post(url, {"name": "x", "higher": "better",
                                 "file": SimpleUploadedFile("a.csv", b"image,caption,score\n")})
    assert response.status_code == 403 and MetricRun.objects.count() == 0


# --- plugins --------------------------------------------------------------------------------------

def make_distribution(root: Path, dist: str, version: str, module: str, code: str, entry_points: dict[str, str]) -> Path:
    """An installed-looking distribution in ``root``: ``<module>.py`` and ``<dist>-<version>.dist-info``
    with METADATA and entry_points.txt (group captioneval.metrics). Returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(textwrap.dedent(code))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\n{lines}")
    return root


@contextlib.contextmanager
def plugins_on_path(*directories: Path):
    """Put plugin distributions on sys.path and rediscover; afterwards restore sys.path, the plugin
    modules and the registry (built-ins only)."""
    modules = set(sys.modules)
    for d in directories:
        sys.path.insert(0, str(d))
    try:
        yield registry.load_plugins()
    finally:
        for d in directories:
            sys.path.remove(str(d))
        for name in set(sys.modules) - modules:  # only the plugins' own modules
            file = getattr(sys.modules[name], "__file__", None) or ""
            if any(Path(file).is_relative_to(d) for d in directories):
                del sys.modules[name]
        registry.load_plugins()
        assert registry.METRICS == registry.BUILTIN_METRICS and not registry.PLUGINS


def test_example_plugin_is_discovered_and_the_registry_is_restored():
    assert "word_f1" not in registry.METRICS
    with plugins_on_path(EXAMPLE_PLUGIN) as found:
        assert set(found.loaded) == {"word_f1"} and not found.problems
        metric = registry.METRICS["word_f1"]
        assert (metric.name, metric.level, metric.family, metric.version, metric.range, metric.higher) == (
            "Word F1", "caption", "plugin:captioneval-example-metric", "example-word-f1/1", (0.0, 1.0), "better")
        assert registry.get_metric("word_f1") is metric and registry.is_plugin("word_f1")
        from captioneval_example_metric import word_f1

        cands = ["a dog runs on the grass", "two people", ""]
        refs = [["a dog is running on grass", "the dog runs"], ["a man and a woman"], ["a cat"]]
        got = registry.score("word_f1", cands, refs)
        assert got.dtype == np.float64 and got.shape == (3,)
        np.testing.assert_array_equal(got, word_f1(cands, refs))
        assert got[0] == pytest.approx(2 * (4 / 6) * (4 / 6) / (4 / 6 + 4 / 6)) and got[2] == 0.0
    assert "word_f1" not in registry.METRICS
    with pytest.raises(registry.UnknownMetricError):
        registry.get_metric("word_f1")


def database_url():
    s = connection.settings_dict
    assert connection.vendor == "postgresql", "these tests need PostgreSQL: set DATABASE_URL"
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_installed_plugin_is_computed_by_compute_metrics_and_found_by_reports(subset):
    """A separate process with the example distribution on PYTHONPATH computes the plugin metric like
    any other; the stored scores equal the plugin's function on freshly tokenised captions."""
    env = {k: v for k, v in os.environ.items() if k != "CELERY_BROKER_URL"}  # tasks in-process
    env.update(DATABASE_URL=database_url(), PYTHONPATH=os.pathsep.join([str(EXAMPLE_PLUGIN), str(ROOT)]),
               METRICS_CHUNK_SIZE="40")
    result = subprocess.run(
        [sys.executable, "manage.py", "compute_metrics", "--dataset", "sub", "--metric", "word_f1", "--wait"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "word_f1: done" in result.stdout
    run = MetricRun.objects.get(dataset=subset, metric="word_f1")
    assert run.version == "example-word-f1/1" and run.status == MetricRun.DONE
    assert "document_frequency" not in run.params
    cands, cand_tok, ref_tok = independent_inputs(subset)
    sys.path.insert(0, str(EXAMPLE_PLUGIN))
    try:
        from captioneval_example_metric import word_f1
    finally:
        sys.path.remove(str(EXAMPLE_PLUGIN))
    expected = word_f1(cand_tok, ref_tok)
    values = stored(run)
    assert run.total == len(cands) == len(values)
    np.testing.assert_array_equal([values[c.pk] for c in cands], expected)
    assert len(set(expected)) > 10  # a real spread of values, not a constant

    # The web process (with the plugin installed) finds the run through the reports' normal path.
    from analysis.reports import completed_runs, current_run

    with plugins_on_path(EXAMPLE_PLUGIN):
        assert current_run(subset, "word_f1") == run
        assert completed_runs(subset)["word_f1"] == run
        assert metric_display_name("word_f1") == "Word F1"
        # and computing it again in this process is "up to date", not a second run
        assert "word_f1: up to date" in run_command("compute_metrics", "--dataset", "sub", "--metric", "word_f1", "--wait")
    assert MetricRun.objects.filter(metric="word_f1").count() == 1


CORPUS_PLUGIN = """
    from captioneval.metrics.plugins import PluginMetric

    def relative_length(candidates, references):
        # depends on every candidate: length over the mean length of all candidates scored together
        lengths = [len(c.split()) for c in candidates]
        mean = sum(lengths) / len(lengths)
        return [n / mean for n in lengths]

    METRIC = PluginMetric("relative_length", "Relative length", "1", relative_length, range=(0.0, 1000.0),
                          higher="worse", needs_corpus=True)
"""


@pytest.mark.django_db
def test_corpus_plugin_sees_the_whole_dataset_whatever_the_chunking(subset, tmp_path, settings):
    settings.METRICS_CHUNK_SIZE = 25
    dist = make_distribution(tmp_path / "corpus", "corpus-plugin", "2.0", "corpus_plugin", CORPUS_PLUGIN,
                             {"relative_length": "corpus_plugin:METRIC"})
    with plugins_on_path(dist):
        assert registry.is_reversed("relative_length")
        run_command("compute_metrics", "--dataset", "sub", "--metric", "relative_length", "--wait")
        run = MetricRun.objects.get(metric="relative_length")
        from corpus_plugin import relative_length

        cands, cand_tok, ref_tok = independent_inputs(subset)
        expected = relative_length(cand_tok, ref_tok)
        values = stored(run)
        assert run.total > 25 * 3 and run.status == MetricRun.DONE
        np.testing.assert_allclose([values[c.pk] for c in cands], expected, rtol=1e-15)
        assert metric_sign("relative_length") == -1


BROKEN = {
    "exploding_plugin": ("exploding", """
        raise RuntimeError("boom: the model weights are missing")
    """),
    "short_plugin": ("short_count", """
        from captioneval.metrics.plugins import PluginMetric
        METRIC = PluginMetric("short_count", "Short", "1", lambda c, r: [0.5] * (len(c) - 1), range=(0.0, 1.0))
    """),
    "nan_plugin": ("nan_scores", """
        from captioneval.metrics.plugins import PluginMetric
        METRIC = PluginMetric("nan_scores", "NaN", "1", lambda c, r: [float("nan")] * len(c))
    """),
    "range_plugin": ("out_of_range", """
        from captioneval.metrics.plugins import PluginMetric
        METRIC = PluginMetric("out_of_range", "Out", "1", lambda c, r: [2.0] * len(c), range=(0.0, 1.0))
    """),
    "clash_plugin": ("cider_d", """
        from captioneval.metrics.plugins import PluginMetric
        METRIC = PluginMetric("cider_d", "My CIDEr", "1", lambda c, r: [0.0] * len(c))
    """),
    "function_plugin": ("just_a_function", """
        def METRIC(candidates, references):
            return [0.0] * len(candidates)
    """),
    "upload_prefix_plugin": ("user_mine", """
        from captioneval.metrics.plugins import PluginMetric
        METRIC = PluginMetric("user_mine", "Mine", "1", lambda c, r: [0.0] * len(c))
    """),
}


def broken_distributions(root: Path) -> list[Path]:
    out = []
    for module, (key, code) in BROKEN.items():
        target = f"{module}:METRIC" if module != "exploding_plugin" else f"{module}:ANYTHING"
        out.append(make_distribution(root / module, module.replace("_", "-"), "1.0", module, code, {key: target}))
    return out


@pytest.mark.django_db
def test_broken_plugins_are_reported_and_built_ins_keep_working(subset, tmp_path, caplog, settings):
    settings.METRICS_CHUNK_SIZE = 50
    with caplog.at_level(logging.WARNING, logger="metrics.plugins"):
        with plugins_on_path(EXAMPLE_PLUGIN, *broken_distributions(tmp_path)) as found:
            warnings = "\n".join(r.getMessage() for r in caplog.records)
            assert ("plugin metric 'exploding' from exploding-plugin 1.0 is unavailable: RuntimeError: boom: the model "
                    "weights are missing") in warnings
            assert "'cider_d' clashes with a built-in metric" in warnings
            assert "must resolve to a captioneval.metrics.plugins.PluginMetric" in found.problems["just_a_function"]
            assert "reserved for uploaded scores" in found.problems["user_mine"]
            assert set(found.problems) == {"exploding", "cider_d", "just_a_function", "user_mine"}
            # unavailable with the reason, like SPICE; the built-in cider_d is untouched
            assert "boom" in registry.UNAVAILABLE["exploding"] and "spice" in registry.UNAVAILABLE
            assert registry.METRICS["cider_d"] == registry.BUILTIN_METRICS["cider_d"]
            assert "word_f1" in registry.METRICS
            with pytest.raises(registry.MetricUnavailableError, match="exploding-plugin 1.0 is unavailable: RuntimeError"):
                registry.get_metric("exploding")
            with pytest.raises(CommandError, match="plugin metric 'exploding' from exploding-plugin 1.0 is unavailable"):
                run_command("compute_metrics", "--dataset", "sub", "--metric", "exploding")

            # plugins that load but return bad scores: a clear error naming the plugin, the run fails
            with pytest.raises(plugins.PluginError, match=r"^plugin metric 'short_count' \(short-plugin 1\.0\) "
                                                          r"returned 1 scores for 2 candidates$"):
                registry.score("short_count", ["a dog", "a cat"], [["a dog"], ["a cat"]])
            for key, message in [
                ("short_count", r"short_count: PluginError: plugin metric 'short_count' \(short-plugin 1\.0\) returned "
                                r"(\d+) scores for (\d+) candidates"),
                ("nan_scores", r"nan_scores: PluginError: plugin metric 'nan_scores' \(nan-plugin 1\.0\): (\d+) of (\d+) "
                               r"scores are not finite"),
                ("out_of_range", r"out_of_range: PluginError: plugin metric 'out_of_range' \(range-plugin 1\.0\): (\d+) "
                                 r"scores are outside its declared range \[0, 1\]"),
            ]:
                with pytest.raises(CommandError, match=message) as err:
                    run_command("compute_metrics", "--dataset", "sub", "--metric", key, "--wait")
                counts = [int(n) for n in re.search(message, str(err.value)).groups()]
                if key == "short_count":
                    assert counts[0] == counts[1] - 1 and counts[1] <= 50
                elif key == "nan_scores":
                    assert counts[0] == counts[1] and counts[1] <= 50
                run = MetricRun.objects.get(metric=key)
                assert run.status == MetricRun.FAILED and not MetricScore.objects.filter(run=run).exists()

            # the built-ins and the good plugin still compute
            out = run_command("compute_metrics", "--dataset", "sub", "--metric", "bleu_1", "word_f1", "--wait")
            assert "bleu_1: done" in out and "word_f1: done" in out
    assert "exploding" not in registry.UNAVAILABLE and set(registry.UNAVAILABLE) == {"spice", *LEARNED, *JUDGES}


def test_plugin_listing_in_a_fresh_process_survives_a_broken_plugin(tmp_path):
    directories = [EXAMPLE_PLUGIN, *broken_distributions(tmp_path)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, directories), str(ROOT)]))
    result = subprocess.run([sys.executable, "-m", "captioneval.metrics.plugins"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = {line.split("\t")[0]: line.split("\t")[1:] for line in result.stdout.splitlines()}
    assert lines["word_f1"][0] == "available" and "captioneval-example-metric 0.1" in lines["word_f1"][1]
    assert lines["short_count"][0] == "available"  # loads; its bad output is caught when it scores
    assert lines["exploding"] == ["unavailable", "plugin metric 'exploding' from exploding-plugin 1.0 is unavailable: "
                                  "RuntimeError: boom: the model weights are missing"]
    assert "exploding" in result.stderr  # the warning is logged
    bare = subprocess.run([sys.executable, "-m", "captioneval.metrics.plugins"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert bare.stdout.startswith("no plugin metrics installed")


DUPLICATE = """
    from captioneval.metrics.plugins import PluginMetric
    METRIC = dict(key="same_key", name="Same", version="1", score=lambda c, r: [0.0] * len(c))
"""


def test_two_distributions_with_one_key_are_both_refused(tmp_path):
    first = make_distribution(tmp_path / "a", "first-dist", "1.0", "first_dist", DUPLICATE, {"same_key": "first_dist:METRIC"})
    second = make_distribution(tmp_path / "b", "second-dist", "2.0", "second_dist", DUPLICATE, {"same_key": "second_dist:METRIC"})
    with plugins_on_path(first):  # alone, a mapping of PluginMetric fields is accepted
        assert registry.METRICS["same_key"].family == "plugin:first-dist"
    with plugins_on_path(first, second) as found:
        assert not found.loaded and "same_key" not in registry.METRICS
        assert registry.UNAVAILABLE["same_key"] == (
            "plugin metric 'same_key' is registered by first-dist 1.0 and second-dist 2.0; neither is used")


def test_plugin_descriptions_are_validated():
    ok = plugins.PluginMetric("good_one", "Good", "1", lambda c, r: [0.0] * len(c))
    assert ok.validate({"cider_d"}) is ok
    for bad, message in [
        (dict(key="Bad Key"), "not a valid metric key"),
        (dict(key="x" * 51), "not a valid metric key"),
        (dict(name=""), "name must be a non-empty string"),
        (dict(version=""), "version must be a non-empty string"),
        (dict(score="not callable"), "score must be callable"),
        (dict(range=(1.0, 0.0)), "low < high"),
        (dict(range="wide"), "range must be a pair"),
        (dict(higher="more"), "higher must be 'better' or 'worse'"),
        (dict(needs_corpus="yes"), "needs_corpus must be True or False"),
    ]:
        fields = dict(key="good_one", name="Good", version="1", score=ok.score) | bad
        with pytest.raises(plugins.PluginError, match=message):
            plugins.PluginMetric(**fields).validate()
