"""The learned metrics in the platform's pipeline (issue 32): CLIP-S, RefCLIP-S, PAC-S and RefPAC-S
computed on a dataset's own pictures, with each picture's features computed once per model and
stored, and BERTScore on its captions and references (:data:`captioneval.metrics.builtin.learned.PIPELINE`,
the ``learned`` extra).

What this module gives :mod:`metrics.pipeline` (which asks it only about metrics it reports learned,
:func:`is_learned`):

* **weights** -- each metric's model spec is ``settings.LEARNED_MODELS[key]`` (or ``compute_metrics
  --model KEY=SPEC``), else the metric's default (OpenAI's ``ViT-B/32``, PAC-S's ``clip_ViT-B-32.pth``,
  BERTScore's ``roberta-large`` folder; BERTScore's layer ``LEARNED_BERT_LAYERS``, default 17 for roberta-large),
  found on local disk only (:func:`local_weights`: a path, or ``$CAPTIONEVAL_MODELS_DIR``, or
  ``~/.cache/clip``); the platform never downloads weights, and a missing file is one line saying
  which file to put where (:func:`weights_problem`);
* **the run's identity** (:func:`run_params`): model spec, the weights file's sha256, device, dtype,
  w, prefix and batch sizes, so runs of other weights or another device are other runs. The device is
  ``settings.LEARNED_DEVICE``, else ``cuda`` when a GPU queue is configured (``CELERY_GPU_QUEUE``),
  else ``cpu``; fp16 on CUDA for CLIP-S and RefCLIP-S as their reference, fp32 otherwise;
* **the queue** (:func:`queue_for`): a metric declaring :attr:`~captioneval.metrics.base.Metric.accelerator`
  goes to ``settings.CELERY_GPU_QUEUE`` when that names a queue (a worker started with ``-Q gpu`` on a
  GPU machine), else to the default queue, on CPU;
* **the metric object of a run** (:func:`metric_for`), built from the run's stored parameters, with a
  :class:`DatabaseFeatureCache` (:class:`metrics.models.ImageFeature` rows keyed by model signature and
  picture sha256);
* **the pictures** (:func:`image_inputs`): a local folder or uploaded files (the dataset's image source,
  :mod:`crowd.images`), or a URL template / the COCO server only for hosts the operator allows
  (``settings.LEARNED_IMAGE_HOSTS``), fetched with ``LEARNED_IMAGE_MAX_BYTES`` and
  ``LEARNED_IMAGE_TIMEOUT`` limits. Every picture that cannot be had or read is reported by its image
  key (:class:`PictureErrors`); no caption is scored without its picture.
"""
from __future__ import annotations

import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from django.conf import settings

from crowd import images as sources
from crowd.kinds.base import CampaignSpecError

from .models import ImageFeature
from captioneval.metrics import base, registry
from captioneval.metrics.builtin.learned import PIPELINE


class PictureErrors(ValueError):
    """Pictures of a dataset that cannot be scored: ``problems`` is a list of (image key, where, cause)."""

    def __init__(self, metric_name: str, problems: list[tuple[str, str, str]]):
        self.problems = problems
        shown = "; ".join(f"image {key!r}: {where}: {cause}" for key, where, cause in problems[:20])
        more = f"; and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"{len(problems)} picture(s) cannot be scored by {metric_name} (no caption is scored "
                         f"without its picture): {shown}{more}")


def is_learned(metric) -> bool:
    """True for the learned metrics the pipeline computes (:data:`PIPELINE`)."""
    return getattr(metric, "key", metric) in PIPELINE


def model_spec(key: str, models: dict | None = None) -> str:
    """The weights spec of learned metric ``key``: ``models[key]``, else ``settings.LEARNED_MODELS[key]``,
    else the metric's default."""
    for table in (models or {}, getattr(settings, "LEARNED_MODELS", {}) or {}):
        if table.get(key):
            return str(table[key])
    return registry.METRICS[key].model


def local_weights(spec: str) -> str | None:
    """The local file or folder of weights ``spec``, never downloading: the path itself, an OpenAI
    name's file (``ViT-B-32.pt``) or the spec under ``$CAPTIONEVAL_MODELS_DIR``, or OpenAI's file in
    ``~/.cache/clip``; for open_clip's names (``hf-hub:<org>/<repo>``, ``ViT-B-32/laion2b_s34b_b79k``)
    the repository's folder under ``$CAPTIONEVAL_MODELS_DIR`` or in the Hugging Face cache. None when
    there is none."""
    from captioneval.kernels.learned.models import (OPENAI_MODELS, WeightsMissing, find_open_clip, models_dir,
                                                    open_clip_repository)

    if os.path.exists(os.path.expanduser(spec)):
        return os.path.expanduser(spec)
    try:
        repo = open_clip_repository(spec)
    except ValueError:
        return None
    if repo is not None:  # open_clip's names: $CAPTIONEVAL_MODELS_DIR or the Hugging Face cache, never the hub
        try:
            return find_open_clip(repo, local_only=True)
        except WeightsMissing:
            return None
    folder = models_dir()
    names = [OPENAI_MODELS[spec].rsplit("/", 1)[1]] if spec in OPENAI_MODELS else [spec]
    places = ([folder] if folder else []) + ([Path("~/.cache/clip").expanduser()] if spec in OPENAI_MODELS else [])
    for place in places:
        for name in names:
            if (place / name).exists():
                return str(place / name)
    return None


