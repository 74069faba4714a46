"""pyproject.toml's ranges and the locks generated from them (requirements/server.txt,
requirements/test.txt) cannot drift apart, and the built wheel installs into a fresh virtual
environment and runs ``captioneval evaluate`` on the bundled COCO files.

A lock is the output of ``uv pip compile pyproject.toml --extra ...`` (its header holds the command,
docs/deployment.md says when to run it): every version pinned, each pin annotated with what needs it
(``# via captioneval (pyproject.toml)`` for our own direct dependencies). :func:`lock_drift` reads the
extras a lock covers from that header and reports a declared requirement that the lock does not pin,
or pins at a version outside the declared range, and a direct dependency of the lock that
pyproject.toml no longer declares.

The wheel test takes the wheel that ``pip wheel --no-deps`` builds once per session (the
``captioneval_wheel`` fixture of tests/conftest.py; the setuptools backend of pyproject.toml, fetched
by pip's build isolation from the configured index or wheel cache), creates a venv with the standard
library's :mod:`venv`, installs the wheel and its base dependencies (numpy, scipy, tqdm) with pip from
the same index/cache (no network beyond it), and compares the numbers the installed command prints with
the ones of ``captioneval.evaluate`` in the checkout (which tests/test_library.py checks against
pycocoevalcap). The base install has no pycocoevalcap, so METEOR is skipped with its one-line reason,
and ``captioneval manage`` and ``captioneval serve`` without the platform say ``pip install
captioneval-server`` in one line (tests/test_server_package.py installs it).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "flickr8k_expert_coco"
#: the locks: the server's (the Docker image) and the server's with the test tools (./run setup, CI)
LOCKS = ("requirements/server.txt", "requirements/test.txt")
#: how a lock names pyproject.toml's own requirements in its ``# via`` annotations
OURS = "captioneval (pyproject.toml)"


def pyproject(root: Path = ROOT) -> dict:
    """pyproject.toml of ``root``, parsed."""
    return tomllib.loads((root / "pyproject.toml").read_text("utf-8"))


def read_lock(text: str) -> tuple[list[str], dict[str, str], set[str]]:
    """A lock's extras (the ``--extra`` options of the command in its header), its pins (canonical
    name -> version) and the names it pins for pyproject.toml itself (``# via captioneval
    (pyproject.toml)``, on the ``# via`` line or in the list below it)."""
    lines = text.splitlines()
    command = next((line for line in lines[:5] if "pip compile pyproject.toml" in line), "")
    extras = re.findall(r"--extra[= ](\S+)", command)
    pins: dict[str, str] = {}
    direct: set[str] = set()
    current = None
    for line in lines:
        pin = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)(\s*;.*)?", line.strip()) \
            if not line.startswith((" ", "#")) else None
        if pin:
            current = canonicalize_name(pin.group(1))
            pins[current] = pin.group(3)
        elif current and re.fullmatch(r"\s+#\s+(via\s+)?" + re.escape(OURS), line):
            direct.add(current)
    return extras, pins, direct


def lock_drift(lock: str, root: Path = ROOT) -> list[str]:
    """Where ``root``'s lock ``lock`` and pyproject.toml disagree (empty when they agree): for the base
    dependencies and each extra the lock was compiled with, every requirement must be pinned at a
    version inside its declared range, and each direct dependency of the lock must still be declared."""
    project = pyproject(root)["project"]
    optional = project["optional-dependencies"]
    extras, pins, direct = read_lock((root / lock).read_text("utf-8"))
    problems = [] if extras else [f"{lock}: the header's command names no extra"]
    problems += [f"{lock}: extra [{extra}] is not in pyproject.toml" for extra in extras if extra not in optional]
    declared = [Requirement(r) for r in project["dependencies"]]
    declared += [Requirement(r) for extra in extras for r in optional.get(extra, [])]
    for req in declared:
        name = canonicalize_name(req.name)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if name not in pins:
            problems.append(f"{lock}: {req} is declared but not pinned")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{lock}: {name}=={pins[name]} is outside the declared range {req}")
    names = {canonicalize_name(req.name) for req in declared}
    problems += [f"{lock}: {name}=={pins[name]} is pinned for captioneval but not declared"
                 for name in sorted(direct - names)]
    return problems


