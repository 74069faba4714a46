"""open_clip's names for CLIP-family models (issue 32): ``hf-hub:<org>/<repository>`` and
``architecture/pretrained`` pairs, loaded from an open_clip folder (``open_clip_config.json`` and
``open_clip_model.safetensors``) in the Hugging Face cache or ``CAPTIONEVAL_MODELS_DIR``, offline.

The tiny seeded CLIP of tests/learned_models.py is written as an open_clip hub repository with two
image heads of width 32, four text heads and GELU (not OpenAI's one head of 64 and QuickGELU), and its
features are compared with tests/open_clip_reference.py, a plain-torch transcription of open_clip's
forward pass; open_clip itself cannot be installed beside the CPU build of torch here (its torchvision
does not import)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests import learned_models as lm

REPO = "test-org/tiny-open-clip"
MEAN = [0.48145466, 0.4578275, 0.40821073]
STD = [0.26862954, 0.26130258, 0.27577711]


def open_clip_config(**changes) -> dict:
    config = {"model_cfg": {"embed_dim": lm.EMBED,
                            "vision_cfg": {"image_size": lm.PATCH * lm.GRID, "layers": lm.LAYERS, "width": lm.WIDTH,
                                           "head_width": 32, "patch_size": lm.PATCH},
                            "text_cfg": {"context_length": lm.CONTEXT, "vocab_size": lm.VOCAB, "width": lm.WIDTH,
                                         "heads": 4, "layers": lm.LAYERS}},
              "preprocess_cfg": {"mean": MEAN, "std": STD}}
    for key, value in changes.items():
        config[key] = value
    return config


def write_open_clip(folder: Path, config: dict) -> Path:
    """The tiny CLIP as open_clip's hub files: its config and a safetensors state dict in OpenAI's layout."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(json.dumps(config), encoding="utf-8")
    save_file({k: v.contiguous() for k, v in lm.tiny_clip_state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return folder


def write_hub_cache(hf_home: Path, repo: str, config: dict) -> Path:
    """``repo`` in the Hugging Face cache layout (models--org--name/snapshots/<commit>, refs/main)."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    root = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    write_open_clip(root / "snapshots" / commit, config)
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return root / "snapshots" / commit


@pytest.fixture
def hub(monkeypatch, tmp_path):
    lm.offline(monkeypatch, tmp_path)
    return write_hub_cache(tmp_path / "hf", REPO, open_clip_config())


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return lm.write_tiny_images(tmp_path_factory.mktemp("open-clip-images"))


def test_a_hub_name_loads_open_clips_model_from_the_cache_offline(hub, images):
    import torch

    from captioneval.kernels.learned.clip_image import load_image
    from captioneval.kernels.learned.clip_text import clip_tokenizer
    from captioneval.kernels.learned.models import load_clip
    from tests import open_clip_reference as ref

    enc = load_clip(f"hf-hub:{REPO}")
    assert enc.kind == "open_clip" and enc.name == f"hf-hub:{REPO}" and len(enc.sha256) == 64
    vision, text = enc.model.config.vision_config, enc.model.config.text_config
    assert (vision.num_attention_heads, text.num_attention_heads) == (2, 4)
    assert vision.hidden_act == text.hidden_act == "gelu"

    sd = lm.tiny_clip_state_dict()
    pixels = np.stack([load_image(str(p)).pixels for p in images])
    expected = ref.encode_image(sd, torch.from_numpy(pixels), head_width=32, quick_gelu=False).numpy()
    got = enc.encode_images(pixels)
    assert got.shape == expected.shape == (len(images), lm.EMBED)
    assert np.max(np.abs(got - expected)) < 1e-5
    ids = clip_tokenizer().tokenize(["A photo depicts " + c for c in lm.flickr8k_captions(40)])
    expected = ref.encode_text(sd, torch.from_numpy(ids), heads=4, quick_gelu=False).numpy()
    assert np.max(np.abs(enc.encode_texts(ids) - expected)) < 1e-5

    # the config is honoured: OpenAI's rules (one head of 64, QuickGELU) give other features
    openai_rules = ref.encode_image(sd, torch.from_numpy(pixels), head_width=64, quick_gelu=True).numpy()
    assert np.max(np.abs(got - openai_rules)) > 1e-3


def test_clip_s_with_an_open_clip_name_and_its_identity(hub, images, tmp_path):
    from captioneval.kernels.learned.clip_image import load_image
    from captioneval.kernels.learned.clip_text import clip_tokenizer
    from captioneval.kernels.learned.models import load_clip
    from captioneval.metrics.base import Batch
    from captioneval.metrics.learned.clip_s import ClipS

    texts = lm.flickr8k_captions(len(images))
    metric = ClipS(model=f"hf-hub:{REPO}", device="cpu")
    values = metric.score(Batch(texts=texts, images=[str(p) for p in images])).values
    enc = load_clip(f"hf-hub:{REPO}")
    img = enc.encode_images(np.stack([load_image(str(p)).pixels for p in images]))

    txt = enc.encode_texts(clip_tokenizer().tokenize(["A photo depicts " + t for t in texts]))
    cos = np.sum(img * txt, axis=1) / np.linalg.norm(img, axis=1) / np.linalg.norm(txt, axis=1)
    assert np.allclose(values, 2.5 * np.maximum(cos, 0), atol=1e-6, rtol=0)
    sig = metric.signature()
    assert sig["model"] == f"hf-hub:{REPO}" and sig["weights_sha256"] == enc.sha256
    # the weights' identity covers the config: another head width is another model
    other = write_hub_cache(tmp_path / "hf", "test-org/other-heads", open_clip_config(
        model_cfg={**open_clip_config()["model_cfg"], "vision_cfg": {**open_clip_config()["model_cfg"]["vision_cfg"], "head_width": 16}}))
    assert (other / "open_clip_model.safetensors").read_bytes() == (hub / "open_clip_model.safetensors").read_bytes()
    assert load_clip("hf-hub:test-org/other-heads").sha256 != enc.sha256


def test_an_architecture_and_pretrained_name_from_the_models_dir(monkeypatch, tmp_path):
    from captioneval.kernels.learned.models import OPEN_CLIP_HUB, WeightsMissing, find_clip_weights, load_clip

    lm.offline(monkeypatch, tmp_path)
    name = "ViT-B-32/laion2b_s34b_b79k"
    assert OPEN_CLIP_HUB[name] == "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"
    with pytest.raises(WeightsMissing) as missing:
        find_clip_weights(name)
    message = str(missing.value)
    assert "\n" not in message and "open_clip_config.json" in message and "open_clip_model.safetensors" in message
    assert "huggingface.co/laion/CLIP-ViT-B-32-laion2B-s34B-b79K" in message
    monkeypatch.setenv("CAPTIONEVAL_MODELS_DIR", str(tmp_path / "models"))
    folder = write_open_clip(tmp_path / "models" / "CLIP-ViT-B-32-laion2B-s34B-b79K", open_clip_config())
    assert find_clip_weights(name) == str(folder)
    assert load_clip(name).kind == "open_clip"
    assert load_clip(str(folder)).sha256 == load_clip(name).sha256  # the folder's path works too


@pytest.mark.parametrize("change, message", [
    ({"preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}}, "preprocessing mean"),
    ({"preprocess_cfg": {"mean": MEAN, "std": STD, "resize_mode": "squash"}}, "preprocessing resize_mode"),
    ({"model_cfg": {"embed_dim": 32, "vision_cfg": {"timm_model_name": "convnext_base"}, "text_cfg": {}}}, "only ViT"),
    ({"model_cfg": {"embed_dim": 32, "vision_cfg": {"layers": [3, 4, 6, 3]}, "text_cfg": {}}}, "only ViT"),
    ({"model_cfg": {"embed_dim": 32, "vision_cfg": {}, "text_cfg": {"hf_model_name": "xlm-roberta-base"}}}, "Hugging Face text tower"),
])
def test_models_this_package_cannot_run_as_open_clip_does_are_refused(monkeypatch, tmp_path, change, message):
    from captioneval.kernels.learned.models import load_clip

    lm.offline(monkeypatch, tmp_path)
    write_hub_cache(tmp_path / "hf", "test-org/unsupported", open_clip_config(**change))
    with pytest.raises(ValueError, match=message):
        load_clip("hf-hub:test-org/unsupported")


def test_malformed_hub_names_are_refused():
    from captioneval.kernels.learned.models import open_clip_repository

    for bad in ("hf-hub:", "hf-hub:no-organisation", "hf-hub:a/b/c", "hf-hub:../../etc/passwd"):
        with pytest.raises(ValueError, match="hf-hub:<organisation>/<repository>"):
            open_clip_repository(bad)
    assert open_clip_repository("ViT-B/32") is None and open_clip_repository("openai/clip-vit-base-patch32") is None
