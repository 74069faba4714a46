"""CLIP's image preprocessing (Radford et al. 2021) as the CLIPScore and PAC-S reference code applies
it, in PIL + numpy (no torchvision), and the per-image content hash that keys cached image features.

The reference (jmhessel/clipscore ``CLIPImageDataset._transform_test``; aimagelab/pacscore and
OpenAI's ``clip._transform`` are the same) is torchvision's
``Compose([Resize(224, BICUBIC), CenterCrop(224), convert("RGB"), ToTensor(), Normalize(mean, std)])``
on the image as ``PIL.Image.open`` reads it. Step by step (:func:`preprocess`):

1. resize so that the short side is 224 and the long side ``int(224 * long / short)`` (truncated, as
   torchvision's ``_compute_resized_output_size``), PIL bicubic, in the file's own mode (RGBA, L, P:
   PIL itself resamples P and 1 images with nearest neighbour);
2. centre crop 224 x 224 at top ``int(round((h - 224) / 2))``, left ``int(round((w - 224) / 2))``
   (Python's round: halves to even; torchvision's ``center_crop``);
3. ``convert("RGB")``: alpha is dropped (not composited), grey is repeated;
4. uint8 -> float32 / 255, then ``(x - mean) / std`` per channel in float32 with OpenAI's
   mean (0.48145466, 0.4578275, 0.40821073) and std (0.26862954, 0.26130258, 0.27577711).

EXIF orientation: the reference does NOT apply it (``Image.open`` leaves the pixels as stored), so
the default ``exif_transpose=False`` reproduces it; ``True`` rotates first (``ImageOps.exif_transpose``)
and is recorded in the metric signature. HF's ``CLIPImageProcessor`` differs (RGB conversion before the
resize, floor instead of round in the crop): it is not used.
"""
from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass
from typing import Union

import numpy as np

N_PX = 224
MEAN = (0.48145466, 0.4578275, 0.40821073)
STD = (0.26862954, 0.26130258, 0.27577711)

#: an image as the metrics accept it: a file path, or the file's bytes
ImageSource = Union[str, os.PathLike, bytes]


class ImageError(ValueError):
    """An image that cannot be scored (missing, unreadable, not an image). ``index`` is its position
    in the batch (or None), ``source`` its path (or ``<bytes>``), ``reason`` the cause."""

    def __init__(self, source, reason: str, index: int | None = None):
        self.source, self.reason, self.index = source, reason, index
        where = f"image {index} " if index is not None else "image "
        super().__init__(f"{where}{source}: {reason}")


class ImageErrors(ValueError):
    """Several :class:`ImageError`, one per failing image (``errors``); the message lists each."""

    def __init__(self, errors: list[ImageError]):
        self.errors = errors
        lines = "\n".join(f"  {e}" for e in errors)
        super().__init__(f"{len(errors)} image(s) cannot be scored (no score is given for them):\n{lines}")


def read_bytes(source: ImageSource) -> bytes:
    """The file's bytes (``source`` itself when bytes). Raises :class:`ImageError` when missing or
    unreadable."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source)
    try:
        with open(source, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ImageError(os.fspath(source), "file not found") from None
    except OSError as e:
        raise ImageError(os.fspath(source), f"cannot read the file ({e.strerror or e})") from None


def content_hash(data: bytes) -> str:
    """sha256 hex digest of an image file's bytes: the image's identity in the feature cache."""
    return hashlib.sha256(data).hexdigest()


def open_image(data: bytes, source="<bytes>"):
    """``PIL.Image`` of the file bytes, fully decoded. Raises :class:`ImageError` when PIL cannot
    decode it (not an image, truncated)."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as e:
        raise ImageError(source, f"not a readable image ({type(e).__name__}: {e})") from None
    return image


def resized_size(width: int, height: int, n_px: int = N_PX) -> tuple[int, int]:
    """(width, height) after torchvision's ``Resize(n_px)``: short side n_px, long side
    ``int(n_px * long / short)``."""
    if width <= height:
        return n_px, int(n_px * height / width)
    return int(n_px * width / height), n_px


def preprocess(image, n_px: int = N_PX, exif_transpose: bool = False) -> np.ndarray:
    """The reference transform of one ``PIL.Image`` (see the module docstring for each step).

    Returns float32 (3, n_px, n_px), channels RGB, values ``(x / 255 - mean) / std`` (about -1.8..2.2).
    """
    from PIL import Image, ImageOps

    if exif_transpose:
        image = ImageOps.exif_transpose(image)
    w, h = resized_size(*image.size, n_px=n_px)
    image = image.resize((w, h), Image.BICUBIC)
    top, left = int(round((h - n_px) / 2.0)), int(round((w - n_px) / 2.0))
    image = image.crop((left, top, left + n_px, top + n_px))
    pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
    x = pixels.transpose(2, 0, 1).astype(np.float32) / np.float32(255)
    mean = np.asarray(MEAN, dtype=np.float32)[:, None, None]
    std = np.asarray(STD, dtype=np.float32)[:, None, None]
    return (x - mean) / std


@dataclass
class LoadedImage:
    """An image read for scoring: ``sha256`` of its bytes and its ``pixels`` (float32 (3, 224, 224))
    or None when only the hash was needed (features already cached)."""

    sha256: str
    pixels: np.ndarray | None = None


def load_image(source: ImageSource, exif_transpose: bool = False, decode: bool = True, index: int | None = None) -> LoadedImage:
    """Read, hash and (``decode``) preprocess one image. Raises :class:`ImageError` (with ``index``)."""
    name = "<bytes>" if isinstance(source, (bytes, bytearray)) else os.fspath(source)
    try:
        data = read_bytes(source)
        digest = content_hash(data)
        if not decode:
            return LoadedImage(digest)
        return LoadedImage(digest, preprocess(open_image(data, name), exif_transpose=exif_transpose))
    except ImageError as e:
        raise ImageError(name, e.reason, index) from None
