"""Dependencies point one way, declared as import-linter contracts (``.importlinter`` at the root),
and the library runs where Django, Celery and the database drivers cannot be imported.

The contracts (read ``.importlinter``; docs/architecture.md#the-layering-rule explains them):

``layers``
    from the top: the wiring (``evalsite.urls``, ``evalsite.celery``, ``evalsite.wsgi``), ``api``,
    ``analysis``, ``metrics``, ``crowd``, the science (``captioneval``), the settings
    (``evalsite.settings`` and the modules Django loads from them). A module may import its own layer
    and the layers below it, never one above.
``science``
    inside ``captioneval``: the command line, then the library API (``evaluate``, ``diversity``,
    ``correlate``, ``coco``), then the metric classes (``metrics``), their kernels (``kernels``),
    the statistics (``stats``), tokenisation (``text``), and at the bottom ``errors`` and ``utils``.
``django-free``
    ``captioneval`` imports none of Django, Celery, kombu, billiard, psycopg and no app of the
    platform; the one ignored import is ``captioneval.commands.manage -> django``, the entry point
    whose job is to start Django (inside its function, never at import).
``legacy``
    the deprecated alias package ``evalcore`` imports only ``captioneval``.
``acyclic``
    no import cycles between sibling packages or modules, at any depth.

Every ``import`` statement counts, wherever it stands (grimp's graph, built from the source).
Besides the contracts, the Django-free modules are imported, and the library's commands run, in a
fresh interpreter where importing Django, Celery, kombu, billiard or a PostgreSQL driver fails.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".importlinter"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
#: top-level packages a Django-free module must not need
BLOCKED = ("django", "celery", "kombu", "billiard", "psycopg", "psycopg2")
#: the packages the contracts cover
ROOT_PACKAGES = ("captioneval", "crowd", "metrics", "analysis", "api", "evalsite", "evalcore")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """Run import-linter on the tree at ``root`` with its ``.importlinter`` (no cache)."""
    return subprocess.run([str(LINT_IMPORTS), "--config", str(root / ".importlinter"), "--no-cache", "--no-logo"],
                          cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})


def library_modules(root: Path = ROOT) -> list[str]:
    """Every module of the ``captioneval`` package, by dotted name."""
    out = []
    for path in sorted((root / "captioneval").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


# --- the contracts -------------------------------------------------------------------------------

def test_the_import_contracts_hold():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in proc.stdout, proc.stdout[-3000:]
    # the one ignored import, and nothing else ignored anywhere
    ignored = [line.strip() for line in CONFIG.read_text("utf-8").splitlines() if "->" in line and not line.startswith("#")]
    assert ignored == ["captioneval.commands.manage -> django"], ignored


def _copy_sources(target: Path):
    for package in ROOT_PACKAGES:
        shutil.copytree(ROOT / package, target / package,
                        ignore=lambda d, names: [n for n in names if n == "__pycache__" or
                                                 (not n.endswith(".py") and not (Path(d) / n).is_dir())])
    shutil.copy(CONFIG, target / ".importlinter")


def test_a_planted_violation_of_each_contract_fails(tmp_path):
    """One planted import per contract in a copy of the sources; import-linter names each."""
    _copy_sources(tmp_path)
    planted = {
        # the science importing an app (layers and django-free), inside a function
        "captioneval/utils/planted_app.py": "def f():\n    from crowd import engine\n    return engine\n",
        # a kernel importing a metric class (science layers)
        "captioneval/kernels/planted_up.py": "from captioneval.metrics import base\n",
        # the library importing Django (django-free)
        "captioneval/stats/planted_django.py": "import django.conf\n",
        # crowd importing analysis (layers)
        "crowd/planted_report.py": "import analysis.reports\n",
        # a cycle between two sibling modules (acyclic)
        "metrics/planted_a.py": "from metrics import planted_b\n",
        "metrics/planted_b.py": "from metrics import planted_a\n",
        # the legacy alias package importing an app (legacy)
        "evalcore/planted.py": "import api.base\n",
    }
    for name, text in planted.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    proc = lint_imports(tmp_path)
    out = proc.stdout
    assert proc.returncode != 0 and "Contracts: 0 kept, 5 broken." in out, out[-4000:]
    for line in ("captioneval.utils.planted_app -> crowd", "captioneval.kernels.planted_up -> captioneval.metrics.base",
                 "crowd.planted_report -> analysis.reports", "evalcore.planted -> api.base",
                 "captioneval.stats.planted_django -> django"):
        assert line in out, (line, out[-4000:])
    assert "planted_a" in out and "planted_b" in out


# --- the library without Django, at run time -----------------------------------------------------

#: start of a script run by ``python -I -c``: ``root`` first on sys.path, then a meta-path finder
#: under which importing any package of the set ``blocked`` (defined by the script before) fails
_BLOCKER = '''
sys.path.insert(0, root)

class Blocker:
    """Meta-path finder: importing any of the blocked packages raises ImportError."""
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ImportError(f"{name} is not available (blocked)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
'''

_IMPORT_WITHOUT = r'''
import importlib, json, sys, traceback
root, modules, blocked = sys.argv[1], json.loads(sys.argv[2]), set(json.loads(sys.argv[3]))
''' + _BLOCKER + r'''
failures = {}
for module in modules:
    try:
        importlib.import_module(module)
    except BaseException as exc:
        frames = [f"{f.filename[len(root) + 1:]}:{f.lineno}" for f in traceback.extract_tb(exc.__traceback__)
                  if f.filename.startswith(root + "/")]
        failures[module] = f"{type(exc).__name__}: {exc} (import chain: {' -> '.join(frames)})"
leaked = sorted(n for n in sys.modules if n.partition(".")[0] in blocked)
print("\n@@RESULT@@" + json.dumps({"failures": failures, "leaked": leaked}))
'''


def import_without(root: Path, modules: list[str], blocked=BLOCKED) -> dict:
    """Import ``modules`` in a fresh interpreter (``python -I``, ``root`` first on ``sys.path``)
    where importing any package named in ``blocked`` raises ImportError. Returns
    ``{"failures": {module: "error (import chain: file:line -> ...)"}, "leaked": [blocked modules
    that got loaded anyway]}``."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _IMPORT_WITHOUT, str(root), json.dumps(modules), json.dumps(list(blocked))],
        capture_output=True, text=True, timeout=900, cwd=root)
    assert "@@RESULT@@" in proc.stdout, f"the import subprocess died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.rpartition("@@RESULT@@")[2])


