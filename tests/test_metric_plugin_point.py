"""Metrics as objects: a new metric is one file (tests/toy_metric.py), computed by the real pipeline on
real Flickr8k-Expert rows and seen in the correlation report under its own name; the built-in
metrics keep their table order and the identities (version, params_key) of runs stored by earlier
releases; the pipeline never tests a metric's name."""
from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from crowd.models import Dataset, System
from metrics import pipeline
from metrics.models import MetricRun, MetricScore
from captioneval.metrics import base, builtin, plugins, registry
from captioneval.text.tokenizer import ptb_tokenize
from captioneval.metrics.builtin import judges as judges_module
from captioneval.metrics.builtin import learned as learned_module
from captioneval.metrics.builtin.learned import LEARNED

from . import toy_metric
from .conftest import ROOT, run_command
from .flickr8k_data import load_flickr8k_expert

TOY = Path(toy_metric.__file__)


@pytest.fixture
def toy_registered():
    """tests/toy_metric.py registered the way a project registers its own metric file."""
    metrics = registry.register_module("tests.toy_metric")
    try:
        yield metrics
    finally:
        registry.unregister(*(m.key for m in metrics))
        assert "word_precision" not in registry.METRICS


def word_precision(candidate: str, references) -> float:
    """The toy formula, computed independently of the metric class."""
    words = candidate.split()
    known = set(" ".join(references).split())
    return sum(1 for w in words if w in known) / len(words) if words else 0.0


@pytest.mark.django_db
def test_toy_metric_is_computed_by_the_pipeline_and_seen_in_the_correlation_report(subset_dir, toy_registered):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    dataset = Dataset.objects.get(name="sub")
    (metric,) = toy_registered
    assert registry.get_metric("word_precision") is metric and list(registry.METRICS)[-1] == "word_precision"

    out = run_command("compute_metrics", "--dataset", "sub", "--metric", "word_precision", "bleu_1", "--wait")
    assert "word_precision: done" in out and "bleu_1: done" in out
    run = MetricRun.objects.get(dataset=dataset, metric="word_precision")
    assert run.version == "toy-word-precision/1" and run.completed == run.total == dataset.candidates().count()
    assert set(run.params) == {"tokenizer", "references"}  # it needs references only

    # stored scores equal the toy formula on the candidates and references tokenised afresh
    cands = list(dataset.candidates().order_by("id"))
    refs_by_image: dict[int, list[str]] = {}
    for ref in dataset.references().order_by("image_id", "key"):
        refs_by_image.setdefault(ref.image_id, []).append(ref.text)
    texts = [c.text for c in cands] + [t for c in cands for t in refs_by_image[c.image_id]]
    tokens = ptb_tokenize(texts)
    expected, pos = [], len(cands)
    for i, c in enumerate(cands):
        n = len(refs_by_image[c.image_id])
        expected.append(word_precision(tokens[i], tokens[pos: pos + n]))
        pos += n
    values = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
    np.testing.assert_allclose([values[c.pk] for c in cands], expected, rtol=0, atol=1e-15)
    assert len(set(expected)) > 10  # a real spread, not a constant

    # the correlation report (correlate --json, the documented interface) lists it by its own name,
    # with the statistics of the file's own rows: every expert rating a row (Hessel et al. 2021)
    report = json.loads(run_command("correlate", "--dataset", "sub", "--metric", "word_precision", "bleu_1", "--json"))
    entry = report["metrics"]["word_precision"]
    assert entry["name"] == "Word precision" and entry["version"] == "toy-word-precision/1" and entry["run"] == run.pk
    assert set(report["metrics"]) == {"word_precision", "bleu_1"}
    pairs = load_flickr8k_expert(subset_dir)
    tok = ptb_tokenize([p.candidate for p in pairs] + [r for p in pairs for r in p.references])
    scores, ratings = [], []
    for i, p in enumerate(pairs):
        refs = tok[len(pairs) + 5 * i: len(pairs) + 5 * i + 5]
        for rating in p.ratings:
            scores.append(word_precision(tok[i], refs))
            ratings.append(rating)
    assert report["n_ratings"] == len(ratings) == 3 * len(pairs)
    assert entry["pearson"] == pytest.approx(stats.pearsonr(scores, ratings)[0], abs=1e-12)
    assert entry["kendall_tau_c"] == pytest.approx(stats.kendalltau(scores, ratings, variant="c")[0], abs=1e-12)


