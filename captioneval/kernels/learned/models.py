"""Finding and loading the weights of the learned metrics: CLIP-family encoders and RoBERTa/BERT.

Where weights come from (:func:`find_clip_weights`, in this order):

1. an existing local path: a file in OpenAI's CLIP format (the TorchScript archive OpenAI publishes,
   e.g. ``ViT-B-32.pt``, or a plain state dict in OpenAI's key layout, which is also open_clip's for
   its ViT models; a ``{"state_dict": ...}`` checkpoint such as PAC-S's ``clip_ViT-B-32.pth``), or a
   Hugging Face model directory (``config.json`` + weights);
2. ``$CAPTIONEVAL_MODELS_DIR/<file>``: for OpenAI's names (``ViT-B/32`` -> ``ViT-B-32.pt``) the file
   OpenAI publishes; for other names a file or folder of that name;
3. OpenAI's names: the file in OpenAI's download cache (``~/.cache/clip``), else downloaded from
   OpenAI's URL and checked against the sha256 in it, unless downloads are off;
4. open_clip's names of hub models: ``hf-hub:laion/CLIP-ViT-B-32-laion2B-s34B-b79K`` or an
   ``architecture/pretrained`` pair of :data:`OPEN_CLIP_HUB` (``ViT-B-32/laion2b_s34b_b79k``, as in
   ``open_clip.create_model_and_transforms("ViT-B-32", pretrained="laion2b_s34b_b79k")``): the
   repository's ``open_clip_config.json`` and weights (``open_clip_model.safetensors``, else
   ``open_clip_pytorch_model.bin``) from ``$CAPTIONEVAL_MODELS_DIR/<repository name>/``, the Hugging
   Face cache or hub (:func:`find_open_clip`); a local folder holding those two files works too. The
   config decides the activation (``quick_gelu``, GELU by default as in open_clip), the heads
   (``width / head_width``) and must ask for the preprocessing this package implements (OpenAI's
   mean and std, 224 px, bicubic, shortest-side resize): others raise ValueError (:func:`open_clip_config`);
5. any other name: the Hugging Face cache and hub (``transformers.CLIPModel.from_pretrained``).

Downloads are off when ``CAPTIONEVAL_OFFLINE``, ``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is 1
(the tests set them). Weights that are missing and cannot be fetched raise :class:`WeightsMissing`
whose one-line message says which file to put where.

The model definitions are transformers' (``CLIPModel``, ``AutoModel``); an OpenAI-format state dict
is converted key by key to ``CLIPModel``'s (:func:`openai_to_hf`), its architecture read from the
tensor shapes as OpenAI's ``clip.model.build_model`` reads it (heads = width / 64, QuickGELU).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODELS_DIR_ENV = "CAPTIONEVAL_MODELS_DIR"

#: OpenAI's published CLIP files: name -> URL (the URL's path holds the file's sha256)
OPENAI_MODELS = {
    "ViT-B/32": "https://openaipublic.azureedge.net/clip/models/40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt",
    "ViT-B/16": "https://openaipublic.azureedge.net/clip/models/5806e77cd80f8b59890b7e101eabd078d9fb84e6937f9e85e4ecb61988df416f/ViT-B-16.pt",
    "ViT-L/14": "https://openaipublic.azureedge.net/clip/models/b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be6f7c2e0eca1737a03836/ViT-L-14.pt",
    "ViT-L/14@336px": "https://openaipublic.azureedge.net/clip/models/3035c92b350959924f9f00213499208652fc7ea050643e8b385c2dac08641f02/ViT-L-14-336px.pt",
}


#: open_clip ``architecture/pretrained`` names of ViT models on the Hugging Face hub -> repository
#: (open_clip's ``src/open_clip/pretrained.py``, ``hf_hub=`` of each entry). Models whose config asks for
#: other preprocessing (e.g. ``ViT-L-14/laion2b_s32b_b82k``: Inception mean and std) are left out.
OPEN_CLIP_HUB = {
    "ViT-B-32/laion2b_s34b_b79k": "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
    "ViT-B-32/datacomp_xl_s13b_b90k": "laion/CLIP-ViT-B-32-DataComp.XL-s13B-b90K",
    "ViT-B-16/laion2b_s34b_b88k": "laion/CLIP-ViT-B-16-laion2B-s34B-b88K",
    "ViT-B-16/datacomp_xl_s13b_b90k": "laion/CLIP-ViT-B-16-DataComp.XL-s13B-b90K",
    "ViT-L-14/datacomp_xl_s13b_b90k": "laion/CLIP-ViT-L-14-DataComp.XL-s13B-b90K",
    "ViT-H-14/laion2b_s32b_b79k": "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
    "ViT-g-14/laion2b_s12b_b42k": "laion/CLIP-ViT-g-14-laion2B-s12B-b42K",
    "ViT-g-14/laion2b_s34b_b88k": "laion/CLIP-ViT-g-14-laion2B-s34B-b88K",
    "ViT-bigG-14/laion2b_s39b_b160k": "laion/CLIP-ViT-bigG-14-laion2B-39B-b160k",
}
OPEN_CLIP_CONFIG = "open_clip_config.json"
OPEN_CLIP_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
_OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


class WeightsMissing(FileNotFoundError):
    """Weights that are neither on disk nor fetchable; the message is one line saying what to put where."""


def offline() -> bool:
    """True when nothing may be downloaded (CAPTIONEVAL_OFFLINE, HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE = 1)."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("CAPTIONEVAL_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def models_dir() -> Path | None:
    """``$CAPTIONEVAL_MODELS_DIR`` as a Path, or None when unset."""
    value = os.environ.get(MODELS_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


_HASHES: dict[tuple, str] = {}


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 hex digest of a weights file, or of a model directory's weight files (``*.safetensors``,
    ``*.bin``, ``*.pt``, ``*.pth`` in name order, concatenated); cached per (path, size, mtime)."""
    path = Path(path)
    files = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".pt", ".pth")) if path.is_dir() else [path]
    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if key not in _HASHES:
        h = hashlib.sha256()
        for p in files:
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def weights_sha256(path: str | os.PathLike) -> str:
    """The identity of the weights at ``path`` recorded in signatures: :func:`file_sha256`, and for an
    open_clip folder the sha256 of that digest and its ``open_clip_config.json`` (the config decides
    the activation and heads, so it is part of the model)."""
    if is_open_clip_folder(path):
        config = (Path(path) / OPEN_CLIP_CONFIG).read_bytes()
        return hashlib.sha256(file_sha256(path).encode() + b"\0" + config).hexdigest()
    return file_sha256(path)


def _download(url: str, target: Path) -> Path:
    expected = url.split("/")[-2]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".part")
    with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
        while block := response.read(1 << 20):
            out.write(block)
    if file_sha256(tmp) != expected:
        tmp.unlink()
        raise WeightsMissing(f"{url} downloaded with a wrong sha256 (expected {expected}); put the file at {target}")
    tmp.replace(target)
    return target


def is_open_clip_folder(path: str | os.PathLike) -> bool:
    """True for a folder holding ``open_clip_config.json`` and open_clip weights."""
    p = Path(path)
    return p.is_dir() and (p / OPEN_CLIP_CONFIG).is_file() and any((p / w).is_file() for w in OPEN_CLIP_WEIGHTS)


def open_clip_repository(spec: str) -> str | None:
    """The hub repository of an open_clip name (``hf-hub:<org>/<name>`` or a key of
    :data:`OPEN_CLIP_HUB`), or None for anything else."""
    if spec.startswith("hf-hub:"):
        repo = spec.removeprefix("hf-hub:").strip("/")
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
            raise ValueError(f"{spec!r}: an open_clip hub name is hf-hub:<organisation>/<repository>")
        return repo
    return OPEN_CLIP_HUB.get(spec)


def hub_cache_dir() -> str:
    """The Hugging Face hub cache as huggingface_hub defines it (``HF_HUB_CACHE``, else ``$HF_HOME/hub``,
    else ``$XDG_CACHE_HOME/huggingface/hub``, else ``~/.cache/huggingface/hub``), read when called, not
    when huggingface_hub was first imported."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return os.path.join(os.path.expanduser(home), "hub")