def test_the_locks_pin_every_declared_requirement_inside_its_range():
    for lock in LOCKS:
        assert lock_drift(lock) == [], lock
    optional = pyproject()["project"]["optional-dependencies"]
    server, _, server_direct = read_lock((ROOT / LOCKS[0]).read_text("utf-8"))
    test, _, _ = read_lock((ROOT / LOCKS[1]).read_text("utf-8"))
    assert set(test) == set(optional), "requirements/test.txt covers every extra"
    assert "test" not in server and {"server", "metrics", "meteor"} <= set(server)
    project = pyproject()["project"]
    assert {canonicalize_name(Requirement(r).name) for r in project["dependencies"]} == {"numpy", "scipy", "tqdm"}
    assert project["scripts"] == {"captioneval": "captioneval.cli:main"}
    assert project["license"] == "BSD-3-Clause AND GPL-2.0-or-later AND LGPL-2.1-or-later"
    assert project["license-files"] == ["LICENSE", "LICENSES/GPL-2.0-or-later.txt", "LICENSES/LGPL-2.1-or-later.txt"]
    assert "GNU GENERAL PUBLIC LICENSE" in (ROOT / "LICENSES/GPL-2.0-or-later.txt").read_text("utf-8")
    assert "Redistribution and use in source and binary forms" in (ROOT / "LICENSE").read_text("utf-8")


def lock_layout(text: str) -> list[str]:
    """Where a lock departs from uv's layout (empty when it does not): pins in canonical name order,
    each followed by its ``# via`` annotation (one ``# via X`` line, or ``# via`` and one ``#   X`` line
    per requirer), ``-c`` constraints first, then ``captioneval (pyproject.toml)``, then the requirers
    in name order, none twice. Hand-added pins (the learned extra's) must look like uv wrote them."""
    problems, names, current, via = [], [], None, []

    def close():
        if current is None:
            return
        if not via:
            problems.append(f"{current}: no # via annotation")
        cons = [v for v in via if v.startswith("-c ")]
        ours = [v for v in via if v == OURS]
        rest = [v for v in via if v not in cons and v not in ours]
        if via != cons + ours + sorted(rest) or len(set(via)) != len(via):
            problems.append(f"{current}: # via not in uv's order or repeated: {via}")

    for line in text.splitlines():
        if not line.startswith((" ", "#")) and "==" in line:
            close()
            current, via = line.split("==")[0], []
            names.append(canonicalize_name(current))
        elif current is not None and (m := re.fullmatch(r"\s+#\s+(?:via\s+)?(\S.*)", line)) and line.strip() != "# via":
            via.append(m.group(1).strip())
    close()
    if names != sorted(names):
        problems.append(f"pins out of name order: {[n for n, s in zip(names, sorted(names)) if n != s][:5]}")
    return problems


def test_the_locks_are_in_uvs_layout_and_the_test_lock_pins_the_cpu_torch():
    for lock in LOCKS:
        assert lock_layout((ROOT / lock).read_text("utf-8")) == [], lock
    _, test, test_direct = read_lock((ROOT / LOCKS[1]).read_text("utf-8"))
    assert test["torch"].endswith("+cpu") and {"torch", "transformers"} <= test_direct
    assert not [name for name in test if name.startswith("nvidia")]
    # the check can fail: a pin out of order, a repeated requirer
    assert lock_layout("b==1\n    # via x\na==1\n    # via x\n") == ["pins out of name order: ['b', 'a']"]
    assert lock_layout("a==1\n    # via\n    #   x\n    #   x\n") == ["a: # via not in uv's order or repeated: ['x', 'x']"]
    assert lock_layout(f"a==1\n    # via\n    #   {OURS}\n    #   -c requirements/server.txt\n") != []


