"""``import_dataset judgments``: your own benchmark from one JSON / JSON Lines / CSV / TSV file
(crowd/importers/judgments.py), on real rows of Flickr8k-Expert and THumB 1.0 (data/).

Every test compares what is stored with an independent reading of the file it wrote (the Flickr8k
and THumB source files, parsed here with the standard library), never with output of the importer.
Malformed files must fail with one line naming the file, the line and the field, with every table
unchanged; a hypothesis fuzz mutates real rows and checks the same contract.
"""
from __future__ import annotations

import csv
import hashlib
import json
import statistics
from pathlib import Path

import pytest
from django.core.management.base import CommandError
from hypothesis import given
from hypothesis import strategies as st

from crowd.importers import IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.judgments import JUDGMENTS_KIND, JudgmentMapping, import_judgments
from crowd.models import Caption, Dataset, HumanJudgment, Image, System

from .conftest import FLICKR8K, ROOT, run_command
from .fuzzing import fuzz_settings, unicode_text

pytestmark = pytest.mark.django_db

THUMB = ROOT / "data" / "thumb"
MODELS = (Dataset, Image, System, Caption, HumanJudgment)


def snapshot() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in MODELS)


def flickr_rows(n_images: int) -> list[dict]:
    """Real Flickr8k-Expert pairs of the first ``n_images`` judged images (own captions excluded):
    {"image", "candidate", "refs" (the image's 5 captions, #0..#4), "ratings" [3 ints]}."""
    tokens = {}
    for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines():
        cid, text = line.split("\t", 1)
        tokens[cid] = text.strip()
    rows, images = [], []
    for line in (FLICKR8K / "ExpertAnnotations.txt").read_text().splitlines():
        image, cid, *ratings = line.split("\t")
        if cid.startswith(image + "#"):
            continue
        if image not in images:
            if len(images) == n_images:
                break
            images.append(image)
        rows.append({"image": image, "candidate": tokens[cid], "refs": [tokens[f"{image}#{k}"] for k in range(5)],
                     "ratings": [int(r) for r in ratings]})
    return rows


def thumb_rows(n_images: int) -> tuple[list[dict], dict[str, list[str]]]:
    """Real THumB 1.0 rows of the first ``n_images`` images (all 5 systems) and the references."""
    refs = {r["seg_id"]: r["refs"] for r in map(json.loads, (THUMB / "mscoco_references.json").read_text().splitlines())}
    rows, keep = [], []
    for row in map(json.loads, (THUMB / "mscoco_THumB-1.0.jsonl").read_text().splitlines()):
        if row["seg_id"] not in keep:
            if len(keep) == n_images:
                continue
            keep.append(row["seg_id"])
        rows.append(row)
    return rows, {k: refs[k] for k in keep}


def stored(name: str) -> dict:
    """What the database holds for dataset ``name``, by image key / system name / caption text."""
    ds = Dataset.objects.get(name=name)
    refs: dict[str, list[str]] = {}
    for key, text in ds.references().order_by("image_id", "key").values_list("image__key", "text"):
        refs.setdefault(key, []).append(text)
    scores: dict[tuple, float] = {}
    for img, system, text, criterion, rater, score in HumanJudgment.objects.filter(image__dataset=ds).values_list(
        "image__key", "system__name", "caption__text", "criterion", "rater", "score"
    ):
        scores[(img, system, text, criterion, rater)] = score
    return {
        "dataset": ds, "refs": refs, "scores": scores,
        "images": list(ds.images.order_by("id").values_list("key", flat=True)),
        "candidates": list(ds.candidates().order_by("id").values_list("image__key", "system__name", "text")),
        "systems": list(ds.systems.exclude(pk=ds.reference_system_id).order_by("id").values_list("name", flat=True)),
    }


def write_csv(path: Path, header: list[str], rows: list[list], delimiter=",") -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


# ---------------------------------------------------------------------------------------------
# Formats
# ---------------------------------------------------------------------------------------------


