"""import_dataset flickr8k-crowdflower / thumb / pascal50s on the bundled real data: counts, each
published protocol, reference sampling, idempotence, malformed inputs; and the acceptance check of
the CrowdFlower protocol (Kendall tau-b of BLEU-4 and CIDEr-D against the published values)."""
import importlib
import json
import re
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from django.apps import apps as django_apps
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.db.models import Avg, Count
from scipy.stats import kendalltau

from crowd.importers import DatasetExistsError, DatasetFormatError
from crowd.importers.pascal50s import (
    forced_choice_rows,
    import_pascal50s,
    pascal50s_category,
    read_references,
    sample_references,
)
from crowd.models import Caption, Dataset, HumanJudgment, Image, PairwiseJudgment, System
from metrics.models import MetricRun, MetricScore

from .conftest import run_command

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent
FLICKR8K = ROOT / "data" / "flickr8k"
THUMB = ROOT / "data" / "thumb"
PASCAL = ROOT / "data" / "pascal50s"
CF_FILE, TOKEN_FILE = "CrowdFlowerAnnotations.txt", "Flickr8k.token.txt"

# Hessel et al. 2021 (CLIPScore), Flickr8k-CrowdFlower, Kendall tau-b x 100 (pycocoevalcap metrics).
CF_PUBLISHED_TAU_B_X100 = {"bleu_4": 16.9, "cider_d": 24.6}
CF_TOLERANCE = 0.2


def table_counts():
    return (Dataset.objects.count(), Image.objects.count(), System.objects.count(), Caption.objects.count(),
            HumanJudgment.objects.count(), PairwiseJudgment.objects.count())


def copy_files(target: Path, source: Path, names) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(source / name, target / name)
        (target / name).chmod(0o644)
    return target


def token_texts() -> dict[str, str]:
    out = {}
    for line in (FLICKR8K / TOKEN_FILE).read_text(encoding="utf-8").splitlines():
        cid, text = line.split("\t", 1)
        out[cid] = text.strip()
    return out