def test_one_new_file_in_a_metric_package_is_discovered(tmp_path):
    """What adding a built-in metric is: a copy of tests/toy_metric.py dropped into a package read by
    :func:`captioneval.metrics.builtin.discover` (the registry reads captioneval/metrics/builtin/ so)."""
    package = tmp_path / "my_metrics"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.copy(TOY, package / "word_precision.py")
    (package / "_helpers.py").write_text("raise RuntimeError('a module starting with _ is not a metric file')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        found = builtin.discover(importlib.import_module("my_metrics"))
        assert [m.key for m in found.metrics] == ["word_precision"] and found.modules == ["my_metrics.word_precision"]
        got = found.metrics[0].score(base.Batch(candidates=["a dog runs", "the cat", ""],
                                                references=[["a dog is running"], ["a cat"], ["x"]])).values
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, [2 / 3, 1 / 2, 0.0])
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n == "my_metrics" or n.startswith("my_metrics.")]:
            del sys.modules[name]


def test_a_metric_object_exported_by_an_entry_point_is_a_plugin(tmp_path):
    """The same file, exported by another distribution's entry point, is loaded as is (no wrapper)."""
    root = tmp_path / "dist"
    root.mkdir()
    (root / "toy_dist.py").write_text("from tests.toy_metric import WORD_PRECISION\n")
    info = root / "toy_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-dist\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{plugins.ENTRY_POINT_GROUP}]\nword_precision = toy_dist:WORD_PRECISION\n")
    sys.path.insert(0, str(root))
    try:
        found = registry.load_plugins()
        assert set(found.loaded) == {"word_precision"} and not found.problems
        assert registry.METRICS["word_precision"] is toy_metric.WORD_PRECISION and registry.is_plugin("word_precision")
        with pytest.raises(ValueError, match="clashes"):  # a registered metric may not take a plugin's key
            registry.register(toy_metric.WordPrecision())
        np.testing.assert_array_equal(registry.score("word_precision", ["a dog"], [["a cat"]]), [0.5])
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("toy_dist", None)
        registry.load_plugins()
    assert registry.METRICS == registry.BUILTIN_METRICS and not registry.PLUGINS


def test_invalid_metric_objects_are_refused():
    class NoScore(base.Metric):
        key, name, version = "no_score", "No score", "1"

    for metric, message in [
        (NoScore(), "does not implement score"),
        (toy_metric.WordPrecision(key="bleu_4"), "clashes with a built-in metric"),
        (toy_metric.WordPrecision(key="coco"), "clashes with a built-in metric"),
        (toy_metric.WordPrecision(key="Bad Key"), "not a valid metric key"),
        (toy_metric.WordPrecision(level="image"), "level must be one of"),
        (toy_metric.WordPrecision(needs={"gpu"}), "unknown needs"),
        (toy_metric.WordPrecision(level="set", needs={base.WHOLE_CORPUS}), "caption-level need"),
        (toy_metric.WordPrecision(key="user_mine"), "reserved for uploaded scores"),
    ]:
        with pytest.raises(ValueError, match=message):
            registry.register(metric)
    assert registry.METRICS == registry.BUILTIN_METRICS
    with pytest.raises(TypeError, match="no metric attribute 'colour'"):
        toy_metric.WordPrecision(colour="red")


# --- the built-in metrics keep their order and identities -----------------------------------------