def test_the_library_imports_without_django_or_celery():
    modules = library_modules()
    assert {"captioneval.kernels.atoms", "captioneval.stats.agreement", "captioneval.utils.csvsafe", "captioneval.cli",
            "captioneval.metrics.registry", "captioneval.text.ptb", "captioneval.commands.manage"} <= set(modules)
    result = import_without(ROOT, modules)
    assert not result["failures"], (f"{len(result['failures'])} library module(s) do not import "
                                    f"without {', '.join(BLOCKED)}:\n"
                                    + "\n".join(f"{m}: {e}" for m, e in sorted(result["failures"].items())))
    assert not result["leaked"], result["leaked"]


_RUN_WITHOUT = r"""
import contextlib, io, json, sys
root, blocked, argvs = sys.argv[1], set(json.loads(sys.argv[2])), json.loads(sys.argv[3])
""" + _BLOCKER + r"""
from captioneval.cli import main
runs = []
for argv in argvs:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    runs.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
import captioneval
facade = {
    "evaluate": captioneval.evaluate(["A dog runs."], [["A dog is running.", "a brown dog"]], metrics=["bleu_4"]).corpus,
    "diversity": captioneval.diversity([["a dog", "a cat runs"], ["two birds", "a bird flies"]], metrics=["lsa"]).corpus,
    "correlate": captioneval.correlate([1.0, 2.0, 3.0, 5.0], [1.0, 3.0, 2.0, 4.0], n_resamples=10).to_dict()["n_items"],
}
leaked = sorted(n for n in sys.modules if n.partition(".")[0] in blocked)
print("\n@@RESULT@@" + json.dumps({"runs": runs, "facade": facade, "leaked": leaked}))
"""


