# The arithmetic of CLIP-S and RefCLIP-S below follows jmhessel/clipscore's clipscore.py
# (https://github.com/jmhessel/clipscore, commit 1036465276513621f77f1c2208d742e4a430781f:
# get_clip_score, get_refonlyclipscore and main's harmonic mean) step by step, under its licence:
#
#   MIT License
#
#   Copyright (c) 2021 Jack Hessel, Ari Holtzman, Maxwell Forbes, Ronan Le Bras, Yejin Choi
#
#   Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
#   associated documentation files (the "Software"), to deal in the Software without restriction,
#   including without limitation the rights to use, copy, modify, merge, publish, distribute,
#   sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
#   furnished to do so, subject to the following conditions:
#
#   The above copyright notice and this permission notice shall be included in all copies or
#   substantial portions of the Software.
#
#   THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
#   NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
#   NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
#   DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT
#   OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""CLIP-S and RefCLIP-S (Hessel et al. 2021, "CLIPScore: A Reference-free Evaluation Metric for Image
Captioning", EMNLP) and PAC-S / RefPAC-S (Sarto et al. 2023, "Positive-Augmented Contrastive Learning
for Image and Video Captioning Evaluation", CVPR; same arithmetic, w = 2, PAC-S weights), with image
features computed once per (model signature, image content hash) through a :class:`FeatureCache`.