def find_open_clip(repo: str, local_only: bool = False) -> str:
    """A local folder with ``repo``'s ``open_clip_config.json`` and weights: ``$CAPTIONEVAL_MODELS_DIR``
    (``<repository name>`` or ``<organisation>--<repository name>``), else the Hugging Face cache, else
    the hub unless downloads are off or ``local_only`` (``huggingface_hub.hf_hub_download``). Raises
    :class:`WeightsMissing` naming the files and where to put them."""
    base = models_dir()
    if base:
        for name in (repo.split("/", 1)[1], repo.replace("/", "--")):
            if is_open_clip_folder(base / name):
                return str(base / name)
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    cache = hub_cache_dir()
    # the cache first (no request to the hub when the files are there), then the hub when allowed
    for cached_only in ((True,) if local_only or offline() else (True, False)):
        try:
            config = hf_hub_download(repo, OPEN_CLIP_CONFIG, local_files_only=cached_only, cache_dir=cache)
            for weights in OPEN_CLIP_WEIGHTS:
                try:
                    hf_hub_download(repo, weights, local_files_only=cached_only, cache_dir=cache)
                    return str(Path(config).parent)
                except (EntryNotFoundError, LocalEntryNotFoundError):
                    continue
        except (OSError, EntryNotFoundError, LocalEntryNotFoundError, ValueError):
            pass
    where = f"{MODELS_DIR_ENV}/{repo.split('/', 1)[1]}/" if base else f"a folder named {repo.split('/', 1)[1]} under {MODELS_DIR_ENV}"
    raise WeightsMissing(f"open_clip model {repo} not found: put its {OPEN_CLIP_CONFIG} and {OPEN_CLIP_WEIGHTS[0]} "
                         f"(from https://huggingface.co/{repo}) in {where}")


