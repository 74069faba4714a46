"""The caption sets of the METEOR goldens (tests/data/meteor/, scripts/meteor_goldens.py): every
candidate of the bundled datasets with its references, raw and PTB-tokenised, plus the hostile
corpora. No Django.

Each set is a list of (candidate, [references]) in a fixed order:

* ``flickr8k-expert``: the 5,664 judged pairs (tests.flickr8k_data), the image's 5 captions;
* ``flickr8k-crowdflower``: the 47,830 judged pairs of CrowdFlowerAnnotations.txt, the image's 5
  captions less the candidate itself where it is one of them (as the importer does);
* ``thumb``: the 2,500 THumB 1.0 system captions, their image's COCO references;
* ``pascal50s``: both candidates of the 4,000 pairs (sent1 then sent2), each against the first 5 of
  its image's 50 references (the full 50 would make the golden run ten times longer);
* ``vifidel-sample``: the VIFIDEL sample description against its references;
* ``hostile``: tests/data/hostile_captions.json (591 captions written for the tokeniser), each caption
  against its two neighbours and a plain caption, and each plain caption against three of them;
* ``meteor-hostile``: tests/data/meteor/hostile_pairs.json, pairs written for METEOR's normaliser and
  beam (quotes, dashes, abbreviations, numbers with commas, empty and punctuation-only texts, long
  repetitive texts that make the beam prune).

``ptb/<name>``: the same pairs PTB-tokenised (captioneval.text.ptb, equal to pycocoevalcap's Java
tokeniser), as COCOEvalCap feeds METEOR.
"""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
PLAIN = "a dog runs on the grass"


def flickr8k_expert():
    from tests.flickr8k_data import load_flickr8k_expert

    return [(p.candidate, list(p.references)) for p in load_flickr8k_expert()]


def _flickr8k_captions() -> dict[str, str]:
    captions = {}
    with open(DATA / "flickr8k" / "Flickr8k.token.txt", encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if "\t" in line:
                cid, text = line.split("\t", 1)
                captions[cid] = text
    return captions


def flickr8k_crowdflower():
    captions = _flickr8k_captions()
    refs: dict[str, list[tuple[str, str]]] = {}
    for cid, text in captions.items():
        refs.setdefault(cid.rpartition("#")[0], []).append((cid, text))
    out = []
    with open(DATA / "flickr8k" / "CrowdFlowerAnnotations.txt", encoding="utf-8") as fh:
        for line in fh:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 5:
                image, cid = fields[0].strip(), fields[1].strip()
                out.append((captions[cid], [t for c, t in sorted(refs[image]) if c != cid]))
    return out


def thumb():
    refs = {}
    for line in (DATA / "thumb" / "mscoco_references.json").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            refs[row["seg_id"]] = row["refs"]
    out = []
    for line in (DATA / "thumb" / "mscoco_THumB-1.0.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            out.append((row["hyp"], list(refs[row["seg_id"]])))
    return out


def pascal50s():
    import scipy.io

    def text(value) -> str:
        return value if isinstance(value, str) else (str(value.ravel()[0]) if value.size else "")

    refs = {}
    for entry in scipy.io.loadmat(str(DATA / "pascal50s" / "pascal50S.mat"))["refs"].ravel():
        refs[text(entry["image"])] = [text(s) for s in entry["sent"].ravel()][:5]
    pairs = scipy.io.loadmat(str(DATA / "pascal50s" / "pair_pascal.mat"))["new_input"].ravel()
    out = []
    for field in ("sent1", "sent2"):
        for entry in pairs:
            out.append((text(entry[field]), refs[text(entry["name"])]))
    return out


def vifidel_sample():
    desc = [x for x in (DATA / "vifidel_sample" / "sample.desc").read_text(encoding="utf-8").splitlines() if x]
    refs = [x for x in (DATA / "vifidel_sample" / "sample.refs").read_text(encoding="utf-8").splitlines() if x]
    return [(d, refs) for d in desc]


def hostile():
    texts = json.loads((ROOT / "tests" / "data" / "hostile_captions.json").read_text(encoding="utf-8"))
    n = len(texts)
    out = [(texts[i], [texts[i - 1], texts[(i + 1) % n], PLAIN]) for i in range(n)]
    out += [(PLAIN, [texts[i], texts[(i + 1) % n], texts[(i + 2) % n]]) for i in range(0, n, 3)]
    return out


def meteor_hostile():
    rows = json.loads((ROOT / "tests" / "data" / "meteor" / "hostile_pairs.json").read_text(encoding="utf-8"))
    return [(c, list(r)) for c, r in rows]


SETS = {
    "flickr8k-expert": flickr8k_expert,
    "flickr8k-crowdflower": flickr8k_crowdflower,
    "thumb": thumb,
    "pascal50s": pascal50s,
    "vifidel-sample": vifidel_sample,
    "hostile": hostile,
    "meteor-hostile": meteor_hostile,
}


def pairs(name: str):
    """The (candidate, references) list of set ``name`` (``ptb/<set>`` for the tokenised variant)."""
    if name.startswith("ptb/"):
        from captioneval.text import ptb

        raw = SETS[name[4:]]()
        cands = ptb.tokenize([c for c, _ in raw])
        flat = ptb.tokenize([r for _, refs in raw for r in refs])
        out, k = [], 0
        for cand, (_, refs) in zip(cands, raw):
            out.append((cand, flat[k:k + len(refs)]))
            k += len(refs)
        return out
    return SETS[name]()


NAMES = [name for base in SETS for name in (base, "ptb/" + base)]
