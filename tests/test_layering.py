"""Dependencies point one way: the import graph of the platform's own code has no cycles and no
upward edges, and the Django-free cores import without Django or Celery.

Layers, from the bottom (a module may import its own layer and any layer below it, never above):

``settings``
    :mod:`evalsite` configuration: ``evalsite.settings``, ``evalsite.production``,
    ``evalsite.rates`` (rate strings of the settings), ``evalsite.cache`` (the fail-open cache
    backend named in ``CACHES``) and ``evalsite.middleware`` (named in ``MIDDLEWARE`` and
    ``handler500``); any other ``evalsite`` module not listed under ``wiring``. These modules are
    loaded by Django from the settings and must not import an app.
``core``
    the Django-free cores: :mod:`captioneval.kernels`, :mod:`captioneval.stats` and :mod:`captioneval.utils`
    (the CSV formula-injection guard). A test imports each of their modules in a fresh
    interpreter where importing ``django``, ``celery``, ``kombu``, ``billiard``, ``psycopg`` or
    ``psycopg2`` fails, and another finds no import of those packages in their source, not even
    inside a function (which the first test would not run).
``library``
    :mod:`captioneval`, the pip-installable library and command line (``evaluate``, ``diversity``,
    ``correlate``, ``COCOEvalCap``) over the cores. Django-free like them (checked the same two ways,
    plus a test that runs the commands in an interpreter where Django, Celery and the PostgreSQL
    drivers cannot be imported); the one exception is ``captioneval.commands.manage``, whose job is
    to start Django's ``manage.py`` (it imports Django inside its function, never at import).
``crowd``
    the human side (datasets, campaigns, raters, MTurk).
``metrics``
    metric runs and their Celery tasks (everything in :mod:`metrics` but :mod:`captioneval.kernels`).
``analysis``
    reports, dashboard, downloads (everything in :mod:`analysis` but :mod:`captioneval.stats`).
``api``
    the REST API (:mod:`api`): DRF views over the layers below (importers, metric runs, reports,
    campaigns), the token page and command; nothing below imports it.
``wiring``
    the modules that put the apps together, on top: the ``evalsite`` package itself (its
    ``__init__`` loads the Celery application), ``evalsite.celery`` (the Celery application, which
    discovers every app's tasks), ``evalsite.urls`` (includes every app's URLs), ``evalsite.wsgi``
    and ``evalsite.asgi`` (entry points).

The graph is built with :mod:`ast` from every ``.py`` file under ``crowd/``, ``metrics/``,
``analysis/``, ``api/``, ``evalsite/``, ``captioneval.utils/`` and ``captioneval/`` (migrations and management commands included; folders
named ``tests`` or ``benchmarks`` and the top-level ``manage.py`` left out). Every ``import`` /
``from ... import`` statement counts, wherever it is (module level, inside a function, under
``if TYPE_CHECKING``), and so does ``importlib.import_module("literal.name")``. Relative imports are
resolved against the importing module's package; ``from X import Y`` is an edge to ``X.Y`` when
``X.Y`` is a module of the project, else to ``X``; ``import X.Y.Z`` is an edge to the longest prefix
of ``X.Y.Z`` that is a module. A parent package a submodule import runs implicitly is not an edge
(the same convention as grimp / import-linter). Third-party and standard-library imports are not
part of the graph, and neither are dotted names in strings (``INSTALLED_APPS``, ``MIDDLEWARE``,
``include("crowd.urls")``): settings and URLconfs name apps that way by design.

"No cycles between files" means no strongly connected component of more than one module; each one
found is reported with its files and the import lines between them.
"""
from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
import textwrap
from collections import defaultdict, deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("crowd", "metrics", "analysis", "api", "evalsite", "captioneval.utils", "captioneval")
SKIPPED_DIRS = {"tests", "benchmarks", "__pycache__"}

LAYERS = ("settings", "core", "library", "crowd", "metrics", "analysis", "api", "wiring")
#: layer of a module: an exact name first, else its longest dotted prefix listed here
LAYER_OF_MODULE = {"evalsite": "wiring", "evalsite.celery": "wiring", "evalsite.urls": "wiring",
                   "evalsite.wsgi": "wiring", "evalsite.asgi": "wiring"}
LAYER_OF_PREFIX = {
    "evalsite": "settings",
    "captioneval.utils": "core",
    "captioneval.kernels": "core",
    "captioneval.stats": "core",
    "captioneval": "library",
    "crowd": "crowd",
    "metrics": "metrics",
    "analysis": "analysis",
    "api": "api",
}
CORES = ("captioneval.kernels", "captioneval.stats", "captioneval.utils", "captioneval")
#: modules of the cores allowed to import a blocked package inside a function: ``captioneval manage``
#: starts Django's command line (it still imports without Django: checked with the others)
BLOCKED_ALLOWED = ("captioneval.commands.manage",)
#: top-level packages a Django-free core must not need
BLOCKED = ("django", "celery", "kombu", "billiard", "psycopg", "psycopg2")


