"""BERTScore (Zhang, Kishore, Wu, Weinberger & Artzi 2020, ICLR, "BERTScore: Evaluating Text Generation
with BERT", Sec. 3: P_BERT, R_BERT, F_BERT, importance weighting, baseline rescaling), computed as the
reference implementation, the ``bert-score`` package 0.3.13 (``bert_score.score`` and
``bert_score.utils``: ``sent_encode``, ``get_idf_dict``, ``bert_cos_score_idf``, ``greedy_cos_idf``),
computes it; equal to ``bert_score.score`` to 1e-6 (tests/test_learned_bertscore.py, on a tiny RoBERTa,
against goldens the unmodified package produced: scripts/learned_goldens_bertscore.py).

This module follows the reference's steps one by one (written anew, not copied), so the reference's
licence applies to it as a derived work:

    bert-score, MIT License. Copyright (c) 2019 Tianyi Zhang, Varsha Kishore, Felix Wu, Kilian Q.
    Weinberger, and Yoav Artzi. Permission is hereby granted, free of charge, to any person obtaining
    a copy of this software and associated documentation files (the "Software"), to deal in the
    Software without restriction, including without limitation the rights to use, copy, modify,
    merge, publish, distribute, sublicense, and/or sell copies of the Software, and to permit persons
    to whom the Software is furnished to do so, subject to the following conditions: The above
    copyright notice and this permission notice shall be included in all copies or substantial
    portions of the Software. THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS
    OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A
    PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE
    LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
    OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
    THE SOFTWARE.

The computation, for candidate x and reference y (token embeddings of the model's layer ``num_layers``,
each normalised to unit length, special tokens included):

* P = sum_i w(x_i) max_j cos(x_i, y_j) / sum_i w(x_i), R = the same from y's side, F = 2PR / (P + R);
  w = 1 for every token but the start and end tokens (``<s>``, ``</s>``; ``[CLS]``, ``[SEP]``), whose
  weight is 0 -- they are still matched, as targets of the other side's max; with ``idf`` w(t) =
  log((N + 1) / (c_t + 1)) over the N references of the call (c_t = references holding token t;
  unseen tokens log(N + 1)); special tokens then weigh log(1) = 0 too.
* Batch composition (kept, as it changes numbers): pairs are matched in chunks of ``batch_size`` (64)
  pairs, each sentence padded to the longest of its side in the chunk, and a padded position counts as
  cosine 0 in the max. A token whose best cosine is negative therefore gets 0 instead when the other
  sentence is shorter than the chunk's longest. With several references per candidate the pairs are
  flattened (candidate repeated per reference) before chunking.
* Several references: the max over references is taken separately for P, R and F (the F returned
  need not be the harmonic mean of the P and R returned).
* A sentence that is empty after ``strip()`` is [start, end]: P = R = 0 for its pairs and F = 0
  (0/0 -> NaN -> 0; the reference warns). bert-score 0.3.13's own code fails on an empty sentence under
  transformers 5 (its ``build_inputs_with_special_tokens`` is gone); here it is [cls, sep] as under 4.
* Rescaling (Sec. 3 "Baseline Rescaling"): s' = (s - b) / (1 - b) per P, R, F, after the max over
  references, with b the row ``num_layers`` (the row position, ``.iloc[num_layers]``) of the package's
  ``rescale_baseline/en/<model>.tsv``; :data:`ROBERTA_LARGE_BASELINES` holds roberta-large's.
* Tokenisation: ``tokenizer.encode(sentence.strip(), add_special_tokens=True, max_length=
  tokenizer.model_max_length, truncation=True)`` plus ``add_prefix_space=True`` for GPT-2 and
  RoBERTa tokenizers, the slow tokenizer class (``use_fast=False``). Under transformers 5 the
  ``add_prefix_space`` of ``encode`` is ignored (the first word is tokenised without its leading
  space, "A" not "ĠA"), under transformers 4 it is honoured: the same call is made here, so the
  numbers equal bert_score's in the same environment, and :func:`prefix_space_honoured` goes in the
  metric's signature.

Arithmetic in float32 as the reference's (torch); embeddings of each distinct sentence are computed
once, in batches of ``batch_size`` sentences of similar length (the reference batches by word count:
padding changes a transformer's output only at float rounding, ~1e-7).
"""
from __future__ import annotations