def test_library_commands_run_without_django_celery_or_a_database(tmp_path):
    """``captioneval evaluate`` (default metrics, METEOR included), ``diversity`` and ``correlate``
    and the facade's functions run in a fresh interpreter where importing Django, Celery, kombu,
    billiard or a PostgreSQL driver fails, and none of them gets imported."""
    from tests.coco_sets import write_coco_files

    coco = json.loads((ROOT / "data/flickr8k_expert_coco/captions_flickr8k_expert.json").read_text("utf-8"))
    results = json.loads((ROOT / "data/flickr8k_expert_coco/results_flickr8k_expert.json").read_text("utf-8"))
    keep = {img["id"] for img in coco["images"][:40]}
    (tmp_path / "ann.json").write_text(json.dumps({"images": coco["images"][:40], "annotations": [
        a for a in coco["annotations"] if a["image_id"] in keep]}))
    (tmp_path / "res.json").write_text(json.dumps([r for r in results if r["image_id"] in keep]))
    human = (ROOT / "data/flickr8k_expert_coco/human_flickr8k_expert.csv").read_text("utf-8").splitlines()
    (tmp_path / "human.csv").write_text("\n".join([human[0]] + [h for h in human[1:] if int(h.split(",")[0]) in keep]))
    write_coco_files(tmp_path)
    d = str(tmp_path)
    argvs = [
        ["evaluate", "--annotations", f"{d}/ann.json", "--results", f"{d}/res.json", "--csv", "--out", f"{d}/s.csv"],
        ["diversity", "--results", f"{d}/merge_as_results.json", "--annotations", f"{d}/captions.json"],
        ["correlate", "--scores", f"{d}/s.csv", "--human", f"{d}/human.csv", "--resamples", "50"],
    ]
    proc = subprocess.run([sys.executable, "-I", "-c", _RUN_WITHOUT, str(ROOT), json.dumps(list(BLOCKED)),
                           json.dumps(argvs)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert "@@RESULT@@" in proc.stdout, f"the subprocess died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.rpartition("@@RESULT@@")[2])
    for argv, run in zip(argvs, result["runs"]):
        assert run["code"] == 0, (argv[0], run["stderr"])
    header = (tmp_path / "s.csv").read_text().splitlines()[0]
    assert header == "image_id,caption,bleu_1,bleu_2,bleu_3,bleu_4,meteor,rouge_l,cider_d"
    assert "METEOR" in result["runs"][0]["stdout"] and "Self-CIDEr" in result["runs"][1]["stdout"]
    assert "kendall_tau_c" in result["runs"][2]["stdout"] and "40 items" in result["runs"][2]["stdout"]
    assert result["facade"]["correlate"] == 4 and set(result["facade"]["evaluate"]) == {"bleu_4"}
    assert result["leaked"] == []


# --- the run-time check can fail ----------------------------------------------------------------

def _write(root: Path, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def test_checker_finds_a_planted_django_import(tmp_path):
    _write(tmp_path, {
        "core/__init__.py": "",
        "core/ok.py": "import json\nimport statistics\n",
        "core/bad.py": "import math\n\nfrom celery import shared_task\n",
        "core/indirect.py": "from . import bad\n",
        "core/lazy.py": "def f():\n    from django.conf import settings\n    return settings\n",
    })
    result = import_without(tmp_path, ["core.ok", "core.bad", "core.indirect", "core.lazy"])
    assert sorted(result["failures"]) == ["core.bad", "core.indirect"]  # core.lazy imports: its import is in f
    assert result["failures"]["core.bad"].startswith("ImportError: celery is not available (blocked)")
    assert "core/indirect.py:1 -> core/bad.py:3" in result["failures"]["core.indirect"]
    assert result["leaked"] == []