# --- the checker ---------------------------------------------------------------------------------

def discover(root: Path, packages) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``root/<package>`` (packages'
    ``__init__.py`` named by the package), skipping folders in :data:`SKIPPED_DIRS`."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if SKIPPED_DIRS.intersection(rel.parts[:-1]):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _target(name: str, modules) -> str | None:
    """The longest prefix of the dotted ``name`` that is a module of the project, or None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imports(tree: ast.AST, module: str, is_package: bool, modules):
    """(target module, line) for every first-party import in ``tree`` (see the module docstring)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _target(alias.name, modules)
                if target:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                submodule = f"{base}.{alias.name}" if base else alias.name
                target = submodule if alias.name != "*" and submodule in modules else _target(base, modules)
                if target:
                    yield target, node.lineno
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                target = _target(node.args[0].value, modules)
                if target:
                    yield target, node.lineno


def import_graph(root: Path, modules: dict[str, Path]) -> dict[tuple[str, str], list[int]]:
    """``{(importer, imported): [line, ...]}`` over the modules of :func:`discover` (no self-edges)."""
    edges = defaultdict(list)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, line in _imports(tree, module, path.name == "__init__.py", modules):
            if target != module:
                edges[module, target].append(line)
    return {edge: sorted(set(lines)) for edge, lines in edges.items()}


def layer_of(module: str, exact=LAYER_OF_MODULE, prefixes=LAYER_OF_PREFIX) -> str:
    """The layer of ``module``: ``exact[module]``, else the layer of its longest listed prefix.
    Raises KeyError for a module no entry covers."""
    if module in exact:
        return exact[module]
    prefix = _target(module, prefixes)
    if prefix is None:
        raise KeyError(f"module {module} is in no layer")
    return prefixes[prefix]


def blocked_imports(modules: dict[str, Path], root: Path, blocked=BLOCKED) -> list[str]:
    """``"file:line: module imports name"`` for every absolute import, anywhere in the source of
    ``modules`` (function bodies included), of a package named in ``blocked``."""
    found = []
    for module, path in sorted(modules.items()):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [(rel, node.lineno, f"{rel}:{node.lineno}: {module} imports {name}")
                      for name in names if name.partition(".")[0] in blocked]
    return [text for _, _, text in sorted(found)]


def upward_edges(graph, modules, root: Path, order=LAYERS, classify=layer_of) -> list[str]:
    """``"file:line: importer [layer] imports imported [higher layer]"`` for every import of a
    module from a higher layer, sorted by file and line."""
    rank = {name: i for i, name in enumerate(order)}
    found = []
    for (src, dst), lines in graph.items():
        low, high = classify(src), classify(dst)
        if rank[low] < rank[high]:
            rel = modules[src].relative_to(root).as_posix()
            found += [(rel, line, f"{rel}:{line}: {src} [{low}] imports {dst} [{high}]") for line in lines]
    return [text for _, _, text in sorted(found)]


def strongly_connected(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative),
    each sorted, the list sorted by first module."""
    succ = defaultdict(list)
    for src, dst in graph:
        succ[src].append(dst)
    nodes = sorted({n for edge in graph for n in edge})
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(succ[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(succ[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def _shortest_cycle(graph, component) -> list[str]:
    """A shortest cycle through the first module of ``component``, staying inside it."""
    members, start = set(component), component[0]
    succ = defaultdict(list)
    for src, dst in graph:
        if src in members and dst in members:
            succ[src].append(dst)
    parent, queue = {}, deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(succ[node]):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if child not in parent:
                parent[child] = node
                queue.append(child)
    raise AssertionError(f"no cycle through {start}")  # cannot happen for a component


def describe_cycles(graph, modules, root: Path) -> list[str]:
    """One paragraph per import cycle: its files, one shortest cycle, every import line inside it."""
    paragraphs = []
    for component in strongly_connected(graph):
        rel = {m: modules[m].relative_to(root).as_posix() for m in component}
        cycle = _shortest_cycle(graph, component)
        lines = [f"cycle between {len(component)} files: {', '.join(rel[m] for m in component)}",
                 "  e.g. " + " -> ".join(f"{rel[a]}:{graph[a, b][0]}" for a, b in zip(cycle, cycle[1:]))
                 + f" -> {rel[cycle[0]]}"]
        for (src, dst), at in sorted(graph.items()):
            if src in rel and dst in rel:
                lines.append(f"  {rel[src]}:{','.join(map(str, at))} imports {dst}")
        paragraphs.append("\n".join(lines))
    return paragraphs


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


@functools.lru_cache(maxsize=None)
def project():
    """The project's modules and import graph, built once per test session."""
    modules = discover(ROOT, PACKAGES)
    return modules, import_graph(ROOT, modules)


# --- the project's import graph ------------------------------------------------------------------

