"""The 0.19 import paths (``metrics.scorers.*``, ``analysis.statistics.*``, ``evalcore.*``) work for
one release: each gives the very module object of its new path under ``captioneval``, with one
``DeprecationWarning`` naming the new path; a plug-in metric written against the old paths still
registers and scores. Each check runs in a fresh interpreter, since a module warns when first imported.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from captioneval.utils.deprecation import REMOVED_IN, deprecated_path_message

ROOT = Path(__file__).resolve().parents[1]

OLD_TO_NEW = {
    "metrics.scorers.base": "captioneval.metrics.base",
    "metrics.scorers.registry": "captioneval.metrics.registry",
    "metrics.scorers.plugins": "captioneval.metrics.plugins",
    "metrics.scorers.builtin.cider_d": "captioneval.metrics.builtin.cider_d",
    "metrics.scorers.tokenizer": "captioneval.text.tokenizer",
    "metrics.scorers.ptb": "captioneval.text.ptb",
    "metrics.scorers.bleu": "captioneval.kernels.bleu",
    "metrics.scorers.cider": "captioneval.kernels.cider",
    "metrics.scorers.diversity": "captioneval.kernels.diversity",
    "analysis.statistics.correlation": "captioneval.stats.correlation",
    "analysis.statistics.agreement": "captioneval.stats.agreement",
    "evalcore.csvsafe": "captioneval.utils.csvsafe",
    "evalcore.numbers": "captioneval.utils.numbers",
}

_CHECK = r'''
import importlib, json, sys, warnings
out = {}
for old, new in json.loads(sys.argv[1]).items():
    sys.modules.pop(old, None)  # the finder is consulted again, as on a first import
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    again = importlib.import_module(old)
    out[old] = {"same": module is importlib.import_module(new) is again,
                "warnings": [(w.category.__name__, str(w.message)) for w in caught]}
print(json.dumps(out))
'''


def _run(code: str, *args: str, cwd: Path = ROOT) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_old_path_is_the_new_module_with_one_warning():
    results = _run(_CHECK, json.dumps(OLD_TO_NEW))
    for old, new in OLD_TO_NEW.items():
        result = results[old]
        assert result["same"], old
        ours = [w for w in result["warnings"] if w[1] == deprecated_path_message(old, new)]
        assert ours == [["DeprecationWarning", f"{old} is deprecated and goes away in captioneval {REMOVED_IN}: "
                                               f"import {new} instead"]], (old, result["warnings"])


def test_the_old_statistics_package_still_exports_its_names():
    code = r'''
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import analysis.statistics as old
import captioneval.stats as new
print(json.dumps({"missing": [n for n in new.__all__ if getattr(old, n, None) is not getattr(new, n)],
                  "warned": [str(w.message) for w in caught if w.category is DeprecationWarning]}))
'''
    result = _run(code)
    assert result["missing"] == []
    assert result["warned"] == [deprecated_path_message("analysis.statistics", "captioneval.stats")]


def test_a_plugin_written_against_the_old_paths_registers_and_scores(tmp_path):
    (tmp_path / "old_plugin.py").write_text('''
import numpy as np
from metrics.scorers import base
from metrics.scorers.tokenizer import ptb_tokenize


class Length(base.Metric):
    key, name, version = "old_length", "Caption length (old import paths)", "old-length/1"
    level, range, higher = "caption", (0.0, 100.0), "better"
    needs = frozenset()
    description = "Number of PTB tokens of the caption."

    def score(self, batch):
        return base.Scores(np.array([len(c.split()) for c in batch.candidates], dtype=float))


METRICS = [Length()]
''', encoding="utf-8")
    code = r'''
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from captioneval.metrics import base, registry
    [metric] = registry.register_module("old_plugin")
    values = metric.score(base.Batch(candidates=["a dog runs", "two cats sit on a mat"])).values.tolist()
print(json.dumps({"values": values, "is_metric": isinstance(metric, base.Metric),
                  "warned": sorted(str(w.message).split(" ")[0] for w in caught if w.category is DeprecationWarning)}))
'''
    result = _run(code, str(tmp_path))
    assert result == {"values": [3.0, 6.0], "is_metric": True,
                      "warned": ["metrics.scorers.base", "metrics.scorers.tokenizer"]}
