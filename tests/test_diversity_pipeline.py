"""Caption sets end to end on PostgreSQL: COCO importers, set- and system-level metric runs (Self-CIDEr,
LSA, mBLEU, accuracy, vocabulary, lexical measures with the Lexical Gap, VIFIDEL), the diversity
summary with F-score, gap-weighted correlations, and runs through a real Celery worker.

Data (bundled, see data/*/SOURCE.txt): the official Self-CIDEr example sets (merge_results.json,
10 model captions per COCO image), THumB's COCO references (4 per image) and its four models'
captions, and POPE's object labels.
"""
import json
from collections import defaultdict

import numpy as np
import pytest
from django.core.management.base import CommandError

from analysis.diversity import diversity_summary
from analysis.reports import ReportError, correlation_report
from crowd.models import Caption, Dataset, HumanJudgment, Image, ObjectLabel, System
from metrics.models import MetricRun, MetricScore, SetScore, SystemScore
from captioneval.kernels import diversity, lexical
from captioneval.metrics import registry
from captioneval.kernels.cider import DocumentFrequency
from captioneval.text.tokenizer import ptb_tokenize

from .coco_sets import MERGE, POPE, write_coco_files
from .conftest import run_command

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_coco_files(tmp_path_factory.mktemp("coco"))


@pytest.fixture
def coco(files):
    out = run_command(
        "import_coco", "--name", "div", "--annotations", str(files / "captions.json"),
        "--results", f"merge={files / 'merge.json'}", "--results", f"thumb-models={files / 'thumb_models.json'}",
    )
    assert "30 images" in out and "120 references" in out and "300 captions of merge" in out
    return Dataset.objects.get(name="div")


def snapshot():
    return tuple(m.objects.count() for m in (Dataset, Image, System, Caption, ObjectLabel))


def test_import_forms_are_equivalent_and_idempotent(coco, files):
    before = snapshot()
    out = run_command("import_coco", "--name", "div", "--results", f"merge={files / 'merge.json'}")
    assert "nothing changed" in out and snapshot() == before
    run_command("import_coco", "--name", "div", "--results", f"merge-b={files / 'merge_as_results.json'}")
    sets = defaultdict(lambda: defaultdict(list))
    for img, system, text in Caption.objects.filter(image__dataset=coco).order_by("key").values_list("image__key", "system__name", "text"):
        sets[system][img].append(text)
    assert sets["merge"] == sets["merge-b"] and len(sets["merge"]) == 30
    assert all(len(v) == 10 for v in sets["merge"].values()) and all(len(v) == 4 for v in sets["thumb-models"].values())
    assert coco.reference_system.name == "coco-references"
    # a different caption set under an existing system name is refused, nothing written
    before = snapshot()
    with pytest.raises(CommandError, match="exists with different captions"):
        run_command("import_coco", "--name", "div", "--results", f"merge={files / 'thumb_models.json'}")
    assert snapshot() == before