def test_polaris_style_json_list_with_rater_lists(tmp_path):
    """Polaris / Nebula field names (imgid, mt, refs, score) and one rating per rater in a list."""
    rows = flickr_rows(12)
    path = tmp_path / "polaris_like.json"
    path.write_text(json.dumps([{"imgid": r["image"], "mt": r["candidate"], "refs": r["refs"], "score": r["ratings"]}
                                for r in rows], indent=2))
    mapping = JudgmentMapping(image="imgid", candidate="mt", references="refs", rows="ratings", published_as="polaris")
    summary = import_judgments(path, "polaris-like", mapping)
    got = stored("polaris-like")
    images = list(dict.fromkeys(r["image"] for r in rows))
    assert got["images"] == images
    assert got["refs"] == {r["image"]: r["refs"] for r in rows}
    assert got["candidates"] == [(r["image"], "candidates", r["candidate"]) for r in rows]
    assert got["scores"] == {(r["image"], "candidates", r["candidate"], "score", f"r{k}"): float(v)
                             for r in rows for k, v in enumerate(r["ratings"], start=1)}
    proto = got["dataset"].protocol
    assert got["dataset"].kind == JUDGMENTS_KIND and got["dataset"].criterion == "score"
    assert proto["rows"] == "rating" and proto["headline"] == "kendall_tau_c" and proto["criteria"] == ["score"]
    assert proto["file"] == "polaris_like.json" and proto["published_as"] == "polaris"
    assert proto["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert proto["mapping"]["image"] == "imgid" and proto["mapping"]["scores"] == ["score"]
    assert summary.created and summary.counts == {
        "images": len(images), "candidate captions": len(rows), "reference captions": 5 * len(images),
        "judgments": 3 * len(rows), "systems": 1}
    assert "references per image: min 5, median 5, max 5" in str(summary)


def test_single_scores_mean_rows_and_no_published_as(tmp_path):
    rows = flickr_rows(5)
    path = tmp_path / "means.jsonl"
    path.write_text("".join(json.dumps({"image": r["image"], "candidate": r["candidate"], "references": r["refs"],
                                        "score": statistics.mean(r["ratings"])}) + "\n" for r in rows))
    import_judgments(path, "means")
    got = stored("means")
    assert got["scores"] == {(r["image"], "candidates", r["candidate"], "score", "r1"): statistics.mean(r["ratings"])
                             for r in rows}
    proto = got["dataset"].protocol
    assert proto["rows"] == "mean" and "published_as" not in proto and "human_system" not in proto


@pytest.mark.parametrize("delimiter, ext", [(",", "csv"), ("\t", "tsv")])
def test_thumb_rows_as_csv_tsv_with_numbered_reference_columns(tmp_path, delimiter, ext):
    """Several systems, three criteria (human_score, P, R renamed) and references.1..4 columns."""
    rows, refs = thumb_rows(15)
    header = ["seg_id", "SYS", "hyp", "human_score", "P", "R"] + [f"refs.{k}" for k in (1, 2, 3, 4)]
    path = write_csv(tmp_path / f"thumb.{ext}", header, [
        [r["seg_id"], r["SYS"], r["hyp"], repr(r["human_score"]), r["P"], r["R"], *refs[r["seg_id"]]] for r in rows
    ], delimiter)
    run_command("import_dataset", "judgments", str(path), "--name", f"thumb-{ext}", "--image-field", "seg_id",
                "--candidate-field", "hyp", "--references-field", "refs", "--system-field", "SYS",
                "--score-field", "human_score", "--score-field", "P", "--score-field", "R",
                "--criterion", "human_score", "--criterion", "precision", "--criterion", "recall",
                "--rows", "ratings", "--headline", "pearson", "--human-system", "Human")
    got = stored(f"thumb-{ext}")
    assert got["systems"] == list(dict.fromkeys(r["SYS"] for r in rows))
    assert got["refs"] == {k: [t.strip() for t in v] for k, v in refs.items()}
    assert got["scores"] == {
        (r["seg_id"], r["SYS"], r["hyp"].strip(), crit, "r1"): float(r[field])
        for r in rows for field, crit in (("human_score", "human_score"), ("P", "precision"), ("R", "recall"))
    }
    ds = got["dataset"]
    assert ds.protocol["criteria"] == ["human_score", "precision", "recall"] and ds.protocol["headline"] == "pearson"
    assert ds.protocol["human_system"] == "Human" and System.objects.get(dataset=ds, name="Human").kind == System.HUMAN
    assert ds.criterion == "human_score"


def test_rater_field_rows_are_ratings(tmp_path):
    """One row per (caption, rater): the Flickr8k experts as raters, several rows per candidate."""
    rows = flickr_rows(8)
    out = []
    for r in rows:
        for k, v in enumerate(r["ratings"], start=1):
            out.append([r["image"], r["candidate"], json.dumps(r["refs"]), f"expert_{k}", v])
    path = write_csv(tmp_path / "ratings.csv", ["image", "candidate", "references", "who", "quality"], out)
    import_judgments(path, "ratings", JudgmentMapping(rater="who", scores=("quality",), rows="ratings"))
    got = stored("ratings")
    assert len(got["candidates"]) == len(rows)
    assert got["scores"] == {(r["image"], "candidates", r["candidate"], "quality", f"expert_{k}"): float(v)
                             for r in rows for k, v in enumerate(r["ratings"], start=1)}


def test_references_from_a_coco_annotation_file(tmp_path):
    """Rows without references; the references come by image id from a COCO caption file built from
    THumB's real references; image fields given as COCO file names are read as ids."""
    rows, refs = thumb_rows(10)
    ann = {"images": [{"id": int(k)} for k in refs],
           "annotations": [{"id": int(k) * 10 + j, "image_id": int(k), "caption": c}
                           for k, v in refs.items() for j, c in enumerate(v)]}
    (tmp_path / "captions.json").write_text(json.dumps(ann))
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"image": f"COCO_val2014_{int(r['seg_id']):012d}.jpg", "candidate": r["hyp"],
                                        "system": r["SYS"], "score": r["human_score"]}) + "\n" for r in rows))
    run_command("import_dataset", "judgments", str(path), "--name", "coco-refs", "--system-field", "system",
                "--references-file", str(tmp_path / "captions.json"))
    got = stored("coco-refs")
    assert got["refs"] == {k: [" ".join(c.split()) for c in v] for k, v in refs.items()}  # COCO files: whitespace normalised
    assert got["images"] == list(refs)
    assert len(got["scores"]) == len(rows)