def weights_problem(key: str, models: dict | None = None) -> str | None:
    """One line saying which weights file to put where, or None when ``key``'s weights are on disk."""
    spec = model_spec(key, models)
    if local_weights(spec) is not None:
        return None
    from captioneval.kernels.learned.models import MODELS_DIR_ENV, OPENAI_MODELS

    name = OPENAI_MODELS[spec].rsplit("/", 1)[1] if spec in OPENAI_MODELS else spec
    return (f"{registry.METRICS[key].name} needs its weights {name}, which are not on this server: put them in "
            f"${MODELS_DIR_ENV} or name it in LEARNED_MODELS ({key}=/path/to/{Path(name).name})")


def wants_pictures(metric) -> bool:
    """True for the learned metrics that score a caption against its picture (the CLIP family)."""
    return base.IMAGES in getattr(metric, "needs", ())


def device() -> str:
    """The torch device of new learned-metric runs (see the module docstring)."""
    configured = getattr(settings, "LEARNED_DEVICE", "") or ""
    if configured:
        return configured
    return "cuda" if getattr(settings, "CELERY_GPU_QUEUE", "") else "cpu"


def queue_for(metric) -> str | None:
    """The Celery queue of ``metric``'s tasks: ``settings.CELERY_GPU_QUEUE`` for a metric that wants an
    accelerator when that names a queue, else None (the default queue)."""
    queue = getattr(settings, "CELERY_GPU_QUEUE", "") or ""
    return queue if queue and getattr(metric, "accelerator", False) else None


def bert_options() -> dict:
    """BERTScore's settings: ``num_layers`` (``LEARNED_BERT_LAYERS``; None: roberta-large's 17) and
    ``batch_size`` (``LEARNED_BERT_BATCH``, the reference's 64)."""
    layers = getattr(settings, "LEARNED_BERT_LAYERS", None)
    return {"num_layers": int(layers) if layers not in (None, "") else None,
            "batch_size": int(getattr(settings, "LEARNED_BERT_BATCH", 64))}


def run_params(key: str, models: dict | None = None) -> dict:
    """The parameters of a learned run beside the pipeline's own (see the module docstring): ``model``,
    ``weights_sha256``, ``device``, ``dtype``, and for the CLIP family ``w``, ``prefix``, ``image_batch``,
    ``text_batch``, ``exif_transpose``; for BERTScore ``num_layers``, ``batch_size``, ``idf`` (False),
    ``rescale`` (False), ``output`` ("f1"). Raises FileNotFoundError (:func:`weights_problem`'s line)
    without local weights, ValueError for a BERTScore model without ``LEARNED_BERT_LAYERS``."""
    from captioneval.kernels.learned.models import weights_sha256

    spec = model_spec(key, models)
    path = local_weights(spec)
    if path is None:
        raise FileNotFoundError(weights_problem(key, models))
    if not wants_pictures(registry.METRICS[key]):
        metric = type(registry.METRICS[key])(model=spec, device=device(), **bert_options())
        return {"model": spec, "weights_sha256": weights_sha256(path), "device": metric.device_option,
                "dtype": metric.dtype, "num_layers": metric.num_layers, "batch_size": metric.batch_size,
                "idf": metric.idf, "rescale": metric.rescale, "output": metric.output}
    metric = type(registry.METRICS[key])(model=spec, device=device())
    return {"model": spec, "weights_sha256": weights_sha256(path), "device": metric.device_option,
            "dtype": metric.dtype(), "w": metric.w, "prefix": metric.prefix,
            "image_batch": int(settings.LEARNED_IMAGE_BATCH), "text_batch": int(settings.LEARNED_TEXT_BATCH),
            "exif_transpose": metric.exif_transpose}


#: run identity -> the metric object this process built for it (models stay loaded between chunks)
_objects: dict[tuple, base.Metric] = {}


