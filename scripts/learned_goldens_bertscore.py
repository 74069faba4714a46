"""Regenerate tests/data/learned_goldens_bertscore.json: the UNMODIFIED reference, PyPI bert-score
0.3.13 (``bert_score.score``; wheel sha256 bbbb4c7fcdaa46d7681aff49f37f96faa09ed74e1b150e659bdc6b58a66989b9,
https://github.com/Tiiiger/bert_score), run on the tiny RoBERTa of tests/learned_models.py
(``write_tiny_roberta``: a Hugging Face folder, passed as ``model_type`` with ``num_layers``).

Rows: Flickr8k captions (the first caption of an image as candidate, its others as references), one
candidate repeated, one candidate longer than the tiny tokenizer's 24 tokens (truncated), short
candidates and a short reference (some best cosines are negative: padding then changes them). Cases: single and multiple references, idf off and on, rescaling with a baseline file
written here (the package ships none for a tiny model: ``baseline_path``), batch sizes 64, 7 and 1
(the batch composition changes numbers: padded positions count as cosine 0 in the max).

It needs an environment with bert-score 0.3.13 and what it imports (torch, transformers, pandas,
matplotlib): ``pip install --no-deps bert-score==0.3.13``, then ``pip install --find-links /opt/wheels
torch==2.13.0+cpu transformers==5.24.0 pandas matplotlib`` (so that pip does not pull PyPI's CUDA
torch), in a virtual environment without torchvision (transformers imports it when present, and
PyPI's torchvision does not load beside the CPU torch). It was run with torch 2.13.0+cpu and
transformers 5.24.0:

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 python scripts/learned_goldens_bertscore.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N_IMAGES = 24
#: (name, multiple references, idf, rescale, batch size, num_layers)
CASES = [
    ("single", False, False, False, 64, 2),
    ("single_idf", False, True, False, 64, 2),
    ("single_rescaled", False, False, True, 64, 2),
    ("multi", True, False, False, 64, 2),
    ("multi_idf", True, True, False, 64, 2),
    ("multi_rescaled", True, False, True, 64, 2),
    ("multi_idf_rescaled_batch7", True, True, True, 7, 2),
    ("multi_batch1", True, False, False, 1, 2),
    ("multi_layer3", True, False, False, 64, 3),
]
#: the tiny model's baseline file (LAYER,P,R,F rows for layers 0-3), as the package's files are laid out
BASELINE = "LAYER,P,R,F\n0,0.41,0.42,0.415\n1,0.31,0.32,0.3125\n2,0.2134567,0.2245678,0.21890123\n3,0.15,0.16,0.155\n"


def rows():
    """(candidate, references) of the golden rows, from the bundled Flickr8k captions."""
    sys.path.insert(0, str(ROOT / "tests"))
    import learned_models as lm

    caps = lm.flickr8k_captions(5 * N_IMAGES)
    out = []
    for i in range(N_IMAGES):
        cand, refs = caps[5 * i], caps[5 * i + 1: 5 * i + 5]
        if i == 3:
            cand = " ".join([cand] * 3)  # longer than the tokenizer's 24 tokens: truncated
        if i == 5:
            cand = caps[0]  # a candidate that occurs twice
        if i == 7:
            refs = refs[:2]  # fewer references
        if i in (9, 10):
            cand = ("dog .", "A man .")[i - 9]  # short candidates: some reference tokens' best cosine is negative
        if i == 11:
            refs = ["a dog", *refs[1:]]  # a short reference
        out.append((cand, refs))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "tests/data/learned_goldens_bertscore.json"))
    args = ap.parse_args()
    import bert_score
    import numpy as np
    import torch
    import transformers
    from importlib.metadata import version

    sys.path.insert(0, str(ROOT / "tests"))
    import learned_models as lm

    work = Path(tempfile.mkdtemp(prefix="bertscore-goldens-"))
    folder = lm.write_tiny_roberta(work / "tiny-roberta")
    baseline = work / "baseline.tsv"
    baseline.write_text(BASELINE, "utf-8")
    table = rows()
    golden: dict = {"reference": f"bert-score {version('bert-score')}", "torch": torch.__version__,
                    "transformers": transformers.__version__, "numpy": np.__version__, "seed": lm.SEED,
                    "baseline_tsv": BASELINE, "rows": [{"candidate": c, "references": r} for c, r in table],
                    "cases": {}}
    from bert_score.utils import sent_encode
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), use_fast=False)
    golden["token_ids"] = [sent_encode(tokenizer, c) for c, _ in table]
    for name, multi, idf, rescale, batch, layers in CASES:
        cands = [c for c, _ in table]
        refs = [r for _, r in table] if multi else [r[0] for _, r in table]
        kw = dict(lang="en", rescale_with_baseline=True, baseline_path=str(baseline)) if rescale else {}
        p, r, f = bert_score.score(cands, refs, model_type=str(folder), num_layers=layers, idf=idf, batch_size=batch,
                                   device="cpu", nthreads=0, **kw)
        golden["cases"][name] = {"multi": multi, "idf": idf, "rescale": rescale, "batch_size": batch,
                                 "num_layers": layers, "P": [float(x) for x in p], "R": [float(x) for x in r],
                                 "F": [float(x) for x in f]}
    Path(args.out).write_text(json.dumps(golden, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