@pytest.mark.parametrize(
    "content, message",
    [
        ('[{"image_id": 1, "caption": "a"}, {"image_id": 2, "captions": ["b"]}]', "mixes"),
        ('[{"image_id": 1, "captions": []}]', "non-empty list"),
        ('[{"image_id": null, "caption": "a dog"}]', "image_id"),
        ('[{"image_id": 1, "caption": "   "}]', "empty caption"),
        ('{"image_id": 1}', "non-empty JSON list"),
        ("[{]", "not valid JSON"),
    ],
)
def test_bad_results_file_writes_nothing(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    before = snapshot()
    with pytest.raises(CommandError, match=message):
        run_command("import_coco", "--name", "x", "--results", f"sys={bad}")
    assert snapshot() == before


def test_object_labels_from_pope_csv_and_coco_instances(coco, tmp_path):
    merge_ids = {e["image_id"] for e in json.loads(MERGE.read_text())}
    out = run_command("import_coco", "--name", "objs", "--results", f"merge={MERGE}", "--objects", str(POPE))
    assert "object labels" in out and "images not in the dataset were skipped" in out.replace("image(s)", "images")
    ds = Dataset.objects.get(name="objs")
    labelled = set(ObjectLabel.objects.filter(image__dataset=ds).values_list("image__key", flat=True))
    assert len(labelled) == 16 and {int(k) for k in labelled} <= merge_ids
    assert ObjectLabel.objects.filter(image__dataset=ds).count() == 16 * 3  # 3 "yes" objects per POPE image
    key = sorted(labelled)[0]
    csv_file = tmp_path / "objects.csv"
    csv_file.write_text(f"image_id,label,count\n{key},Tennis  Racket,2\n{key},person,1\n{key},person,2\n")
    run_command("import_coco", "--name", "objs", "--objects", str(csv_file))
    assert dict(ObjectLabel.objects.filter(image__dataset=ds, image__key=key).values_list("label", "count")) == {
        "tennis racket": 2, "person": 3,
    }
    inst = tmp_path / "instances.json"
    inst.write_text(json.dumps({
        "categories": [{"id": 1, "name": "zebra"}, {"id": 2, "name": "tree"}],
        "annotations": [{"image_id": int(key), "category_id": 1}] * 3 + [{"image_id": int(key), "category_id": 2}],
    }))
    run_command("import_coco", "--name", "objs", "--objects", str(inst))
    assert dict(ObjectLabel.objects.filter(image__dataset=ds, image__key=key).values_list("label", "count")) == {"zebra": 3, "tree": 1}
    before = snapshot()
    bad = tmp_path / "bad.csv"
    bad.write_text(f"image_id,label,count\n{key},dog,many\n")
    with pytest.raises(CommandError, match=r"bad.csv:2: count .many. is not an integer"):
        run_command("import_coco", "--name", "objs", "--objects", str(bad))
    assert snapshot() == before


def _sets_from_rows(dataset):
    """Caption sets straight from the rows, tokenised afresh: {(image id, system id): [tokens]}."""
    rows = list(Caption.objects.filter(image__dataset=dataset).order_by("image_id", "system_id", "key").values_list("image_id", "system_id", "text"))
    tokens = ptb_tokenize([r[2] for r in rows])
    sets = defaultdict(list)
    for (img, sys_, _), tok in zip(rows, tokens):
        sets[(img, sys_)].append(tok)
    return sets


def test_set_level_runs_equal_the_kernels_and_store_their_options(coco):
    out = run_command("compute_metrics", "--dataset", "div", "--metric", "diversity", "--wait")
    assert "self_cider: done" in out and "vocabulary: done" in out
    sets = _sets_from_rows(coco)
    ref_id = coco.reference_system_id
    df = DocumentFrequency.from_references([v for (img, s), v in sorted(sets.items()) if s == ref_id])
    units = sorted(sets)
    assert len(units) == 90  # 30 images x (references, merge, thumb-models)
    runs = {r.metric: r for r in MetricRun.objects.filter(dataset=coco)}
    assert runs["self_cider"].params["m"] is None and runs["self_cider"].params["document_frequency"] == "dataset"
    stored = {(s.image_id, s.system_id): s.value for s in SetScore.objects.filter(run=runs["self_cider"])}
    expected = diversity.self_cider([sets[u] for u in units], df)
    np.testing.assert_allclose([stored[u] for u in units], expected, atol=1e-9)
    lsa = {(s.image_id, s.system_id): s.value for s in SetScore.objects.filter(run=runs["lsa"])}
    np.testing.assert_allclose([lsa[u] for u in units], diversity.lsa_diversity([sets[u] for u in units]), atol=1e-9)
    # accuracy: model sets against the references; the reference set itself = leave-one-out
    acc = {(s.image_id, s.system_id): s.value for s in SetScore.objects.filter(run=runs["set_accuracy"])}
    model_units = [u for u in units if u[1] != ref_id]
    refs_of = {img: sets[(img, ref_id)] for img, _ in units}
    np.testing.assert_allclose(
        [acc[u] for u in model_units],
        diversity.accuracy([sets[u] for u in model_units], [refs_of[u[0]] for u in model_units], df=df), atol=1e-9,
    )
    ref_units = [u for u in units if u[1] == ref_id]
    np.testing.assert_allclose([acc[u] for u in ref_units], diversity.leave_one_out_accuracy([sets[u] for u in ref_units], df=df), atol=1e-9)
    # m = 5 (the official driver) is a separate run with its own numbers
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "--m", "5", "--wait")
    five = MetricRun.objects.get(dataset=coco, metric="self_cider", params__m=5)
    merge = System.objects.get(dataset=coco, name="merge")
    got = {s.image_id: (s.value, s.n_captions) for s in SetScore.objects.filter(run=five, system=merge)}
    imgs = sorted(got)
    np.testing.assert_allclose([got[i][0] for i in imgs], diversity.self_cider([sets[(i, merge.pk)][:5] for i in imgs], df), atol=1e-9)
    assert {n for _, n in got.values()} == {5}
    # the run is idempotent: a second request changes nothing
    before = SetScore.objects.count()
    assert "up to date" in run_command("compute_metrics", "--dataset", "div", "--metric", "diversity", "--wait")
    assert SetScore.objects.count() == before