def cf_lines() -> list[list[str]]:
    return [line.split("\t") for line in (FLICKR8K / CF_FILE).read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------------------
# Flickr8k-CrowdFlower
# ------------------------------------------------------------------------------------------------


def expected_crowdflower_references() -> dict[str, list[str]]:
    """The protocol re-derived from the files: in file order, a judged candidate's text removes the
    first equal reference of its image; every judged image keeps the rest."""
    texts = token_texts()
    refs: dict[str, list[tuple[str, str]]] = {}
    for image, cid, *_ in cf_lines():
        lst = refs.setdefault(image, [(f"{image}#{k}", texts[f"{image}#{k}"]) for k in range(5)])
        match = [i for i, (_, t) in enumerate(lst) if t == texts[cid]]
        if match:
            del lst[match[0]]
    return {image: sorted(key for key, _ in lst) for image, lst in refs.items()}


@pytest.mark.slow
def test_crowdflower_full_import_follows_the_clipscore_protocol_and_matches_published_tau_b():
    """One import of all 47,830 pairs into PostgreSQL (about 15 s, so done once for both halves):

    * the import follows the CLIPScore protocol (counts, references = each image's 5 captions minus
      the judged candidates' texts, votes as 0/1 judgments, protocol) and importing again changes
      nothing;
    * the acceptance check: the pairs scored through the metric pipeline and each caption's score
      correlated with its fraction of yes votes give the published Kendall tau-b of BLEU-4 and
      CIDEr-D (scipy), and the product's report and `correlate` table give the same numbers."""
    out = run_command("import_dataset", "flickr8k-crowdflower", str(FLICKR8K), "--name", "cf")
    ds = Dataset.objects.get(name="cf")
    lines = cf_lines()
    assert len(lines) == 47830
    assert ds.kind == "flickr8k-crowdflower" and ds.criterion == "describes"
    assert ds.images.count() == 1000
    assert ds.candidates().count() == 47830  # every pair is kept ...
    own = sum(1 for image, cid, *_ in lines if cid.startswith(image + "#"))
    assert own == 721 and ds.candidates().filter(key__startswith=(lines[0][0] + "#")).exists()
    assert HumanJudgment.objects.filter(image__dataset=ds).count() == 144860 == sum(int(f[3]) + int(f[4]) for f in lines)
    # ... and the references are each image's 5 captions minus the judged candidates' texts.
    assert ds.references().count() == 4277
    got = defaultdict(list)
    for image, key in ds.references().values_list("image__key", "key"):
        got[image].append(key)
    assert {i: sorted(k) for i, k in got.items()} == expected_crowdflower_references()
    per_image = Counter(len(k) for k in got.values())
    assert per_image == {5: 279, 4: 719, 3: 2} and min(per_image) >= 1
    assert "723 references" in out and "721 of 1,000 images" in out and "no image is left without references" in out
    # Per caption: the mean of the 0/1 votes is the file's fraction of yes votes; raters are vote_1..vote_n.
    means = {
        (r["image__key"], r["caption__key"]): (r["m"], r["n"])
        for r in HumanJudgment.objects.filter(image__dataset=ds)
        .values("image__key", "caption__key").annotate(m=Avg("score"), n=Count("id"))
    }
    assert len(means) == 47830
    for image, cid, fraction, yes, no in lines:
        mean, n = means[(image, cid)]
        assert n == int(yes) + int(no) and abs(mean - float(fraction)) < 1e-9
    image, cid, _, yes, no = next(f for f in lines if int(f[3]) and int(f[4]))  # a pair with mixed votes
    caption = Caption.objects.get(image__key=image, key=cid, system__name="crowdflower-candidates")
    expected = [(f"vote_{k}", 1.0 if k <= int(yes) else 0.0) for k in range(1, int(yes) + int(no) + 1)]
    assert sorted(caption.judgments.values_list("rater", "score")) == sorted(expected)
    assert set(HumanJudgment.objects.filter(image__dataset=ds).values_list("criterion", flat=True)) == {"describes"}
    assert ds.protocol["rows"] == "mean" and ds.protocol["headline"] == "kendall_tau_b"
    assert ds.protocol["criteria"] == ["describes"] and ds.protocol["task"] == "rating"
    assert "fraction" in ds.protocol["summary"] and ds.protocol["source"]
    # Importing the same files again changes nothing.
    before = table_counts()
    out = run_command("import_dataset", "flickr8k-crowdflower", str(FLICKR8K), "--name", "cf")
    assert "already imported" in out and table_counts() == before

    # The acceptance check (Hessel et al. 2021's Flickr8k-CrowdFlower tau-b) on the dataset just imported.
    out = run_command("compute_metrics", "--dataset", "cf", "--metric", "bleu_4", "cider_d", "--wait")
    assert "bleu_4: done, 47,830/47,830" in out and "cider_d: done, 47,830/47,830" in out
    human = dict(
        HumanJudgment.objects.filter(image__dataset=ds).values("caption_id").annotate(m=Avg("score")).values_list("caption_id", "m")
    )
    assert len(human) == 47830
    ids = sorted(human)
    got = {}
    for metric, published in CF_PUBLISHED_TAU_B_X100.items():
        run = MetricRun.objects.get(dataset=ds, metric=metric)
        scores = dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value"))
        assert len(scores) == 47830
        got[metric] = 100 * kendalltau([scores[i] for i in ids], [human[i] for i in ids], variant="b")[0]
    bad = {m: v for m, v in got.items() if abs(v - CF_PUBLISHED_TAU_B_X100[m]) > CF_TOLERANCE}
    assert not bad, f"tau-b x100 {got} off the published {CF_PUBLISHED_TAU_B_X100}"
    # The product's own report (protocol rows = caption means, headline tau-b) gives the same numbers,
    # and the `correlate` table prints them.
    from analysis.benchmarks import benchmark_report

    report = benchmark_report("cf", levels=("item",), statistics=("kendall_tau_b",), n_resamples=100, n_permutations=100)
    assert report["headline"] == "kendall_tau_b" and report["counts"]["rows"] == 47830
    for metric, value in got.items():
        assert 100 * report["metrics"][metric]["item"]["values"]["kendall_tau_b"] == pytest.approx(value, abs=1e-9)
    assert report["significance"]["permutation"]["ranks"] == {"cider_d": 1, "bleu_4": 2}
    ceiling = report["ceiling"]["item"]
    assert ceiling["method"].startswith("split") and ceiling["value"] > report["metrics"]["cider_d"]["item"]["values"]["kendall_tau_b"]
    table = run_command("correlate", "--dataset", "cf", "--level", "item", "--statistic", "kendall_tau_b",
                        "--resamples", "100", "--permutations", "100")
    assert re.search(r"CIDEr-D\s+1\s+24\.6 \[", table) and re.search(r"BLEU-4\s+2\s+16\.9 \[", table)


@pytest.fixture
def cf_dir(tmp_path):
    """A writable copy of the CrowdFlower files."""
    return copy_files(tmp_path / "cf", FLICKR8K, (CF_FILE, TOKEN_FILE))


def _replace_line(path: Path, line_no: int, make):
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[line_no - 1] = make(lines[line_no - 1].split("\t"))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize(
    "line_no, make, message",
    [
        (17, lambda f: "\t".join(f[:4]), "expected 5 TAB-separated fields"),
        (200, lambda f: "\t".join([*f[:3], "two", f[4]]), "#yes 'two' is not a non-negative integer"),
        (300, lambda f: "\t".join([*f[:2], "lots", *f[3:]]), "fraction of yes 'lots' is not a number"),
        (400, lambda f: "\t".join([*f[:2], "0.5", "1", "2"]), "disagrees with #yes/(#yes+#no) = 1/3"),
        (500, lambda f: "\t".join(["nope.jpg", *f[1:]]), "image 'nope.jpg' has no reference captions"),
        (600, lambda f: "\t".join([f[0], "nope.jpg#1", *f[2:]]), "caption id 'nope.jpg#1' not found"),
        (700, lambda f: "\t".join([*f[:3], "0", "0"]), "a pair without votes"),
    ],
)
def test_crowdflower_malformed_line_imports_nothing(cf_dir, line_no, make, message):
    _replace_line(cf_dir / CF_FILE, line_no, make)
    before = table_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "flickr8k-crowdflower", str(cf_dir), "--name", "broken")
    assert f"{CF_FILE}:{line_no}:" in str(err.value) and message in str(err.value)
    assert table_counts() == before