def metric_for(run) -> base.Metric:
    """The metric object of learned run ``run`` (a :class:`metrics.models.MetricRun`), built from its
    stored parameters once per process, with a :class:`DatabaseFeatureCache`. Its weights are looked
    up where this worker finds them (:func:`local_weights`, else the spec as given); a file whose sha256
    is not the run's is refused (FileNotFoundError)."""
    from captioneval.kernels.learned.models import weights_sha256

    ident = (run.metric, run.version, run.params_key)
    if ident not in _objects:
        p = run.params
        path = local_weights(p["model"])
        if path is None or weights_sha256(path) != p["weights_sha256"]:
            found = "not found" if path is None else f"{path} has another sha256"
            raise FileNotFoundError(f"the weights of run {run.pk} ({p['model']}, sha256 {p['weights_sha256']}) are "
                                    f"not on this worker ({found}): put that file in $CAPTIONEVAL_MODELS_DIR")
        cls = type(registry.METRICS[run.metric])
        if not wants_pictures(registry.METRICS[run.metric]):
            _objects[ident] = cls(model=p["model"], num_layers=p["num_layers"], device=p["device"], dtype=p["dtype"],
                                  batch_size=p["batch_size"], idf=p["idf"], rescale=p["rescale"], output=p["output"])
            return _objects[ident]
        _objects[ident] = cls(model=p["model"], w=p["w"], prefix=p["prefix"], device=p["device"], dtype=p["dtype"],
                              image_batch=p["image_batch"], text_batch=p["text_batch"],
                              exif_transpose=p["exif_transpose"], cache=DatabaseFeatureCache())
    return _objects[ident]


def signature_string(run) -> str:
    """The sacrebleu-style signature of learned run ``run`` (as the metric's ``signature_string``: name,
    version, level, model, weights sha256, device, dtype, prefix, w, preprocessing, tokenizer, batches),
    from its stored parameters, without loading the model (BERTScore: its stored parameters in that
    form, without the tokenizer's and transformers' versions that its loaded signature adds)."""
    p = run.params
    if not wants_pictures(registry.METRICS[run.metric]):
        name = registry.METRICS[run.metric].name
        rest = [f"{k}:{p[k]}" for k in ("model", "weights_sha256", "num_layers", "idf", "rescale", "batch_size",
                                        "device", "dtype", "output")]
        return "|".join([name, f"v:{run.version}", "level:caption", *rest])
    metric = type(registry.METRICS[run.metric])(model=p["model"], w=p["w"], prefix=p["prefix"], device=p["device"],
                                                dtype=p["dtype"], image_batch=p["image_batch"],
                                                text_batch=p["text_batch"], exif_transpose=p["exif_transpose"])
    rest = metric.parameters_of(p["weights_sha256"], p["device"], p["dtype"])
    return "|".join([metric.name, f"v:{run.version}", f"level:{metric.level}", *[f"{k}:{v}" for k, v in rest.items()]])


class DatabaseFeatureCache:
    """The platform's :class:`captioneval.kernels.learned.clip_score.FeatureCache`: image features in
    :class:`metrics.models.ImageFeature` rows (shared by every worker and run), with this process's
    dict in front."""

    def __init__(self):
        self.memory: dict[str, np.ndarray] = {}

    def get(self, key: str) -> np.ndarray | None:
        if key in self.memory:
            return self.memory[key]
        row = ImageFeature.objects.filter(key=key).values_list("dtype", "dim", "vector").first()
        if row is None:
            return None
        dtype, dim, vector = row
        value = np.frombuffer(bytes(vector), dtype=dtype).copy()
        if value.shape != (dim,):
            return None  # not what was stored: encoded again
        self.memory[key] = value
        return value

    def put(self, key: str, value: np.ndarray) -> None:
        value = np.ascontiguousarray(value)
        self.memory[key] = value
        ImageFeature.objects.bulk_create([ImageFeature(key=key, dtype=str(value.dtype), dim=int(value.shape[0]),
                                                       vector=value.tobytes())], ignore_conflicts=True)


# --- pictures ----------------------------------------------------------------------------------------------
def images_problem(dataset) -> str | None:
    """Why the learned metrics cannot have ``dataset``'s pictures (no image source; a URL source whose
    host the operator does not allow), or None."""
    try:
        source = sources.source_for(dataset)
    except sources.ImageSourceError as exc:
        return f"its image source is not valid: {exc}"
    if source is None:
        return (f"needs the pictures and {dataset.name} has no image source: manage.py set_image_source "
                f"--dataset {dataset.name} --images-dir DIR")
    if source.kind in (sources.URL, sources.COCO):
        host = _host_of(source)
        if host not in allowed_hosts():
            return (f"needs the pictures, which {dataset.name} has on {host}, a host not in LEARNED_IMAGE_HOSTS "
                    "(pictures are fetched only from hosts the operator allows)")
    return None


def allowed_hosts() -> set[str]:
    """``settings.LEARNED_IMAGE_HOSTS`` as a set of lower-case host names."""
    return {h.lower() for h in getattr(settings, "LEARNED_IMAGE_HOSTS", []) or []}


