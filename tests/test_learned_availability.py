"""The learned metrics are listed as unavailable with the reason (captioneval.metrics.builtin.learned):
without torch and transformers the reason names the ``learned`` extra, and the rest of the library
works; with them, the reason says the platform's pipeline does not run them yet."""
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


def test_with_torch_the_reason_points_at_the_library():
    from captioneval.metrics import registry
    from captioneval.metrics.builtin import learned

    assert learned.missing_packages() == []
    for key in LEARNED_KEYS:
        assert key not in registry.METRICS
        assert "is computed by the library (captioneval.metrics.learned." in registry.UNAVAILABLE[key]
        assert "not yet by the platform's pipeline" in registry.UNAVAILABLE[key]
    # the library class each reason names exists and has that key
    import importlib

    for key, (name, path) in learned.LEARNED.items():
        module, _, cls = path.rpartition(".")
        metric_cls = getattr(importlib.import_module(module), cls)
        assert metric_cls.key == key and metric_cls.name == name
    assert learned.reasons(["torch"])["pac_s"].startswith("PAC-S needs the learned extra, and torch is not installed")