def test_crowdflower_duplicate_pair_and_missing_file(cf_dir):
    path = cf_dir / CF_FILE
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:10] + [lines[3]]) + "\n")
    with pytest.raises(CommandError, match=rf"{CF_FILE}:11: duplicate pair"):
        run_command("import_dataset", "flickr8k-crowdflower", str(cf_dir), "--name", "x")
    path.unlink()
    with pytest.raises(CommandError, match=rf"{CF_FILE}: file not found"):
        run_command("import_dataset", "flickr8k-crowdflower", str(cf_dir), "--name", "x")
    assert table_counts() == (0, 0, 0, 0, 0, 0)


def test_crowdflower_image_left_without_references_is_refused(cf_dir):
    """If all five of an image's captions are judged candidates of it, no reference is left: refused
    (naming the pair that removed the last one) rather than imported with a changed protocol."""
    image = "1056338697_4f7d7ce270.jpg"
    extra = [f"{image}\t{image}#{k}\t0\t0\t3" for k in range(5) if k != 2]  # #2 is already judged (line 1)
    path = cf_dir / CF_FILE
    lines = path.read_text().splitlines()[:50]
    path.write_text("\n".join(lines + extra) + "\n")
    with pytest.raises(CommandError, match=rf"{CF_FILE}:54: image '{image}' has no reference caption left"):
        run_command("import_dataset", "flickr8k-crowdflower", str(cf_dir), "--name", "x")
    assert table_counts() == (0, 0, 0, 0, 0, 0)
    # With one of them removed again the image keeps one reference and the subset imports.
    path.write_text("\n".join(lines + extra[:-1]) + "\n")
    run_command("import_dataset", "flickr8k-crowdflower", str(cf_dir), "--name", "x")
    ds = Dataset.objects.get(name="x")
    assert ds.references().filter(image__key=image).count() == 1
    assert ds.candidates().count() == 53