def _host_of(source) -> str:
    url = source.BASE if source.kind == sources.COCO else source.template
    return (urllib.parse.urlsplit(url.replace("{key}", "x")).hostname or "").lower()


def fetch(url: str) -> bytes:
    """The bytes at ``url`` from an allowed host (:func:`allowed_hosts`), at most
    ``settings.LEARNED_IMAGE_MAX_BYTES``, the whole request within ``settings.LEARNED_IMAGE_TIMEOUT``
    seconds (also each connect and read); redirects are followed only to allowed hosts. Raises OSError
    (TimeoutError past the time limit; ValueError for a host that is not allowed, a response too large)
    saying why."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if urllib.parse.urlsplit(url).scheme not in ("http", "https") or host not in allowed_hosts():
        raise ValueError(f"host {host!r} is not in LEARNED_IMAGE_HOSTS")
    limit = int(settings.LEARNED_IMAGE_MAX_BYTES)

    class AllowedRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, req, fp, code, msg, headers, newurl):
            target = (urllib.parse.urlsplit(newurl).hostname or "").lower()
            if target not in allowed_hosts():
                raise ValueError(f"redirected to host {target!r}, which is not in LEARNED_IMAGE_HOSTS")
            return super().redirect_request(req, fp, code, msg, headers, newurl)

    timeout = float(settings.LEARNED_IMAGE_TIMEOUT)
    deadline = time.monotonic() + timeout
    opener = urllib.request.build_opener(AllowedRedirects)
    with opener.open(urllib.request.Request(url, headers={"User-Agent": "captioneval"}), timeout=timeout) as response:
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise ValueError(f"{declared} bytes, more than LEARNED_IMAGE_MAX_BYTES ({limit})")
        data = bytearray()
        while len(data) <= limit:  # the whole request within the time limit, not only each read
            block = response.read(min(1 << 16, limit + 1 - len(data)))
            if not block:
                break
            data += block
            if time.monotonic() > deadline:
                raise TimeoutError(f"not received within LEARNED_IMAGE_TIMEOUT ({timeout:g} s)")
    if len(data) > limit:
        raise ValueError(f"more than LEARNED_IMAGE_MAX_BYTES ({limit}) bytes")
    return bytes(data)


def local_file(source, key: str) -> Path | None:
    """The file of image ``key`` in a local source (folder, uploads): ``source.file(key)`` (the rater
    pages' rule: no climbing out of the folder), else the key with one of the picture extensions
    (``974`` -> ``974.jpg``, for keys that are ids such as COCO's). None when there is none."""
    found = source.file(key)
    if found is None and Path(key).suffix.lower() not in sources.IMAGE_TYPES:
        for ext in sources.IMAGE_TYPES:
            found = source.file(key + ext)
            if found is not None:
                break
    return found


def missing_pictures(dataset, keys, limit: int = 20) -> tuple[int, list[str]]:
    """For a local source: how many of image ``keys`` have no file (:func:`local_file`), and the first
    ``limit``; ``(0, [])`` for other sources (fetched when scored)."""
    source = sources.source_for(dataset)
    if source is None or source.kind not in (sources.FOLDER, sources.UPLOAD):
        return 0, []
    missing = [k for k in keys if local_file(source, k) is None]
    return len(missing), missing[:limit]


def image_inputs(dataset, image_ids, metric_name: str) -> dict[int, str | bytes]:
    """image id -> the picture's file path (local folder, uploads) or bytes (fetched from an allowed
    host) for each of ``image_ids``. Raises :class:`PictureErrors` naming every picture that cannot be
    had (no file, a host not allowed, a fetch that failed or was too large), or ValueError when the
    dataset has no usable image source (:func:`images_problem`)."""
    from crowd.models import Image

    problem = images_problem(dataset)
    if problem:
        raise ValueError(f"{metric_name} {problem}")
    source = sources.source_for(dataset)
    keys = dict(Image.objects.filter(pk__in=set(image_ids)).values_list("id", "key"))
    out, problems = {}, []
    for image_id in sorted(keys):
        key = keys[image_id]
        if source.kind in (sources.FOLDER, sources.UPLOAD):
            path = local_file(source, key)
            if path is None:
                problems.append((key, str(source.directory / key), "no such picture file in the image folder"))
            else:
                out[image_id] = str(path)
            continue
        try:
            url = source.url(dataset, key)
        except (sources.ImageSourceError, CampaignSpecError) as exc:
            problems.append((key, source.describe(), str(exc)))
            continue
        try:
            out[image_id] = fetch(url)
        except (OSError, ValueError, urllib.error.URLError) as exc:
            problems.append((key, url, f"{type(exc).__name__}: {exc}"))
    if problems:
        raise PictureErrors(metric_name, problems)
    return out