def test_graph_covers_the_project():
    modules, graph = project()
    for expected in ("crowd.engine", "crowd.kinds.rating", "metrics.pipeline", "captioneval.kernels.cider",
                     "analysis.campaigns", "captioneval.stats", "evalsite.settings", "captioneval.utils.csvsafe",
                     "analysis.management.commands.simulate_raters", "api.base"):
        assert expected in modules, expected
    assert not [m for m in modules if m.split(".")[0] in ("tests", "benchmarks", "manage")]
    unlayered = []
    for module in modules:
        try:
            layer_of(module)
        except KeyError as exc:
            unlayered.append(str(exc))
    assert not unlayered, unlayered
    assert ("crowd.ratelimit", "evalsite.rates") in graph  # a first-party edge is seen
    assert layer_of("evalsite.production") == "settings" and layer_of("evalsite.urls") == "wiring"
    assert layer_of("captioneval.coco") == "library" and ("captioneval.evaluate", "captioneval._metrics") in graph


def test_no_import_cycles_between_files():
    modules, graph = project()
    cycles = describe_cycles(graph, modules, ROOT)
    assert not cycles, f"{len(cycles)} import cycle(s) between files:\n" + "\n".join(cycles)


def test_no_import_from_a_higher_layer():
    modules, graph = project()
    upward = upward_edges(graph, modules, ROOT)
    assert not upward, (f"{len(upward)} import(s) from a higher layer (order, bottom first: "
                        f"{' < '.join(LAYERS)}):\n" + "\n".join(upward))


def _cores(modules):
    return {m: path for m, path in modules.items() if _target(m, dict.fromkeys(CORES)) is not None}


def test_django_free_cores_never_import_django_or_celery():
    modules, _ = project()
    cores = _cores(modules)
    assert set(BLOCKED_ALLOWED) <= set(cores)
    found = blocked_imports({m: p for m, p in cores.items() if m not in BLOCKED_ALLOWED}, ROOT)
    assert not found, f"Django-free cores importing {', '.join(BLOCKED)}:\n" + "\n".join(found)


def test_django_free_cores_import_without_django_or_celery():
    modules, _ = project()
    cores = sorted(_cores(modules))
    assert {"captioneval.kernels.atoms", "captioneval.stats.agreement", "captioneval.utils.csvsafe", "captioneval.cli",
            "captioneval.commands.manage"} <= set(cores)
    result = import_without(ROOT, cores)
    assert not result["failures"], (f"{len(result['failures'])} Django-free core module(s) do not import "
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


# --- the checker can fail ------------------------------------------------------------------------

def _write(root: Path, files: dict[str, str]):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")


def test_checker_finds_a_planted_cycle_and_upward_edge(tmp_path):
    _write(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": """
            import json


            def f():
                from high import b  # upward (function-local, submodule)
                return b, json
            """,
        "low/ok.py": "from . import a\nfrom low.a import f\n",
        "high/__init__.py": "",
        "high/b.py": "from . import c\n",  # relative import of a submodule
        "high/c.py": """
            import os


            def g():
                from .b import thing  # closes the cycle b -> c -> b
                return thing
            """,
        "high/sub/__init__.py": "from ..c import g\nfrom .. import b\nfrom low import ok\n",
        "high/tests/test_x.py": "import low.a\n",  # tests are not part of the graph
    })
    modules = discover(tmp_path, ("low", "high"))
    assert sorted(modules) == ["high", "high.b", "high.c", "high.sub", "low", "low.a", "low.ok"]
    graph = import_graph(tmp_path, modules)
    assert graph == {("low.a", "high.b"): [5], ("low.ok", "low.a"): [1, 2], ("high.b", "high.c"): [1],
                     ("high.c", "high.b"): [5], ("high.sub", "high.c"): [1],
                     ("high.sub", "high.b"): [2], ("high.sub", "low.ok"): [3]}

    def classify(module):
        return layer_of(module, exact={}, prefixes={"low": "low", "high": "high"})

    upward = upward_edges(graph, modules, tmp_path, order=("low", "high"), classify=classify)
    assert upward == ["low/a.py:5: low.a [low] imports high.b [high]"]
    assert strongly_connected(graph) == [["high.b", "high.c"]]
    assert describe_cycles(graph, modules, tmp_path) == [
        "cycle between 2 files: high/b.py, high/c.py\n"
        "  e.g. high/b.py:1 -> high/c.py:5 -> high/b.py\n"
        "  high/b.py:1 imports high.c\n"
        "  high/c.py:5 imports high.b"]
    # without the two planted imports the same package is clean
    (tmp_path / "low/a.py").write_text("import json\n", encoding="utf-8")
    (tmp_path / "high/c.py").write_text("import low.a\n", encoding="utf-8")  # downward: allowed
    graph = import_graph(tmp_path, modules)
    assert upward_edges(graph, modules, tmp_path, order=("low", "high"), classify=classify) == []
    assert strongly_connected(graph) == []


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
    modules = discover(tmp_path, ("core",))
    assert blocked_imports(modules, tmp_path) == ["core/bad.py:3: core.bad imports celery",
                                                  "core/lazy.py:2: core.lazy imports django.conf"]