# ------------------------------------------------------------------------------------------------
# Flickr8k-Expert protocol and the data migration
# ------------------------------------------------------------------------------------------------


def test_expert_import_and_migration_set_the_expert_protocol(tmp_path):
    from .conftest import write_subset

    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub", 5)), "--name", "ex")
    proto = Dataset.objects.get(name="ex").protocol
    assert proto["rows"] == "rating" and proto["headline"] == "kendall_tau_c" and proto["criteria"] == ["quality"]
    assert proto["task"] == "rating" and proto["summary"] and proto["source"]
    # The data migration fills the protocol of expert datasets imported before it, and only theirs.
    migration = importlib.import_module("crowd.migrations.0006_protocol_pairwise_without_reference")
    old = Dataset.objects.create(name="old-expert", kind="flickr8k-expert")
    other = Dataset.objects.create(name="other", kind="coco")
    migration.set_expert_protocol(django_apps, None)
    old.refresh_from_db()
    other.refresh_from_db()
    assert old.protocol == migration.FLICKR8K_EXPERT_PROTOCOL and other.protocol == {}
    from crowd.importers.flickr8k import EXPERT_PROTOCOL

    assert migration.FLICKR8K_EXPERT_PROTOCOL == EXPERT_PROTOCOL


# ------------------------------------------------------------------------------------------------
# THumB
# ------------------------------------------------------------------------------------------------


