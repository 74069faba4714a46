"""METEOR 1.5 through a pool of persistent JVMs (captioneval.kernels.meteor): the same floats as
pycocoevalcap's Meteor (captioneval.kernels.coco.meteor, the reference) on all 5,664 Flickr8k-Expert
pairs with 2 JVMs (and the first 1,500 with 1 JVM), order kept, a JVM killed mid-use restarted, awkward captions, fork
safety, and Java missing with CAPTIONEVAL_METEOR=java: a clear error, the metric skipped by compute_metrics
and the web form while the others are computed (with the default Python METEOR, nothing is skipped)."""
import gc
import io
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from django.core.management import call_command
from django.contrib.auth.models import User
from django.core.management.base import CommandError
from django.urls import reverse

from crowd.models import Dataset
from metrics.models import MetricRun, MetricScore
from captioneval.kernels import coco, meteor
from captioneval.metrics import registry
from captioneval.text.tokenizer import JavaMissingError

from . import references as pycoco
from .conftest import ROOT, run_command
from .flickr8k_data import N_EXPERT_PAIRS
from .test_user_metrics import csrf_client, page_token

JAVA_HINT = "apt-get install default-jre-headless"
SKIP_MESSAGE = ("METEOR skipped: Java is not installed; install a JRE (apt-get install default-jre-headless / "
                "brew install openjdk) to compute it")

#: captions the wire protocol must survive: its field separator, empty and whitespace-only text,
#: accents, CJK, an emoji (outside the BMP), full-width letters, tabs and newlines
AWKWARD = [
    ("a dog ||| runs on the grass", ["a dog runs on grass", "the dog ||| is running"]),
    ("", ["a dog runs"]),
    ("|||", ["x ||| y", "z"]),
    ("   ", ["a man rides a bike"]),
    ("un café près de la fenêtre", ["un café à côté de la fenêtre", "a cafe by the window"]),
    ("日本語 の 文", ["日本語 の 文 です"]),
    ("a|||b c", ["a b c"]),
    ("  spaces   and\ttabs\nnewline ", ["spaces and tabs newline"]),
    ("a dog 🐶 runs", ["a dog 🐶 is running", "a puppy runs"]),
    ("ＡＢＣ dog", ["abc dog", ""]),
]


@pytest.fixture(scope="module")
def expert():
    """(candidates, references, pycocoevalcap's scores) of the 5,664 tokenised Flickr8k-Expert pairs
    (pycocoevalcap's Meteor on them is computed once per session: tests.references)."""
    candidates, references = pycoco.expert_inputs()
    assert len(candidates) == N_EXPERT_PAIRS
    return candidates, references, pycoco.meteor(candidates, references)[1]


@pytest.fixture(scope="module")
def pool2():
    """A pool of 2 JVMs shared by this module's tests (started once: a cold JVM takes 5-12 s);
    tests that kill one of its JVMs check that it is restarted, so it is alive for the next test."""
    pool = meteor.MeteorPool(2)
    pool.start(wait=True)
    yield pool
    pool.close()
    assert pool.processes == [None, None]


@pytest.fixture(scope="module")
def pool1():
    """This process's pool (meteor.get_pool()) with 1 JVM, started once and shared by this module's
    tests that neither kill its JVM nor change its size (test_module_pool_follows_configure, which
    does, comes first in the file and leaves a size-1 pool behind, so it is the same pool)."""
    meteor.configure(1)
    pool = meteor.get_pool()
    pool.start(wait=True)
    return pool


@pytest.fixture
def java_meteor(monkeypatch):
    """This process configured as with CAPTIONEVAL_METEOR=java (read at import, so patched here): the
    kernels use the jar and the METEOR metric needs a JVM, as in a process started with it."""
    from captioneval.metrics import base

    monkeypatch.setattr(meteor, "DEFAULT_IMPLEMENTATION", "java")
    metric = registry.METRICS["meteor"]
    monkeypatch.setattr(metric, "needs", frozenset({base.REFERENCES, base.JVM}))
    monkeypatch.setattr(metric, "version", "pycocoevalcap-1.2/meteor-1.5")