def open_clip_config(folder: str | os.PathLike) -> dict:
    """What :func:`load_clip` needs from an open_clip folder's ``open_clip_config.json`` (open_clip's
    ``factory.py`` reads ``model_cfg`` and ``preprocess_cfg`` from it; its ``model.py`` defaults):
    ``{"quick_gelu": bool (default False), "vision_head_width": int (default 64), "text_heads": int
    (default 8)}``. Raises ValueError for a model this package cannot run as open_clip does: not a
    ViT with a text tower, or preprocessing other than OpenAI's mean and std at 224 px, bicubic,
    shortest-side resize (what :mod:`captioneval.kernels.learned.clip_image` implements)."""
    path = Path(folder) / OPEN_CLIP_CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable open_clip config ({e})") from None
    model = config.get("model_cfg", config) if isinstance(config, dict) else None
    if not isinstance(model, dict) or not isinstance(model.get("vision_cfg"), dict) or not isinstance(model.get("text_cfg"), dict):
        raise ValueError(f"{path}: no model_cfg with vision_cfg and text_cfg")
    vision, text = model["vision_cfg"], model["text_cfg"]
    if any(k in vision for k in ("timm_model_name", "layers_per_stage")) or isinstance(vision.get("layers"), (list, tuple)):
        raise ValueError(f"{path}: only ViT image towers in OpenAI's layout are supported, not {vision.get('timm_model_name') or 'a ResNet'}")
    if "hf_model_name" in text:
        raise ValueError(f"{path}: a Hugging Face text tower ({text['hf_model_name']}) is not supported")
    pre = config.get("preprocess_cfg", {}) if isinstance(config, dict) else {}
    checks = {"mean": (tuple(pre.get("mean", _OPENAI_MEAN)), _OPENAI_MEAN), "std": (tuple(pre.get("std", _OPENAI_STD)), _OPENAI_STD),
              "size": (pre.get("size", vision.get("image_size", 224)), 224), "interpolation": (pre.get("interpolation", "bicubic"), "bicubic"),
              "resize_mode": (pre.get("resize_mode", "shortest"), "shortest")}
    for field_, (got, want) in checks.items():
        if got != want and not (isinstance(got, (list, tuple)) and list(got) == [want, want]):
            raise ValueError(f"{path}: preprocessing {field_} {got!r} is not supported (only {want!r}, OpenAI's)")
    return {"quick_gelu": bool(model.get("quick_gelu", False)), "vision_head_width": int(vision.get("head_width", 64)),
            "text_heads": int(text.get("heads", 8))}