def thumb_rows() -> list[dict]:
    return [json.loads(line) for line in (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines()]


def test_thumb_full_import_counts_criteria_and_scores():
    out = run_command("import_dataset", "thumb", str(THUMB), "--name", "thumb")
    ds = Dataset.objects.get(name="thumb")
    systems = dict(ds.systems.values_list("name", "kind"))
    assert systems == {"coco-references": "human", "Up-Down": "model", "Unified-VLP": "model", "VinVL-base": "model",
                       "VinVL-large": "model", "Human": "human"}
    assert ds.images.count() == 500 and ds.references().count() == 2000 and ds.candidates().count() == 2500
    assert Counter(ds.references().values_list("image_id", flat=True)).most_common()[-1][1] == 4
    judgments = HumanJudgment.objects.filter(image__dataset=ds)
    assert judgments.count() == 7500
    assert Counter(judgments.values_list("criterion", flat=True)) == {"human_score": 2500, "precision": 2500, "recall": 2500}
    assert set(judgments.values_list("rater", flat=True)) == {"thumb"}
    by_caption = defaultdict(dict)
    for sys_name, image, criterion, score in judgments.values_list("system__name", "image__key", "criterion", "score"):
        by_caption[(sys_name, image)][criterion] = score
    rows = thumb_rows()
    for row in rows:
        got = by_caption[(row["SYS"], row["seg_id"])]
        assert got == {"human_score": row["human_score"], "precision": row["P"], "recall": row["R"]}
        # human_score = (P + R) / 2 + penalties (Fl, Con, Inc <= 0)
        penalty = got["human_score"] - (got["precision"] + got["recall"]) / 2
        assert abs(penalty - (row["Fl"] + row["Con"] + row["Inc"])) < 1e-9 and penalty <= 1e-12
    penalised = sum(1 for s in by_caption.values() if s["human_score"] < (s["precision"] + s["recall"]) / 2 - 1e-9)
    assert penalised == sum(1 for r in rows if r["Fl"] + r["Con"] + r["Inc"] < 0) > 0
    # Captions: the Human system's caption is a candidate, and the texts are the file's.
    first = Caption.objects.get(image__dataset=ds, system__name="Up-Down", image__key="974")
    assert first.text == "A group of people riding on the back of an elephant."
    refs = json.loads((THUMB / "mscoco_references.json").read_text().splitlines()[0])
    assert sorted(ds.references().filter(image__key="974").values_list("text", flat=True)) == sorted(refs["refs"])
    assert ds.criterion == "human_score"
    assert ds.protocol["headline"] == "pearson" and ds.protocol["system_level"] is True
    assert ds.protocol["criteria"] == ["human_score", "precision", "recall"] and ds.protocol["rows"] == "rating"
    assert "system level" in ds.protocol["summary"] and "Human" in ds.protocol["summary"]
    assert "Human 39" in out
    before = table_counts()
    assert "already imported" in run_command("import_dataset", "thumb", str(THUMB), "--name", "thumb")
    assert table_counts() == before


@pytest.fixture
def thumb_dir(tmp_path):
    return copy_files(tmp_path / "thumb", THUMB, ("mscoco_THumB-1.0.jsonl", "mscoco_references.json"))


def _edit_json_line(path: Path, line_no: int, edit):
    lines = path.read_text().splitlines()
    obj = json.loads(lines[line_no - 1])
    edit(obj)
    lines[line_no - 1] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    "line_no, edit, message",
    [
        (12, lambda o: o.update(human_score=o["human_score"] + 0.5), "disagrees with (P+R)/2 + Fl + Con + Inc"),
        (30, lambda o: o.pop("R"), "missing field 'R'"),
        (40, lambda o: o.update(P="high"), "P must be a finite number, got 'high'"),
        (50, lambda o: o.update(P=7.0), "P = 7 is outside the 1-5 scale"),
        (60, lambda o: o.update(Fl=0.5, human_score=o["human_score"] + 0.5), "penalty Fl = 0.5 must be <= 0"),
        (70, lambda o: o.update(seg_id="123456789", image="COCO_val2014_000123456789.jpg"), "image 123456789 has no references"),
        (80, lambda o: o.update(image="COCO_val2014_000000000001.jpg"), "is not COCO image"),
    ],
)
def test_thumb_malformed_line_imports_nothing(thumb_dir, line_no, edit, message):
    _edit_json_line(thumb_dir / "mscoco_THumB-1.0.jsonl", line_no, edit)
    before = table_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "thumb", str(thumb_dir), "--name", "broken")
    assert "mscoco_THumB-1.0.jsonl:" + str(line_no) + ":" in str(err.value) and message in str(err.value)
    assert table_counts() == before


def test_thumb_bad_json_and_bad_references(thumb_dir):
    path = thumb_dir / "mscoco_THumB-1.0.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5] + ['{"SYS": "Up-Down", "seg_id": ']) + "\n")
    with pytest.raises(CommandError, match=r"mscoco_THumB-1.0.jsonl:6: not valid JSON"):
        run_command("import_dataset", "thumb", str(thumb_dir), "--name", "x")
    _edit_json_line(thumb_dir / "mscoco_references.json", 3, lambda o: o.update(refs=["fine", ""]))
    with pytest.raises(CommandError, match=r"mscoco_references.json:3: refs\[1\] must be a non-empty string"):
        run_command("import_dataset", "thumb", str(thumb_dir), "--name", "x")
    assert table_counts() == (0, 0, 0, 0, 0, 0)


# ------------------------------------------------------------------------------------------------
# PASCAL-50S
# ------------------------------------------------------------------------------------------------


def load_pairs():
    mat = scipy.io.loadmat(str(PASCAL / "pair_pascal.mat"))
    inputs = mat["new_input"][0]
    return (
        [(str(x["name"][0]), " ".join(str(x["sent1"][0]).split()), " ".join(str(x["sent2"][0]).split())) for x in inputs],
        mat["new_data"], mat["category"][0], [r["result"].ravel().astype(int) for r in mat["result"][0]],
    )


