"""The shared class of the CLIP-family metrics (CLIP-S, RefCLIP-S, PAC-S, RefPAC-S); see
:mod:`captioneval.kernels.learned.clip_score` for the formulas and their sources."""
from __future__ import annotations

import numpy as np

from captioneval.metrics import base
from captioneval.kernels.learned import clip_score as k
from captioneval.kernels.learned.clip_image import N_PX
from captioneval.kernels.learned.models import load_clip, resolve_device

VERSION = "captioneval-clip-score/1"


class ClipFamily(base.Metric):
    """Caption-level ``w * max(cos(image, prefix + caption), 0)`` (and, with ``reference_based``, its
    harmonic mean with the best reference cosine) on any CLIP-family checkpoint.

    Parameters (all in :meth:`parameters`, hence in the signature and the run's identity):
    ``model`` weights spec (OpenAI name, file, folder, Hugging Face name; see
    :func:`captioneval.kernels.learned.models.find_clip_weights`); ``w``; ``prefix``; ``device``
    ("auto": CUDA when present); ``dtype`` ("auto": float16 on CUDA and float32 on CPU when
    ``fp16_on_cuda``, else float32); ``image_batch`` / ``text_batch`` (the reference's 64 / 256);
    ``exif_transpose`` (False, as the reference); ``quick_gelu`` (OpenAI's activation); ``cache`` a
    :class:`~captioneval.kernels.learned.clip_score.FeatureCache` (default: one dict per metric object).
    """

    version = VERSION
    level = "caption"
    family = "clip_score"
    groups = ("learned",)
    accelerator = True
    fp16_on_cuda = True
    reference_based = False

    def __init__(self, model: str = "ViT-B/32", w: float = 2.5, prefix: str = k.PREFIX, device: str = "auto",
                 dtype: str = "auto", image_batch: int = k.IMAGE_BATCH, text_batch: int = k.TEXT_BATCH,
                 exif_transpose: bool = False, quick_gelu: bool = True, cache: k.FeatureCache | None = None,
                 **attributes):
        super().__init__(**attributes)
        self.model, self.w, self.prefix = str(model), float(w), prefix
        self.device_option, self.dtype_option = device, dtype
        self.image_batch, self.text_batch = int(image_batch), int(text_batch)
        self.exif_transpose, self.quick_gelu = bool(exif_transpose), bool(quick_gelu)
        self.cache = cache if cache is not None else k.MemoryFeatureCache()
        self._encoder = None
        low = -self.w if self.reference_based else 0.0
        self.range = (low, self.w)

    # --- the model, loaded on first use -------------------------------------------------------------
    def device(self) -> str:
        """The torch device the metric runs on ("cpu", "cuda"...)."""
        return resolve_device(self.device_option)

    def dtype(self) -> str:
        """"float16" or "float32" (see the class docstring)."""
        if self.dtype_option != "auto":
            return self.dtype_option
        return "float16" if self.fp16_on_cuda and self.device().startswith("cuda") else "float32"

    def encoder(self):
        """The loaded :class:`~captioneval.kernels.learned.models.ClipEncoder` (WeightsMissing if absent)."""
        if self._encoder is None:
            self._encoder = load_clip(self.model, device=self.device(), dtype=self.dtype(), quick_gelu=self.quick_gelu)
        return self._encoder

    def parameters(self) -> dict:
        """Model name, weights sha256 (loads the model), device, dtype, prefix, w, preprocessing,
        tokenizer and batch composition."""
        enc = self.encoder()
        return self.parameters_of(enc.sha256, enc.device, enc.dtype)

    def parameters_of(self, weights_sha256: str | None, device: str, dtype: str) -> dict:
        """:meth:`parameters` for the given weights hash, device and dtype, without loading the model
        (the platform shows a stored run's signature this way)."""
        return {"model": self.model, "weights_sha256": weights_sha256, "device": device, "dtype": dtype,
                "prefix": self.prefix, "w": self.w,
                "preprocess": f"bicubic-short-{N_PX}+centre-crop-round+rgb+openai-mean-std" + ("+exif" if self.exif_transpose else ""),
                "tokenizer": "openai-clip-bpe-16e6/77/eot-kept",
                "batch": f"images:{self.image_batch} distinct,texts:{self.text_batch},references:{self.text_batch} flattened"}

    def model_signature(self) -> str:
        """What identifies an image feature: model, weights hash, device, dtype, preprocessing."""
        enc = self.encoder()
        return f"{self.model}|{enc.sha256}|{enc.device}|{enc.dtype}|{self.exif_transpose}|{self.quick_gelu}|{N_PX}"

    # --- scoring --------------------------------------------------------------------------------------
    def score(self, batch: base.Batch) -> base.Scores:
        """Score ``batch.texts`` (raw captions) against ``batch.images`` (path or bytes per caption) and,
        reference-based, ``batch.reference_texts``. ``values`` float64 (n,); ``raw`` the cosine with the
        image (CLIP-S) or the best reference cosine (Ref variants). Raises ImageErrors naming every image
        that cannot be read, ValueError for missing inputs, WeightsMissing for absent weights."""
        if batch.texts is None or batch.images is None or len(batch.texts) != len(batch.images):
            raise ValueError(f"{self.key} needs one image per caption (Batch.texts and Batch.images)")
        enc = self.encoder()
        imgs = k.image_features(enc, batch.images, self.model_signature(), self.cache, self.image_batch, self.exif_transpose)
        texts = k.text_features(enc, list(batch.texts), self.prefix, self.text_batch)
        per, cand = k.clip_s(imgs, texts, self.w)
        if not self.reference_based:
            return base.Scores(np.asarray(per, dtype=np.float64), raw=np.asarray(per / self.w, dtype=np.float64))
        if batch.reference_texts is None:
            raise ValueError(f"{self.key} needs the reference captions (Batch.reference_texts)")
        refs = k.reference_features(enc, batch.reference_texts, self.prefix, self.text_batch)
        t = k.reference_side(cand, refs)
        return base.Scores(np.asarray(k.harmonic(per, t), dtype=np.float64), raw=np.asarray(t, dtype=np.float64))
