"""Speed of CLIP-S with image features computed once and cached, against the reference script's way
(jmhessel/clipscore ``clipscore.py``: every row of the candidates file re-encodes its image), on a
CLIP the size of OpenAI's ViT-B/32 with random weights (no weights are downloaded or needed).

Run from the repository root (the ``learned`` extra installed)::

    .venv/bin/python benchmarks/learned_metrics_speed.py                       # CPU, 16 pictures x 5 captions
    .venv/bin/python benchmarks/learned_metrics_speed.py --images 64 --json out.json
    .venv/bin/python benchmarks/learned_metrics_speed.py --device cuda --dtype float16 --images 512   # by hand, on a GPU

The model: transformers' ``CLIPModel`` with ViT-B/32's dimensions (vision width 768, 12 layers, patch
32 at 224 px; text width 512, 12 layers, 8 heads, 77 tokens; embedding 512), seeded random weights,
run through the same :class:`captioneval.kernels.learned.models.ClipEncoder` the metrics use. The
data: ``--images`` JPEG pictures of 640 x 480 drawn from a fixed seed and written to a temporary
folder, each with ``--captions-per-image`` bundled Flickr8k captions (the rows of a candidates file).

Timed after one untimed warm-up row, each in this process on the same encoder and files (the fastest
of ``--repeats``):

* **reference**: as clipscore.py's ``extract_all_images`` -- each row's picture decoded, preprocessed
  and encoded (batches of 64 rows), then the rows' captions encoded (batches of 256) and CLIP-S taken;
* **ours, cold**: :func:`captioneval.kernels.learned.clip_score.image_features` -- each distinct picture
  read and hashed, decoded and encoded once (batches of 64 distinct pictures), its features cached;
  the captions as above;
* **ours, a new system**: the same pictures with other captions (a second system) and the features
  already cached: only hashing the files and encoding text (the pictures encoded: 0, checked).

Prints pictures and captions per second of each, the speed-up (reference / ours cold, and reference /
new system) and the largest difference of the CLIP-S values between the reference way and ours (the
same numbers up to float rounding of the batch composition). ``--json FILE`` writes ``{"device",
"dtype", "images", "rows", "model", "reference_s", "ours_s", "new_system_s", "ratio",
"ratio_new_system", "images_encoded_new_system", "max_abs_diff", "images_per_s", "captions_per_s"}``.

Hardware reference (issue 32, measured by others on one H100): about 27,000 images/s for the ViT-B/32
image encoder in fp16 and 80,000 captions/s for its text encoder, while decoding and preprocessing a
JPEG costs about 5 ms of one CPU core -- on a GPU the pictures' decoding, not the model, bounds the
reference way, which is what caching the features saves.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

#: ViT-B/32's dimensions (OpenAI CLIP), and a small model for the tests of this script (--small)
SIZES = {
    "ViT-B/32": {"vision": dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                                patch_size=32, image_size=224),
                 "text": dict(hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
                              max_position_embeddings=77, vocab_size=49408),
                 "projection_dim": 512},
    "small": {"vision": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=1,
                             patch_size=32, image_size=224),
              "text": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=1,
                           max_position_embeddings=77, vocab_size=49408),
              "projection_dim": 32},
}
SEED = 20261128


def random_encoder(size: str, device: str, dtype: str):
    """A :class:`ClipEncoder` over transformers' CLIPModel with ``SIZES[size]`` and weights from
    ``torch.manual_seed(SEED)`` (quick GELU, as OpenAI's CLIP)."""
    import torch
    from transformers import CLIPConfig, CLIPModel

    from captioneval.kernels.learned.models import ClipEncoder

    spec = SIZES[size]
    config = CLIPConfig(text_config={**spec["text"], "hidden_act": "quick_gelu", "eos_token_id": 49407},
                        vision_config={**spec["vision"], "hidden_act": "quick_gelu"},
                        projection_dim=spec["projection_dim"])
    torch.manual_seed(SEED)
    model = CLIPModel(config).eval().to(device, {"float32": torch.float32, "float16": torch.float16}[dtype])
    return ClipEncoder(model, f"random-{size}", None, device, dtype, "random")


def write_pictures(folder: Path, n: int) -> list[Path]:
    """``n`` JPEG pictures of 640 x 480 (smooth random colours from ``SEED``) in ``folder``."""
    from PIL import Image

    rng = np.random.default_rng(SEED)
    paths = []
    for i in range(n):
        small = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
        path = folder / f"{i:05d}.jpg"
        Image.fromarray(small).resize((640, 480), Image.BILINEAR).save(path, quality=90)
        paths.append(path)
    return paths


def captions(n: int, offset: int = 0) -> list[str]:
    """``n`` bundled Flickr8k captions starting at ``offset`` (data/flickr8k/Flickr8k.token.txt)."""
    lines = (REPO_ROOT / "data/flickr8k/Flickr8k.token.txt").read_text("utf-8").splitlines()
    caps = [line.split("\t", 1)[1] for line in lines if "\t" in line]
    return caps[offset:offset + n]


def reference_way(encoder, rows: list[Path], texts: list[str]) -> np.ndarray:
    """CLIP-S as clipscore.py computes it: every row's picture decoded, preprocessed and encoded (batches
    of 64 rows, in row order), the captions encoded (batches of 256)."""
    from captioneval.kernels.learned import clip_score as k
    from captioneval.kernels.learned.clip_image import load_image

    feats = []
    for start in range(0, len(rows), k.IMAGE_BATCH):
        pixels = np.stack([load_image(p).pixels for p in rows[start:start + k.IMAGE_BATCH]])
        feats.append(encoder.encode_images(pixels))
    images = np.vstack(feats)
    return k.clip_s(images, k.text_features(encoder, texts), 2.5)[0]


def our_way(encoder, rows: list[Path], texts: list[str], cache) -> np.ndarray:
    """CLIP-S with each distinct picture encoded once and its features in ``cache``."""
    from captioneval.kernels.learned import clip_score as k

    images = k.image_features(encoder, [str(p) for p in rows], "benchmark-signature", cache)
    return k.clip_s(images, k.text_features(encoder, texts), 2.5)[0]


def best_of(repeats: int, fn):
    """(fastest seconds, last result) of ``repeats`` calls of ``fn()``."""
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=16, help="distinct pictures (default 16)")
    parser.add_argument("--captions-per-image", type=int, default=5, help="rows per picture (default 5)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "float16"))
    parser.add_argument("--repeats", type=int, default=1, help="keep the fastest of N runs of each (default 1)")
    parser.add_argument("--small", action="store_true", help="a tiny model instead of ViT-B/32's size (tests)")
    parser.add_argument("--json", metavar="FILE", help="write the summary as JSON")
    args = parser.parse_args(argv)

    from captioneval.kernels.learned.clip_score import MemoryFeatureCache

    size = "small" if args.small else "ViT-B/32"
    encoder = random_encoder(size, args.device, args.dtype)
    n_rows = args.images * args.captions_per_image
    with tempfile.TemporaryDirectory(prefix="learned-speed-") as tmp:
        pictures = write_pictures(Path(tmp), args.images)
        rows = [pictures[i % args.images] for i in range(n_rows)]
        first, second = captions(n_rows), captions(n_rows, offset=n_rows)
        reference_way(encoder, rows[:1], first[:1])  # warm-up (tokenizer, first calls), untimed
        reference_s, expected = best_of(args.repeats, lambda: reference_way(encoder, rows, first))
        caches = []

        def cold():
            caches.append(MemoryFeatureCache())
            return our_way(encoder, rows, first, caches[-1])

        ours_s, got = best_of(args.repeats, cold)
        encoded = []
        original = encoder.encode_images
        encoder.encode_images = lambda px: (encoded.append(len(px)), original(px))[1]
        try:
            new_s, _ = best_of(args.repeats, lambda: our_way(encoder, rows, second, caches[-1]))
        finally:
            encoder.encode_images = original
    diff = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - np.asarray(expected, dtype=np.float64))))
    summary = {
        "device": args.device, "dtype": args.dtype, "images": args.images, "rows": n_rows, "model": size,
        "reference_s": reference_s, "ours_s": ours_s, "new_system_s": new_s,
        "ratio": reference_s / ours_s, "ratio_new_system": reference_s / new_s,
        "images_encoded_new_system": sum(encoded), "max_abs_diff": diff,
        "images_per_s": {"reference": n_rows / reference_s, "ours": args.images / ours_s},
        "captions_per_s": {"reference": n_rows / reference_s, "ours": n_rows / ours_s, "new_system": n_rows / new_s},
    }
    print(f"CLIP-S, {size} random weights, {args.device} {args.dtype}: {args.images} pictures x "
          f"{args.captions_per_image} captions = {n_rows} rows")
    print(f"reference way (each row re-encodes its picture): {reference_s:8.2f} s  "
          f"{n_rows / reference_s:8.1f} rows/s")
    print(f"ours, cold (each picture once, features cached): {ours_s:8.2f} s  {n_rows / ours_s:8.1f} rows/s  "
          f"{args.images / ours_s:8.1f} pictures/s")
    print(f"ours, a new system (cached features, text only):  {new_s:8.2f} s  {n_rows / new_s:8.1f} captions/s  "
          f"(pictures encoded: {sum(encoded)})")
    print(f"ratio (reference / ours): {summary['ratio']:.1f}x; reference / new system: {summary['ratio_new_system']:.1f}x")
    print(f"largest |CLIP-S difference|, reference way vs ours: {diff:.2e}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