def test_vocabulary_chart_bars_are_the_sizes_not_the_cut_curves(coco, monkeypatch):
    """The run keeps the first CURVE_RANKS ranks of each word-frequency curve; the chart's bars are the
    vocabulary sizes (the run's values), not the lengths of those cut curves."""
    import matplotlib.axes

    from analysis import plots
    from analysis.diversity import word_frequency_curves
    from captioneval.metrics.builtin import vocabulary as vocabulary_metric

    monkeypatch.setattr(vocabulary_metric, "CURVE_RANKS", 40)
    run_command("compute_metrics", "--dataset", "div", "--metric", "vocabulary", "--wait")
    curves = word_frequency_curves(coco)
    stored = {s.system.name: s.value for s in SystemScore.objects.filter(run__metric="vocabulary").select_related("system")}
    assert set(curves) == set(stored) == {"coco-references", "merge", "thumb-models"}
    for name, (size, counts) in curves.items():
        assert size == stored[name] > len(counts) == 40
    heights = []
    original = matplotlib.axes.Axes.bar

    def bar(self, x, height, *args, **kwargs):
        heights.append(list(height))
        return original(self, x, height, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    assert plots.vocabulary_png(curves)[:8] == b"\x89PNG\r\n\x1a\n"
    assert heights == [[stored[name] for name in curves]]


def test_summary_f_score_and_lexical_gap(coco):
    run_command("compute_metrics", "--dataset", "div", "--metric", "diversity", "lexical", "--wait")
    summary = diversity_summary("div")
    rows = {r["system"]: r for r in summary["systems"]}
    assert set(rows) == {"coco-references", "merge", "thumb-models"}
    for r in rows.values():
        d, a = r["self_cider"], r["set_accuracy"]
        assert r["f_score"] == pytest.approx((1 + 5) * d * a / (5 * d + a), rel=1e-12)
        assert 0 < d < 1 and r["n_sets"] == 30
    # sampled model captions (merge) are more diverse than the four strong models' captions of an image
    assert rows["merge"]["self_cider"] > rows["thumb-models"]["self_cider"]
    assert rows["merge"]["vocabulary"] > rows["thumb-models"]["vocabulary"]
    # lexical diversity ratio and Lexical Gap against the reference corpus
    # the reference value is the mean MTLD of the 4 corpora holding the k-th reference of every image
    sets = _sets_from_rows(coco)
    ref_sets = [v for (img, s), v in sorted(sets.items()) if s == coco.reference_system_id]
    ref_value = np.mean([lexical.corpus_diversity([r[k] for r in ref_sets], "mtld") for k in range(4)])
    tm = SystemScore.objects.get(run__metric="mtld", system__name="thumb-models")
    assert tm.details["reference"] == pytest.approx(ref_value, rel=1e-12)
    assert tm.details["ldr"] == pytest.approx(tm.value / ref_value)
    assert tm.details["lexical_gap"] == pytest.approx(float(lexical.lexical_gap(tm.details["ldr"])))
    assert rows["thumb-models"]["lexical_gap_mtld"] == tm.details["lexical_gap"]
    with pytest.raises(ValueError, match="beta2"):
        diversity_summary("div", beta2=0)


def test_gap_weighted_correlations(coco, client):
    """Each caption of a model set gets a human score; the gap-weighted entry multiplies every
    metric score by its system's L_g, so it differs from the plain one across systems."""
    run_command("compute_metrics", "--dataset", "div", "--metric", "cider_d", "mtld", "--wait")
    rng = np.random.default_rng(0)
    coco.criterion = "quality"
    coco.save()
    cider = dict(MetricScore.objects.filter(run__metric="cider_d", run__dataset=coco).values_list("caption_id", "value"))
    judgments = []
    for cap in coco.candidates():
        for r in range(2):
            judgments.append(HumanJudgment(image_id=cap.image_id, system_id=cap.system_id, caption=cap, criterion="quality",
                                           rater=f"r{r}", score=float(cider[cap.pk] + rng.normal(scale=0.3))))
    HumanJudgment.objects.bulk_create(judgments)
    report = correlation_report("div", ["cider_d"], n_resamples=50, weighting="gap:mtld")
    assert list(report["metrics"]) == ["cider_d", "cider_d+gap_mtld"]
    assert report["weighting"]["measure"] == "mtld" and report["metrics"]["cider_d+gap_mtld"]["name"] == "CIDEr-D x L_g (MTLD)"
    assert report["metrics"]["cider_d+gap_mtld"]["pearson"] != pytest.approx(report["metrics"]["cider_d"]["pearson"])
    out = run_command("correlate", "--dataset", "div", "--metric", "cider_d", "--weighting", "ldr:mtld", "--resamples", "20")
    assert "CIDEr-D x l_d (MTLD)" in out
    with pytest.raises(CommandError, match="weighting must be"):
        run_command("correlate", "--dataset", "div", "--weighting", "gap:bleu_4")
    with pytest.raises(ReportError, match="set-level"):
        correlation_report("div", ["self_cider"])
    # the dashboard page and its downloads take the same option
    page = client.get("/datasets/div/?weighting=gap:mtld").content.decode()
    assert 'data-metric="cider_d+gap_mtld"' in page and "CIDEr-D x L_g (MTLD)" in page
    data = client.get("/datasets/div/correlations.json?weighting=gap:mtld").json()
    assert data["metrics"]["cider_d+gap_mtld"]["pearson"] == pytest.approx(report["metrics"]["cider_d+gap_mtld"]["pearson"])
    assert "weighting must be" in client.get("/datasets/div/?weighting=gap:nope").content.decode()


def test_errors_name_what_is_missing(coco, tmp_path):
    run_command("import_coco", "--name", "norefs", "--results", f"merge={MERGE}")
    with pytest.raises(CommandError, match="Self-CIDEr needs reference captions.*--cider-df"):
        run_command("compute_metrics", "--dataset", "norefs", "--metric", "self_cider")
    with pytest.raises(CommandError, match="object labels"):
        run_command("compute_metrics", "--dataset", "div", "--metric", "vifidel")
    with pytest.raises(CommandError, match="m .* >= 2"):
        run_command("compute_metrics", "--dataset", "div", "--metric", "lsa", "--m", "1")
    assert not MetricRun.objects.filter(dataset__name__in=["norefs", "div"]).exists()
    # with a supplied document-frequency table Self-CIDEr runs without references
    table = DocumentFrequency.from_references([[c] for e in json.loads(MERGE.read_text())[:200] for c in e["captions"][:1]])
    (tmp_path / "df.json").write_text(json.dumps(table.to_json()))
    out = run_command("compute_metrics", "--dataset", "norefs", "--metric", "self_cider", "--cider-df", str(tmp_path / "df.json"), "--wait")
    assert "self_cider: done, 5,000/5,000" in out


def test_vifidel_run_keeps_the_distance(tmp_path):
    run_command("import_coco", "--name", "objs", "--results", f"merge={MERGE}", "--objects", str(POPE))
    out = run_command("compute_metrics", "--dataset", "objs", "--metric", "vifidel", "--wait")
    assert "vifidel: done, 160/160" in out  # 16 images with objects x 10 captions
    from captioneval.kernels import vifidel

    scores = list(MetricScore.objects.filter(run__metric="vifidel").select_related("caption"))
    first = scores[0]
    objects = dict(ObjectLabel.objects.filter(image=first.caption.image).values_list("label", "count"))
    direct = vifidel.vifidel(first.caption.text, objects)
    assert first.raw == pytest.approx(direct.distance, abs=1e-9) and first.value == pytest.approx(direct.similarity, abs=1e-9)
    assert all(0 <= s.value <= 1 for s in scores if np.isfinite(s.value))


def test_diversity_campaign_reports_set_level_metrics(coco):
    """A diversity campaign's judgments are caption-set judgments: its report correlates them with
    Self-CIDEr, LSA and mBLEU directly (and with the set mean of per-caption metrics)."""
    from django.contrib.auth.models import User

    from analysis.campaigns import campaign_report
    from crowd.models import Campaign

    User.objects.create_user("alice", password="pw")
    run_command("compute_metrics", "--dataset", "div", "--metric", "self_cider", "lsa", "mbleu_4", "--wait")
    run_command("create_campaign", "diversity", "--dataset", "div", "--name", "divc", "--images", "30", "--owner", "alice", "--live")
    out = run_command("simulate_raters", "--campaign", "divc", "--raters", "4", "--noise", "0.03")
    assert "30/30 items complete" in out
    report = campaign_report(Campaign.objects.get(name="divc"), n_resamples=100)
    corr = report["correlations"]["diversity"]
    assert {"self_cider", "lsa", "mbleu_4"} <= set(corr)
    # the simulated raters judge word overlap between captions, which the diversity metrics measure too
    for key in ("self_cider", "lsa", "mbleu_4"):
        assert corr[key]["kendall_tau_b"] > 0.3, (key, corr[key])
        assert corr[key]["n_units"] == 90  # 30 images x 3 caption sets, all with a set-level score


def test_visual_atoms_command_feeds_the_vote_campaign(subset_dir, tmp_path):
    """Atoms of the Flickr8k references (40-image subset) -> CSV -> a visual-atom campaign."""
    from django.contrib.auth.models import User

    from crowd.models import Campaign

    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    out = run_command("visual_atoms", "--dataset", "sub", "--top", "20", "--exclude", "be", "--out", str(tmp_path / "atoms.csv"))
    assert "200 captions of the references" in out
    entity_line = next(line for line in out.splitlines() if line.startswith("entity:"))
    assert "dog" in entity_line or "man" in entity_line
    rows = (tmp_path / "atoms.csv").read_text().splitlines()
    assert rows[0] == "word,category,count" and len(rows) == 1 + 60
    assert not any(r.startswith("be,") for r in rows)
    User.objects.create_user("alice", password="pw")
    made = run_command("create_campaign", "visual_atom", "--dataset", "sub", "--name", "atoms", "--atoms",
                       str(tmp_path / "atoms.csv"), "--owner", "alice")
    assert "campaign 'atoms' (visual_atom" in made
    items = list(Campaign.objects.get(name="atoms").items.filter(is_gold=False))
    assert len(items) == 60
    # atoms are lemmas; their example captions are found through the inflected forms (sit -> sitting)
    without = [i.payload["word"] for i in items if not i.payload["examples"]]
    assert len(without) <= 3, without
    actions = [i for i in items if i.payload["category"] == "action" and i.payload["examples"]]
    assert any(i.payload["word"] not in i.payload["examples"][0].lower().split() for i in actions)
    with pytest.raises(CommandError, match="no captions"):
        run_command("visual_atoms", "--dataset", "sub", "--system", "nobody")