def test_pascal50s_category_from_system_names():
    assert pascal50s_category("human-correct", "human-correct") == "HC"
    assert pascal50s_category("human-other", "human-correct") == "HI"
    assert pascal50s_category("machine-3", "human-correct") == pascal50s_category("human-correct", "machine-1") == "HM"
    assert pascal50s_category("machine-2", "machine-5") == "MM"
    for bad in (("human-other", "human-other"), ("human-other", "machine-1"), ("flickr8k-references", "machine-1")):
        with pytest.raises(ValueError, match="do not form a PASCAL-50S category"):
            pascal50s_category(*bad)


def test_pascal50s_full_import_pairs_votes_categories_and_reproducible_reference_sampling():
    """The full import (pairs, votes, categories, protocol, idempotence) and its reference sampling
    (reproducible with the same seed, another sample with another seed, never a candidate), in one
    test so that the default import (seed 0) is done once for both."""
    out = run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "p50")
    ds = Dataset.objects.get(name="p50")
    pairs, systems, categories, votes = load_pairs()
    assert ds.images.count() == 1000
    assert ds.references().count() == 5000
    assert ds.candidates().count() == 8000
    assert PairwiseJudgment.objects.filter(caption_b__image__dataset=ds).count() == 43994 == sum(len(v) for v in votes)
    assert not PairwiseJudgment.objects.filter(caption_b__image__dataset=ds, reference__isnull=False).exists()
    rows = forced_choice_rows(ds)
    assert len(rows) == 4000
    assert Counter(r[2] for r in rows) == {"HC": 1000, "HI": 1000, "HM": 1000, "MM": 1000}
    assert sum(r[4] for r in rows) == 43994
    captions = {c.id: c for c in Caption.objects.filter(image__dataset=ds).select_related("system", "image")}
    names = {6: "human-correct", 7: "human-other", **{k: f"machine-{k}" for k in range(1, 6)}}
    hi_majority_correct = 0
    for i, (b, c, category, votes_b, total) in enumerate(rows):
        cb, cc = captions[b], captions[c]
        image, sent1, sent2 = pairs[i]
        # B = sent2, C = sent1; keys follow the pair's position; both sides belong to the pair's image.
        assert (cb.key, cc.key) == (f"pair-{i + 1:04d}-b", f"pair-{i + 1:04d}-c")
        assert cb.image.key == cc.image.key == image and (cb.text, cc.text) == (sent2, sent1)
        assert (cc.system.name, cb.system.name) == (names[int(systems[i][0])], names[int(systems[i][1])])
        assert category == "HC HI HM MM".split()[int(categories[i]) - 1]
        # +1 = sent1 (C) preferred, -1 = sent2 (B) preferred.
        assert total == len(votes[i]) and votes_b == int(np.sum(votes[i] == -1))
        if category == "HI":
            human_side = "b" if cb.system.name == "human-correct" else "c"
            majority = "b" if votes_b > total - votes_b else "c"
            hi_majority_correct += majority == human_side
    assert hi_majority_correct == 998
    assert "in 998 of 1,000 HI pairs" in out
    assert sorted(ds.systems.values_list("name", flat=True)) == sorted(
        ["pascal50s-references", "human-correct", "human-other", *(f"machine-{k}" for k in range(1, 6))]
    )
    proto = ds.protocol
    assert proto["task"] == "forced_choice" and proto["headline"] == "accuracy"
    assert proto["categories"] == ["HC", "HI", "HM", "MM"] and proto["references"] == 5 and proto["seed"] == 0
    assert "consensus_pascal.mat" in proto["summary"] and proto["sides"] == {"b": "sent2", "c": "sent1"}
    before = table_counts()
    assert "already imported" in run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "p50")
    assert table_counts() == before

    # Reference sampling: the same seed gives the same references (p50 above: seed 0 by default, equal to
    # the documented draw random.Random(0) of sample_references, a pure function of the files and the seed;
    # a second import with the same seed and the command line's options: test_pascal50s_options_on_the_command_line),
    # another seed another sample, and a candidate is never its image's reference.
    import_pascal50s(PASCAL, "p-c", seed=1)
    a, c = (_references_by_image(Dataset.objects.get(name=n)) for n in ("p50", "p-c"))
    sentences = read_references(PASCAL / "pascal50S.mat")
    assert a == _drawn(sentences, n=5, seed=0)  # same seed: the same references
    differ = sum(1 for image in a if a[image] != c[image])
    assert differ > 900  # another seed: (almost) every image gets another sample
    norm = lambda s: " ".join(s.split()).lower()  # noqa: E731
    candidates = defaultdict(set)
    for cap in Caption.objects.filter(image__dataset__name="p50").exclude(system__name="pascal50s-references").select_related("image"):
        candidates[cap.image.key].add(norm(cap.text))
    for refs in (a, c):
        for image, texts in refs.items():
            assert len(texts) == 5
            assert all(t in sentences[image] for t in texts)
            assert not {norm(t) for t in texts} & candidates[image]  # no candidate is its own reference
    # Some candidates are among their image's 50 sentences; they are never drawn, whatever the seed.
    clashing = {image for image, sents in sentences.items() if {norm(s) for s in sents} & candidates[image]}
    assert len(clashing) == 35


