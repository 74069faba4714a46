"""The learned metrics in the platform's pipeline (metrics/learned.py), in-process on the test database:
a dataset imported with ``import_coco`` and given a local picture folder (``set_image_source``),
scored with CLIP-S / RefCLIP-S / PAC-S on the tiny seeded CLIP of tests/learned_models.py (a local
weights file: ``--model`` and ``LEARNED_MODELS``) and six pictures generated from a fixed seed.

The stored scores are the library's (which equal the reference code's, test_learned_clip.py); each
picture's features are computed once per model and stored (ImageFeature), so a second run with the same
model encodes no picture; missing and unreadable pictures are errors naming each image key; runs of
metrics that want an accelerator go to CELERY_GPU_QUEUE when it is set; pictures from URLs only from
allowed hosts, with a size limit."""
from __future__ import annotations

import http.server
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from django.core.management.base import CommandError

from crowd.models import Dataset
from metrics import jobs, learned, pipeline, tasks
from metrics.models import ImageFeature, MetricRun, MetricScore
from tests import learned_models as lm

from .conftest import run_command

#: six image ids, two systems: a handful of captions
CAPTIONS = {
    "model_a": ["A dog runs on the grass .", "Two children play in the snow .", "A man rides a bike .",
                "A black dog jumps .", "A girl in a pink dress .", "People walk down a street ."],
    "model_b": ["A cat sleeps .", "A boy in the snow .", "A cyclist on a road .", "A dog in the water .",
                "A child climbs stairs .", "A busy city street ."],
}


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    lm.offline(monkeypatch, tmp_path)
    learned._objects.clear()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-clip-pipeline")
    return {"weights": lm.write_tiny_clip(root / "models"), "images": lm.write_tiny_images(root / "generated")}


def picture_folder(tiny, folder: Path) -> Path:
    """Pictures named by image id (1.png, 2.jpg, ...), as a COCO dataset's keys are ids."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(6):
        src = tiny["images"][i]
        shutil.copy(src, folder / f"{i + 1}{src.suffix}")
    return folder


def coco_files(folder: Path) -> list[str]:
    refs = lm.flickr8k_captions(30)
    ann = {"images": [{"id": i + 1, "file_name": f"{i + 1}.png"} for i in range(6)],
           "annotations": [{"id": 10 * i + k, "image_id": i + 1, "caption": refs[5 * i + k]} for i in range(6)
                           for k in range(5)]}
    (folder / "captions.json").write_text(json.dumps(ann), "utf-8")
    args = ["--annotations", str(folder / "captions.json")]
    for system, caps in CAPTIONS.items():
        (folder / f"{system}.json").write_text(json.dumps([{"image_id": i + 1, "caption": c} for i, c in enumerate(caps)]))
        args += ["--results", f"{system}={folder / f'{system}.json'}"]
    return args


@pytest.fixture
def dataset(tiny, tmp_path, settings):
    settings.LEARNED_MODELS = {"pac_s": str(tiny["weights"]["pac"]), "ref_pac_s": str(tiny["weights"]["pac"])}
    settings.CELERY_GPU_QUEUE = ""
    settings.LEARNED_DEVICE = ""
    run_command("import_coco", "--name", "pictures", *coco_files(tmp_path))
    run_command("set_image_source", "pictures", "--images-dir", str(picture_folder(tiny, tmp_path / "pictures")))
    return Dataset.objects.get(name="pictures")


def library_scores(tiny, tmp_path, key="clip_s", kind="openai") -> dict[str, float]:
    """caption text -> the library's score of it (captioneval.evaluate with the same pictures)."""
    import captioneval

    folder = tmp_path / "pictures"
    texts = [c for caps in CAPTIONS.values() for c in caps]
    pictures = [next(folder.glob(f"{i % 6 + 1}.*")) for i in range(12)]
    refs = lm.flickr8k_captions(30)
    references = [refs[5 * (i % 6):5 * (i % 6) + 5] for i in range(12)]
    result = captioneval.evaluate(texts, references, metrics=[key], images=pictures,
                                  options={key: {"model": str(tiny["weights"][kind]), "device": "cpu"}})
    return dict(zip(texts, result.scores[key].tolist()))


def stored(run: MetricRun) -> dict[str, float]:
    return dict(MetricScore.objects.filter(run=run).values_list("caption__text", "value"))