@pytest.fixture
def no_java(tmp_path, monkeypatch):
    """PATH without java (an empty directory), for this process and its subprocesses."""
    empty = tmp_path / "bin-without-java"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return str(empty)


# --- the same numbers as pycocoevalcap ----------------------------------------------------------------

@pytest.mark.slow
def test_module_pool_follows_configure_and_equals_pycocoevalcap(expert):
    candidates, references, reference = expert
    try:
        meteor.configure(2)
        assert meteor.pool_size() == 2 and meteor.get_pool().size == 2
        meteor.get_pool().start(wait=False)  # returns at once; the JVMs load in the background
        assert np.array_equal(meteor.meteor(candidates[:500], references[:500], implementation="java"), reference[:500])
        first = meteor.get_pool()
        assert meteor.get_pool() is first  # reused across calls
        meteor.configure(1)  # another size: the running pool is closed, a new one made on next use
        assert first.processes == [None, None]
        assert meteor.get_pool().size == 1
        assert np.array_equal(meteor.meteor(candidates[500:700], references[500:700], implementation="java"), reference[500:700])
    finally:
        meteor.configure(1)
    with pytest.raises(ValueError, match="at least one JVM"):
        meteor.configure(0)
    with pytest.raises(ValueError, match="at least one JVM"):
        meteor.MeteorPool(0)


@pytest.mark.slow
@pytest.mark.parametrize("size", [1, 2])
def test_equal_to_pycocoevalcap_on_every_flickr8k_expert_pair(expert, size, request):
    """Exact float equality with pycocoevalcap's Meteor: with 2 JVMs (parts scored concurrently) on
    every one of the 5,664 pairs, with 1 JVM (no split) on the first 1,500 (a caption's score depends
    only on its own statistics line, so the pool size cannot change a number: the full-data check is
    the split one). The module's warm pools are used (starting and stopping a pool is checked by
    test_module_pool_follows_configure, the dead-JVM tests and the pool2 fixture's teardown)."""
    candidates, references, reference = expert
    pool = request.getfixturevalue(f"pool{size}")
    n = N_EXPERT_PAIRS if size == 2 else 1500
    scores = pool.score(candidates[:n], references[:n])
    assert pool.size == size
    assert scores.dtype == np.float64 and scores.shape == (n,)
    assert np.array_equal(scores, reference[:n])  # exact float equality, no tolerance
    assert 0.0 < scores.mean() < 1.0 and len(np.unique(scores)) > 0.7 * n  # real scores, not a constant
    assert all(p is not None and p.poll() is None for p in pool.processes)


@pytest.mark.slow
def test_order_is_kept_whatever_the_split(expert, pool2):
    candidates, references, reference = expert
    rng = np.random.default_rng(7)
    order = rng.permutation(N_EXPERT_PAIRS)[:1001]  # odd: parts of unequal size
    scores = pool2.score([candidates[i] for i in order], [references[i] for i in order])
    assert np.array_equal(scores, reference[order])
    backwards = pool2.score(candidates[:300][::-1], references[:300][::-1])
    assert np.array_equal(backwards, reference[:300][::-1])
    one = pool2.score(candidates[41:42], references[41:42])  # fewer captions than JVMs
    assert one.shape == (1,) and one[0] == reference[41]
    assert pool2.score([], []).shape == (0,)


@pytest.mark.slow
def test_awkward_captions_equal_pycocoevalcap(pool2):
    candidates = [c for c, _ in AWKWARD]
    references = [r for _, r in AWKWARD]
    expected = coco.meteor(candidates, references)
    assert expected[0] > 0 and expected[1] == 0.0  # the separator is cleaned, an empty candidate scores 0
    assert np.array_equal(pool2.score(candidates, references), expected)
    assert np.array_equal(meteor.meteor(candidates, references), expected)  # the Python default: equal too


def test_bad_input_is_refused_before_any_jvm():
    pool = meteor.MeteorPool(1)
    with pytest.raises(ValueError, match="2 candidates but 1 reference lists"):
        pool.score(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="candidate 1 has no reference captions"):
        pool.score(["a", "b"], [["a"], []])
    assert pool.processes == [None]


# --- dead JVMs ---------------------------------------------------------------------------------------