def _references_by_image(ds) -> dict[str, list[str]]:
    out = defaultdict(list)
    for image, text in ds.references().order_by("image__key", "key").values_list("image__key", "text"):
        out[image].append(text)
    return dict(out)


def _drawn(sentences: dict[str, list[str]], n: int, seed: int) -> dict[str, list[str]]:
    """The references sample_references draws with ``n`` and ``seed`` for the bundled pairs' images
    (their candidates read from pair_pascal.mat here), as _references_by_image lists them (by number)."""
    candidates = defaultdict(set)
    for image, sent1, sent2 in load_pairs()[0]:
        candidates[image].update((sent1, sent2))
    samples, _ = sample_references(sentences, candidates, n=n, seed=seed)
    return {image: [text for _, text in drawn] for image, drawn in samples.items()}


def test_sample_references_function():
    refs = {"img1": [f"sentence {k}" for k in range(1, 11)], "img2": [f"other {k}" for k in range(1, 11)]}
    cands = {"img1": {"Sentence  3", "sentence 4"}, "img2": set()}
    s1, excluded = sample_references(refs, cands, n=8, seed=3)
    assert excluded == {"img1": 2}
    assert s1["img1"] == [(k, f"sentence {k}") for k in (1, 2, 5, 6, 7, 8, 9, 10)]  # the whole pool
    assert len(s1["img2"]) == 8 and s1 == sample_references(refs, cands, n=8, seed=3)[0]
    draws = {tuple(sample_references(refs, cands, n=3, seed=s)[0]["img2"]) for s in range(20)}
    assert len(draws) > 10
    with pytest.raises(DatasetFormatError, match="image 'img1' has 8 reference sentences besides its candidates, fewer than the 9"):
        sample_references(refs, cands, n=9, seed=0)
    with pytest.raises(ValueError):
        sample_references(refs, cands, n=0)


def test_pascal50s_options_on_the_command_line():
    out = run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "p3", "--references", "3", "--seed", "7")
    ds = Dataset.objects.get(name="p3")
    assert ds.protocol["references"] == 3 and ds.protocol["seed"] == 7 and "3 per image sampled with seed 7" in out
    assert set(Counter(ds.references().values_list("image_id", flat=True)).values()) == {3}
    # the same references as the seeded draw with these options (what import_pascal50s(PASCAL, "p3b",
    # references=3, seed=7) stores too: a pure function of the files and the options)
    assert _references_by_image(ds) == _drawn(read_references(PASCAL / "pascal50S.mat"), n=3, seed=7)
    before = table_counts()
    with pytest.raises(CommandError, match="already exists with different data"):
        run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "p3", "--references", "3", "--seed", "8")
    with pytest.raises(DatasetExistsError):
        import_pascal50s(PASCAL, "p3", references=4, seed=7)
    with pytest.raises(CommandError, match="--references is not an option of kind 'thumb'"):
        run_command("import_dataset", "thumb", str(THUMB), "--name", "t", "--references", "3")
    with pytest.raises(CommandError, match="--seed is not an option of kind 'flickr8k-crowdflower'"):
        run_command("import_dataset", "flickr8k-crowdflower", str(FLICKR8K), "--name", "t", "--seed", "3")
    with pytest.raises(CommandError, match="--references must be at least 1"):
        run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "t", "--references", "0")
    with pytest.raises(CommandError, match="fewer than the 49 references to sample"):
        run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "t", "--references", "49")
    assert table_counts() == before