def test_the_server_lock_holds_no_test_tool_and_agrees_with_the_test_lock():
    """The production image installs requirements/server.txt: the test tools are not in it (the test
    extra's packages that a server package needs, such as PyYAML for drf-spectacular, are, but not
    for captioneval), and every package it pins is pinned at the same version in requirements/test.txt
    (compiled with the server lock as constraints)."""
    optional = pyproject()["project"]["optional-dependencies"]
    server_names = {canonicalize_name(Requirement(r).name) for r in optional["server"]}
    test_only = {canonicalize_name(Requirement(r).name) for r in optional["test"]} - server_names
    _, server, server_direct = read_lock((ROOT / LOCKS[0]).read_text("utf-8"))
    _, test, test_direct = read_lock((ROOT / LOCKS[1]).read_text("utf-8"))
    tools = {"pytest", "pytest-django", "selenium", "schemathesis", "hypothesis", "sacrebleu", "scikit-learn"}
    assert tools <= test_only and tools <= test_direct
    assert not tools & set(server), sorted(tools & set(server))
    assert not test_only & server_direct, sorted(test_only & server_direct)
    assert {name: test.get(name) for name in server} == server


def test_the_drift_check_can_fail(tmp_path):
    (tmp_path / "requirements").mkdir()
    shutil.copy(ROOT / LOCKS[1], tmp_path / LOCKS[1])
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert lock_drift(LOCKS[1], tmp_path) == []  # the copies agree, as the originals do
    _, pins, _ = read_lock((ROOT / LOCKS[1]).read_text("utf-8"))
    text = (ROOT / "pyproject.toml").read_text("utf-8")
    assert '"Django>=5.2,<6",' in text and '"pytest>=8",' in text
    # a range the pinned Django is outside of, and a new test dependency nobody locked
    text = text.replace('"Django>=5.2,<6",', '"Django>=9",').replace('"pytest>=8",', '"pytest>=8",\n    "newthing>=1",')
    (tmp_path / "pyproject.toml").write_text(text)
    # a direct dependency of the lock that pyproject.toml does not declare
    with open(tmp_path / LOCKS[1], "a", encoding="utf-8") as lock:
        lock.write(f"leftover==1.0\n    # via {OURS}\n")
    problems = lock_drift(LOCKS[1], tmp_path)
    assert problems == [
        f"requirements/test.txt: django=={pins['django']} is outside the declared range Django>=9",
        "requirements/test.txt: newthing>=1 is declared but not pinned",
        "requirements/test.txt: leftover==1.0 is pinned for captioneval but not declared",
    ]


ANNOTATIONS = DATA / "captions_flickr8k_expert.json"
RESULTS = DATA / "results_flickr8k_expert.json"
#: the COCO metrics but METEOR (which needs pycocoevalcap's jar and Java)
NO_METEOR = ["bleu_1", "bleu_2", "bleu_3", "bleu_4", "rouge_l", "cider_d"]
#: environment variables that would point an installed command back at the checkout or at services
CHECKOUT_ENV = ("PYTHONPATH", "CAPTIONEVAL_HOME", "DJANGO_SETTINGS_MODULE", "EVALSITE_VAR_DIR", "DATABASE_URL",
                "CELERY_BROKER_URL", "CACHE_URL")


def _run(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, **kw)
    return proc


def installed_env() -> dict[str, str]:
    """This process's environment without :data:`CHECKOUT_ENV`: an installed command sees only its venv."""
    return {k: v for k, v in os.environ.items() if k not in CHECKOUT_ENV}