def test_idempotent_reimport_taken_name_and_other_importer(tmp_path, subset_dir):
    rows = flickr_rows(4)
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"image": r["image"], "candidate": r["candidate"], "references": r["refs"],
                                 "score": r["ratings"]} for r in rows]))
    first = import_judgments(path, "mine")
    before = snapshot()
    again = import_judgments(path, "mine")
    assert first.created and not again.created and snapshot() == before and again.counts == first.counts
    with pytest.raises(DatasetExistsError):  # same file, another mapping
        import_judgments(path, "mine", JudgmentMapping(rows="ratings"))
    other = tmp_path / "b.json"
    other.write_text(json.dumps([{"image": r["image"], "candidate": r["candidate"], "references": r["refs"],
                                  "score": r["ratings"][:2]} for r in rows]))
    with pytest.raises(DatasetExistsError):
        import_judgments(other, "mine")
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "expert")
    before = snapshot()
    with pytest.raises(CommandError, match="already exists"):
        run_command("import_dataset", "judgments", str(path), "--name", "expert")
    assert snapshot() == before


def test_command_options_belong_to_their_format(tmp_path, subset_dir):
    path = tmp_path / "x.json"
    path.write_text(json.dumps([{"image": r["image"], "candidate": r["candidate"], "references": r["refs"],
                                 "score": r["ratings"]} for r in flickr_rows(2)]))
    with pytest.raises(CommandError, match="--seed is not an option of kind 'judgments'"):
        run_command("import_dataset", "judgments", str(path), "--name", "x", "--seed", "1")
    with pytest.raises(CommandError, match="--rater-field is an option of kind 'judgments' only"):
        run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "y", "--rater-field", "r")
    with pytest.raises(CommandError, match="2 criterion name"):
        run_command("import_dataset", "judgments", str(path), "--name", "x", "--criterion", "a", "--criterion", "b")
    assert snapshot() == (0, 0, 0, 0, 0)
    assert "judgments" in IMPORTERS
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "y")  # the others still work
    assert Dataset.objects.get(name="y").kind == "flickr8k-expert"