def kill_after(jvm, n_lines, times):
    """Make ``jvm`` SIGKILL its process after reading ``n_lines`` answers, on its next ``times`` reads
    (the writer thread is still streaming requests then)."""
    original = jvm._read
    left = [times]

    def read(n):
        if left[0] > 0 and n > n_lines:
            left[0] -= 1
            head = original(n_lines)
            jvm.proc.kill()
            jvm.proc.wait()
            return head + original(n - n_lines)
        return original(n)

    jvm._read = read
    return lambda: jvm.__dict__.pop("_read", None)


@pytest.mark.slow
def test_a_jvm_killed_mid_use_is_restarted_and_scores_are_unchanged(expert, pool2):
    candidates, references, reference = expert
    jvm = pool2._jvms[1]
    old_pid, starts = jvm.proc.pid, jvm.starts
    restore = kill_after(jvm, 50, times=1)
    try:
        scores = pool2.score(candidates[:2000], references[:2000])
    finally:
        restore()
    assert np.array_equal(scores, reference[:2000])
    assert jvm.starts == starts + 1 and jvm.proc.pid != old_pid and jvm.proc.poll() is None
    # killed between calls: the next call notices (process exited) and starts a new one
    pool2.processes[0].kill()
    pool2.processes[0].wait()
    assert np.array_equal(pool2.score(candidates[:400], references[:400]), reference[:400])
    assert all(p.poll() is None for p in pool2.processes)


@pytest.mark.slow
def test_a_jvm_dying_again_after_its_restart_is_a_clear_error(expert):
    candidates, references, _ = expert
    pool = meteor.MeteorPool(1)
    try:
        pool.start(wait=True)
        kill_after(pool._jvms[0], 10, times=2)
        with pytest.raises(meteor.MeteorError, match=r"(?s)METEOR JVM 0 died.*exit status -9.*again after a restart"):
            pool.score(candidates[:100], references[:100])
    finally:
        pool.close()
    assert pool.processes == [None]