@pytest.fixture
def pascal_dir(tmp_path):
    return copy_files(tmp_path / "p50", PASCAL, ("pascal50S.mat", "pair_pascal.mat"))


def _edit_pairs(directory: Path, edit):
    path = directory / "pair_pascal.mat"
    mat = scipy.io.loadmat(str(path))
    edit(mat)
    scipy.io.savemat(str(path), {k: v for k, v in mat.items() if not k.startswith("__")})


def _set_name(mat, i, name):
    mat["new_input"][0, i]["name"] = np.array([name])


def _set_vote(mat, i, value):
    votes = mat["result"][0, i]["result"].astype(np.int16)
    votes[0, 0] = value
    mat["result"][0, i]["result"] = votes


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["category"].__setitem__((0, 4), 1), "pair 5: category 1 (HC) disagrees with its systems machine-2 / human-correct (HM)"),
        (lambda m: m["new_data"].__setitem__((9, 1), 9), "pair 10: new_data system id 9 (column 2) is not in 1-7"),
        (lambda m: _set_name(m, 19, "2099_000000.jpg"), "pair 20: image '2099_000000.jpg' is not in pascal50S.mat"),
        (lambda m: _set_vote(m, 29, 0), "pair 30: vote 0 is not +1 (sent1 preferred) or -1 (sent2 preferred)"),
        (lambda m: m.pop("category"), "missing variable 'category'"),
    ],
)
def test_pascal50s_malformed_pairs_import_nothing(pascal_dir, edit, message):
    _edit_pairs(pascal_dir, edit)
    before = table_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "pascal50s", str(pascal_dir), "--name", "broken")
    assert "pair_pascal.mat: " in str(err.value) and message in str(err.value)
    assert table_counts() == before


@pytest.mark.parametrize("name", ["pascal50S.mat", "pair_pascal.mat"])
@pytest.mark.parametrize("keep", [0, 100, 5000])
def test_pascal50s_truncated_mat_file(pascal_dir, name, keep):
    path = pascal_dir / name
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "pascal50s", str(pascal_dir), "--name", "broken")
    text = str(err.value)
    assert name in text and ("not a readable MATLAB .mat file" in text or "missing variable" in text)
    assert "\n" not in text
    assert table_counts() == (0, 0, 0, 0, 0, 0)


# ------------------------------------------------------------------------------------------------
# PairwiseJudgment without a reference
# ------------------------------------------------------------------------------------------------


def test_pairwise_judgment_uniqueness_with_and_without_reference():
    ds = Dataset.objects.create(name="pw", kind="test")
    system = System.objects.create(dataset=ds, name="s", kind=System.HUMAN)
    image = Image.objects.create(dataset=ds, key="i")
    a, b, c = (Caption.objects.create(image=image, system=system, key=k, text=k) for k in "abc")
    PairwiseJudgment.objects.create(reference=None, caption_b=b, caption_c=c, rater="r1", choice="b")
    PairwiseJudgment.objects.create(reference=a, caption_b=b, caption_c=c, rater="r1", choice="c")
    PairwiseJudgment.objects.create(reference=None, caption_b=b, caption_c=c, rater="r2", choice="c")
    for reference in (None, a):  # one vote per rater and pair, with or without a reference
        with pytest.raises(IntegrityError), transaction.atomic():
            PairwiseJudgment.objects.create(reference=reference, caption_b=b, caption_c=c, rater="r1", choice="b")
    assert PairwiseJudgment.objects.count() == 3
