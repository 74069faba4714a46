"""Equality and speed of the pure-Python PTB tokeniser against pycocoevalcap's Java tokeniser.

Run from the repository root (no Django needed)::

    .venv/bin/python benchmarks/tokenizer_equality.py            # Flickr8k-CrowdFlower captions
    .venv/bin/python benchmarks/tokenizer_equality.py --quick    # a 5,000-caption sample of them
    .venv/bin/python benchmarks/tokenizer_equality.py --all      # every bundled dataset + hostile corpus
    .venv/bin/python benchmarks/tokenizer_equality.py --json out.json

Compares ``captioneval.text.tokenizer.ptb_tokenize_java`` (pycocoevalcap 1.2: Stanford CoreNLP 3.4.1
``PTBTokenizer -preserveLines -lowerCase``, one JVM per batch, its start included in the time) with
``captioneval.text.ptb.tokenize`` (its cache cleared before the run, so the time includes tokenising each
distinct caption once) on the same caption list, in the same run. Default set: the Flickr8k-CrowdFlower
dataset's captions as the importer stores them (one candidate per judged pair, 47,830, and the five
reference captions of each of the 1,000 judged images; data/flickr8k). Prints the number of captions
compared, how many differ (with up to 20 examples, both outputs), both times and their ratio.
``--json FILE`` writes ``{"captions": N, "differing": M, "ratio": R}`` (R = Java time / Python time of the
first call, which includes compiling the Python lexer's rules, as the Java time includes the JVM start;
the time of a second run with an empty cache is printed too).
Exit status 1 if any caption differs.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from captioneval.text import ptb  # noqa: E402
from captioneval.text.tokenizer import ptb_tokenize_java  # noqa: E402

DATA = REPO_ROOT / "data"
HOSTILE = REPO_ROOT / "tests" / "data" / "hostile_captions.json"
QUICK_SAMPLE = 5000
MAX_SHOWN = 20


def _flickr8k_captions() -> dict[str, str]:
    captions = {}
    with open(DATA / "flickr8k" / "Flickr8k.token.txt", encoding="utf-8") as fh:
        for line in fh:
            if "\t" in line:
                cid, text = line.rstrip("\n").split("\t", 1)
                captions[cid.strip()] = text.strip()
    return captions


def crowdflower_captions() -> list[str]:
    """Flickr8k-CrowdFlower as imported: each judged pair's candidate (file order), then the five
    captions of each judged image (first-judged order). Texts stripped, as the importer stores them."""
    captions = _flickr8k_captions()
    refs: dict[str, list[str]] = {}
    for cid, text in captions.items():
        refs.setdefault(cid.rpartition("#")[0], []).append(text)
    candidates, images = [], {}
    with open(DATA / "flickr8k" / "CrowdFlowerAnnotations.txt", encoding="utf-8") as fh:
        for line in fh:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 5:
                images.setdefault(fields[0].strip(), None)
                candidates.append(captions[fields[1].strip()])
    return candidates + [t for image in images for t in refs[image]]


def flickr8k_token_captions() -> list[str]:
    """All 40,460 raw captions of Flickr8k.token.txt (Expert and CrowdFlower draw on them), unstripped."""
    with open(DATA / "flickr8k" / "Flickr8k.token.txt", encoding="utf-8") as fh:
        return [line.rstrip("\n").split("\t", 1)[1] for line in fh if "\t" in line]


def thumb_captions() -> list[str]:
    """THumB 1.0: the COCO references and the systems' captions (data/thumb)."""
    refs = [r for line in (DATA / "thumb" / "mscoco_references.json").read_text(encoding="utf-8").splitlines()
            if line.strip() for r in json.loads(line)["refs"]]
    hyps = [json.loads(line)["hyp"] for line in (DATA / "thumb" / "mscoco_THumB-1.0.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()]
    return refs + hyps


def pascal50s_captions() -> list[str]:
    """PASCAL-50S: the 50,000 reference sentences and the 8,000 candidate sentences, raw (scipy.io.loadmat)."""
    import scipy.io

    def text(value) -> str:
        return value if isinstance(value, str) else (str(value.ravel()[0]) if value.size else "")

    refs = scipy.io.loadmat(str(DATA / "pascal50s" / "pascal50S.mat"))["refs"].ravel()
    out = [text(s) for entry in refs for s in entry["sent"].ravel()]
    pairs = scipy.io.loadmat(str(DATA / "pascal50s" / "pair_pascal.mat"))["new_input"].ravel()
    out += [text(entry[field]) for entry in pairs for field in ("sent1", "sent2")]
    return out


def selfcider_example_captions() -> list[str]:
    """The official Self-CIDEr example's sampled captions (data/coco_multicaption_selfcider_example)."""
    merge = json.loads((DATA / "coco_multicaption_selfcider_example" / "merge_results.json").read_text(encoding="utf-8"))
    return [c for entry in merge for c in entry["captions"]]


def vifidel_sample_captions() -> list[str]:
    return [line for line in (DATA / "vifidel_sample" / "sample.desc").read_text(encoding="utf-8").splitlines() if line]


def pope_questions() -> list[str]:
    """The POPE questions (text field of data/pope_coco_objects/coco_pope_random.json, JSON lines)."""
    return [json.loads(line)["text"] for line in (DATA / "pope_coco_objects" / "coco_pope_random.json").read_text(
        encoding="utf-8").splitlines() if line.strip()]


def hostile_captions() -> list[str]:
    """The hand-written hostile corpus (tests/data/hostile_captions.json, see tests/data/README.md)."""
    return json.loads(HOSTILE.read_text(encoding="utf-8"))


#: Every bundled caption set, by name (``--all``).
DATASETS = {
    "flickr8k-token": flickr8k_token_captions,
    "flickr8k-crowdflower": crowdflower_captions,
    "thumb": thumb_captions,
    "pascal50s": pascal50s_captions,
    "selfcider-example": selfcider_example_captions,
    "vifidel-sample": vifidel_sample_captions,
    "pope-questions": pope_questions,
    "hostile": hostile_captions,
}


def compare(texts: list[str]) -> tuple[float, float, float, list[tuple[str, str, str]]]:
    """Tokenise ``texts`` with both implementations; return (Java s, Python s, Python s again,
    [(text, java, python)...] for the differing captions). The first Python time includes compiling the
    lexer's rules if this is the process's first call (the analogue of the JVM start); the second is
    a fresh run (empty caption cache) with the rules compiled."""
    t0 = time.perf_counter()
    java = ptb_tokenize_java(texts)
    t_java = time.perf_counter() - t0
    ptb._CACHE.clear()
    t0 = time.perf_counter()
    python = ptb.tokenize(texts)
    t_python = time.perf_counter() - t0
    ptb._CACHE.clear()
    t0 = time.perf_counter()
    again = ptb.tokenize(texts)
    t_again = time.perf_counter() - t0
    assert again == python
    return t_java, t_python, t_again, [(t, j, p) for t, j, p in zip(texts, java, python) if j != p]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help=f"a {QUICK_SAMPLE:,}-caption sample of the CrowdFlower set")
    mode.add_argument("--all", action="store_true", help="every bundled dataset and the hostile corpus")
    parser.add_argument("--json", metavar="FILE", help='write {"captions": N, "differing": M, "ratio": R}')
    args = parser.parse_args(argv)

    if args.all:
        sets = {name: load() for name, load in DATASETS.items()}
    elif args.quick:
        captions = crowdflower_captions()
        sets = {"flickr8k-crowdflower (sample)": random.Random(18).sample(captions, QUICK_SAMPLE)}
    else:
        sets = {"flickr8k-crowdflower": crowdflower_captions()}

    total_n = total_bad = 0
    total_java = total_python = total_again = 0.0
    shown = 0
    for name, texts in sets.items():
        t_java, t_python, t_again, bad = compare(texts)
        total_n += len(texts)
        total_bad += len(bad)
        total_java += t_java
        total_python += t_python
        total_again += t_again
        print(f"{name}: {len(texts):,} captions ({len(set(texts)):,} distinct), {len(bad):,} differ; "
              f"Java {t_java:.3f} s, Python {t_python:.3f} s ({t_java / t_python:.1f}x), "
              f"again {t_again:.3f} s ({t_java / t_again:.1f}x)")
        for text, java, python in bad:
            if shown < MAX_SHOWN:
                print(f"  input  {text!r}\n  java   {java!r}\n  python {python!r}")
                shown += 1
    ratio = total_java / total_python
    print(f"total: {total_n:,} captions compared, {total_bad:,} differing; Java {total_java:.3f} s (JVM start "
          f"included), Python {total_python:.3f} s (first call: rules compiled); Python is {ratio:.1f}x faster "
          f"({total_java / total_again:.1f}x with the rules already compiled)")
    if args.json:
        Path(args.json).write_text(json.dumps({"captions": total_n, "differing": total_bad, "ratio": ratio}))
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