@pytest.mark.django_db
def test_clip_s_on_a_local_picture_folder_features_once(dataset, tiny, tmp_path, monkeypatch):
    from captioneval.kernels.learned.models import ClipEncoder

    encoded = []
    original = ClipEncoder.encode_images
    monkeypatch.setattr(ClipEncoder, "encode_images", lambda self, px: (encoded.append(len(px)), original(self, px))[1])
    out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--model",
                      f"clip_s={tiny['weights']['openai']}", "--wait")
    assert "clip_s: done, 12/12 scores" in out
    run = MetricRun.objects.get(metric="clip_s")
    assert run.params["model"] == str(tiny["weights"]["openai"]) and run.params["device"] == "cpu"
    assert run.params["dtype"] == "float32" and len(run.params["weights_sha256"]) == 64
    # the signature the reports show, from the stored parameters, is the loaded metric's own
    assert learned.signature_string(run) == learned.metric_for(run).signature_string()
    assert f"weights_sha256:{run.params['weights_sha256']}" in learned.signature_string(run)
    assert sum(encoded) == 6 and ImageFeature.objects.count() == 6  # each picture once, for both systems
    # RefCLIP-S on the same weights: no picture is encoded again, only texts
    out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "ref_clip_s", "--model",
                      f"ref_clip_s={tiny['weights']['openai']}", "--wait")
    assert "ref_clip_s: done, 12/12 scores" in out and sum(encoded) == 6 and ImageFeature.objects.count() == 6
    # PAC-S from LEARNED_MODELS: another model, its own features
    out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "pac_s", "--wait")
    assert "pac_s: done, 12/12 scores" in out and sum(encoded) == 12 and ImageFeature.objects.count() == 12
    # the stored scores are the library's (hence the reference code's)
    for key, kind in (("clip_s", "openai"), ("ref_clip_s", "openai"), ("pac_s", "pac")):
        got, expected = stored(MetricRun.objects.get(metric=key)), library_scores(tiny, tmp_path, key, kind)
        assert set(got) == set(expected) and max(abs(got[t] - expected[t]) for t in got) <= 1e-6, key


@pytest.mark.django_db
def test_missing_and_unreadable_pictures_are_named(dataset, tiny, tmp_path):
    folder = tmp_path / "pictures"
    for path in folder.glob("4.*"):
        path.unlink()
    with pytest.raises(CommandError, match=r"CLIP-S needs every picture, and 1 of the 6 pictures of 'pictures' are "
                                           r"not in its image folder: '4'"):
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--model",
                    f"clip_s={tiny['weights']['openai']}", "--wait")
    (folder / "4.png").write_text("not a picture")
    (next(folder.glob("5.*"))).write_bytes(b"\x89PNG\r\n\x1a\n broken")
    with pytest.raises(CommandError) as err:
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--model",
                    f"clip_s={tiny['weights']['openai']}", "--wait")
    run = MetricRun.objects.get(metric="clip_s")
    assert run.status == MetricRun.FAILED
    assert "2 picture(s) cannot be scored by CLIP-S" in run.error
    assert "image '4': " in run.error and "image '5': " in run.error and "not a readable image" in run.error
    assert "did not finish" in str(err.value)
    # weights that are not on disk: one line saying what to put where, nothing recorded
    with pytest.raises(CommandError, match="PAC-S needs its weights"):
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "pac_s", "--model",
                    f"pac_s={tmp_path / 'absent.pth'}")
    assert not MetricRun.objects.filter(metric="pac_s").exists()


@pytest.mark.django_db
def test_accelerator_metrics_go_to_the_gpu_queue_when_one_is_configured(dataset, tiny, settings, monkeypatch):
    sent = []
    monkeypatch.setattr(tasks.start_run, "apply_async", lambda args, **kw: sent.append(("apply_async", args, kw)))
    monkeypatch.setattr(tasks.start_run, "delay", lambda *args: sent.append(("delay", args, {})))
    settings.LEARNED_MODELS = {"clip_s": str(tiny["weights"]["openai"])}
    settings.CELERY_GPU_QUEUE = "gpu"
    run, bleu = pipeline.plan_runs("pictures", ["clip_s", "bleu_4"])
    assert run.params["device"] == "cuda" and run.params["dtype"] == "float16"  # fp16 on CUDA as the reference
    tasks.start_runs([run, bleu])
    assert sent == [("apply_async", (run.pk,), {"queue": "gpu"}), ("delay", (bleu.pk,), {})]
    # without a GPU queue: the default queue, on CPU (another run: the device is in its identity)
    settings.CELERY_GPU_QUEUE = ""
    sent.clear()
    cpu_run = pipeline.plan_runs("pictures", ["clip_s"])[0]
    assert cpu_run.pk != run.pk and cpu_run.params["device"] == "cpu" and cpu_run.params["dtype"] == "float32"
    tasks.start_runs([cpu_run])
    assert sent == [("delay", (cpu_run.pk,), {})]
    # LEARNED_DEVICE overrides; batch sizes are settings too, stored with the run
    settings.LEARNED_DEVICE, settings.LEARNED_IMAGE_BATCH = "cpu", 2
    small = pipeline.plan_runs("pictures", ["clip_s"])[0]
    assert small.params["image_batch"] == 2 and small.pk not in (run.pk, cpu_run.pk)