import math
from collections import Counter

import numpy as np

#: bert-score 0.3.13's default for English: roberta-large, layer 17 (``bert_score.utils.model2layers``)
DEFAULT_MODEL, DEFAULT_LAYER, DEFAULT_BATCH = "roberta-large", 17, 64
#: the reference: PyPI bert-score 0.3.13 (wheel sha256 bbbb4c7f...989b9), MIT
REFERENCE = "bert-score 0.3.13"

#: roberta-large's rescaling baselines (P, R, F) by layer (row position 0-24): bert-score 0.3.13's
#: ``bert_score/rescale_baseline/en/roberta-large.tsv`` (sha256 08e22483...9e122ae; MIT, see the
#: module docstring), read as float32 as ``torch.from_numpy(...).float()`` does
ROBERTA_LARGE_BASELINES = (
    (0.3712891, 0.37132213, 0.36826715), (0.67176163, 0.6717439, 0.6703483), (0.70031923, 0.7003052, 0.69969934),
    (0.7080897, 0.7081011, 0.707698), (0.6976306, 0.69762677, 0.69710517), (0.7187199, 0.71873325, 0.71828526),
    (0.74678195, 0.74678224, 0.74642223), (0.7772428, 0.7772184, 0.77691925), (0.8021733, 0.8021747, 0.8019093),
    (0.8067641, 0.80678225, 0.8065291), (0.8366976, 0.8367098, 0.8364913), (0.8163513, 0.816369, 0.8161064),
    (0.8175406, 0.8175611, 0.81728977), (0.82106245, 0.8210674, 0.82080233), (0.81487834, 0.8148861, 0.8145652),
    (0.8243552, 0.8243522, 0.8240494), (0.8341641, 0.8341684, 0.833912), (0.83150584, 0.8314941, 0.83122575),
    (0.8314624, 0.83146274, 0.8311686), (0.82761073, 0.8276117, 0.8273196), (0.799873, 0.79988, 0.79956234),
    (0.8082163, 0.80819315, 0.8079286), (0.83196104, 0.83195347, 0.83174026), (0.8408042, 0.8408027, 0.8405716),
    (0.96022236, 0.96021587, 0.960168),
)


def read_baseline(path: str, num_layers: int) -> tuple[float, float, float]:
    """(P, R, F) baselines of a bert-score baseline file (a CSV with header ``LAYER,P,R,F``; the row at
    position ``num_layers`` after the header, as the reference's ``pd.read_csv(path).iloc[num_layers]``).
    Raises ValueError for a file without that row, OSError for a missing file."""
    with open(path, encoding="utf-8") as f:
        rows = [line.strip().split(",") for line in f if line.strip()]
    if len(rows) < 2 or [c.strip() for c in rows[0][1:4]] != ["P", "R", "F"]:
        raise ValueError(f"{path}: not a bert-score baseline file (header LAYER,P,R,F)")
    if not 0 <= num_layers < len(rows) - 1:
        raise ValueError(f"{path}: no baseline row for layer {num_layers} ({len(rows) - 1} rows)")
    p, r, f_ = (float(v) for v in rows[1 + num_layers][1:4])
    return p, r, f_


def baseline_for(model: str, num_layers: int, baseline: str | tuple | None) -> tuple[float, float, float]:
    """The (P, R, F) rescaling baseline: ``baseline`` given as a triple or a baseline file path, else
    roberta-large's bundled row when ``model`` is roberta-large. Raises ValueError otherwise (no
    baseline is known for that model: pass the package's file for it)."""
    if isinstance(baseline, (tuple, list)):
        if len(baseline) != 3:
            raise ValueError(f"a baseline is (P, R, F), got {baseline!r}")
        return tuple(float(v) for v in baseline)  # type: ignore[return-value]
    if baseline is not None:
        return read_baseline(str(baseline), num_layers)
    if model.rstrip("/").split("/")[-1] == DEFAULT_MODEL and 0 <= num_layers < len(ROBERTA_LARGE_BASELINES):
        return ROBERTA_LARGE_BASELINES[num_layers]
    raise ValueError(f"no rescaling baseline known for {model!r} layer {num_layers}: pass baseline= the file "
                     "bert-score ships for it (bert_score/rescale_baseline/en/<model>.tsv) or a (P, R, F) triple")


