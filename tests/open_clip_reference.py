"""An independent forward pass of open_clip's ViT CLIP in plain torch, for tests/test_learned_open_clip.py.

It follows open_clip's ``src/open_clip/transformer.py`` (``VisionTransformer`` with ``pool_type="tok"``,
``TextTransformer`` with argmax pooling, ``ResidualAttentionBlock`` over ``nn.MultiheadAttention``) and
``model.py`` (``CLIP.encode_image`` / ``encode_text``) operation by operation on an OpenAI-layout state
dict, with attention written out (no transformers, no code of captioneval): the check that our
conversion to ``transformers.CLIPModel`` (heads from ``head_width``, GELU, MLP widths) computes
what open_clip computes. open_clip is MIT-licensed (Copyright (c) 2012-2021 Gabriel Ilharco, Mitchell
Wortsman, Nicholas Carlini, Rohan Taori, Achal Dave, Vaishaal Shankar, John Miller, Hongseok Namkoong,
Hannaneh Hajishirzi, Ali Farhadi, Ludwig Schmidt).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _attention(x, sd, p, heads, mask=None):
    """nn.MultiheadAttention(width, heads) forward on (L, N, width) with in_proj / out_proj of block ``p``."""
    length, batch, width = x.shape
    qkv = F.linear(x, sd[p + "attn.in_proj_weight"], sd[p + "attn.in_proj_bias"])
    q, k, v = qkv.chunk(3, dim=-1)
    head = width // heads

    def split(t):
        return t.reshape(length, batch * heads, head).transpose(0, 1)  # (N*heads, L, head)

    q, k, v = split(q) / math.sqrt(head), split(k), split(v)
    scores = q @ k.transpose(1, 2)
    if mask is not None:
        scores = scores + mask
    out = torch.softmax(scores, dim=-1) @ v  # (N*heads, L, head)
    out = out.transpose(0, 1).reshape(length, batch, width)
    return F.linear(out, sd[p + "attn.out_proj.weight"], sd[p + "attn.out_proj.bias"])


def _blocks(x, sd, prefix, heads, quick_gelu, mask=None):
    width = x.shape[-1]
    layers = len({k.split(".")[len(prefix.split("."))] for k in sd if k.startswith(prefix + ".")})
    for i in range(layers):
        p = f"{prefix}.{i}."
        x = x + _attention(F.layer_norm(x, (width,), sd[p + "ln_1.weight"], sd[p + "ln_1.bias"], 1e-5), sd, p, heads, mask)
        h = F.linear(F.layer_norm(x, (width,), sd[p + "ln_2.weight"], sd[p + "ln_2.bias"], 1e-5),
                     sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"])
        h = h * torch.sigmoid(1.702 * h) if quick_gelu else F.gelu(h)
        x = x + F.linear(h, sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"])
    return x


@torch.no_grad()
def encode_image(sd: dict, pixels: torch.Tensor, head_width: int, quick_gelu: bool) -> torch.Tensor:
    """open_clip ``CLIP.encode_image(normalize=False)``: (n, 3, H, W) float32 -> (n, embed_dim)."""
    width = sd["visual.conv1.weight"].shape[0]
    x = F.conv2d(pixels, sd["visual.conv1.weight"], stride=sd["visual.conv1.weight"].shape[-1])
    x = x.reshape(x.shape[0], width, -1).permute(0, 2, 1)
    cls = sd["visual.class_embedding"].to(x.dtype) + torch.zeros(x.shape[0], 1, width, dtype=x.dtype)
    x = torch.cat([cls, x], dim=1) + sd["visual.positional_embedding"]
    x = F.layer_norm(x, (width,), sd["visual.ln_pre.weight"], sd["visual.ln_pre.bias"], 1e-5)
    x = _blocks(x.permute(1, 0, 2), sd, "visual.transformer.resblocks", width // head_width, quick_gelu).permute(1, 0, 2)
    x = F.layer_norm(x, (width,), sd["visual.ln_post.weight"], sd["visual.ln_post.bias"], 1e-5)
    return x[:, 0] @ sd["visual.proj"]


@torch.no_grad()
def encode_text(sd: dict, ids: torch.Tensor, heads: int, quick_gelu: bool) -> torch.Tensor:
    """open_clip ``CLIP.encode_text(normalize=False)``: token ids (n, 77) -> (n, embed_dim)."""
    width = sd["ln_final.weight"].shape[0]
    length = ids.shape[1]
    x = sd["token_embedding.weight"][ids] + sd["positional_embedding"]
    mask = torch.full((length, length), float("-inf")).triu_(1)  # open_clip build_causal_mask
    x = _blocks(x.permute(1, 0, 2), sd, "transformer.resblocks", heads, quick_gelu, mask).permute(1, 0, 2)
    x = F.layer_norm(x, (width,), sd["ln_final.weight"], sd["ln_final.bias"], 1e-5)
    return x[torch.arange(x.shape[0]), ids.argmax(dim=-1)] @ sd["text_projection"]