def evaluate_installed(exe: Path, out: Path, *args, cwd: Path, env: dict) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the installed ``captioneval evaluate`` on the bundled Flickr8k-Expert COCO files with ``args``,
    the report to ``out``; assert it succeeds and its numbers are those of :func:`captioneval.evaluate`
    in the checkout (tests/test_library.py checks those against pycocoevalcap), for every metric of
    :data:`NO_METEOR` it reports. Return the process and the report."""
    import captioneval

    proc = _run([exe, "evaluate", "--annotations", ANNOTATIONS, "--results", RESULTS, "--out", out, *args],
                cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    keys = [key for key in NO_METEOR if key in report["corpus"]]
    assert keys, report["corpus"]
    ann = json.loads(ANNOTATIONS.read_text("utf-8"))
    res = json.loads(RESULTS.read_text("utf-8"))
    refs: dict = {}
    for a in ann["annotations"]:
        refs.setdefault(a["image_id"], []).append(a["caption"])
    here = captioneval.evaluate({r["image_id"]: r["caption"] for r in res}, refs, metrics=keys)
    for key in keys:
        assert report["corpus"][key]["score"] == here.corpus[key], key
        assert f"{here.corpus[key]:.4f}" in proc.stdout
        assert [row[key] for row in report["captions"]] == [float(v) for v in here.scores[key]], key
    return proc, report


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv_and_evaluates(tmp_path, captioneval_wheel):
    # the licence (PEP 639) and the stop list's data file travel in the wheel
    with zipfile.ZipFile(captioneval_wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        assert "License-Expression: BSD-3-Clause AND GPL-2.0-or-later AND LGPL-2.1-or-later" in archive.read(metadata).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert any(n.endswith(".dist-info/licenses/LICENSES/GPL-2.0-or-later.txt") for n in names), names
    assert "captioneval/kernels/data/english_stop_words.txt" in names
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0  # the test's pip installs
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", py]
    proc = _run([*pip, "install", "-q", "--disable-pip-version-check", "--no-compile", captioneval_wheel])
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = _run([*pip, "list", "--format=json"]).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert {"captioneval", "numpy", "scipy", "tqdm"} <= installed
    assert not installed & {"django", "celery", "psycopg", "pycocoevalcap", "gensim", "scikit-learn"}, installed
    env = installed_env()
    exe = venv / "bin" / "captioneval"
    proc, report = evaluate_installed(exe, tmp_path / "scores.json", cwd=tmp_path, env=env)
    # the installed package, not the checkout, ran
    where = _run([py, "-c", "import captioneval, captioneval.kernels; print(captioneval.__file__, captioneval.kernels.__file__)"],
                 cwd=tmp_path, env=env).stdout
    assert str(venv) in where and str(ROOT) not in where
    # LSA's stop list reads the installed data file (there is no scikit-learn in this venv)
    words = _run([py, "-c", "from captioneval.kernels.stopwords import ENGLISH_STOP_WORDS as w; print(len(w))"],
                 cwd=tmp_path, env=env)
    assert words.stdout.strip() == "318", words.stderr
    assert proc.stderr.strip().splitlines() == [
        "captioneval: METEOR needs the METEOR 1.5 jar of pycocoevalcap: pip install 'captioneval[meteor]' (which also "
        "brings snowballstemmer for the Python implementation)"]
    assert list(report["corpus"]) == NO_METEOR and report["skipped"].keys() == {"meteor"}
    # METEOR asked for explicitly, and the platform's commands, fail with one line each
    proc = _run([exe, "evaluate", "--annotations", ANNOTATIONS, "--results", RESULTS, "--metric", "meteor"],
                cwd=tmp_path, env=env)
    assert proc.returncode == 2 and proc.stderr.startswith("captioneval: error: --metric: METEOR needs the METEOR 1.5 jar")
    for command in (["manage", "check"], ["serve", "--port", "1"]):
        proc = _run([exe, *command], cwd=tmp_path, env=env)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith(f"captioneval: error: {command[0]}: the platform is not installed: "
                                      "pip install captioneval-server"), proc.stderr