def encode(tokenizer, sentence: str) -> list[int]:
    """Token ids of one sentence with the start and end tokens, as ``bert_score.utils.sent_encode``
    (see the module docstring): stripped; an empty sentence is [cls, sep]; truncated at the tokenizer's
    ``model_max_length``; ``add_prefix_space=True`` for GPT-2/RoBERTa tokenizers."""
    from transformers import GPT2Tokenizer, RobertaTokenizer

    sentence = sentence.strip()
    if not sentence:
        return [tokenizer.cls_token_id, tokenizer.sep_token_id]
    kw = {"add_prefix_space": True} if isinstance(tokenizer, (GPT2Tokenizer, RobertaTokenizer)) else {}
    return list(tokenizer.encode(sentence, add_special_tokens=True, max_length=tokenizer.model_max_length,
                                 truncation=True, **kw))


def prefix_space_honoured(tokenizer) -> bool | None:
    """For a GPT-2/RoBERTa tokenizer: whether :func:`encode` tokenises the first word with its leading
    space (transformers 4: True; 5: False); None for other tokenizers (no prefix space asked)."""
    from transformers import GPT2Tokenizer, RobertaTokenizer

    if not isinstance(tokenizer, (GPT2Tokenizer, RobertaTokenizer)):
        return None
    probe = encode(tokenizer, "a a")
    return len(probe) >= 4 and probe[1] == probe[2]


def idf_weights(reference_ids: list[list[int]]) -> dict[int, float]:
    """Token id -> idf over the references (each reference one document, every occurrence in the list
    counted, duplicates included, as ``get_idf_dict`` on the flattened references): log((N + 1) /
    (c + 1)); tokens not in the dict weigh log(N + 1) (see :func:`weight_of`)."""
    counts = Counter(t for ids in reference_ids for t in set(ids))
    n = len(reference_ids)
    return {t: math.log((n + 1) / (c + 1)) for t, c in counts.items()}


def weight_of(ids: list[int], idf: dict[int, float] | None, n_refs: int, special: tuple[int, ...]) -> list[float]:
    """Importance weights of a sentence's tokens: with ``idf`` its values (unseen tokens log(n_refs + 1));
    without, 1 for every token and 0 for the ``special`` (start and end) ids."""
    if idf is None:
        return [0.0 if t in special else 1.0 for t in ids]
    unseen = math.log(n_refs + 1)
    return [idf.get(t, unseen) for t in ids]