@pytest.mark.django_db
def test_the_compute_form_offers_them_with_names_and_reasons(dataset, tiny, settings):
    settings.LEARNED_MODELS = {"clip_s": str(tiny["weights"]["openai"])}
    offered, refused = jobs.metric_choices(dataset)
    names = {m["key"]: m["name"] for m in offered + refused}
    assert {"clip_s": "CLIP-S", "ref_clip_s": "RefCLIP-S", "pac_s": "PAC-S", "ref_pac_s": "RefPAC-S",
            "bert_score": "BERTScore"}.items() <= names.items()
    assert "clip_s" in {m["key"] for m in offered}
    reasons = {m["key"]: m["reason"] for m in refused}
    assert reasons["ref_clip_s"].startswith("needs its weights ViT-B-32.pt, which are not on this server")
    assert reasons["bert_score"].startswith("needs its weights roberta-large, which are not on this server")
    # the dataset page, as staff: the form offers CLIP-S by its name, the others with their reasons
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(User.objects.create_user("staff-page", password="pw", is_staff=True))
    html = client.get(reverse("analysis:dataset", args=["pictures"])).content.decode()
    assert 'value="clip_s"' in html and 'value="ref_clip_s"' not in html
    assert '<li data-metric="ref_clip_s">RefCLIP-S: needs its weights ViT-B-32.pt' in html
    assert '<li data-metric="bert_score">BERTScore: needs its weights roberta-large' in html
    assert "BERT_SCORE" not in html and "CLIP_S" not in html
    dataset.image_source, dataset.image_location = "", ""
    dataset.save()
    offered, refused = jobs.metric_choices(dataset)
    assert "clip_s" not in {m["key"] for m in offered}
    assert {m["key"]: m["reason"] for m in refused}["clip_s"].startswith("needs the pictures and pictures has no image source")
    # RefCLIP-S needs the references (raw), CLIP-S does not
    dataset.reference_system = None
    dataset.save()
    with pytest.raises(pipeline.PipelineError) as err:
        pipeline.plan_runs("pictures", ["ref_clip_s"], models={"ref_clip_s": str(tiny["weights"]["openai"])})
    assert str(err.value) == "RefCLIP-S needs reference captions and dataset 'pictures' has none"
    offered, refused = jobs.metric_choices(dataset)
    assert {m["key"]: m["reason"] for m in refused}["ref_clip_s"] == "needs reference captions and pictures has none"


class _Pictures(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):  # noqa: N802
        if self.path.startswith("/slow"):
            threading.Event().wait(3)  # far past the test's 0.3 s limit
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.mark.django_db
def test_url_pictures_only_from_allowed_hosts_with_a_size_limit(dataset, tiny, settings):
    _Pictures.body = tiny["images"][0].read_bytes()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pictures)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_command("set_image_source", "pictures", "--image-url", f"http://127.0.0.1:{server.server_port}/{{key}}.png")
        dataset.refresh_from_db()
        settings.LEARNED_IMAGE_HOSTS = []
        assert "127.0.0.1, a host not in LEARNED_IMAGE_HOSTS" in learned.images_problem(dataset)
        with pytest.raises(pipeline.PipelineError, match="not in LEARNED_IMAGE_HOSTS"):
            pipeline.plan_runs("pictures", ["clip_s"], models={"clip_s": str(tiny["weights"]["openai"])})
        with pytest.raises(ValueError, match="not in LEARNED_IMAGE_HOSTS"):
            learned.fetch(f"http://127.0.0.1:{server.server_port}/1.png")
        settings.LEARNED_IMAGE_HOSTS = ["127.0.0.1"]
        ids = list(dataset.images.order_by("id").values_list("id", flat=True))
        got = learned.image_inputs(dataset, ids[:2], "CLIP-S")
        assert got == {ids[0]: _Pictures.body, ids[1]: _Pictures.body}
        settings.LEARNED_IMAGE_MAX_BYTES = 100
        with pytest.raises(learned.PictureErrors) as err:
            learned.image_inputs(dataset, ids[:2], "CLIP-S")
        assert len(err.value.problems) == 2 and "more than LEARNED_IMAGE_MAX_BYTES (100)" in str(err.value)
        # a host that does not answer in time: the fetch gives up (LEARNED_IMAGE_TIMEOUT)
        settings.LEARNED_IMAGE_MAX_BYTES, settings.LEARNED_IMAGE_TIMEOUT = 10**6, 0.3
        with pytest.raises(OSError, match="timed out"):
            learned.fetch(f"http://127.0.0.1:{server.server_port}/slow.png")
    finally:
        server.shutdown()