def read_open_clip_weights(folder: str | os.PathLike) -> dict:
    """The state dict of an open_clip folder (safetensors preferred; open_clip's ViT keys are OpenAI's)."""
    folder = Path(folder)
    if (folder / OPEN_CLIP_WEIGHTS[0]).is_file():
        from safetensors.torch import load_file

        sd = load_file(str(folder / OPEN_CLIP_WEIGHTS[0]), device="cpu")
    else:
        import torch

        sd = torch.load(str(folder / OPEN_CLIP_WEIGHTS[1]), map_location="cpu", weights_only=True)
    if "visual.proj" not in sd:
        raise ValueError(f"{folder}: not a CLIP ViT state dict in OpenAI's layout (no visual.proj)")
    return sd


def find_clip_weights(spec: str | os.PathLike) -> str:
    """Resolve a CLIP-family weights spec (path, OpenAI name, ``CAPTIONEVAL_MODELS_DIR`` entry or Hugging
    Face name; see the module docstring) to a local file or directory, or to a Hugging Face name
    (returned as given, loaded by :func:`load_clip`). Raises :class:`WeightsMissing`."""
    spec_s = os.fspath(spec)
    if os.path.exists(spec_s):
        return spec_s
    repo = open_clip_repository(spec_s)
    if repo is not None:
        return find_open_clip(repo)
    base = models_dir()
    if spec_s in OPENAI_MODELS:
        filename = OPENAI_MODELS[spec_s].rsplit("/", 1)[1]
        candidates = ([base / filename] if base else []) + [Path("~/.cache/clip").expanduser() / filename]
        for c in candidates:
            if c.is_file():
                return str(c)
        if not offline():
            try:
                return str(_download(OPENAI_MODELS[spec_s], candidates[0]))
            except OSError:
                pass
        where = f"{MODELS_DIR_ENV} ({base})" if base else f"a folder named by {MODELS_DIR_ENV}"
        raise WeightsMissing(f"CLIP {spec_s} weights not found: put OpenAI's {filename} (sha256 "
                             f"{OPENAI_MODELS[spec_s].split('/')[-2]}, from {OPENAI_MODELS[spec_s]}) in {where}")
    if base and (base / spec_s).exists():
        return str(base / spec_s)
    looks_like_path = spec_s.startswith((".", "/", "~")) or spec_s.endswith((".pt", ".pth", ".bin", ".safetensors"))
    if looks_like_path:
        where = f"{MODELS_DIR_ENV} ({base})" if base else "that path"
        raise WeightsMissing(f"weights file {spec_s} not found: put it at that path or in {where}")
    return spec_s  # a Hugging Face name


def read_state_dict(path: str) -> dict:
    """The state dict of an OpenAI-format CLIP file: a TorchScript archive (``torch.jit.load``), a
    plain state dict, or a checkpoint holding one under ``state_dict`` (PAC-S) or ``model``; a
    ``module.`` prefix (DataParallel) is removed. Values: float tensors on CPU."""
    import torch

    try:
        obj = torch.jit.load(path, map_location="cpu").state_dict()
    except RuntimeError:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or "visual.proj" not in {k.removeprefix("module.") for k in obj}:
        raise ValueError(f"{path}: not a CLIP ViT state dict in OpenAI's layout (no visual.proj)")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def openai_architecture(sd: dict) -> dict:
    """Architecture of an OpenAI-layout ViT CLIP state dict, read from tensor shapes as OpenAI's
    ``clip.model.build_model`` reads it (heads = width // 64)."""
    vision_width = sd["visual.conv1.weight"].shape[0]
    vision_layers = len({k.split(".")[3] for k in sd if k.startswith("visual.transformer.resblocks.") and k.endswith(".attn.in_proj_weight")})
    patch = sd["visual.conv1.weight"].shape[-1]
    grid = round((sd["visual.positional_embedding"].shape[0] - 1) ** 0.5)
    width = sd["ln_final.weight"].shape[0]
    return {
        "embed_dim": sd["text_projection"].shape[1], "image_resolution": patch * grid, "vision_layers": vision_layers,
        "vision_width": vision_width, "vision_patch_size": patch, "context_length": sd["positional_embedding"].shape[0],
        "vocab_size": sd["token_embedding.weight"].shape[0], "transformer_width": width,
        "transformer_heads": width // 64,
        "transformer_layers": len({k.split(".")[2] for k in sd if k.startswith("transformer.resblocks.")}),
    }