def exited(pid: int, timeout: float = 20.0) -> bool:
    """True once process ``pid`` is gone or a zombie (waited for up to ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_no_jvm_outlives_its_pool_or_its_process():
    pool = meteor.MeteorPool(1)
    assert pool.score(["a dog runs"], [["a dog is running"]])[0] > 0
    pid = pool.processes[0].pid
    del pool  # dropped without close(): its stdin closes, the JVM reads end-of-file and exits
    gc.collect()
    assert exited(pid)
    # a Python process killed with SIGKILL (a worker killed by the OOM killer) takes its JVM along
    script = ("import os, signal; from captioneval.kernels import meteor; p = meteor.MeteorPool(1); p.start(wait=True); "
              "print(p.processes[0].pid, flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == -9, result.stderr
    assert exited(int(result.stdout))


# --- one pool per process -----------------------------------------------------------------------------

@pytest.mark.slow
def test_a_forked_child_gets_its_own_pool_and_leaves_the_parents_alone(expert):
    candidates, references, reference = expert
    parent_pool = meteor.get_pool()
    parent_pool.start(wait=True)
    parent_pid = parent_pool.processes[0].pid
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report, never return into pytest
        try:
            os.close(read_end)
            pool = meteor.get_pool()
            scores = meteor.meteor(candidates[:20], references[:20], implementation="java")
            result = {"new_pool": pool is not parent_pool, "pid": pool.pid, "jvm": pool.processes[0].pid,
                      "equal": bool(np.array_equal(scores, reference[:20]))}
            pool.close()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"error": repr(exc)}
        finally:
            os.write(write_end, json.dumps(result).encode())
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as fh:
        result = json.loads(fh.read())
    os.waitpid(child, 0)
    assert "error" not in result, result
    assert result["new_pool"] and result["pid"] == child and result["equal"]
    assert result["jvm"] != parent_pid
    # the parent's JVM survived the child and still answers
    assert parent_pool.processes[0].pid == parent_pid and parent_pool.processes[0].poll() is None
    assert np.array_equal(meteor.meteor(candidates[:20], references[:20], implementation="java"), reference[:20])


def test_a_pool_of_another_process_is_replaced_not_used(monkeypatch):
    foreign = meteor.MeteorPool(1)
    foreign.pid = os.getpid() + 1  # as after os.fork without the at-fork hook
    monkeypatch.setattr(meteor, "_pool", foreign)
    assert meteor.get_pool() is not foreign and meteor.get_pool().pid == os.getpid()
    with pytest.raises(meteor.MeteorError, match="another process"):
        foreign.score(["a dog"], [["a dog"]])


# --- Java missing -------------------------------------------------------------------------------------

def test_java_missing_is_a_clear_error_and_the_metric_is_listed_unavailable(no_java, java_meteor):
    with pytest.raises(JavaMissingError, match=JAVA_HINT):
        meteor.meteor(["a dog runs"], [["a dog is running"]])
    with pytest.raises(JavaMissingError, match=JAVA_HINT):
        meteor.meteor(["a dog runs"], [["a dog is running"]], implementation="java")
    with pytest.raises(JavaMissingError, match=JAVA_HINT):
        meteor.MeteorPool(1).start(wait=True)
    with pytest.raises(JavaMissingError, match=JAVA_HINT):
        registry.score("meteor", ["a dog runs"], [["a dog is running"]])
    before = meteor.get_pool().processes
    meteor.prestart()  # a no-op, raises nothing
    assert meteor.get_pool().processes == before
    assert registry.unavailable_now(["coco"]) == {"meteor": SKIP_MESSAGE}
    assert registry.unavailable_now(["meteor", "bleu_4", "no_such_metric"]) == {"meteor": SKIP_MESSAGE}
    assert registry.unavailable_now(["bleu_4", "cider_d"]) == {}


def test_with_java_nothing_is_unavailable_now():
    assert registry.unavailable_now(["coco", "meteor"]) == {}


def test_without_java_the_python_meteor_is_available_and_equal(no_java):
    """The default implementation (Python) needs no Java: nothing is unavailable, and its scores
    are the jar's (tests/test_meteor_python.py has the goldens)."""
    assert meteor.DEFAULT_IMPLEMENTATION == "python" and meteor.available()
    assert registry.unavailable_now(["coco", "meteor"]) == {}
    assert registry.METRICS["meteor"].version == "pycocoevalcap-1.2/meteor-1.5/python"
    scores = registry.score("meteor", ["a dog runs", "a cat"], [["a dog is running"], ["a black cat sits"]])
    assert scores.shape == (2,) and 0 < scores[0] < 1


def test_command_fails_when_every_requested_metric_is_skipped(no_java):
    # a real process with the jar chosen: exit status 1 and the reason on stderr (fails before touching
    # the database)
    result = subprocess.run([sys.executable, "manage.py", "compute_metrics", "--dataset", "anything", "--metric",
                             "meteor"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "CAPTIONEVAL_METEOR": "java"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert SKIP_MESSAGE in result.stderr


@pytest.fixture
def subset(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    # nothing is tokenised yet: the default PTB tokenizer is the pure-Python one, so without Java
    # only METEOR is missing
    return Dataset.objects.get(name="sub")


@pytest.mark.django_db
def test_compute_metrics_without_java_computes_all_seven(subset, no_java):
    """The platform on a machine without Java: the default METEOR is the Python one."""
    err, out = io.StringIO(), io.StringIO()
    call_command("compute_metrics", "--dataset", "sub", "--wait", stdout=out, stderr=err)  # default: coco
    assert "skipped" not in err.getvalue()
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=subset)}
    assert set(runs) == set(registry.DEFAULT_METRICS)
    n = subset.candidates().count()
    for run in runs.values():
        assert run.status == MetricRun.DONE and MetricScore.objects.filter(run=run).count() == run.total == n
    assert runs["meteor"].version == "pycocoevalcap-1.2/meteor-1.5/python"


@pytest.mark.django_db
def test_compute_metrics_without_java_skips_meteor_and_computes_the_rest(subset, no_java, java_meteor):
    err, out = io.StringIO(), io.StringIO()
    call_command("compute_metrics", "--dataset", "sub", "--wait", stdout=out, stderr=err)  # default: coco
    assert SKIP_MESSAGE in err.getvalue()
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=subset)}
    assert set(runs) == set(registry.DEFAULT_METRICS) - {"meteor"}
    n = subset.candidates().count()
    for run in runs.values():
        assert run.status == MetricRun.DONE and MetricScore.objects.filter(run=run).count() == run.total == n
    assert "meteor" not in out.getvalue()
    with pytest.raises(CommandError, match="METEOR skipped: Java is not installed"):
        call_command("compute_metrics", "--dataset", "sub", "--metric", "meteor", stdout=out, stderr=err)
    assert not MetricRun.objects.filter(dataset=subset, metric="meteor").exists()


