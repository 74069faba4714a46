# This module follows OpenAI's CLIP tokenizer (clip/simple_tokenizer.py and clip.tokenize in
# https://github.com/openai/CLIP, commit d05afc436d78f1c48dc0dbf8e5980a9d471f35f6) step by step, and
# ships its vocabulary file (captioneval/kernels/data/bpe_simple_vocab_16e6.txt.gz, sha256
# 924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a). Both are under OpenAI's licence:
#
#   MIT License
#
#   Copyright (c) 2021 OpenAI
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
"""OpenAI CLIP's byte-level BPE tokenizer (Radford et al. 2021), as ``clip.tokenize(text, truncate=True)``
computes it: ftfy + HTML unescaping, whitespace collapsing, lower-casing, byte-level BPE over the
49,152 merges of ``bpe_simple_vocab_16e6.txt.gz``, start token 49406, end token 49407, zero padding
to 77 positions; a longer text is cut to 77 tokens whose last one is replaced by the end token.

Needs ``ftfy`` and ``regex`` (the ``learned`` extra). No torch: returns numpy arrays."""
from __future__ import annotations

import gzip
import html
import os
from functools import lru_cache

import numpy as np

#: the vocabulary shipped with captioneval (OpenAI's, MIT)
VOCAB_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "bpe_simple_vocab_16e6.txt.gz")
CONTEXT_LENGTH = 77
SOT, EOT = 49406, 49407


@lru_cache()
def bytes_to_unicode() -> dict[int, str]:
    """OpenAI's reversible map from the 256 byte values to printable unicode characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def _pairs(word: tuple[str, ...]) -> set[tuple[str, str]]:
    return {(a, b) for a, b in zip(word[:-1], word[1:])}


def _clean(text: str) -> str:
    import ftfy
    import regex as re

    text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


class ClipTokenizer:
    """OpenAI CLIP's tokenizer. ``ClipTokenizer().encode(text)`` -> BPE ids without start/end tokens;
    :meth:`tokenize` -> (n, 77) int64 ids as ``clip.tokenize(texts, truncate=True)``."""

    def __init__(self, vocab_path: str = VOCAB_PATH):
        import regex as re

        self.byte_encoder = bytes_to_unicode()
        merges = gzip.open(vocab_path).read().decode("utf-8").split("\n")
        merges = [tuple(m.split()) for m in merges[1:49152 - 256 - 2 + 1]]
        vocab = list(self.byte_encoder.values())
        vocab = vocab + [v + "</w>" for v in vocab]
        vocab.extend("".join(m) for m in merges)
        vocab.extend(["<|startoftext|>", "<|endoftext|>"])
        self.encoder = {v: i for i, v in enumerate(vocab)}
        self.bpe_ranks = {m: i for i, m in enumerate(merges)}
        self.cache = {"<|startoftext|>": "<|startoftext|>", "<|endoftext|>": "<|endoftext|>"}
        self.pattern = re.compile(
            r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
            re.IGNORECASE)

    def bpe(self, token: str) -> str:
        """Byte-pair merges of one pre-token (lowest merge rank first); space-separated sub-words."""
        if token in self.cache:
            return self.cache[token]
        word = tuple(token[:-1]) + (token[-1] + "</w>",)
        pairs = _pairs(word)
        if not pairs:
            return token + "</w>"
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word: list[str] = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = _pairs(word)
        out = " ".join(word)
        self.cache[token] = out
        return out

    def encode(self, text: str) -> list[int]:
        """BPE ids of ``text`` after OpenAI's cleaning and lower-casing (no start / end token)."""
        import regex as re

        ids: list[int] = []
        text = _clean(text).lower()
        for token in re.findall(self.pattern, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return ids

    def tokenize(self, texts: list[str], context_length: int = CONTEXT_LENGTH) -> np.ndarray:
        """(len(texts), context_length) int64: start token, BPE ids, end token, zeros; a row longer
        than ``context_length`` is cut and its last position set to the end token (``truncate=True``)."""
        out = np.zeros((len(texts), context_length), dtype=np.int64)
        for i, text in enumerate(texts):
            ids = [SOT] + self.encode(text) + [EOT]
            if len(ids) > context_length:
                ids = ids[:context_length]
                ids[-1] = EOT
            out[i, :len(ids)] = ids
        return out


@lru_cache(maxsize=4)
def clip_tokenizer(vocab_path: str = VOCAB_PATH) -> ClipTokenizer:
    """A shared :class:`ClipTokenizer` for ``vocab_path`` (reading the vocabulary takes ~0.3 s)."""
    return ClipTokenizer(vocab_path)
