"""Tiny models for the learned-metric tests, built from a fixed numpy seed and written in the real
on-disk formats (nothing but this generator is committed):

* :func:`write_tiny_clip` -- a ViT CLIP in OpenAI's state-dict layout (``torch.save`` of the state dict,
  what ``clip.load(path)`` accepts), and the same wrapped as PAC-S's ``{"state_dict": ...}`` checkpoint;
  OpenAI's real vocabulary size (49,408) so that OpenAI's tokenizer's ids are valid; width 64
  (one head of 64, as OpenAI's build_model derives heads = width // 64), 2 layers, patch 32 at 224 px;
* :func:`write_tiny_images` -- small test images: odd sizes, RGBA, greyscale, palette, EXIF-rotated.

Also used by scripts/learned_goldens.py, which runs the reference code on the same files.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

SEED = 20260401
EMBED, WIDTH, LAYERS, PATCH, GRID, CONTEXT, VOCAB = 32, 64, 2, 32, 7, 77, 49408


def clip_shapes() -> list[tuple[str, tuple[int, ...]]]:
    """(key, shape) of every tensor of the tiny CLIP in OpenAI's layout, in a fixed order."""
    out = [("positional_embedding", (CONTEXT, WIDTH)), ("text_projection", (WIDTH, EMBED)), ("logit_scale", ()),
           ("token_embedding.weight", (VOCAB, WIDTH)), ("ln_final.weight", (WIDTH,)), ("ln_final.bias", (WIDTH,)),
           ("visual.class_embedding", (WIDTH,)), ("visual.positional_embedding", (GRID * GRID + 1, WIDTH)),
           ("visual.proj", (WIDTH, EMBED)), ("visual.conv1.weight", (WIDTH, 3, PATCH, PATCH)),
           ("visual.ln_pre.weight", (WIDTH,)), ("visual.ln_pre.bias", (WIDTH,)),
           ("visual.ln_post.weight", (WIDTH,)), ("visual.ln_post.bias", (WIDTH,))]
    for prefix in ("transformer.resblocks", "visual.transformer.resblocks"):
        for i in range(LAYERS):
            p = f"{prefix}.{i}."
            out += [(p + "attn.in_proj_weight", (3 * WIDTH, WIDTH)), (p + "attn.in_proj_bias", (3 * WIDTH,)),
                    (p + "attn.out_proj.weight", (WIDTH, WIDTH)), (p + "attn.out_proj.bias", (WIDTH,)),
                    (p + "ln_1.weight", (WIDTH,)), (p + "ln_1.bias", (WIDTH,)),
                    (p + "mlp.c_fc.weight", (4 * WIDTH, WIDTH)), (p + "mlp.c_fc.bias", (4 * WIDTH,)),
                    (p + "mlp.c_proj.weight", (WIDTH, 4 * WIDTH)), (p + "mlp.c_proj.bias", (WIDTH,)),
                    (p + "ln_2.weight", (WIDTH,)), (p + "ln_2.bias", (WIDTH,))]
    return out


def tiny_clip_state_dict(seed: int = SEED) -> dict:
    """The tiny CLIP's tensors (float32 torch tensors holding float16 values) drawn from ``numpy.random.default_rng(seed)``:
    layer-norm weights near 1, the rest N(0, 0.02) (conv and projections N(0, 1/sqrt(fan_in)))."""
    import torch

    rng = np.random.default_rng(seed)
    sd = {}
    for key, shape in clip_shapes():
        if key == "logit_scale":
            value = np.array(np.log(1 / 0.07), dtype=np.float32)
        elif key.endswith(".weight") and ("ln_" in key):
            value = 1 + 0.1 * rng.standard_normal(shape)
        elif key in ("visual.proj", "text_projection", "visual.conv1.weight"):
            fan_in = int(np.prod(shape[1:])) if key == "visual.conv1.weight" else shape[0]
            value = rng.standard_normal(shape) / np.sqrt(fan_in)
        elif key.endswith("embedding") or key.endswith("embedding.weight"):
            value = 0.5 * rng.standard_normal(shape)
        else:
            value = 0.05 * rng.standard_normal(shape)
        # values representable in float16: OpenAI's build_model converts the weights to fp16 (its
        # published files are fp16) before clip.load's .float() on CPU
        sd[key] = torch.from_numpy(np.asarray(value, dtype=np.float16).astype(np.float32))
    return sd


def write_tiny_clip(folder: Path, seed: int = SEED) -> dict[str, Path]:
    """Write ``tiny-clip.pt`` (OpenAI state dict) and ``tiny-pac.pth`` (PAC-S checkpoint of a second
    seed) into ``folder``; returns their paths by kind ("openai", "pac")."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    paths = {"openai": folder / "tiny-clip.pt", "pac": folder / "tiny-pac.pth"}
    torch.save(tiny_clip_state_dict(seed), paths["openai"])
    torch.save({"state_dict": tiny_clip_state_dict(seed + 1)}, paths["pac"])
    return paths


def _exif_rotated(rng) -> bytes:
    from PIL import Image

    img = Image.fromarray(rng.integers(0, 256, (250, 300, 3), dtype=np.uint8), "RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to display
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def write_tiny_images(folder: Path, seed: int = SEED) -> list[Path]:
    """Write eight small images (random smooth pixels from the seed) in different sizes and modes into
    ``folder``; returns their paths in a fixed order."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)

    def smooth(h, w, c):
        small = rng.integers(0, 256, (max(2, h // 16), max(2, w // 16), c), dtype=np.uint8)
        img = Image.fromarray(small.squeeze(-1) if c == 1 else small)
        return np.asarray(img.resize((w, h), Image.BILINEAR))

    specs = [("odd.png", 301, 227, "RGB"), ("tall.jpg", 500, 333, "RGB"), ("half.png", 225, 449, "RGB"),
             ("rgba.png", 240, 321, "RGBA"), ("grey.png", 256, 257, "L"), ("small.png", 120, 90, "RGB"),
             ("palette.png", 230, 250, "P")]
    paths = []
    for name, h, w, mode in specs:
        c = {"RGB": 3, "RGBA": 4, "L": 1, "P": 3}[mode]
        img = Image.fromarray(smooth(h, w, c))
        if mode == "P":
            img = img.convert("P", palette=Image.ADAPTIVE, colors=64)
        path = folder / name
        img.save(path, quality=92) if name.endswith(".jpg") else img.save(path)
        paths.append(path)
    exif = folder / "exif.jpg"
    exif.write_bytes(_exif_rotated(rng))
    paths.append(exif)
    return paths


def flickr8k_captions(limit: int | None = None) -> list[str]:
    """The bundled Flickr8k captions (data/flickr8k/Flickr8k.token.txt), in file order."""
    root = Path(__file__).resolve().parent.parent
    lines = (root / "data/flickr8k/Flickr8k.token.txt").read_text("utf-8").splitlines()
    caps = [line.split("\t", 1)[1] for line in lines if "\t" in line]
    return caps[:limit] if limit else caps
