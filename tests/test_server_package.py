"""The two distributions: ``captioneval`` (the library, one top-level package) and
``captioneval-server`` (the platform, server/pyproject.toml), installed from their wheels into a fresh
virtual environment, evaluate and serve from an empty folder.

Both wheels are built with ``pip wheel --no-deps`` (the library's once per session: the
``captioneval_wheel`` fixture of tests/conftest.py, shared with tests/test_packaging.py; pip's build
isolation fetches setuptools and hatchling from the configured index or cache). The venv is made by
the standard library's :mod:`venv` without pip; this interpreter's pip installs the two wheels into it
with ``--no-deps``, and a ``.pth`` file puts this interpreter's site-packages after the venv's own, so
the third-party dependencies (Django, numpy...) come from there and nothing is downloaded. The
platform's packages themselves come only from the venv: the commands run in a folder holding a
``metrics.py``, ``analysis.py``, ``evalcore.py``, ``crowd.py`` and ``api.py`` that raise ImportError
when imported, with no PYTHONPATH, no checkout and no database or broker URL in the environment.
"""
from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import httpx
import pytest

import captioneval

from .conftest import ROOT, build_wheel
from .test_faults import free_port, stop, wait_until
from .test_packaging import NO_METEOR, _run, evaluate_installed, installed_env

pytestmark = pytest.mark.slow

#: the platform's packages, each a top-level folder of the repository copied whole into the wheel
PLATFORM = ("crowd", "metrics", "analysis", "api", "evalsite")
#: top-level modules of the current folder that must never be imported by the installed commands
DECOYS = ("metrics", "analysis", "evalcore", "crowd", "api")


@pytest.fixture(scope="module")
def server_wheel(tmp_path_factory) -> Path:
    """The ``captioneval-server`` wheel built from server/pyproject.toml."""
    return build_wheel(ROOT / "server", tmp_path_factory.mktemp("server-wheel"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory, captioneval_wheel, server_wheel) -> dict:
    """A fresh venv with both wheels, and an empty folder of decoy modules: ``{"venv", "exe", "python", "folder"}``."""
    base = tmp_path_factory.mktemp("installed")
    venv = base / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv]).returncode == 0
    python = venv / "bin" / "python"
    proc = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps",
                 "--disable-pip-version-check", captioneval_wheel, server_wheel])
    assert proc.returncode == 0, proc.stderr[-3000:]
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "_third_party_from_the_test_interpreter.pth").write_text("\n".join(sorted(ours)) + "\n")
    folder = base / "empty"
    folder.mkdir()
    for name in DECOYS:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name}.py of the current folder was imported')\n")
    return {"venv": venv, "exe": venv / "bin" / "captioneval", "python": python, "folder": folder}


def test_the_library_wheel_holds_one_top_level_package(captioneval_wheel):
    with zipfile.ZipFile(captioneval_wheel) as wheel:
        names = wheel.namelist()
        info = f"captioneval-{captioneval.__version__}.dist-info"
        assert wheel.read(f"{info}/top_level.txt").decode().split() == ["captioneval"]
        record = [line.split(",")[0] for line in wheel.read(f"{info}/RECORD").decode().splitlines()]
    assert sorted(record) == sorted(names)
    assert {name.split("/")[0] for name in names} == {"captioneval", info}
    assert "captioneval/commands/serve.py" in names


def test_the_server_wheel_holds_the_platform(server_wheel):
    library = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    version = library["version"]
    assert version == captioneval.__version__
    info = f"captioneval_server-{version}.dist-info"
    with zipfile.ZipFile(server_wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"{info}/METADATA").decode()
    # every file of the apps (code, migrations, static files), the templates and the published table
    expected = {f"{info}/{name}" for name in ("METADATA", "WHEEL", "RECORD")}
    for source, target in [*((p, p) for p in PLATFORM), ("templates", "evalsite/templates"),
                           ("data/published_correlations", "analysis/published_correlations")]:
        for path in (ROOT / source).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                expected.add(f"{target}/{path.relative_to(ROOT / source).as_posix()}")
    assert names == expected, (sorted(names - expected)[:10], sorted(expected - names)[:10])
    assert {"crowd/migrations/0001_initial.py", "analysis/static/analysis/charts.js",
            "evalsite/templates/base.html"} <= names
    assert f"Name: captioneval-server\nVersion: {version}\n" in metadata
    requires = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: ")}
    assert f"captioneval[metrics]=={version}" in requires
    assert len(requires) == 1 + len(library["optional-dependencies"]["server"])


def test_installed_library_evaluates_from_an_empty_folder(installed, tmp_path):
    env = installed_env()
    proc, report = evaluate_installed(installed["exe"], tmp_path / "scores.json", "--metric", *NO_METEOR,
                                      cwd=installed["folder"], env=env)
    assert list(report["corpus"]) == NO_METEOR
    # the venv's packages ran: the platform's and the library's, none of the checkout or the folder
    where = _run([installed["python"], "-P", "-c",
                  "import captioneval, crowd, metrics, analysis, api, evalsite; "
                  "print('\\n'.join(m.__file__ for m in (captioneval, crowd, metrics, analysis, api, evalsite)))"],
                 cwd=installed["folder"], env=env)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(installed["venv"])) for line in where.stdout.splitlines()), where.stdout


def test_serve_starts_the_site_on_sqlite_from_an_empty_folder(installed, tmp_path):
    data = tmp_path / "data"
    port = free_port()
    env = installed_env()
    log = open(tmp_path / "serve.log", "w+")
    server = subprocess.Popen([str(installed["exe"]), "serve", "--port", str(port), "--data-dir", str(data)],
                              cwd=installed["folder"], env=env, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def answers():
        assert server.poll() is None, "captioneval serve stopped"
        try:
            return httpx.get(url + "/", timeout=10)
        except httpx.TransportError:
            return None

    try:
        home = wait_until(answers, 300, "captioneval serve to answer")
        assert home.status_code == 200 and "<h1>Datasets</h1>" in home.text
        datasets = httpx.get(url + "/api/datasets/", timeout=10)
        assert datasets.status_code == 200 and datasets.json()["count"] == 0
        static = httpx.get(url + "/static/analysis/charts.js", timeout=10)
        assert static.status_code == 200
        assert static.content == (ROOT / "analysis" / "static" / "analysis" / "charts.js").read_bytes()
        login = httpx.get(url + "/accounts/login/", timeout=10)
        assert login.status_code == 200 and 'name="password"' in login.text
    finally:
        stop(server)
        log.seek(0)
        said = log.read()
        log.close()
        print(said[-3000:])
    assert f"captioneval: database sqlite3 {data.resolve() / 'captioneval.sqlite3'}; migrating" in said
    assert (data / "captioneval.sqlite3").is_file()
    # `captioneval manage` runs the installed platform: the database serve migrated has nothing left
    # to apply; the per-user default folder ($XDG_DATA_HOME/captioneval) is a new, unmigrated one
    check = _run([installed["exe"], "manage", "migrate", "--check"], cwd=installed["folder"],
                 env=dict(env, EVALSITE_VAR_DIR=str(data)))
    assert check.returncode == 0, check.stderr
    fresh = _run([installed["exe"], "manage", "migrate", "--check"], cwd=installed["folder"],
                 env=dict(env, XDG_DATA_HOME=str(tmp_path / "xdg")))
    assert fresh.returncode == 1, fresh.stderr
    assert (tmp_path / "xdg" / "captioneval" / "captioneval.sqlite3").is_file()
