"""Speed of the batched VIFIDEL against a naive per-pair loop over gensim's ``wmdistance``.

Run from the repository root (no Django needed)::

    .venv/bin/python benchmarks/vifidel_speed.py [--pairs 2000]

Pairs: the first ``--pairs`` captions of THumB 1.0 (MSCOCO, 5 systems x 500 images,
data/thumb/mscoco_THumB-1.0.jsonl). Objects of an image: the COCO category names
(the label set of the POPE files in data/pope_coco_objects) whose words occur in the
image's THumB references, each counted once per reference that mentions it; an image without such a
label gets the present objects of a POPE image instead (synthetic, but real labels). References: the
image's THumB references (for the weighted timing).

Vectors: the offline default GloVe 6B 50-d. Both sides use the same word processing
(``content_words`` / ``object_words``): the naive loop tokenises and calls
``KeyedVectors.wmdistance`` once per pair, as a user of gensim would. Times are the best of 3 runs.
Exits with status 1 if the two disagree by more than 1e-9 on any pair.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from benchmarks.timing import best_time  # noqa: E402
from captioneval.kernels.embeddings import describe_vectors, load_vectors  # noqa: E402
from captioneval.kernels.vifidel import content_words, object_words, vifidel_many  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"
THUMB = DATA / "thumb" / "mscoco_THumB-1.0.jsonl"
THUMB_REFS = DATA / "thumb" / "mscoco_references.json"
POPE = DATA / "pope_coco_objects" / "coco_pope_random.json"
TOLERANCE = 1e-9
REPEATS = 3
_QUESTION = re.compile(r"^Is there an? (.+?) in the image\?$")




def load_pairs(n_pairs: int):
    rows = [json.loads(line) for line in THUMB.read_text().splitlines() if line.strip()]
    refs = {}
    for line in THUMB_REFS.read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            refs[item["seg_id"]] = item["refs"]
    pope_present = defaultdict(list)
    for line in POPE.read_text().splitlines():
        q = json.loads(line)
        m = _QUESTION.match(q["text"].strip())
        if m and q["label"] == "yes":
            pope_present[q["image"]].append(m.group(1).strip())
    labels = sorted({label for objs in pope_present.values() for label in objs})
    fallback = list(pope_present.values())

    descriptions, objects, references = [], [], []
    n_fallback = 0
    for i, row in enumerate(rows[:n_pairs]):
        image_refs = refs[row["seg_id"]]
        ref_words = [set(content_words(r)) | {w[:-1] for w in content_words(r) if w.endswith("s")}
                     for r in image_refs]
        counts = Counter()
        for label in labels:
            words = content_words(label)
            for rw in ref_words:
                if words and all(w in rw for w in words):
                    counts[label] += 1
        if not counts:
            counts = Counter(fallback[i % len(fallback)])
            n_fallback += 1
        descriptions.append(row["hyp"])
        objects.append(dict(counts))
        references.append(image_refs)
    return descriptions, objects, references, n_fallback


def naive(kv, descriptions, objects):
    out = np.empty(len(descriptions))
    for i, (d, o) in enumerate(zip(descriptions, objects)):
        doc_o = [w for w, c in object_words(o).items() for _ in range(c)]
        out[i] = kv.wmdistance(doc_o, content_words(d))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=2000)
    args = parser.parse_args()

    t0 = time.perf_counter()
    kv = load_vectors()
    t_load = time.perf_counter() - t0
    descriptions, objects, references, n_fallback = load_pairs(args.pairs)
    n = len(descriptions)
    mean_obj = np.mean([sum(object_words(o).values()) for o in objects])
    mean_desc = np.mean([len(content_words(d)) for d in descriptions])
    print(f"vectors: {describe_vectors(kv)} (loaded in {t_load:.2f} s)")
    print(f"{n} pairs from THumB ({len(set(descriptions))} distinct captions), "
          f"{mean_desc:.1f} content words / caption, {mean_obj:.1f} object words / image; "
          f"{n_fallback} pairs use POPE objects (no COCO label in the references)")

    import logging
    logging.getLogger("gensim").setLevel(logging.ERROR)  # wmdistance logs OOV removals per pair

    t_naive, ref = best_time(lambda: naive(kv, descriptions, objects), REPEATS)
    t_batch, batch = best_time(lambda: vifidel_many(descriptions, objects, vectors=kv), REPEATS)
    t_emd2, batch_emd2 = best_time(lambda: vifidel_many(descriptions, objects, vectors=kv, solver="emd2"), REPEATS)
    t_weighted, weighted = best_time(lambda: vifidel_many(descriptions, objects, references, vectors=kv), REPEATS)

    ok = np.isfinite(ref)
    diff = float(np.max(np.abs(batch.distance[ok] - ref[ok]))) if ok.any() else 0.0
    diff_emd2 = float(np.max(np.abs(batch_emd2.distance[ok] - ref[ok]))) if ok.any() else 0.0
    same_skips = bool(np.array_equal(~ok, batch.skipped))

    print(f"naive loop (content_words + gensim wmdistance per pair): {t_naive:.3f} s, "
          f"{n / t_naive:,.0f} pairs/s")
    print(f"vifidel_many (network simplex):                          {t_batch:.3f} s, "
          f"{n / t_batch:,.0f} pairs/s, {t_naive / t_batch:.1f}x the naive loop")
    print(f"vifidel_many (solver='emd2'):                            {t_emd2:.3f} s, "
          f"{n / t_emd2:,.0f} pairs/s, {t_naive / t_emd2:.1f}x the naive loop")
    print(f"vifidel_many with references (weighted):                 {t_weighted:.3f} s, "
          f"{n / t_weighted:,.0f} pairs/s")
    print(f"max |distance - gensim| = {diff:.1e} (emd2 path {diff_emd2:.1e}); skipped {batch.n_skipped} "
          f"(gensim inf on the same pairs: {same_skips}); mean similarity {np.nanmean(batch.similarity):.3f} "
          f"unweighted, {np.nanmean(weighted.similarity):.3f} weighted")
    if not (diff <= TOLERANCE and diff_emd2 <= TOLERANCE and same_skips):
        print(f"FAIL: distances differ from gensim by more than {TOLERANCE:g}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