@pytest.mark.django_db(transaction=True)
def test_web_compute_without_java_skips_meteor_with_the_message(subset, no_java, java_meteor):
    client = csrf_client(User.objects.create_user("curator", password="pw", is_staff=True))
    page = reverse("analysis:dataset", args=["sub"])
    compute = reverse("metrics:compute", args=["sub"])
    html = client.get(page).content.decode()  # the form says why, and offers no METEOR box
    assert ('<li data-metric="meteor">METEOR: Java is not installed; install a JRE (apt-get install '
            'default-jre-headless / brew install openjdk) to compute it</li>') in html
    assert 'value="meteor"' not in html and 'value="bleu_4"' in html
    # a POST naming it anyway (an old form, a script) gets the same reason
    response = client.post(compute, {"metric": ["meteor"], "csrfmiddlewaretoken": page_token(client, page)})
    assert response.status_code == 400 and SKIP_MESSAGE in response.content.decode()
    assert 'id="compute-error"' in response.content.decode()
    response = client.post(compute, {"metric": ["bleu_4", "meteor"], "csrfmiddlewaretoken": page_token(client, page)},
                           follow=True)
    html = response.content.decode()
    assert response.status_code == 200 and SKIP_MESSAGE + "." in html and "Started BLEU-4" in html
    deadline = time.monotonic() + 300
    while MetricRun.objects.filter(dataset=subset, status__in=(MetricRun.PENDING, MetricRun.RUNNING)).exists():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    runs = dict(MetricRun.objects.filter(dataset=subset).values_list("metric", "status"))
    assert runs == {"bleu_4": MetricRun.DONE}


@pytest.mark.django_db
def test_in_process_runs_start_the_jvm_first_and_compute_meteor_last(subset, monkeypatch, java_meteor):
    """Without a broker the runs are computed one after the other in this process: METEOR's JVM is
    started in the background before anything else and METEOR goes last, so that its start-up
    overlaps the other metrics (the `./run demo` metric stage)."""
    from metrics import pipeline, tasks

    events = []
    monkeypatch.setattr(meteor, "prestart", lambda: events.append("prestart"))
    real_start = tasks.start
    monkeypatch.setattr(tasks, "start", lambda run: events.append(run.metric) or real_start(run))
    runs = pipeline.plan_runs("sub", ["meteor", "bleu_4", "rouge_l"])
    assert [r.metric for r in runs] == ["meteor", "bleu_4", "rouge_l"]
    assert tasks.start_runs(runs) == []
    assert events == ["prestart", "bleu_4", "rouge_l", "meteor"]
    assert all(r.status == MetricRun.DONE for r in MetricRun.objects.filter(dataset=subset))


def test_statistics_are_the_jars_answers_in_order_whatever_the_split(expert, pool1, pool2):
    """The sufficient statistics (the corpus METEOR's input, captioneval.kernels.corpus.MeteorCorpus)
    come from the same JVMs: in caption order with 2 JVMs, 23 numbers each, and equal to what
    pycocoevalcap's own Meteor._stat returns for the same caption."""
    candidates, references, _ = expert
    cands, refs = candidates[:300], references[:300]
    lines = pool2.statistics(cands, refs)
    assert len(lines) == 300 and all(len(line.split()) == 23 for line in lines)
    assert pool1.statistics(cands, refs) == lines
    reference = coco._meteor_scorer()
    with reference.lock:
        for i in (0, 137, 299):
            assert reference._stat(cands[i], refs[i]) == lines[i]