def embed(model, ids: list[list[int]], pad_id: int, batch_size: int, device: str):
    """Last hidden states (layer ``num_layers`` of a truncated model) of each sentence: a list of float32
    torch tensors (len_i, d) on the CPU, in the order of ``ids``. Sentences go through the model in
    batches of ``batch_size`` sorted by length (longest first), padded with ``pad_id`` and masked."""
    import torch

    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    out: list = [None] * len(ids)
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            width = max(len(ids[i]) for i in chunk)
            x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, i in enumerate(chunk):
                x[row, :len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                mask[row, :len(ids[i])] = 1
            hidden = model(x.to(device), attention_mask=mask.to(device))[0].float().cpu()
            for row, i in enumerate(chunk):
                out[i] = hidden[row, :len(ids[i])]
    return out


def greedy_match(cand_emb, cand_w, ref_emb, ref_w, batch_size: int):
    """P, R, F (float32 torch tensors (n_pairs,)) of aligned pairs (candidate i with reference i) by
    greedy cosine matching in chunks of ``batch_size`` pairs (padded positions count as cosine 0 in the
    max; see the module docstring). ``*_emb``: lists of (len, d) tensors; ``*_w``: lists of weight lists."""
    import torch

    ps, rs, fs = [], [], []

    def pad(embs, weights):
        width = max(e.shape[0] for e in embs)
        e = torch.zeros((len(embs), width, embs[0].shape[1]), dtype=torch.float32)
        w = torch.zeros((len(embs), width), dtype=torch.float32)
        m = torch.zeros((len(embs), width), dtype=torch.float32)
        for i, (emb, wt) in enumerate(zip(embs, weights)):
            e[i, :emb.shape[0]] = emb / torch.norm(emb, dim=-1, keepdim=True)
            w[i, :emb.shape[0]] = torch.tensor(wt, dtype=torch.float32)
            m[i, :emb.shape[0]] = 1
        return e, w, m

    with torch.no_grad():
        for start in range(0, len(cand_emb), batch_size):
            sl = slice(start, start + batch_size)
            h, hw, hm = pad(cand_emb[sl], cand_w[sl])
            r, rw, rm = pad(ref_emb[sl], ref_w[sl])
            sim = torch.bmm(h, r.transpose(1, 2)) * torch.bmm(hm.unsqueeze(2), rm.unsqueeze(1))
            p = (sim.max(dim=2)[0] * (hw / hw.sum(dim=1, keepdim=True))).sum(dim=1)
            rec = (sim.max(dim=1)[0] * (rw / rw.sum(dim=1, keepdim=True))).sum(dim=1)
            f = 2 * p * rec / (p + rec)
            empty = (hm.sum(dim=1) == 2) | (rm.sum(dim=1) == 2)  # [start, end] only: an empty sentence
            p, rec = p.masked_fill(empty, 0.0), rec.masked_fill(empty, 0.0)
            ps.append(p)
            rs.append(rec)
            fs.append(f.masked_fill(torch.isnan(f), 0.0))
    return torch.cat(ps), torch.cat(rs), torch.cat(fs)


def bert_score(tokenizer, model, candidates: list[str], references: list[list[str]], idf: bool = False,
               baseline: tuple[float, float, float] | None = None, batch_size: int = DEFAULT_BATCH,
               device: str = "cpu") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BERTScore (P, R, F) of each candidate against its references, as ``bert_score.score(candidates,
    references, ..., idf=idf, batch_size=batch_size, rescale_with_baseline=baseline is not None)``.

    ``candidates``: n raw strings; ``references``: n non-empty lists of raw strings; ``tokenizer`` /
    ``model``: from :func:`captioneval.kernels.learned.models.load_text_model` (the model already
    truncated to its layer); ``baseline``: (P, R, F) to rescale with (:func:`baseline_for`), or None.
    Returns three float32 arrays (n,): raw values in [-1, 1] (token cosines; 0 for empty sentences),
    rescaled ones (s - b) / (1 - b) below 1 and unbounded below. Raises ValueError for mismatched
    lengths or a candidate without references."""
    import torch

    if len(candidates) != len(references):
        raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
    if any(len(r) == 0 for r in references):
        raise ValueError("every candidate needs at least one reference")
    pairs_c = [c for c, refs in zip(candidates, references) for _ in refs]
    pairs_r = [r for refs in references for r in refs]
    if not pairs_c:
        empty = np.zeros(0, dtype=np.float32)
        return empty, empty, empty
    sentences = list(dict.fromkeys(pairs_r + pairs_c))
    ids = {s: encode(tokenizer, s) for s in sentences}
    embs = dict(zip(sentences, embed(model, [ids[s] for s in sentences], tokenizer.pad_token_id, batch_size, device)))
    weights_idf = idf_weights([ids[r] for r in pairs_r]) if idf else None
    special = (tokenizer.sep_token_id, tokenizer.cls_token_id)

    def w(s):
        return weight_of(ids[s], weights_idf, len(pairs_r), special)

    p, r, f = greedy_match([embs[c] for c in pairs_c], [w(c) for c in pairs_c],
                           [embs[x] for x in pairs_r], [w(x) for x in pairs_r], batch_size)
    bounds = np.cumsum([0] + [len(refs) for refs in references])
    prf = torch.stack([p, r, f], dim=-1)
    best = torch.stack([prf[a:b].max(dim=0)[0] for a, b in zip(bounds[:-1], bounds[1:])])
    best = best.numpy()
    prf = best[:, 0].copy(), best[:, 1].copy(), best[:, 2].copy()
    return rescale(prf, baseline) if baseline is not None else prf


def rescale(prf, baseline: tuple[float, float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Baseline rescaling (Zhang et al. 2020, Sec. 3): (s - b) / (1 - b) for each of P, R, F (float32
    arrays (n,)) with its baseline b (rounded to float32, as the reference's ``.float()``); float32
    arithmetic as the reference's. Returns three new float32 arrays."""
    out = []
    for values, b in zip(prf, baseline):
        b32 = np.float32(b)
        out.append(((np.asarray(values, dtype=np.float32) - b32) / (np.float32(1) - b32)).astype(np.float32))
    return tuple(out)  # type: ignore[return-value]
