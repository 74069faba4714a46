"""The learned metrics are listed as unavailable with the reason (captioneval.metrics.builtin.learned):
without torch and transformers the reason names the ``learned`` extra, and the rest of the library
works; with them, all five are in the registry (the platform's pipeline computes them)."""
from __future__ import annotations

import json
import subprocess
import sys

from tests.test_layering import _BLOCKER, ROOT

LEARNED_KEYS = ["clip_s", "ref_clip_s", "pac_s", "ref_pac_s", "bert_score"]
#: the learned extra's packages, made unimportable in the subprocess
NO_TORCH = ["torch", "transformers", "safetensors", "tokenizers", "huggingface_hub"]

_WITHOUT_TORCH = r"""
import contextlib, io, json, sys
root, blocked, keys, argvs = sys.argv[1], set(json.loads(sys.argv[2])), json.loads(sys.argv[3]), json.loads(sys.argv[4])
""" + _BLOCKER + r"""
from captioneval.metrics import registry
from captioneval.cli import main
import captioneval
runs = []
for argv in argvs:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    runs.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
# the library's learned modules import (torch is needed only to load a model)
from captioneval.metrics.learned.bert_score import BertScore
from captioneval.metrics.learned.clip_s import ClipS
from captioneval.metrics.base import Batch
try:
    BertScore().score(Batch(texts=["a dog"], reference_texts=[["a dog runs"]]))
    scoring = "no error"
except ImportError as exc:
    scoring = f"ImportError: {exc}"
result = {
    "unavailable": {k: registry.UNAVAILABLE.get(k) for k in keys},
    "in_metrics": [k for k in keys if k in registry.METRICS],
    "bleu_4": captioneval.evaluate(["A dog runs."], [["A dog is running.", "a brown dog"]], metrics=["bleu_4"]).corpus,
    "runs": runs, "scoring": scoring, "clip_key": ClipS().key,
    "leaked": sorted(n for n in sys.modules if n.partition(".")[0] in blocked),
}
print("\n@@RESULT@@" + json.dumps(result))
"""


def test_without_torch_the_learned_metrics_are_listed_unavailable_and_nothing_else_breaks(tmp_path):
    ann = ROOT / "data/flickr8k_expert_coco/captions_flickr8k_expert.json"
    res = ROOT / "data/flickr8k_expert_coco/results_flickr8k_expert.json"
    argvs = [["evaluate", "--annotations", str(ann), "--results", str(res), "--metric", "bleu_4", "cider_d",
              "--out", str(tmp_path / "s.json")],
             ["evaluate", "--annotations", str(ann), "--results", str(res), "--metric", "bert_score"]]
    proc = subprocess.run([sys.executable, "-I", "-c", _WITHOUT_TORCH, str(ROOT), json.dumps(NO_TORCH),
                           json.dumps(LEARNED_KEYS), json.dumps(argvs)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert "@@RESULT@@" in proc.stdout, f"the subprocess died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.rpartition("@@RESULT@@")[2])
    names = {"clip_s": "CLIP-S", "ref_clip_s": "RefCLIP-S", "pac_s": "PAC-S", "ref_pac_s": "RefPAC-S",
             "bert_score": "BERTScore"}
    for key, reason in result["unavailable"].items():
        assert reason is not None and reason.startswith(f"{names[key]} needs the learned extra, and torch and "
                                                        "transformers are not installed: pip install "
                                                        "'captioneval[learned]'"), (key, reason)
    assert result["in_metrics"] == [] and result["leaked"] == []
    ok, refused = result["runs"]
    assert ok["code"] == 0, ok["stderr"]
    assert set(json.loads((tmp_path / "s.json").read_text())["corpus"]) == {"bleu_4", "cider_d"}
    assert refused["code"] == 2 and len(refused["stderr"].strip().splitlines()) == 1
    assert "BERTScore needs the learned extra" in refused["stderr"] and "captioneval[learned]" in refused["stderr"]
    assert set(result["bleu_4"]) == {"bleu_4"} and result["clip_key"] == "clip_s"
    assert result["scoring"].startswith("ImportError") and "torch" in result["scoring"]


def test_with_torch_the_learned_metrics_are_in_the_registry():
    from captioneval.metrics import registry
    from captioneval.metrics.builtin import learned

    assert learned.missing_packages() == []
    assert set(learned.PIPELINE) == set(LEARNED_KEYS)
    for key in learned.PIPELINE:  # computed by the platform's pipeline (tests/test_learned_pipeline.py)
        assert key in registry.METRICS and key not in registry.UNAVAILABLE
        assert registry.METRICS[key].accelerator and "learned" in registry.METRICS[key].groups
    assert registry.GROUPS["learned"] == learned.PIPELINE and learned.reasons() == {}
    # the library class each reason names exists and has that key
    import importlib

    for key, (name, path) in learned.LEARNED.items():
        module, _, cls = path.rpartition(".")
        metric_cls = getattr(importlib.import_module(module), cls)
        assert metric_cls.key == key and metric_cls.name == name
    assert learned.reasons(["torch"])["pac_s"].startswith("PAC-S needs the learned extra, and torch is not installed")


def test_the_flickr8k_reproduction_script_runs_on_tiny_stand_ins(tmp_path):
    """scripts/reproduce_learned_flickr8k.py cannot reproduce the published numbers here (no real weights,
    no Flickr8k images); this runs its code path end to end on seeded tiny models under the real file
    names in CAPTIONEVAL_MODELS_DIR and generated images under the first Flickr8k file names."""
    import os
    import shutil

    from tests import learned_models as lm

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import reproduce_learned_flickr8k as script
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    models = tmp_path / "models"
    weights = lm.write_tiny_clip(models)
    weights["openai"].rename(models / "ViT-B-32.pt")
    weights["pac"].rename(models / "clip_ViT-B-32.pth")
    lm.write_tiny_roberta(models / "roberta-large")
    generated = lm.write_tiny_images(tmp_path / "generated")
    _, files, _, _, _ = script.load_rows(12)
    images = tmp_path / "images"
    images.mkdir()
    for k, name in enumerate(files):
        shutil.copy(generated[k % len(generated)], images / name)
    env = {**os.environ, "CAPTIONEVAL_MODELS_DIR": str(models), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "CAPTIONEVAL_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    cmd = [sys.executable, str(ROOT / "scripts/reproduce_learned_flickr8k.py"), "--images", str(images), "--limit", "12",
           "--device", "cpu", "--bert-layer", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines if line and not line.startswith((" ", "metric"))}
    assert list(rows) == ["CLIP-S", "RefCLIP-S", "PAC-S", "RefPAC-S", "BERTScore"], proc.stdout
    assert rows["CLIP-S"][2:] == ["51.1", "51.2"] and rows["RefPAC-S"][2:] == ["-", "55.9"]  # the bundled values
    assert rows["BERTScore"][2:] == ["-", "-"]
    assert all(-100 <= float(v) <= 100 for r in rows.values() for v in r[:2])
    assert sum("signature: BERTScore|v:captioneval-bertscore/1" in line for line in lines) == 1
    # without the images: one line saying what to give
    proc = subprocess.run([*cmd[:3], str(tmp_path / "none"), *cmd[4:]], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: 12 of 12 Flickr8k images are not in")
