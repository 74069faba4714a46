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


def offline(monkeypatch, tmp_path: Path) -> None:
    """Nothing may be downloaded in a test: the hub and our loader offline, an empty Hugging Face
    cache under ``tmp_path`` and no ``CAPTIONEVAL_MODELS_DIR`` (``monkeypatch`` undoes it all)."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "CAPTIONEVAL_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("CAPTIONEVAL_MODELS_DIR", raising=False)


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


def write_tiny_clip_torchscript(path: Path, seed: int = SEED) -> Path:
    """The tiny CLIP as a TorchScript archive holding fp16 parameters under OpenAI's names, the format
    of OpenAI's published files (``ViT-B-32.pt`` is a ``torch.jit.save`` of its CLIP module in fp16):
    the parameters sit in nested modules named by the key's parts; ``forward`` only returns
    ``logit_scale`` (the loader reads the archive's state dict, never runs it)."""
    import torch

    class Holder(torch.nn.Module):
        def forward(self):
            return self.logit_scale

    root = Holder()
    for key, value in tiny_clip_state_dict(seed).items():
        *parents, leaf = key.split(".")
        module = root
        for part in parents:
            if not hasattr(module, part):
                module.add_module(part, torch.nn.Module())
            module = getattr(module, part)
        module.register_parameter(leaf, torch.nn.Parameter(value.half(), requires_grad=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(root), str(path))
    return path


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


# --- a tiny RoBERTa for BERTScore ------------------------------------------------------------------

#: the tiny RoBERTa: hidden 32, 4 heads, 3 layers, a byte-level BPE of MERGES merges learned from the
#: first BPE_CAPTIONS Flickr8k captions, captions truncated at MAX_TOKENS tokens (as bert_score's
#: sent_encode truncates at the tokenizer's model_max_length: 512 for roberta-large)
ROBERTA_HIDDEN, ROBERTA_HEADS, ROBERTA_LAYERS, MERGES, BPE_CAPTIONS, MAX_TOKENS = 32, 4, 3, 200, 800, 24
ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # ids 0-3 as in roberta-large; <mask> last


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the alphabet of byte-level BPE): printable Latin-1
    bytes map to themselves, the others to chr(256 + k) in byte order (Radford et al. 2019's
    ``bytes_to_unicode``, written out from its definition)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def learn_bpe(captions: list[str], merges: int = MERGES) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A deterministic byte-level BPE (vocabulary, merges) learned from ``captions``: words are
    space-prefixed (as RoBERTa's tokenizer sees them with add_prefix_space), the most frequent
    adjacent pair is merged first, ties broken by the pair's string order."""
    alphabet = byte_alphabet()
    counts: dict[tuple[str, ...], int] = {}
    for caption in captions:
        for word in caption.split():
            key = tuple(alphabet[b] for b in (" " + word).encode("utf-8"))
            counts[key] = counts.get(key, 0) + 1
    learned: list[tuple[str, str]] = []
    for _ in range(merges):
        pairs: dict[tuple[str, str], int] = {}
        for word, n in counts.items():
            for pair in zip(word, word[1:]):
                pairs[pair] = pairs.get(pair, 0) + n
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        learned.append(best)
        merged = {}
        for word, n in counts.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + n
        counts = merged
    vocab = {tok: i for i, tok in enumerate(ROBERTA_SPECIALS)}
    for ch in byte_alphabet().values():
        vocab.setdefault(ch, len(vocab))
    for a, b in learned:
        vocab.setdefault(a + b, len(vocab))
    vocab["<mask>"] = len(vocab)
    return vocab, learned


def write_tiny_roberta(folder: Path, seed: int = SEED) -> Path:
    """Write a tiny RoBERTa as a Hugging Face model folder (config.json, model.safetensors, vocab.json,
    merges.txt, tokenizer_config.json, special_tokens_map.json): the BPE of :func:`learn_bpe`, every
    weight drawn from ``numpy.random.default_rng(seed)`` in ``named_parameters`` order (layer-norm
    weights near 1 and biases near 0, word embeddings N(0, 1), positions N(0, 0.1), the one token type 0:
    token vectors that are nearly uncorrelated, so that some cosines are negative; the rest N(0, 0.1)). Returns ``folder``."""
    import json

    import torch
    from transformers import RobertaConfig, RobertaModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab, merges = learn_bpe(flickr8k_captions(BPE_CAPTIONS))
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), "utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges), "utf-8")
    specials = {"bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>",
                "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>"}
    (folder / "special_tokens_map.json").write_text(json.dumps(specials), "utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "RobertaTokenizer", "model_max_length": MAX_TOKENS, "add_prefix_space": False,
         "errors": "replace", **specials}), "utf-8")
    config = RobertaConfig(vocab_size=len(vocab), hidden_size=ROBERTA_HIDDEN, num_hidden_layers=ROBERTA_LAYERS,
                           num_attention_heads=ROBERTA_HEADS, intermediate_size=4 * ROBERTA_HIDDEN,
                           max_position_embeddings=MAX_TOKENS + 2, type_vocab_size=1, pad_token_id=1,
                           bos_token_id=0, eos_token_id=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = RobertaModel(config, add_pooling_layer=False)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            shape = tuple(param.shape)
            if "LayerNorm.weight" in name:
                value = 1 + 0.1 * rng.standard_normal(shape)
            elif "LayerNorm.bias" in name:
                value = 0.02 * rng.standard_normal(shape)
            elif "word_embeddings" in name:
                value = rng.standard_normal(shape)
            elif "position_embeddings" in name:
                value = 0.1 * rng.standard_normal(shape)
            elif "token_type" in name:  # one type: a vector shared by every token, kept 0
                value = 0.0 * rng.standard_normal(shape)
            else:
                value = 0.1 * rng.standard_normal(shape)
            param.copy_(torch.from_numpy(np.asarray(value, dtype=np.float32)))
    model.save_pretrained(folder, safe_serialization=True)
    return folder