def openai_to_hf(sd: dict, quick_gelu: bool = True, vision_head_width: int = 64, text_heads: int | None = None):
    """A ``transformers.CLIPModel`` holding an OpenAI-layout ViT CLIP state dict (fp32, eval mode).
    ``quick_gelu``: OpenAI's activation (True for OpenAI's and PAC-S's weights; open_clip's LAION
    models use GELU: False). ``vision_head_width``: the image tower's heads are its width divided by
    it (64 in OpenAI's ``build_model``; open_clip's ``head_width``); ``text_heads``: None for OpenAI's
    width // 64, else open_clip's ``text_cfg.heads``. MLP widths are read from the tensors (open_clip's
    ``mlp_ratio`` is not always 4)."""
    from transformers import CLIPConfig, CLIPModel

    a = openai_architecture(sd)
    if text_heads is not None:
        a["transformer_heads"] = int(text_heads)
    vision_heads = a["vision_width"] // int(vision_head_width)
    for heads, width, what in ((a["transformer_heads"], a["transformer_width"], "text"), (vision_heads, a["vision_width"], "image")):
        if heads < 1 or width % heads:
            raise ValueError(f"CLIP {what} tower: width {width} is not a multiple of {heads} heads")
    text_mlp = sd["transformer.resblocks.0.mlp.c_fc.weight"].shape[0]
    vision_mlp = sd["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0]
    act = "quick_gelu" if quick_gelu else "gelu"
    config = CLIPConfig(
        text_config=dict(vocab_size=a["vocab_size"], hidden_size=a["transformer_width"],
                         intermediate_size=text_mlp, num_hidden_layers=a["transformer_layers"],
                         num_attention_heads=a["transformer_heads"], max_position_embeddings=a["context_length"],
                         hidden_act=act, layer_norm_eps=1e-5, projection_dim=a["embed_dim"],
                         bos_token_id=49406, eos_token_id=49407, pad_token_id=0),
        vision_config=dict(hidden_size=a["vision_width"], intermediate_size=vision_mlp,
                           num_hidden_layers=a["vision_layers"], num_attention_heads=vision_heads,
                           image_size=a["image_resolution"], patch_size=a["vision_patch_size"], hidden_act=act,
                           layer_norm_eps=1e-5, projection_dim=a["embed_dim"]),
        projection_dim=a["embed_dim"])
    out: dict = {}

    def blocks(src: str, dst: str, n: int):
        for i in range(n):
            s, d = f"{src}.{i}.", f"{dst}.{i}."
            for qkv, part in zip(sd[s + "attn.in_proj_weight"].chunk(3, dim=0), "qkv"):
                out[d + f"self_attn.{part}_proj.weight"] = qkv
            for qkv, part in zip(sd[s + "attn.in_proj_bias"].chunk(3, dim=0), "qkv"):
                out[d + f"self_attn.{part}_proj.bias"] = qkv
            pairs = {"attn.out_proj": "self_attn.out_proj", "ln_1": "layer_norm1", "ln_2": "layer_norm2",
                     "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2"}
            for a_, b_ in pairs.items():
                out[d + b_ + ".weight"] = sd[s + a_ + ".weight"]
                out[d + b_ + ".bias"] = sd[s + a_ + ".bias"]

    blocks("transformer.resblocks", "text_model.encoder.layers", a["transformer_layers"])
    blocks("visual.transformer.resblocks", "vision_model.encoder.layers", a["vision_layers"])
    out["text_model.embeddings.token_embedding.weight"] = sd["token_embedding.weight"]
    out["text_model.embeddings.position_embedding.weight"] = sd["positional_embedding"]
    out["text_model.final_layer_norm.weight"] = sd["ln_final.weight"]
    out["text_model.final_layer_norm.bias"] = sd["ln_final.bias"]
    out["text_projection.weight"] = sd["text_projection"].t()
    out["vision_model.embeddings.patch_embedding.weight"] = sd["visual.conv1.weight"]
    out["vision_model.embeddings.class_embedding"] = sd["visual.class_embedding"]
    out["vision_model.embeddings.position_embedding.weight"] = sd["visual.positional_embedding"]
    for a_, b_ in {"ln_pre": "pre_layrnorm", "ln_post": "post_layernorm"}.items():
        out[f"vision_model.{b_}.weight"] = sd[f"visual.{a_}.weight"]
        out[f"vision_model.{b_}.bias"] = sd[f"visual.{a_}.bias"]
    out["visual_projection.weight"] = sd["visual.proj"].t()
    out["logit_scale"] = sd["logit_scale"]
    model = CLIPModel(config)
    out = {k: v.float().contiguous() for k, v in out.items()}
    missing, unexpected = model.load_state_dict(out, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(f"CLIP state dict does not fit: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()


@dataclass
class ClipEncoder:
    """A loaded CLIP-family model. ``name`` the spec it was loaded from, ``sha256`` of its weights
    (None for a hub name not on disk), ``device`` / ``dtype`` as torch strings, ``kind`` its file format."""

    model: object
    name: str
    sha256: str | None
    device: str
    dtype: str
    kind: str

    def _torch_dtype(self):
        import torch

        return {"float32": torch.float32, "float16": torch.float16}[self.dtype]

    def encode_images(self, pixels: np.ndarray) -> np.ndarray:
        """Image embeddings (not normalised) of preprocessed pixels float32 (n, 3, H, W) -> (n, d) in the
        model's dtype (float16 features stay float16, as the reference's ``.cpu().numpy()``)."""
        import torch

        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(pixels)).to(self.device, self._torch_dtype())
            out = self.model.get_image_features(pixel_values=x)
            out = getattr(out, "pooler_output", out)
            return out.cpu().numpy()

    def encode_texts(self, ids: np.ndarray) -> np.ndarray:
        """Text embeddings (not normalised) of token ids int64 (n, 77) -> (n, d) in the model's dtype; the pooled
        position is the first end token (49407), which is OpenAI's ``argmax`` of the ids."""
        import torch

        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(ids)).to(self.device)
            out = self.model.get_text_features(input_ids=x)
            out = getattr(out, "pooler_output", out)
            return out.cpu().numpy()


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when torch sees a GPU, else ``"cpu"``; other values unchanged."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


_LOADED: dict[tuple, ClipEncoder] = {}


def load_clip(spec: str | os.PathLike, device: str = "cpu", dtype: str = "float32", quick_gelu: bool = True) -> ClipEncoder:
    """Load a CLIP-family model (see the module docstring for where from); cached per process.

    ``dtype``: "float32" or "float16" (the CLIPScore reference runs fp16 on CUDA; LayerNorm then runs in
    fp16 in transformers' CLIP where OpenAI's computes it in fp32, so fp16 numbers differ slightly from
    the reference's fp16 numbers). Raises :class:`WeightsMissing`, ValueError for a file that is not CLIP.
    """
    import torch

    where = find_clip_weights(spec)
    key = (where, device, dtype, quick_gelu)
    if key in _LOADED:
        return _LOADED[key]
    if os.path.isfile(where):
        model, kind, digest = openai_to_hf(read_state_dict(where), quick_gelu=quick_gelu), "openai", file_sha256(where)
    elif is_open_clip_folder(where):  # the folder's config decides the activation and heads, not quick_gelu
        cfg = open_clip_config(where)
        model = openai_to_hf(read_open_clip_weights(where), quick_gelu=cfg["quick_gelu"],
                             vision_head_width=cfg["vision_head_width"], text_heads=cfg["text_heads"])
        kind, digest = "open_clip", weights_sha256(where)
    else:
        from transformers import CLIPModel

        try:
            model = CLIPModel.from_pretrained(where, local_files_only=offline()).eval()
        except OSError as e:
            raise WeightsMissing(f"CLIP weights {where!r} not found in the Hugging Face cache and not fetchable: put "
                                 f"the model folder (config.json, model.safetensors) at ${MODELS_DIR_ENV}/{where} "
                                 f"or pass its path ({type(e).__name__})") from None
        kind = "huggingface"
        digest = file_sha256(where) if os.path.isdir(where) else _hub_sha256(model)
    model = model.to(device, {"float32": torch.float32, "float16": torch.float16}[dtype])
    enc = ClipEncoder(model, os.fspath(spec), digest, device, dtype, kind)
    _LOADED[key] = enc
    return enc


def _hub_sha256(model) -> str | None:
    path = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", "")
    try:
        from huggingface_hub import try_to_load_from_cache

        for name in ("model.safetensors", "pytorch_model.bin"):
            cached = try_to_load_from_cache(path, name)
            if isinstance(cached, str):
                return file_sha256(cached)
    except Exception:  # the hash is best effort for a hub model; the name is in the signature anyway
        return None
    return None


_TEXT_LOADED: dict[tuple, tuple] = {}

#: the files a Hugging Face RoBERTa / BERT folder holds (named in the one-line WeightsMissing message)
TEXT_MODEL_FILES = "config.json, model.safetensors (or pytorch_model.bin) and the tokenizer's files (vocab.json + merges.txt for RoBERTa, vocab.txt for BERT)"


def find_text_weights(spec: str | os.PathLike) -> str:
    """Resolve a text-encoder spec: an existing local folder, ``$CAPTIONEVAL_MODELS_DIR/<spec>``, else
    the spec itself (a Hugging Face name, looked up in the cache and then, unless downloads are off,
    on the hub by :func:`load_text_model`)."""
    spec_s = os.fspath(spec)
    if os.path.exists(spec_s):
        return spec_s
    base = models_dir()
    if base and (base / spec_s).exists():
        return str(base / spec_s)
    return spec_s


def load_text_model(spec: str | os.PathLike, num_layers: int | None, device: str = "cpu", dtype: str = "float32",
                    use_fast: bool = False):
    """(tokenizer, model, sha256) of a Hugging Face text encoder (RoBERTa, BERT...) for BERTScore,
    found by :func:`find_text_weights`; cached per process.

    ``num_layers``: the model keeps its embeddings and first ``num_layers`` transformer layers (None:
    all), as ``bert_score.utils.get_model`` truncates ``model.encoder.layer``; its output is then
    layer ``num_layers``'s hidden states. 0 <= num_layers <= the model's layers, else ValueError.
    ``use_fast``: False, as ``bert_score.score``'s default (``AutoTokenizer(..., use_fast=False)``).
    ``dtype``: "float32" (bert_score's) or "float16". The sha256 is that of the folder's weight files
    (:func:`file_sha256`), or of the cached hub file (None when it cannot be found).
    Raises :class:`WeightsMissing` with a one-line message saying which files to put where."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    spec_s = os.fspath(spec)
    where = find_text_weights(spec_s)
    key = (where, num_layers, device, dtype, use_fast)
    if key not in _TEXT_LOADED:
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, use_fast=use_fast, local_files_only=offline())
            model = AutoModel.from_pretrained(where, local_files_only=offline())
        except OSError as e:
            base = models_dir()
            folder = f"{base / spec_s}" if base else f"${MODELS_DIR_ENV}/{spec_s}"
            raise WeightsMissing(f"text model {spec_s!r} not found here and not fetchable: put its Hugging Face folder "
                                 f"({TEXT_MODEL_FILES}) at {folder} or pass the folder's path "
                                 f"({type(e).__name__})") from None
        model.eval()
        if hasattr(model, "decoder") and hasattr(model, "encoder"):  # encoder-decoder: its encoder, as bert_score
            model = model.encoder
        layers = getattr(getattr(model, "encoder", None), "layer", None)
        if layers is None:
            raise ValueError(f"{spec_s}: not a BERT/RoBERTa-style encoder (no encoder.layer); BERTScore here supports those")
        if num_layers is not None:
            if not 0 <= num_layers <= len(layers):
                raise ValueError(f"{spec_s}: num_layers must be between 0 and {len(layers)}, got {num_layers}")
            model.encoder.layer = torch.nn.ModuleList(list(layers[:num_layers]))
        digest = file_sha256(where) if os.path.isdir(where) else _hub_sha256(model)
        model = model.to(device, {"float32": torch.float32, "float16": torch.float16}[dtype])
        _TEXT_LOADED[key] = (tokenizer, model, digest)
    return _TEXT_LOADED[key]


def short_name(spec: str) -> str:
    """A path's file name, or the spec itself (for signatures)."""
    return os.path.basename(spec.rstrip("/")) if re.search(r"[/\\]", spec) and os.path.exists(spec) else spec