#: registry order of earlier releases (tables, dashboard, compute_metrics --help)
LEGACY_ORDER = [
    "bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "cider_d", "self_cider", "lsa", "mbleu_1",
    "mbleu_2", "mbleu_3", "mbleu_4", "mbleu_mix", "set_accuracy", "vocabulary", "ttr", "root_ttr", "log_ttr", "hdd",
    "mtld", "vifidel", "vifidel_ref",
]
LEGACY_GROUPS = {
    "coco": ("bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "cider_d"),
    "diversity": ("self_cider", "lsa", "mbleu_1", "mbleu_2", "mbleu_3", "mbleu_4", "mbleu_mix", "set_accuracy",
                  "vocabulary"),
    "lexical": ("ttr", "root_ttr", "log_ttr", "hdd", "mtld"),
    "fidelity": ("vifidel", "vifidel_ref"),
}
#: (metric, run_params keyword arguments) -> (version, params_key) as stored by the release before
#: metrics became objects, for a dataset whose reference system is called "references"; literal
#: identities of existing runs, not outputs of the current code. BLEU's version is the one exception:
#: since issue 18 BLEU-1..4 are our own implementation (``captioneval-bleu/1``, equal to pycocoevalcap
#: bit for bit), stored apart from the runs pycocoevalcap computed (``pycocoevalcap-1.2``)
LEGACY_IDENTITIES = [
    ("bleu_4", {}, "captioneval-bleu/1", "4703dde164123b5880fb631a466345db6f15a49c506e2af69e0bd42764d116dc"),
    ("meteor", {}, "pycocoevalcap-1.2/meteor-1.5", "4703dde164123b5880fb631a466345db6f15a49c506e2af69e0bd42764d116dc"),
    ("cider_d", {}, "captioneval-cider-d/1", "68621f923fee7921cfb5c980fb0cdc05d2dc212c457a05d4557b6985e3af1db0"),
    ("self_cider", {"m": 5}, "captioneval-diversity/1",
     "0863ef0462b0b278493953c781efac0c631377c064edd8913876cb22888af743"),
    ("self_cider", {}, "captioneval-diversity/1", "cd4f26a8fc643869957d48f4cea015c3cb2cd1e93566db97251686b300914946"),
    ("set_accuracy", {}, "captioneval-cider-d/1", "cd4f26a8fc643869957d48f4cea015c3cb2cd1e93566db97251686b300914946"),
    ("mbleu_mix", {}, "captioneval-diversity/1", "888d39dca204208aa18dba8608a8b124edd816911be2b9bc0678939b0b8702e1"),
    ("vocabulary", {}, "captioneval-diversity/1", "4703dde164123b5880fb631a466345db6f15a49c506e2af69e0bd42764d116dc"),
    ("mtld", {}, "captioneval-lexical/1+lexicalrichness-0.5.1",
     "4703dde164123b5880fb631a466345db6f15a49c506e2af69e0bd42764d116dc"),
    ("vifidel_ref", {"vectors": None}, "captioneval-vifidel/1",
     "0f3af50eaedb5add8ef1d41612900473bc952041e3752a94d62b72212b8f9083"),
]


def test_registry_order_groups_and_stored_run_identities_are_unchanged(settings, monkeypatch):
    settings.VIFIDEL_VECTORS = None  # the bundled GloVe 6B 50-d, whose identity the legacy key holds
    # The tokenizer is part of a run's identity: since issue 18 the default is the pure-Python PTB
    # tokenizer, so new runs are new; runs of the Java tokenizer (CAPTIONEVAL_TOKENIZER=java) keep theirs.
    assert pipeline.TOKENIZER == "ptb/captioneval-ptb/1"
    monkeypatch.setattr(pipeline, "TOKENIZER", "ptb/pycocoevalcap-1.2/stanford-corenlp-3.4.1")
    # the learned metrics the pipeline computes come last when the learned extra is installed (builtin/learned.py)
    computed = [m.key for m in learned_module.METRICS]
    assert computed == ([] if learned_module.missing_packages() else list(learned_module.PIPELINE))
    assert list(registry.BUILTIN_METRICS) == LEGACY_ORDER + computed
    assert registry.GROUPS == {**LEGACY_GROUPS, **({"learned": tuple(computed)} if computed else {})}
    assert registry.DEFAULT_METRICS == LEGACY_GROUPS["coco"]
    # SPICE, the learned metrics the platform does not compute here (builtin/learned.py) and the LLM
    # judges while no endpoint is configured (builtin/judges.py)
    assert not judges_module.configured()
    assert set(registry.UNAVAILABLE) == {"spice", *(set(LEARNED) - set(computed)), *judges_module.JUDGES}
    dataset = Dataset(name="flickr8k-expert")  # unsaved: run_params reads only the reference system's name
    dataset.reference_system = System(name="references")
    for key, kwargs, version, key_hash in LEGACY_IDENTITIES:
        if key == "meteor":
            # since issue 33 METEOR is computed by the pure-Python port (equal to the jar bit for bit), whose
            # version names it; CAPTIONEVAL_METEOR=java keeps the jar's version. The run identity is the same.
            version += "/python"
        if key == "cider_d":
            # since issue 33 mostly distinct captions without supplied document frequencies take a
            # numeric path whose sums run in another order (about one ulp): version /2; same run identity
            version = "captioneval-cider-d/2"
        assert registry.METRICS[key].version == version, key
        assert pipeline.run_identity(pipeline.run_params(dataset, key, **kwargs)) == key_hash, (key, kwargs)
    supplied = pipeline.SuppliedDocumentFrequency("df.json", "ab" * 32, {})
    assert pipeline.run_identity(pipeline.run_params(dataset, "cider_d", supplied)) == (
        "d008cfddbecd7472e070fd9dfe9921ab1c346fd249747c4fcdc7e55353a6fc16")


def test_signatures_name_every_parameter_that_changes_the_numbers():
    bleu4 = registry.METRICS["bleu_4"]
    assert bleu4.signature() == {"name": "BLEU-4", "key": "bleu_4", "version": "captioneval-bleu/1", "level": "caption",
                                 "n": 4, "brevity_penalty": "closest", "smoothing": "pycocoevalcap"}
    assert bleu4.signature_string() == "BLEU-4|v:captioneval-bleu/1|level:caption|n:4|brevity_penalty:closest|smoothing:pycocoevalcap"
    assert registry.METRICS["cider_d"].signature()["sigma"] == 6.0
    assert registry.METRICS["mtld"].signature()["threshold"] == 0.72
    names = {k: m.name for k, m in registry.METRICS.items()}
    assert [names[k] for k in ("bleu_4", "meteor", "rouge_l", "cider_d", "self_cider")] == [
        "BLEU-4", "METEOR", "ROUGE-L", "CIDEr-D", "Self-CIDEr"]
    for metric in registry.BUILTIN_METRICS.values():
        assert base.validate(metric) is metric and metric.description and "(" in metric.description


def test_the_pipeline_never_compares_a_metric_name():
    source = (ROOT / "metrics" / "pipeline.py").read_text()
    names = "bleu|meteor|rouge|cider|self_cider|set_accuracy|vifidel|lsa|mbleu|vocabulary|ttr|mtld|hdd"
    assert not re.findall(rf'"({names})', source)
    assert not re.search(r"\.family\b|is_plugin\(", source)
    # nor does the dispatch import loop come back: pipeline does not import tasks
    assert "import tasks" not in source and "from .tasks" not in source


def test_plugins_module_does_not_import_the_registry():
    code = textwrap.dedent("""
        import sys
        import captioneval.metrics.plugins
        assert "captioneval.metrics.registry" not in sys.modules, "plugins imported the registry"
        from captioneval.metrics import plugins
        assert plugins.main() == 0
        assert "captioneval.metrics.registry" not in sys.modules
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no plugin metrics installed")
