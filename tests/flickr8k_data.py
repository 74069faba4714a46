"""Flickr8k-Expert loading helpers shared by tests and benchmarks (no Django).

Protocol (CLIPScore / VIFIDEL evaluation of Flickr8k-Expert): every row of ``ExpertAnnotations.txt``
(image file, candidate caption id, 3 expert ratings in 1..4) is one (image, candidate) pair; pairs
whose candidate is one of the image's own captions (id starting with ``<image>#``) are skipped,
leaving 5,664 pairs. The references of a pair are the image's 5 captions from
``Flickr8k.token.txt`` and the candidate is the text of the candidate caption id.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import NamedTuple

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "flickr8k"
N_EXPERT_PAIRS = 5664


class ExpertPair(NamedTuple):
    """One judged (image, candidate) pair; unpacks as (image, candidate, references, ratings)."""

    image: str  # image file name, e.g. "1056338697_4f7d7ce270.jpg"
    candidate: str  # candidate caption text (raw or tokenised)
    references: tuple[str, ...]  # the image's 5 captions, in caption-number order
    ratings: tuple[int, int, int]  # the 3 expert ratings (1..4)


def _read_captions(data_dir: Path) -> dict[str, str]:
    captions: dict[str, str] = {}
    with open(data_dir / "Flickr8k.token.txt", encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            cap_id, text = line.split("\t", 1)
            captions[cap_id] = text
    return captions


def references_by_image(captions: dict[str, str]) -> dict[str, list[tuple[int, str]]]:
    """Flickr8k caption id ``<image>#<k>`` -> text, regrouped as image -> [(k, text), ...]."""
    refs_of: dict[str, list[tuple[int, str]]] = {}
    for cap_id, text in captions.items():
        image, _, k = cap_id.rpartition("#")
        refs_of.setdefault(image, []).append((int(k), text))
    return refs_of


@functools.lru_cache(maxsize=None)
def _load(data_dir: str) -> tuple[ExpertPair, ...]:
    root = Path(data_dir)
    captions = _read_captions(root)
    refs_of = references_by_image(captions)
    pairs = []
    with open(root / "ExpertAnnotations.txt", encoding="utf-8") as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                continue
            image, cand_id, *ratings = line.split("\t")
            if cand_id.startswith(image + "#"):
                continue
            refs = tuple(text for _, text in sorted(refs_of[image]))
            pairs.append(ExpertPair(image, captions[cand_id], refs, tuple(int(r) for r in ratings)))
    return tuple(pairs)


def load_flickr8k_expert(data_dir: str | Path | None = None) -> list[ExpertPair]:
    """The 5,664 Flickr8k-Expert pairs with raw caption texts, in file order."""
    return list(_load(str(data_dir or DATA_DIR)))


@functools.lru_cache(maxsize=None)
def _load_tokenized(data_dir: str) -> tuple[ExpertPair, ...]:
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    pairs = _load(data_dir)
    texts = list(dict.fromkeys(t for p in pairs for t in (p.candidate, *p.references)))
    tokenized = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(texts)})
    if len(tokenized) != len(texts):
        raise RuntimeError(f"PTB tokeniser returned {len(tokenized)} captions for {len(texts)}")
    tok = {t: tokenized[i][0] for i, t in enumerate(texts)}
    return tuple(
        ExpertPair(p.image, tok[p.candidate], tuple(tok[r] for r in p.references), p.ratings) for p in pairs
    )


def load_flickr8k_expert_tokenized(data_dir: str | Path | None = None) -> list[ExpertPair]:
    """Same pairs with candidate and references PTB-tokenised (pycocoevalcap's PTBTokenizer: lower
    case, punctuation removed). Runs Java once per process and data directory (cached)."""
    return list(_load_tokenized(str(data_dir or DATA_DIR)))