@pytest.mark.django_db
def test_the_rest_api_computes_and_lists_them(dataset, tiny, settings, monkeypatch):
    from django.contrib.auth.models import User
    from django.test import Client

    settings.LEARNED_MODELS = {"clip_s": str(tiny["weights"]["openai"])}
    monkeypatch.setattr(jobs, "in_background", lambda target, *args: target(*args))  # in this test's transaction
    User.objects.create_user("api-staff", password="pw", is_staff=True)
    token = run_command("api_token", "create", "--user", "api-staff").strip().splitlines()[-1]
    headers = {"HTTP_AUTHORIZATION": f"Token {token}"}
    client = Client()
    refused = client.post("/api/runs/", {"dataset": "pictures", "metrics": ["ref_clip_s"]},
                          content_type="application/json", **headers)
    assert refused.status_code == 400 and "not offered" in refused.content.decode()  # its weights are not here
    answer = client.post("/api/runs/", {"dataset": "pictures", "metrics": ["clip_s"]}, content_type="application/json",
                         **headers)
    assert answer.status_code == 202, answer.content
    run_id = answer.json()["runs"][0]["id"]
    detail = client.get(f"/api/runs/{run_id}/", **headers).json()
    assert detail["metric"] == "clip_s" and detail["status"] == "done" and detail["params"]["device"] == "cpu"
    scores = client.get(f"/api/runs/{run_id}/scores/", **headers).json()
    assert scores["count"] == 12 and all(0 <= row["value"] <= 2.5 for row in scores["results"])
    listed = client.get("/api/runs/?dataset=pictures&metric=clip_s", **headers).json()
    assert [r["id"] for r in listed["results"]] == [run_id]


@pytest.mark.django_db
def test_uploaded_pictures_are_read_like_a_folder(dataset, tiny, settings, tmp_path):
    from crowd import images as sources

    settings.IMAGES_ROOT = str(tmp_path / "uploads")
    run_command("set_image_source", "pictures", "--uploads")
    dataset.refresh_from_db()
    picture_folder(tiny, sources.upload_dir("pictures"))
    ids = dict(dataset.images.values_list("key", "id"))
    got = learned.image_inputs(dataset, [ids["1"], ids["2"]], "CLIP-S")
    assert got[ids["1"]] == str((sources.upload_dir("pictures") / f"1{tiny['images'][0].suffix}").resolve())
    assert learned.missing_pictures(dataset, list(ids)) == (0, [])
    run = pipeline.plan_runs("pictures", ["clip_s"], models={"clip_s": str(tiny["weights"]["openai"])})[0]
    assert run.total == 12


@pytest.mark.django_db
def test_bert_score_on_the_captions_and_references(dataset, tiny, tmp_path, settings):
    """BERTScore on the tiny seeded RoBERTa (a Hugging Face folder, layer 2): no picture needed; the
    stored F1 is the library's (which equals bert_score.score, tests/test_learned_bertscore.py)."""
    from captioneval.metrics.base import Batch
    from captioneval.metrics.learned.bert_score import BertScore

    folder = lm.write_tiny_roberta(tmp_path / "models" / "tiny-roberta")
    settings.LEARNED_MODELS = {"bert_score": str(folder)}
    with pytest.raises(CommandError, match="num_layers is required"):  # a model other than roberta-large
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "bert_score")
    settings.LEARNED_BERT_LAYERS = "2"
    dataset.image_source, dataset.image_location = "", ""  # BERTScore needs no picture
    dataset.save()
    assert "bert_score" in {m["key"] for m in jobs.metric_choices(dataset)[0]}
    out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "bert_score", "--wait")
    assert "bert_score: done, 12/12 scores" in out
    run = MetricRun.objects.get(metric="bert_score")
    assert run.params["num_layers"] == 2 and run.params["batch_size"] == 64 and run.params["idf"] is False
    assert learned.signature_string(run).startswith(f"BERTScore|v:{run.version}|level:caption|model:{folder}|")
    texts = [c for caps in CAPTIONS.values() for c in caps]
    refs = lm.flickr8k_captions(30)
    expected = BertScore(model=str(folder), num_layers=2, device="cpu").score(
        Batch(texts=texts, reference_texts=[refs[5 * (i % 6):5 * (i % 6) + 5] for i in range(12)])).values
    got = stored(run)
    assert max(abs(got[t] - e) for t, e in zip(texts, expected)) <= 1e-6
    assert ImageFeature.objects.count() == 0


