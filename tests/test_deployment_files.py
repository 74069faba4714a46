"""docker-compose.yml cannot run here (no Docker engine): check its structure instead, and that the
metric and statistics code imports without Django."""
import os
import re
import subprocess
import sys

import yaml

from .conftest import ROOT


def test_compose_file_has_the_five_services_wired_together():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "web", "worker", "beat"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    for name in ("web", "worker", "beat"):
        svc = services[name]
        env = svc["environment"]
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["CELERY_BROKER_URL"].startswith("redis://redis:6379")
        assert set(svc["depends_on"]) == {"postgres", "redis"}
        assert svc["build"] == "."
    assert "celery -A evalsite worker" in services["worker"]["command"]
    assert "celery -A evalsite beat" in services["beat"]["command"]
    web = services["web"]
    assert "manage.py migrate" in web["command"] and "gunicorn evalsite.wsgi" in web["command"]
    assert "runserver" not in web["command"]
    assert [port.rsplit(":", 2)[-2:] for port in web["ports"]] == [["8000", "8000"]]
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "default-jre-headless" in dockerfile
    # the image installs the server's lock (every version pinned), not the one with the test tools
    installs = re.findall(r"pip install [^\n]*-r (\S+)", dockerfile)
    assert installs == ["requirements/server.txt"] and "requirements/test.txt" not in dockerfile
    assert "COPY requirements/server.txt" in dockerfile and (ROOT / installs[0]).is_file()
    assert "DJANGO_SETTINGS_MODULE=evalsite.production" in dockerfile and '"gunicorn", "evalsite.wsgi"' in dockerfile
    assert ".env" in (ROOT / ".dockerignore").read_text().split()  # secrets file never copied into the image


def test_compose_takes_every_secret_from_the_environment():
    """Production settings, and no secret written in the file: the Django key and the database
    password are required variables (``${NAME:?message}``: compose refuses to start without them)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("web", "worker", "beat"):
        env = services[name]["environment"]
        assert env["DJANGO_SETTINGS_MODULE"] == "${DJANGO_SETTINGS_MODULE:-evalsite.production}"
        assert env["DJANGO_SECRET_KEY"].startswith("${DJANGO_SECRET_KEY:?")
        assert "${POSTGRES_PASSWORD:?" in env["DATABASE_URL"]
        assert env["CACHE_URL"].startswith("redis://redis:6379/")  # rate limits shared by the gunicorn workers
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    text = (ROOT / "docker-compose.yml").read_text()
    assert "captioneval:captioneval@" not in text and "POSTGRES_PASSWORD: captioneval" not in text


def test_metric_and_statistics_code_runs_without_django():
    code = (
        "import sys\n"
        "from captioneval.metrics import registry\n"
        "from captioneval.kernels import cider, coco\n"
        "from captioneval.text import tokenizer\n"
        "from captioneval.stats import correlate\n"
        "import numpy as np\n"
        "s = cider.cider_d(['a dog runs', 'a cat'], [['a dog runs fast', 'dog running'], ['a cat sits']])\n"
        "r = correlate(np.array([1., 2, 3, 4]), np.array([1., 3, 2, 4]), np.array([0, 0, 1, 1]), n_resamples=10)\n"
        "assert s.shape == (2,) and r.n_rows == 4\n"
        "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')], 'django was imported'\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