# ---------------------------------------------------------------------------------------------
# Malformed files: one line naming file, line and field; nothing written
# ---------------------------------------------------------------------------------------------

R = flickr_rows(2)[:3]
GOOD = [{"image": r["image"], "candidate": r["candidate"], "references": r["refs"], "score": 2} for r in R]


def jsonl(rows) -> str:
    return "".join(json.dumps(r, allow_nan=True) + "\n" for r in rows)


def changed(k: int, **fields) -> list[dict]:
    rows = [dict(r) for r in GOOD]
    for key, value in fields.items():
        if value is ...:
            del rows[k][key]
        else:
            rows[k][key] = value
    return rows


MALFORMED = [
    ("unknown extension", "rows.txt", jsonl(GOOD), {}, "rows.txt: unknown extension '.txt'"),
    ("missing score field", "m.jsonl", jsonl(changed(2, score=...)), {}, "m.jsonl:3: field 'score': missing field"),
    ("empty caption", "m.jsonl", jsonl(changed(1, candidate="   ")), {}, "m.jsonl:2: field 'candidate': empty candidate caption"),
    ("non-numeric score", "m.jsonl", jsonl(changed(0, score="good")), {}, "m.jsonl:1: field 'score': score 'good' is not a number"),
    ("NaN score", "m.jsonl", jsonl(changed(2, score=float("nan"))), {}, "m.jsonl:3: field 'score': score nan is not a finite number"),
    ("infinite CSV score", "m.csv", "image,candidate,references,score\n" + f'{R[0]["image"]},a dog,"[""a cat""]",inf\n', {},
     "m.csv:2: field 'score': score 'inf' is not a number"),
    ("duplicate candidate", "m.jsonl", jsonl(GOOD + [GOOD[0]]), {}, "m.jsonl:4: field 'candidate': candidate"),
    ("image without references", "m.jsonl", jsonl(changed(1, references=[])), {},
     "m.jsonl:2: field 'references': no reference captions (empty list)"),
    ("inconsistent references", "m.jsonl",
     jsonl(GOOD + [dict(GOOD[0], candidate="another caption", references=GOOD[0]["references"][:4])]), {},
     "m.jsonl:4: field 'references': references of image"),
    ("mixed scales", "m.jsonl", jsonl(changed(0, score=0.75)), {},
     "m.jsonl:1: criterion 'score' mixes scales: 0.75 (line 1) is a fraction of 1 but 2 (line 2) is on an integer scale"),
    ("invalid JSON", "m.json", json.dumps(GOOD)[:-30], {}, "m.json:1: not valid JSON"),
    ("JSON object, not a list", "m.json", json.dumps({"rows": GOOD}), {}, "m.json:1: expected a JSON list of objects"),
    ("list in rater mode", "m.jsonl", jsonl([dict(g, who="a", score=[1, 2]) for g in GOOD]), {"rater": "who"},
     "m.jsonl:1: field 'score': with a rater field each row is one rating"),
    ("same rater twice", "m.jsonl", jsonl([dict(GOOD[0], who="a"), dict(GOOD[0], who="a")]), {"rater": "who"},
     "m.jsonl:2: field 'who': rater 'a' rated this candidate"),
    ("CSV row longer than header", "m.csv", "image,candidate,references,score\nx,a dog,\"[\"\"a\"\"]\",3,4\n", {},
     "m.csv:2: 5 cells but the header has 4 columns"),
    ("references not a list", "m.jsonl", jsonl(changed(0, references="a dog")), {},
     "m.jsonl:1: field 'references': references must be a list"),
    ("empty score list", "m.jsonl", jsonl(changed(0, score=[])), {}, "m.jsonl:1: field 'score': empty list of scores"),
    ("missing references field", "m.jsonl", jsonl(changed(0, references=...)), {}, "m.jsonl:1: field 'references': missing field"),
    ("not UTF-8", "m.jsonl", None, {}, "m.jsonl:1: not valid UTF-8"),
]


