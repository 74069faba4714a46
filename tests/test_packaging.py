"""pyproject.toml: the extras cannot drift from requirements.txt, and the built wheel installs into a
fresh virtual environment and runs ``captioneval evaluate`` on the bundled COCO files.

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
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "flickr8k_expert_coco"


def _normalise(requirement: str) -> str:
    """A requirement line without comment and spaces, name lower-cased (PEP 503 style for -/_)."""
    text = requirement.split("#", 1)[0].strip().replace(" ", "")
    name = re.match(r"[A-Za-z0-9._-]+", text).group(0)
    return re.sub(r"[-_.]+", "-", name).lower() + text[len(name):]


def requirement_sections(root: Path = ROOT) -> dict[str, list[str]]:
    """requirements.txt's sections (``# Runtime``, ``# Tests``): normalised requirement lines."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in (root / "requirements.txt").read_text("utf-8").splitlines():
        if re.fullmatch(r"#\s*\w+\s*", line):
            current = line.strip("# ").lower()
            sections[current] = []
        elif line.strip() and not line.startswith("#"):
            sections[current].append(_normalise(line))
    return sections


def pyproject(root: Path = ROOT) -> dict:
    return tomllib.loads((root / "pyproject.toml").read_text("utf-8"))


def drift(root: Path = ROOT) -> list[str]:
    """Where pyproject.toml and requirements.txt disagree (empty when they agree): the ``server`` extra
    must be the ``# Runtime`` section and ``test`` the ``# Tests`` section, line for line; the base
    dependencies and the metric extras must be lines of the runtime section."""
    sections = requirement_sections(root)
    project = pyproject(root)["project"]
    extras = project["optional-dependencies"]
    problems = []
    if set(sections) != {"runtime", "tests"}:
        problems.append(f"requirements.txt sections: {sorted(sections)}")
    for extra, section in (("server", "runtime"), ("test", "tests")):
        ours = [_normalise(r) for r in extras[extra]]
        theirs = sections.get(section, [])
        if ours != theirs:
            problems.append(f"[{extra}] differs from # {section}: only in pyproject {sorted(set(ours) - set(theirs))}, "
                            f"only in requirements.txt {sorted(set(theirs) - set(ours))} (or the order differs)")
    runtime = set(sections.get("runtime", []))
    for name, group in (("dependencies", project["dependencies"]), ("meteor", extras["meteor"]),
                        ("metrics", extras["metrics"])):
        extra_lines = {_normalise(r) for r in group} - runtime
        if extra_lines:
            problems.append(f"{name}: {sorted(extra_lines)} not in requirements.txt's runtime section")
    return problems


def test_extras_equal_requirements_sections():
    assert drift() == []
    project = pyproject()["project"]
    assert {re.split(r"[<>=]", _normalise(r))[0] for r in project["dependencies"]} == {"numpy", "scipy", "tqdm"}
    assert project["scripts"] == {"captioneval": "captioneval.cli:main"}


def test_the_drift_check_can_fail(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text("utf-8"))
    text = (ROOT / "requirements.txt").read_text("utf-8")
    (tmp_path / "requirements.txt").write_text(text.replace("Django>=5.2,<6", "Django>=5.1,<6")
                                               + "newthing>=1  # a new test dependency\n")
    problems = drift(tmp_path)
    assert len(problems) == 2
    assert "only in pyproject ['django>=5.2,<6'], only in requirements.txt ['django>=5.1,<6']" in problems[0]
    assert "only in requirements.txt ['newthing>=1']" in problems[1]


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
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", venv]).returncode == 0
    py = venv / "bin" / "python"
    proc = _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", captioneval_wheel])
    assert proc.returncode == 0, proc.stderr[-3000:]
    listed = _run([py, "-m", "pip", "list", "--format=json"]).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert {"captioneval", "numpy", "scipy", "tqdm"} <= installed
    assert not installed & {"django", "celery", "psycopg", "pycocoevalcap", "gensim"}, installed
    env = installed_env()
    exe = venv / "bin" / "captioneval"
    proc, report = evaluate_installed(exe, tmp_path / "scores.json", cwd=tmp_path, env=env)
    # the installed package, not the checkout, ran
    where = _run([py, "-c", "import captioneval, captioneval.kernels; print(captioneval.__file__, captioneval.kernels.__file__)"],
                 cwd=tmp_path, env=env).stdout
    assert str(venv) in where and str(ROOT) not in where
    assert proc.stderr.strip().splitlines() == [
        "captioneval: METEOR needs the METEOR 1.5 jar of pycocoevalcap: pip install 'captioneval[meteor]' (and a Java "
        "runtime)"]
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