@pytest.mark.django_db
def test_an_open_clip_name_from_the_hugging_face_cache(dataset, tmp_path):
    """The platform takes open_clip's names too, from the Hugging Face cache only (never the hub):
    the run names the model as given and scores every caption; a name not in the cache is refused at
    once with the line saying what to put where."""
    from .test_learned_open_clip import REPO, open_clip_config, write_hub_cache

    folder = write_hub_cache(tmp_path / "hf", REPO, open_clip_config())
    assert learned.local_weights(f"hf-hub:{REPO}") == str(folder)
    out = run_command("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--model",
                      f"clip_s=hf-hub:{REPO}", "--wait")
    assert "clip_s: done, 12/12 scores" in out
    run = MetricRun.objects.get(metric="clip_s")
    assert run.params["model"] == f"hf-hub:{REPO}" and len(run.params["weights_sha256"]) == 64
    assert learned.signature_string(run) == learned.metric_for(run).signature_string()  # config in the identity
    assert learned.local_weights("hf-hub:test-org/not-cached") is None
    assert learned.local_weights("hf-hub:not a name") is None
    with pytest.raises(CommandError, match="not-cached"):
        run_command("compute_metrics", "--dataset", "pictures", "--metric", "clip_s", "--model",
                    "clip_s=hf-hub:test-org/not-cached", "--wait")


@pytest.mark.django_db
def test_learned_metrics_in_the_benchmark_report_and_the_comparison(tiny, subset_dir, tmp_path):
    """A learned run is a metric like the others in every report: CLIP-S of the tiny model on a
    40-image Flickr8k-Expert subset (generated JPEG pictures under the images' keys) appears in the
    benchmark report with scipy's Kendall tau-c of its stored scores against the expert ratings, in
    the cross-benchmark comparison, and in the `correlate` table, by its name."""
    import scipy.stats as st

    from analysis.benchmarks import benchmark_report, comparison

    from .test_benchmarks import rows_by_hand

    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    ds = Dataset.objects.get(name="sub")
    jpegs = [p for p in tiny["images"] if p.suffix == ".jpg"]
    folder = tmp_path / "expert-pictures"
    folder.mkdir()
    for i, key in enumerate(sorted(ds.images.values_list("key", flat=True))):
        shutil.copy(jpegs[i % len(jpegs)], folder / key)
    run_command("set_image_source", "sub", "--images-dir", str(folder))
    out = run_command("compute_metrics", "--dataset", "sub", "--metric", "clip_s", "cider_d", "--model",
                      f"clip_s={tiny['weights']['openai']}", "--wait")
    assert "clip_s: done" in out and "cider_d: done" in out
    report = benchmark_report("sub", n_resamples=20, n_permutations=20)
    assert set(report["metrics"]) == {"clip_s", "cider_d"} and report["metrics"]["clip_s"]["name"] == "CLIP-S"
    x, y, *_ = rows_by_hand(ds, "clip_s")
    assert len(x) > 200 and np.ptp(x) > 0
    assert report["metrics"]["clip_s"]["item"]["values"]["kendall_tau_c"] == pytest.approx(
        st.kendalltau(x, y, variant="c").statistic, abs=1e-12)
    matrix = comparison(["sub"], n_resamples=0, n_permutations=20)
    assert {r["metric"]: r["name"] for r in matrix["rows"]}["clip_s"] == "CLIP-S"
    table = run_command("correlate", "--dataset", "sub", "--resamples", "0", "--permutations", "0")
    assert any(line.startswith("CLIP-S") for line in table.splitlines())