@pytest.mark.parametrize("label, filename, content, options, expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_file_one_clear_line_nothing_written(tmp_path, label, filename, content, options, expected):
    path = tmp_path / filename
    if content is None:
        path.write_bytes(jsonl(GOOD).encode("utf-8").replace(b"a", b"\xe9", 1))
    else:
        path.write_text(content, encoding="utf-8")
    before = snapshot()
    with pytest.raises(DatasetFormatError) as err:
        import_judgments(path, "bad", JudgmentMapping(**options))
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path)), message
    assert expected in message, message
    assert snapshot() == before
    with pytest.raises(CommandError) as err2:  # the command says the same, one line
        args = ["import_dataset", "judgments", str(path), "--name", "bad"]
        if options:
            args += ["--rater-field", options["rater"]]
        run_command(*args)
    assert str(err2.value) == message and snapshot() == before


def test_missing_image_in_references_file(tmp_path):
    (tmp_path / "caps.json").write_text(json.dumps({"images": [{"id": 1}], "annotations": [{"id": 5, "image_id": 1, "caption": "a dog"}]}))
    path = tmp_path / "r.jsonl"
    path.write_text(jsonl([{"image": 1, "candidate": "a dog runs", "score": 3}, {"image": 2, "candidate": "a cat", "score": 2}]))
    with pytest.raises(DatasetFormatError, match=r"r.jsonl:2: field 'image': image '2' has no references in caps.json"):
        import_judgments(path, "x", JudgmentMapping(references_file=str(tmp_path / "caps.json")))
    assert snapshot() == (0, 0, 0, 0, 0)


# ---------------------------------------------------------------------------------------------
# Fuzz: one field of a real row replaced by any JSON value
# ---------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
    | st.floats(allow_nan=True, allow_infinity=True) | unicode_text(0, 30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(unicode_text(0, 8), children, max_size=3),
    max_leaves=8,
)


@fuzz_settings(60)
@given(row=st.integers(0, len(GOOD) - 1), field=st.sampled_from(["image", "candidate", "references", "score"]),
       value=JSON_VALUES)
def test_fuzzed_field_imports_exactly_or_fails_on_its_line(row, field, value):
    import tempfile

    rows = changed(row, **{field: value})
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "fuzz.jsonl"
        path.write_text(jsonl(rows), encoding="utf-8")
        before = snapshot()
        try:
            import_judgments(path, "fuzz")
        except DatasetFormatError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(str(path)), message
            assert snapshot() == before
            return
    ds = Dataset.objects.get(name="fuzz")
    try:
        got = stored("fuzz")
        assert len(got["candidates"]) == len(rows)
        mine = got["candidates"][row]
        if field == "candidate":
            assert mine[2] == value.strip()
        if field == "score":
            scores = value if isinstance(value, list) else [value]
            assert sorted(v for k, v in got["scores"].items() if k[2] == mine[2] and k[0] == mine[0]) == sorted(map(float, scores))
        if field == "references":
            assert got["refs"][mine[0]] == [v.strip() for v in value]
    finally:
        ds.delete()
