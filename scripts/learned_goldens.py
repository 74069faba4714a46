"""Regenerate tests/data/learned_goldens_clip.json: the UNMODIFIED reference code run on the tiny
models and images of tests/learned_models.py.

References (checkouts given on the command line, at these commits):

* jmhessel/clipscore 1036465276513621f77f1c2208d742e4a430781f -- clipscore.py: CLIPImageDataset
  (preprocessing), get_clip_score, get_refonlyclipscore, main's harmonic mean (CLIP-S, RefCLIP-S);
* openai/CLIP d05afc436d78f1c48dc0dbf8e5980a9d471f35f6 -- the ``clip`` package clipscore.py imports
  (clip.load of a local file, clip.tokenize);
* aimagelab/pacscore bfbc488e9f5cccd818e75c7cdfaa37e1c87f00eb -- evaluation/pac_score/pac_score.py
  (PACScore, RefPACScore), models/clip, and compute_metrics.py's steps (clip.load, model.float(),
  load_state_dict(checkpoint["state_dict"]), the harmonic mean).

clip.load itself is not called on the tiny files: they are plain state dicts, and clip.load's
fallback for those fails with torch 2.13 (see main); the script calls clip.load's own steps for
jit=False on CPU (``build_model(state_dict).float()`` and ``_transform(224)``).

It needs an environment with torch, torchvision, ftfy, regex, tqdm, scikit-learn, packaging,
setuptools<81 (pkg_resources for pacscore's clip.py) and pycocoevalcap (clipscore.py imports
generation_eval_utils). It was run with torch 2.13.0+cpu and torchvision 0.28.0 from PyPI. That
torchvision's compiled detection operators do not load beside the CPU torch wheel ("operator
torchvision::nms does not exist" while importing ``torchvision._meta_registrations``, which only
registers fake kernels of nms / roi_align for torch.compile); the script therefore puts an empty
module in its place before importing torchvision. ``torchvision.transforms`` -- the reference
preprocessing -- is untouched.

    python scripts/learned_goldens.py --clipscore DIR --clip DIR --pacscore DIR [--out FILE]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMITS = {"jmhessel/clipscore": "1036465276513621f77f1c2208d742e4a430781f",
           "openai/CLIP": "d05afc436d78f1c48dc0dbf8e5980a9d471f35f6",
           "aimagelab/pacscore": "bfbc488e9f5cccd818e75c7cdfaa37e1c87f00eb"}
N_ROWS = 12


def rows():
    """(image index, candidate, references) of the golden rows: Flickr8k captions (first 12 images'
    first caption as candidate, the next ones as references), one caption longer than 77 tokens, and
    one image used twice."""
    sys.path.insert(0, str(ROOT / "tests"))
    import learned_models as lm

    caps = lm.flickr8k_captions(5 * N_ROWS)
    out = []
    for i in range(N_ROWS):
        image = i % 8 if i < 10 else (i % 8) + 1
        cand = caps[5 * i]
        if i == 3:
            cand = " ".join([cand] * 8)  # longer than 77 tokens: truncated with the end token kept
        out.append((image, cand, caps[5 * i + 1: 5 * i + 1 + (2 + i % 3)]))
    return out


def sha(array) -> str:
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clipscore", required=True)
    ap.add_argument("--clip", required=True)
    ap.add_argument("--pacscore", required=True)
    ap.add_argument("--out", default=str(ROOT / "tests/data/learned_goldens_clip.json"))
    args = ap.parse_args()
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    import learned_models as lm

    work = Path(tempfile.mkdtemp(prefix="learned-goldens-"))
    weights = lm.write_tiny_clip(work)
    images = [str(p) for p in lm.write_tiny_images(work / "images")]
    table = rows()
    row_images = [images[i] for i, _, _ in table]
    cands = [c for _, c, _ in table]
    refs = [r for _, _, r in table]
    golden: dict = {"commits": COMMITS, "seed": lm.SEED, "torch": torch.__version__, "numpy": np.__version__,
                    "images": [Path(p).name for p in images],
                    "rows": [{"image": i, "candidate": c, "references": r} for i, c, r in table]}

    # --- clipscore.py with OpenAI's clip package ------------------------------------------------------
    sys.path[:0] = [args.clip, args.clipscore]
    import clip
    import clipscore

    golden["preprocess_sha256"] = [sha(clipscore.CLIPImageDataset(images)[k]["image"].numpy()) for k in range(len(images))]
    golden["preprocess_first_values"] = [clipscore.CLIPImageDataset(images)[k]["image"].numpy()[:, 100, 100:103].tolist()
                                         for k in range(len(images))]
    all_caps = lm.flickr8k_captions()
    ids = clip.tokenize(["A photo depicts " + c for c in all_caps], truncate=True).numpy().astype(np.int64)
    golden["tokens_all_flickr8k_sha256"] = sha(ids)
    golden["tokens_rows"] = clip.tokenize(["A photo depicts " + c for c in cands], truncate=True).numpy().tolist()

    # clip.load(path, jit=False) on a file that is not a TorchScript archive reaches its torch.load
    # fallback with the file object already read to the end by torch.jit.load (EOFError with torch
    # 2.13); OpenAI's published files are TorchScript archives and never reach it. We call what
    # clip.load calls for jit=False on CPU: build_model(state_dict).to("cpu"), .float(), .eval().
    from clip.model import build_model

    model = build_model(torch.load(weights["openai"], map_location="cpu")).to("cpu").float().eval()
    image_feats = clipscore.extract_all_images(row_images, model, "cpu", batch_size=64, num_workers=0)
    _, per, cand_feats = clipscore.get_clip_score(model, image_feats, cands, "cpu")
    _, text_text = clipscore.get_refonlyclipscore(model, refs, cand_feats, "cpu")
    ref = 2 * per * text_text / (per + text_text)
    golden["clip_s"] = [float(x) for x in per]
    golden["ref_clip_s"] = [float(x) for x in ref]
    golden["ref_clip_s_text_side"] = [float(x) for x in text_text]

    # --- pacscore (its own copy of the clip package) --------------------------------------------------
    for name in [m for m in sys.modules if m == "clip" or m.startswith("clip.")]:
        del sys.modules[name]
    sys.path[:2] = []
    sys.path.insert(0, args.pacscore)
    from models.clip import clip as pclip
    from models.clip.model import build_model as pbuild_model
    from evaluation.pac_score.pac_score import PACScore, RefPACScore

    # compute_metrics.py: clip.load("ViT-B/32") (here: the same build_model step, see above), then
    # model.float(), load_state_dict(torch.load(checkpoint)["state_dict"]), eval()
    model = pbuild_model(torch.load(weights["openai"], map_location="cpu")).to("cpu")
    preprocess = pclip._transform(model.visual.input_resolution)
    model = model.float()
    model.load_state_dict(torch.load(weights["pac"])["state_dict"])
    model.eval()
    _, pac, cand_feats, len_candidates = PACScore(model, preprocess, row_images, cands, "cpu", w=2.0)
    _, text_text = RefPACScore(model, refs, cand_feats, "cpu", torch.tensor(len_candidates))
    refpac = 2 * pac * text_text / (pac + text_text)
    golden["pac_s"] = [float(x) for x in pac]
    golden["ref_pac_s"] = [float(x) for x in refpac]
    Path(args.out).write_text(json.dumps(golden, indent=1) + "\n", "utf-8")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