Formulas (as the reference code computes them; numpy in the features' dtype):

* normalise: ``x / sqrt(sum(x**2, axis=1))`` (the numpy >= 1.21 branch of clipscore.py);
* CLIP-S = ``w * max(cos(image, "A photo depicts " + caption), 0)``, w = 2.5 (CLIP-S) or 2.0 (PAC-S);
  range [0, w];
* reference side = ``max_r cos(c, r)`` over the caption's references, where the candidate features are
  normalised twice (the reference passes the already normalised features of get_clip_score to
  get_refonlyclipscore, which normalises again) -- NOT clipped at 0;
* RefCLIP-S = ``2 * s * t / (s + t)`` with s = CLIP-S and t the reference side. The paper (Eq. 2)
  defines H-Mean(CLIP-S, max(max_r cos(c, r), 0)); the code neither clips t at 0 nor rescales it by w,
  so RefCLIP-S can be negative or undefined (NaN when s + t = 0) where the paper's is not. We follow
  the code.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from captioneval.kernels.learned.clip_image import ImageError, ImageErrors, ImageSource, load_image
from captioneval.kernels.learned.clip_text import clip_tokenizer

PREFIX = "A photo depicts "
IMAGE_BATCH = 64
TEXT_BATCH = 256


class FeatureCache(Protocol):
    """Where image features live between runs: ``get(key)`` -> ndarray (d,) or None, ``put(key, array)``.
    The key is :func:`feature_key` (model signature + image sha256); the platform can back it by its
    database."""

    def get(self, key: str) -> np.ndarray | None: ...

    def put(self, key: str, value: np.ndarray) -> None: ...


class MemoryFeatureCache(dict):
    """A :class:`FeatureCache` in a dict (one process)."""

    def put(self, key: str, value: np.ndarray) -> None:
        self[key] = value


class DirectoryFeatureCache:
    """A :class:`FeatureCache` in a folder: ``<root>/<key[:2]>/<key>.npy`` (written atomically)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.npy"

    def get(self, key: str) -> np.ndarray | None:
        path = self._path(key)
        return np.load(path) if path.is_file() else None

    def put(self, key: str, value: np.ndarray) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            np.save(f, value)
        tmp.replace(path)


def feature_key(model_signature: str, image_sha256: str) -> str:
    """Cache key: sha256 of ``model_signature + "|" + image_sha256`` (hex)."""
    return hashlib.sha256(f"{model_signature}|{image_sha256}".encode()).hexdigest()


def image_features(encoder, images: Sequence[ImageSource], model_signature: str, cache: FeatureCache | None = None,
                   batch_size: int = IMAGE_BATCH, exif_transpose: bool = False) -> np.ndarray:
    """Features (n, d) of ``images`` (paths or bytes) from ``encoder.encode_images``, each distinct image
    content encoded once (in batches of ``batch_size`` distinct images, in first-seen order) and cached
    under :func:`feature_key`. Raises :class:`ImageErrors` listing every image that cannot be read."""
    cache = cache if cache is not None else MemoryFeatureCache()
    keys: list[str | None] = []
    todo: dict[str, np.ndarray] = {}
    errors: list[ImageError] = []
    found: dict[str, np.ndarray] = {}
    for i, source in enumerate(images):
        try:
            digest = load_image(source, decode=False, index=i).sha256
            key = feature_key(model_signature, digest)
            if key not in found and key not in todo:
                hit = cache.get(key)
                if hit is not None:
                    found[key] = hit
                else:
                    todo[key] = load_image(source, exif_transpose=exif_transpose, index=i).pixels
            keys.append(key)
        except ImageError as e:
            errors.append(e)
            keys.append(None)
    if errors:
        raise ImageErrors(errors)
    pending = list(todo)
    for start in range(0, len(pending), batch_size):
        chunk = pending[start:start + batch_size]
        feats = encoder.encode_images(np.stack([todo[k] for k in chunk]))
        for k, f in zip(chunk, feats):
            found[k] = f
            cache.put(k, f)
    return np.stack([found[k] for k in keys]) if keys else np.zeros((0, 0), dtype=np.float32)


def text_features(encoder, texts: Sequence[str], prefix: str = PREFIX, batch_size: int = TEXT_BATCH) -> np.ndarray:
    """Features (n, d) of ``prefix + text`` for each text (a prefix not ending in a space gets one, as
    the reference's dataset class does), tokenised by OpenAI's tokenizer (77 tokens, end token kept),
    encoded in batches of ``batch_size`` in the given order."""
    if prefix and not prefix.endswith(" "):
        prefix += " "
    tok = clip_tokenizer()
    out = [encoder.encode_texts(tok.tokenize([prefix + t for t in texts[s:s + batch_size]]))
           for s in range(0, len(texts), batch_size)]
    return np.vstack(out) if out else np.zeros((0, 0), dtype=np.float32)


def normalise(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm, ``x / sqrt(sum(x**2, axis=1, keepdims=True))`` in x's dtype."""
    return x / np.sqrt(np.sum(x ** 2, axis=1, keepdims=True))


def clip_s(image_feats: np.ndarray, text_feats: np.ndarray, w: float = 2.5) -> tuple[np.ndarray, np.ndarray]:
    """(per-caption CLIP-S ``w * max(cos, 0)``, the normalised text features), both in the features'
    dtype; rows pair image i with caption i. Hessel et al. 2021, Eq. 1; clipscore.py get_clip_score."""
    images = normalise(image_feats)
    candidates = normalise(text_feats)
    return w * np.clip(np.sum(images * candidates, axis=1), 0, None), candidates


def reference_side(candidate_feats: np.ndarray, reference_feats: Sequence[np.ndarray]) -> np.ndarray:
    """Per candidate the largest cosine with one of its references, ``max_r c . r`` after normalising
    ``candidate_feats`` (n, d) and each (k_i, d) array of ``reference_feats``; not clipped at 0
    (clipscore.py get_refonlyclipscore). Raises ValueError for a candidate without references."""
    candidates = normalise(candidate_feats)
    out = []
    for i, (cand, refs) in enumerate(zip(candidates, reference_feats)):
        if len(refs) == 0:
            raise ValueError(f"caption {i} has no reference captions")
        out.append(np.max(cand.dot(normalise(refs).transpose())))
    return np.asarray(out, dtype=candidates.dtype)


def harmonic(s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``2 * s * t / (s + t)`` elementwise as clipscore.py's main computes RefCLIP-S (NaN where s + t = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return 2 * s * t / (s + t)


def reference_features(encoder, references: Sequence[Sequence[str]], prefix: str = PREFIX,
                       batch_size: int = TEXT_BATCH) -> list[np.ndarray]:
    """Features of every reference, flattened and encoded in batches of ``batch_size`` as
    get_refonlyclipscore does, split back into one (k_i, d) array per caption."""
    flat = [r for refs in references for r in refs]
    feats = text_features(encoder, flat, prefix, batch_size)
    out, start = [], 0
    for refs in references:
        out.append(feats[start:start + len(refs)])
        start += len(refs)
    return out
