"""The quick start: the embedded SQLite default and in-process tasks, driven through the CLI exactly
as a user would, reproduces the published Flickr8k-Expert correlations."""
import json
import shutil
import subprocess
import sys

import pytest

from .conftest import FLICKR8K, ROOT
from .published import check_published
from .sqlite_var import migrated_var, sqlite_env

pytestmark = pytest.mark.slow


def manage(*args, env):
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )


@pytest.fixture(scope="module")
def imported_var(tmp_path_factory):
    """A var folder whose embedded SQLite database (migrated once per session: tests.sqlite_var) was given
    Flickr8k-Expert through the CLI, once for the module (each test works on its own copy: ``env``)."""
    var = migrated_var(tmp_path_factory.mktemp("sqlite-imported") / "var")
    env = sqlite_env(var)
    imported = manage("import_dataset", "flickr8k-expert", str(FLICKR8K), "--name", "flickr8k-expert", env=env)
    assert imported.returncode == 0, imported.stderr
    assert (var / "captioneval.sqlite3").exists()
    return var


@pytest.fixture
def env(imported_var, tmp_path):
    """The environment of a test's own copy of the imported SQLite database."""
    shutil.copytree(imported_var, tmp_path / "var")
    return sqlite_env(tmp_path / "var")


def test_flickr8k_expert_on_embedded_sqlite(env):
    computed = manage("compute_metrics", "--dataset", "flickr8k-expert", "--wait", env=env)
    assert computed.returncode == 0, computed.stderr
    assert "100%" in computed.stderr  # the progress bar reached the end
    assert "No hostname was supplied" not in computed.stderr  # no broker: kombu must not look for one
    assert computed.stdout.count(": done, 5,664/5,664 scores") == 7
    result = manage("correlate", "--dataset", "flickr8k-expert", "--json", "--resamples", "200", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["metrics"]) == {"bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "cider_d"}
    print(check_published(report))
    for m in report["metrics"].values():
        lo, hi = m["ci95"]["kendall_tau_c"]
        assert lo < m["kendall_tau_c"] < hi
    # Unknown metric: one line, non-zero exit, nothing changed.
    bad = manage("correlate", "--dataset", "flickr8k-expert", "--metric", "cider", "--json", env=env)
    assert bad.returncode != 0 and bad.stderr.strip().count("\n") == 0 and "unknown metric 'cider'" in bad.stderr


def test_set_level_run_with_undefined_sets_completes_on_sqlite(env):
    """SQLite cannot store NaN (it becomes NULL): a set of one caption, whose LSA diversity is
    undefined, used to be dropped silently by INSERT OR IGNORE and the run never finished. Every set
    must be stored, the undefined ones read back as NaN."""
    computed = manage("compute_metrics", "--dataset", "flickr8k-expert", "--metric", "lsa", "--wait", env=env)
    assert computed.returncode == 0, computed.stderr
    probe = (
        "import json, math\n"
        "from collections import Counter\n"
        "from crowd.models import Caption\n"
        "from metrics.models import MetricRun, SetScore\n"
        "run = MetricRun.objects.get(metric='lsa')\n"
        "sizes = Counter(Caption.objects.filter(image__dataset=run.dataset).values_list('image_id', 'system_id'))\n"
        "values = dict(((i, s), v) for i, s, v in SetScore.objects.filter(run=run).values_list('image_id', 'system_id', 'value'))\n"
        "print(json.dumps({'status': run.status, 'total': run.total, 'stored': len(values), 'sets': len(sizes),\n"
        "  'singles': sum(1 for n in sizes.values() if n < 2),\n"
        "  'nan_where_single': sorted(k for k, n in sizes.items() if n < 2) == sorted(k for k, v in values.items() if math.isnan(v))}))\n"
    )
    shown = manage("shell", "-c", probe, env=env)
    assert shown.returncode == 0, shown.stderr
    state = json.loads(shown.stdout.strip().splitlines()[-1])
    assert state["status"] == "done" and state["stored"] == state["total"] == state["sets"], state
    assert state["singles"] == 5 and state["nan_where_single"], state  # 5 sets of one caption
