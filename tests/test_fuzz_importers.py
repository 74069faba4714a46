"""Hostile input to the dataset importers and the file-reading commands (issue 7), fuzzed with
hypothesis on PostgreSQL.

Contract checked for every generated input: the import either succeeds and stores exactly what
the files say (compared with an independent reading of the same bytes), or fails with the
project's error (DatasetFormatError / DatasetExistsError from the importers, CommandError from the
commands, UploadError from metric uploads) whose one-line message names the file; any other
exception fails the test, and on failure no table has a row more or less.

Inputs are mutations of the real bundled files (small subsets of them, so that one example takes a
fraction of a second): truncated, dropped, duplicated and swapped lines and TAB fields, replaced
fields (numbers, Unicode, huge values), random and invalid UTF-8 bytes, NUL bytes, byte-order
marks, CR/CRLF line ends, UTF-16 and Latin-1 re-encodings; JSON trees with values of the wrong
type, missing keys, string/float/huge ids; .mat files with flipped bytes or wrong variables.
Examples are derandomized, so CI runs the same inputs every time (``FUZZ_SCALE`` / ``FUZZ_RANDOM``
for a deeper search: see tests/fuzzing.py).
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from django.core.management.base import CommandError
from hypothesis import assume, event, given
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from crowd.importers import DatasetFormatError
from crowd.importers.base import MAX_CAPTION_CHARS
from crowd.importers.coco import SystemFile, import_coco, read_coco_results
from crowd.models import Caption, Campaign, Dataset, HumanJudgment, Image, Item, ObjectLabel, PairwiseJudgment, System
from metrics.models import MetricRun, MetricScore
from captioneval.kernels.cider import cider_d
from captioneval.kernels.coco import bleu
from captioneval.text.tokenizer import ptb_tokenize

from .coco_sets import POPE, write_coco_files
from .conftest import FLICKR8K, ROOT, run_command, write_subset
from .fuzzing import fuzz_settings, unicode_text

pytestmark = pytest.mark.django_db

THUMB = ROOT / "data" / "thumb"
PASCAL = ROOT / "data" / "pascal50s"
TOKEN, EXPERT, CF = "Flickr8k.token.txt", "ExpertAnnotations.txt", "CrowdFlowerAnnotations.txt"
JUDGMENTS, REFS = "mscoco_THumB-1.0.jsonl", "mscoco_references.json"
PASCAL_REFS, PASCAL_PAIRS = "pascal50S.mat", "pair_pascal.mat"


MODELS = (Dataset, Image, System, Caption, HumanJudgment, PairwiseJudgment, ObjectLabel, Campaign, Item,
          MetricRun, MetricScore)


def table_counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in MODELS}


_names = itertools.count()


def outcome(label: str) -> None:
    """Count ``label`` in hypothesis' statistics (``--hypothesis-show-statistics``) when in a fuzz example."""
    if currently_in_test_context():
        event(label)


def fresh_name(prefix: str = "fz") -> str:
    return f"{prefix}{next(_names)}"


# -------------------------------------------------------------------------------------------------
# Small real inputs
# -------------------------------------------------------------------------------------------------
def expert_files() -> dict[str, bytes]:
    """A 6-image Flickr8k-Expert subset (real lines, unchanged)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = write_subset(Path(tmp), 6)
        return {name: (d / name).read_bytes() for name in (TOKEN, EXPERT)}


def crowdflower_files() -> dict[str, bytes]:
    """The first 25 CrowdFlower pairs with every token line of their images and candidates."""
    cf = (FLICKR8K / CF).read_text(encoding="utf-8").splitlines()[:25]
    images = {line.split("\t")[0] for line in cf} | {line.split("\t")[1].rpartition("#")[0] for line in cf}
    tokens = [line for line in (FLICKR8K / TOKEN).read_text(encoding="utf-8").splitlines()
              if line.split("\t")[0].rpartition("#")[0] in images]
    return {CF: ("\n".join(cf) + "\n").encode(), TOKEN: ("\n".join(tokens) + "\n").encode()}


def thumb_files() -> dict[str, bytes]:
    """THumB lines of the first 3 images (5 systems each) and their references."""
    lines = (THUMB / JUDGMENTS).read_text(encoding="utf-8").splitlines()[:15]
    segs = {json.loads(line)["seg_id"] for line in lines}
    refs = [line for line in (THUMB / REFS).read_text(encoding="utf-8").splitlines() if json.loads(line)["seg_id"] in segs]
    return {JUDGMENTS: ("\n".join(lines) + "\n").encode(), REFS: ("\n".join(refs) + "\n").encode()}


def pascal_files() -> dict[str, bytes]:
    """The first 8 PASCAL-50S pairs and the 50 sentences of their images, saved with scipy.io.savemat."""
    pairs = scipy.io.loadmat(str(PASCAL / PASCAL_PAIRS))
    refs = scipy.io.loadmat(str(PASCAL / PASCAL_REFS))["refs"]
    n = 8
    images = {str(pairs["new_input"][0, i]["name"].ravel()[0]) for i in range(n)}
    keep = [j for j in range(refs.shape[1]) if str(refs[0, j]["image"].ravel()[0]) in images]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        scipy.io.savemat(f"{tmp}/r.mat", {"refs": refs[:, keep]})
        scipy.io.savemat(f"{tmp}/p.mat", {"new_input": pairs["new_input"][:, :n], "new_data": pairs["new_data"][:n],
                                          "category": pairs["category"][:, :n], "result": pairs["result"][:, :n]})
        out[PASCAL_REFS], out[PASCAL_PAIRS] = Path(f"{tmp}/r.mat").read_bytes(), Path(f"{tmp}/p.mat").read_bytes()
    return out


FILES = {
    "flickr8k-expert": expert_files(),
    "flickr8k-crowdflower": crowdflower_files(),
    "thumb": thumb_files(),
    "pascal50s": pascal_files(),
}


def write_dir(root: Path, files: dict[str, bytes]) -> Path:
    d = root / fresh_name("in")
    d.mkdir()
    for name, data in files.items():
        (d / name).write_bytes(data)
    return d


# -------------------------------------------------------------------------------------------------
# Independent readings of the (mutated) files, used only when the importer accepted them
# -------------------------------------------------------------------------------------------------
def text_lines(data: bytes) -> list[str]:
    text = data.decode("utf-8")
    return re.split(r"\r\n|\r|\n", text[1:] if text.startswith("\ufeff") else text)


def token_map(data: bytes) -> dict[str, str]:
    out = {}
    for line in text_lines(data):
        if line.strip():
            cid, _, text = line.partition("\t")
            out[cid.strip()] = text.strip()
    return out


def tab_rows(data: bytes) -> list[list[str]]:
    return [[f.strip() for f in line.split("\t")] for line in text_lines(data) if line.strip()]


def coco_key(value) -> str:
    """What an image id names: an int, an ASCII digit string or COCO file name -> the decimal id."""
    if isinstance(value, int):
        return str(value)
    text = value.strip()
    m = re.fullmatch(r"(?:.*/)?COCO_[A-Za-z]+\d*_0*(\d+)\.(?:jpg|jpeg|png)", text, re.IGNORECASE)
    if m:
        return str(int(m.group(1)))
    return str(int(text)) if text.isascii() and text.isdigit() else text


def norm(text: str) -> str:
    return " ".join(text.split())


def expected(kind: str, files: dict[str, bytes]) -> dict:
    """What an accepted import of ``files`` must store, read without the importer's code."""
    if kind == "flickr8k-expert":
        tokens = token_map(files[TOKEN])
        judged = {(r[0], r[1]): [float(x) for x in r[2:]] for r in tab_rows(files[EXPERT]) if not r[1].startswith(r[0] + "#")}
        images = {image for image, _ in judged}
        return {
            "references": {(cid.rpartition("#")[0], cid): t for cid, t in tokens.items() if cid.rpartition("#")[0] in images},
            "candidates": {(image, cid): tokens[cid] for image, cid in judged},
            "scores": {(image, cid, f"expert_{k}"): s for (image, cid), r in judged.items() for k, s in enumerate(r, 1)},
        }
    if kind == "flickr8k-crowdflower":
        tokens = token_map(files[TOKEN])
        rows = tab_rows(files[CF])
        return {
            "candidates": {(r[0], r[1]): tokens[r[1]] for r in rows},
            "votes": {(r[0], r[1]): (int(r[3]), int(r[4])) for r in rows},
            "tokens": tokens,
        }
    if kind == "thumb":
        refs = {coco_key(o["seg_id"]): [norm(t) for t in o["refs"]]
                for o in (json.loads(line) for line in text_lines(files[REFS]) if line.strip())}
        rows = [json.loads(line) for line in text_lines(files[JUDGMENTS]) if line.strip()]
        return {
            "references": {k: v for k, v in refs.items() if k in {coco_key(o["seg_id"]) for o in rows}},
            "candidates": {(coco_key(o["seg_id"]), norm(o["SYS"])): norm(o["hyp"]) for o in rows},
            "scores": {(coco_key(o["seg_id"]), norm(o["SYS"]), crit): float(o[field]) for o in rows
                       for field, crit in (("human_score", "human_score"), ("P", "precision"), ("R", "recall"))},
        }
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "p.mat").write_bytes(files[PASCAL_PAIRS])
        pairs = scipy.io.loadmat(f"{tmp}/p.mat")
    captions, votes = {}, {}
    for i, (entry, res) in enumerate(zip(pairs["new_input"].ravel(), pairs["result"].ravel()), start=1):
        captions[f"pair-{i:04d}-c"] = norm(str(entry["sent1"].ravel()[0]))
        captions[f"pair-{i:04d}-b"] = norm(str(entry["sent2"].ravel()[0]))
        v = np.asarray(res[res.dtype.names[0]] if isinstance(res, np.void) else res, dtype=float).ravel()
        votes[i] = (int((v == 1).sum()), int((v == -1).sum()))
    return {"captions": captions, "votes": votes}


def stored(kind: str, ds: Dataset) -> dict:
    """The same shape as :func:`expected`, read from the database."""
    refs = ds.references().select_related("image")
    cands = ds.candidates().select_related("image", "system")
    judgments = HumanJudgment.objects.filter(image__dataset=ds).select_related("image", "caption", "system")
    if kind == "flickr8k-expert":
        return {
            "references": {(c.image.key, c.key): c.text for c in refs},
            "candidates": {(c.image.key, c.key): c.text for c in cands},
            "scores": {(j.image.key, j.caption.key, j.rater): j.score for j in judgments},
        }
    if kind == "flickr8k-crowdflower":
        votes = defaultdict(lambda: [0, 0])
        for j in judgments:
            votes[(j.image.key, j.caption.key)][0 if j.score == 1.0 else 1] += 1
        return {"candidates": {(c.image.key, c.key): c.text for c in cands}, "votes": {k: tuple(v) for k, v in votes.items()},
                "references": {(c.image.key, c.key): c.text for c in refs}}
    if kind == "thumb":
        by_image = defaultdict(list)
        for c in sorted(refs, key=lambda c: int(c.key.rpartition("-ref")[2])):
            by_image[c.image.key].append(c.text)
        return {
            "references": dict(by_image),
            "candidates": {(c.image.key, c.system.name): c.text for c in cands},
            "scores": {(j.image.key, j.system.name, j.criterion): j.score for j in judgments},
        }
    pair_votes = defaultdict(lambda: [0, 0])
    for p in PairwiseJudgment.objects.filter(caption_b__image__dataset=ds).select_related("caption_b"):
        pair_votes[int(p.caption_b.key.split("-")[1])][0 if p.choice == PairwiseJudgment.C else 1] += 1
    return {"captions": {c.key: c.text for c in cands}, "votes": {k: tuple(v) for k, v in pair_votes.items()}}


def check_round_trip(kind: str, files: dict[str, bytes], ds: Dataset) -> None:
    want, have = expected(kind, files), stored(kind, ds)
    if kind == "flickr8k-crowdflower":  # the reduced reference lists: each a token-file caption of its image
        assert have["candidates"] == want["candidates"] and have["votes"] == want["votes"]
        assert all(want["tokens"].get(key) == text and key.rpartition("#")[0] == image
                   for (image, key), text in have["references"].items())
        assert {image for image, _ in have["references"]} == {image for image, _ in want["candidates"]}
    else:
        assert have == want


def run_import(kind: str, directory: Path, files: dict[str, bytes]):
    """Import through the command; check the contract; return the dataset or None (refused)."""
    name = fresh_name()
    before = table_counts()
    try:
        run_command("import_dataset", kind, str(directory), "--name", name)
    except CommandError as exc:
        message = str(exc)
        assert "\n" not in message
        assert any(str(directory / f) in message for f in files), message
        assert table_counts() == before
        outcome("refused")
        return None
    ds = Dataset.objects.get(name=name)
    check_round_trip(kind, files, ds)
    outcome("imported")
    return ds


# -------------------------------------------------------------------------------------------------
# Mutation strategies
# -------------------------------------------------------------------------------------------------
UNICODE_TEXT = unicode_text(min_size=1)
FIELD_VALUES = st.one_of(
    st.sampled_from([
        "", " ", "0", "1", "2", "4", "5", "-1", "1.0", "3.5", "1e309", "nan", "inf", "-0", "\u0661", "\u00b2",
        "\uff19", "1_0", "9" * 5000, "x.jpg#", "#1", "1000_268201.jpg#0", "1000_268201.jpg", "a" * 300 + "#1",
        "COCO_val2014_000000000974.jpg", "974", "0.333333333333333", "3\t3",
    ]),
    UNICODE_TEXT,
    st.text(max_size=12),
)
TEXT_OPS = ("truncate", "drop_line", "dup_line", "swap_lines", "drop_field", "dup_field", "swap_fields",
            "replace_field", "insert_bytes", "invalid_utf8", "nul", "bom", "crlf", "cr", "utf16", "utf16le",
            "latin1", "json_value", "json_drop_key")
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([10**30, -(10**30), 10**300, 2**63, 1.5, 974.0, "974", "0974", " 974 ", "COCO_val2014_000000000974.jpg",
                     "", "\u0000", "\ud83d", "x" * 6000, "1e5"]),
    UNICODE_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _pick(draw, n: int) -> int:
    return draw(st.integers(0, max(0, n - 1)))


def mutate_text(draw, data: bytes, op: str) -> bytes:
    """One mutation of a text file's bytes (see TEXT_OPS)."""
    lines = data.split(b"\n")
    if op == "truncate":
        return data[: _pick(draw, len(data) + 1)]
    if op in ("drop_line", "dup_line", "swap_lines"):
        i, j = _pick(draw, len(lines)), _pick(draw, len(lines))
        if op == "drop_line":
            del lines[i]
        elif op == "dup_line":
            lines.insert(j, lines[i])
        else:
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if op in ("drop_field", "dup_field", "swap_fields", "replace_field"):
        i = _pick(draw, len(lines))
        fields = lines[i].split(b"\t")
        k, m = _pick(draw, len(fields)), _pick(draw, len(fields))
        if op == "drop_field":
            del fields[k]
        elif op == "dup_field":
            fields.insert(m, fields[k])
        elif op == "swap_fields":
            fields[k], fields[m] = fields[m], fields[k]
        else:
            fields[k] = draw(FIELD_VALUES).encode("utf-8")
        lines[i] = b"\t".join(fields)
        return b"\n".join(lines)
    if op in ("json_value", "json_drop_key"):
        i = _pick(draw, len(lines))
        try:
            obj = json.loads(lines[i])
        except ValueError:
            return data
        if not isinstance(obj, dict) or not obj:
            return data
        key = draw(st.sampled_from(sorted(obj)))
        if op == "json_drop_key":
            del obj[key]
        else:
            obj[key] = draw(JSON_VALUES)
        lines[i] = json.dumps(obj, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
        return b"\n".join(lines)
    if op in ("insert_bytes", "invalid_utf8", "nul"):
        blob = {"insert_bytes": draw(st.binary(min_size=1, max_size=8)), "invalid_utf8": b"\xff",
                "nul": b"\x00"}[op]
        at = _pick(draw, len(data) + 1)
        return data[:at] + blob + data[at:]
    if op == "bom":
        return b"\xef\xbb\xbf" + data
    if op == "crlf":
        return data.replace(b"\n", b"\r\n")
    if op == "cr":
        return data.replace(b"\n", b"\r")
    text = data.decode("utf-8", "replace")
    if op == "latin1":  # a real Latin-1 copy needs a non-ASCII character to differ from ASCII
        text = text.replace(" a ", " \u00e0 ", 1).replace("a", "\u00e1", 1)
        return text.encode("latin-1", "replace")
    return text.encode("utf-16" if op == "utf16" else "utf-16-le")


@st.composite
def mutated_text_files(draw, kind: str):
    files = dict(FILES[kind])
    name = draw(st.sampled_from(sorted(files)))
    for op in draw(st.lists(st.sampled_from(TEXT_OPS), min_size=1, max_size=3)):
        files[name] = mutate_text(draw, files[name], op)
    return files


@st.composite
def mutated_mat_files(draw):
    files = dict(FILES["pascal50s"])
    name = draw(st.sampled_from(sorted(files)))
    data = bytearray(files[name])
    for op in draw(st.lists(st.sampled_from(["flip", "truncate", "insert", "zero"]), min_size=1, max_size=3)):
        at = _pick(draw, len(data))
        if op == "flip":
            data[at] = draw(st.integers(0, 255))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            data[at: at + draw(st.integers(1, 64))] = bytes(min(64, len(data) - at))
        if not data:
            break
    files[name] = bytes(data)
    return files


# -------------------------------------------------------------------------------------------------
# Tests: the real files as given, then mutated
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(FILES))
def test_unmutated_subsets_import_and_round_trip(kind, tmp_path):
    """The baseline of the fuzz tests: the small real inputs import and store what they say."""
    ds = run_import(kind, write_dir(tmp_path, FILES[kind]), FILES[kind])
    assert ds is not None and ds.candidates().exists()


@pytest.mark.parametrize("kind, examples", [("flickr8k-expert", 60), ("flickr8k-crowdflower", 40), ("thumb", 50)])
def test_mutated_text_files_import_exactly_or_fail_clearly(kind, examples, tmp_path):
    outcomes = Counter()

    @fuzz_settings(examples)
    @given(files=mutated_text_files(kind))
    def check(files):
        ds = run_import(kind, write_dir(tmp_path, files), files)
        outcomes["imported" if ds else "refused"] += 1

    check()
    print(kind, dict(outcomes))
    assert outcomes["refused"] > 0 and outcomes["imported"] > 0  # both the validation and the round trip ran


def test_mutated_mat_files_import_exactly_or_fail_clearly(tmp_path):
    outcomes = Counter()

    @fuzz_settings(40)
    @given(files=mutated_mat_files())
    def check(files):
        ds = run_import("pascal50s", write_dir(tmp_path, files), files)
        outcomes["imported" if ds else "refused"] += 1

    check()
    print("pascal50s", dict(outcomes))
    assert outcomes["refused"] > 0 and outcomes["imported"] > 0


def test_mat_header_declaring_a_huge_array_is_refused(tmp_path):
    """A corrupt header that declares a struct array of 2**31 x 2**31 elements (scipy.io.loadmat
    then fails to allocate it) is a format error naming the file, not a MemoryError."""
    files = dict(FILES["pascal50s"])
    dims = b"\x05\x00\x00\x00\x08\x00\x00\x00\x01\x00\x00\x00\x08\x00\x00\x00"  # int32 [1, 8]: new_input
    assert dims in files[PASCAL_PAIRS]
    files[PASCAL_PAIRS] = files[PASCAL_PAIRS].replace(dims, dims[:8] + b"\xff\xff\xff\x7f" * 2, 1)
    directory = write_dir(tmp_path, files)
    with pytest.raises(CommandError, match=rf"^{re.escape(str(directory / PASCAL_PAIRS))}: not a readable MATLAB \.mat file"):
        run_command("import_dataset", "pascal50s", str(directory), "--name", "huge")
    assert table_counts()["Dataset"] == 0


def test_mat_file_that_crashes_scipy_is_refused_and_the_importer_survives(tmp_path):
    """Found by the fuzz test: a truncated pascal50S.mat whose char element has type 179 makes
    scipy.io.loadmat (1.17) crash the process with a segmentation fault; the importer reads .mat
    files through a probe process and refuses the file instead."""
    files = dict(FILES["pascal50s"])
    data = bytearray(files[PASCAL_REFS])
    at = data.index(b"$\x00\x00\x00A small boy") - 4  # the miUTF8 (16) type tag of that sentence
    assert data[at] == 16
    data[at] = 0xB3
    files[PASCAL_REFS] = bytes(data[: at + 843])
    directory = write_dir(tmp_path, files)
    with pytest.raises(CommandError, match=rf"^{re.escape(str(directory / PASCAL_REFS))}: not a readable MATLAB \.mat file"):
        run_command("import_dataset", "pascal50s", str(directory), "--name", "crash")
    assert table_counts()["Dataset"] == 0


MAT_VALUES = st.one_of(
    st.integers(-5, 10).map(lambda v: np.array([[v]], dtype=np.int16)),
    st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=0, max_size=5).map(np.array),
    st.text(max_size=20).map(lambda t: np.array([t])),
    st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3).map(lambda ts: np.array([ts], dtype=object)),
    st.sampled_from(["name", "sent1", "image", "sent"]).map(
        lambda f: np.array([[(np.array(["2008_000001.jpg"]), np.array(["a cat"]))]], dtype=[(f, "O"), ("other", "O")])
    ),
)


@fuzz_settings(40)
@given(data=st.data())
def test_mat_files_with_wrong_variables_fail_clearly(data, tmp_path):
    """Variables replaced by numbers, strings, cells or structs of other shapes, or removed."""
    files = dict(FILES["pascal50s"])
    name = data.draw(st.sampled_from(sorted(files)))
    src = tmp_path / fresh_name("src")
    src.write_bytes(files[name])
    mat = {k: v for k, v in scipy.io.loadmat(str(src)).items() if not k.startswith("__")}
    variable = data.draw(st.sampled_from(sorted(mat) + ["extra"]))
    if data.draw(st.booleans()) and variable in mat:
        del mat[variable]
    else:
        mat[variable if variable != "extra" else "refs_"] = data.draw(MAT_VALUES)
    try:
        scipy.io.savemat(str(src), mat)
    except Exception:  # scipy cannot write every generated value; such inputs are not .mat files
        assume(False)
    files[name] = src.read_bytes()
    run_import("pascal50s", write_dir(tmp_path, files), files)


# -------------------------------------------------------------------------------------------------
# Encodings, byte-order marks, line ends: accepted exactly or refused naming the encoding
# -------------------------------------------------------------------------------------------------
def snapshot(kind: str, name: str) -> dict:
    return stored(kind, Dataset.objects.get(name=name))


@pytest.mark.parametrize("kind", ["flickr8k-expert", "flickr8k-crowdflower", "thumb"])
@pytest.mark.parametrize("change", ["bom", "crlf", "cr", "bom+crlf"])
def test_bom_and_crlf_are_accepted_and_store_the_same(kind, change, tmp_path):
    run_command("import_dataset", kind, str(write_dir(tmp_path, FILES[kind])), "--name", "plain")
    files = {}
    for name, data in FILES[kind].items():
        if "crlf" in change:
            data = data.replace(b"\n", b"\r\n")
        if change == "cr":
            data = data.replace(b"\n", b"\r")
        files[name] = (b"\xef\xbb\xbf" if "bom" in change else b"") + data
    run_command("import_dataset", kind, str(write_dir(tmp_path, files)), "--name", "changed")
    assert snapshot(kind, "changed") == snapshot(kind, "plain")


@pytest.mark.parametrize("kind", ["flickr8k-expert", "flickr8k-crowdflower", "thumb"])
@pytest.mark.parametrize("encoding, message", [
    ("utf-16", "is UTF-16 encoded (byte-order mark); save it as UTF-8"),
    ("utf-16-le", "looks UTF-16 encoded (a NUL byte next to every character); save it as UTF-8"),  # no BOM
    ("utf-32", "is UTF-32 encoded (byte-order mark); save it as UTF-8"),
    ("latin-1", "not valid UTF-8 text"),
])
def test_other_encodings_are_refused_naming_file_line_and_encoding(kind, encoding, message, tmp_path):
    files = dict(FILES[kind])
    name = JUDGMENTS if kind == "thumb" else TOKEN
    text = files[name].decode("utf-8")
    lines = text.split("\n")
    lines[2] = lines[2].replace("a", "\u00e0", 1)  # a non-ASCII character on line 3 (Latin-1: one byte 0xe0)
    files[name] = "\n".join(lines).encode(encoding)
    directory = write_dir(tmp_path, files)
    before = table_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", kind, str(directory), "--name", "enc")
    line = {"latin-1": 3, "utf-16-le": 1}.get(encoding, 1)
    assert f"{directory / name}:{line}: " in str(err.value) and message in str(err.value)
    assert table_counts() == before


def test_latin1_byte_is_reported_with_its_value(tmp_path):
    files = dict(FILES["flickr8k-expert"])
    files[TOKEN] = files[TOKEN].replace(b" dog ", b" d\xf6g ", 1)
    line = files[TOKEN][: files[TOKEN].index(b"\xf6")].count(b"\n") + 1
    directory = write_dir(tmp_path, files)
    with pytest.raises(CommandError, match=rf"{re.escape(str(directory / TOKEN))}:{line}: not valid UTF-8 text "
                                           r"\(invalid start byte: byte 0xf6\); save the file as UTF-8"):
        run_command("import_dataset", "flickr8k-expert", str(directory), "--name", "latin")


# -------------------------------------------------------------------------------------------------
# Huge, NUL and Unicode-heavy captions
# -------------------------------------------------------------------------------------------------
HUGE = {"1 MB": "a" * 1_000_000, "100k tokens": " ".join(["dog"] * 100_000), "limit + 1": "b" * (MAX_CAPTION_CHARS + 1)}


def first_candidate(files: dict[str, bytes]) -> tuple[str, int]:
    """Caption id of the first judged candidate of the Expert subset and its line in the token file."""
    cid = files[EXPERT].split(b"\n")[0].split(b"\t")[1].decode()
    lines = files[TOKEN].decode().split("\n")
    return cid, next(i for i, line in enumerate(lines, start=1) if line.startswith(cid + "\t"))


def with_caption(files: dict[str, bytes], cid: str, caption: str) -> dict[str, bytes]:
    lines = files[TOKEN].decode().split("\n")
    out = dict(files)
    out[TOKEN] = "\n".join(f"{cid}\t{caption}" if line.startswith(cid + "\t") else line for line in lines).encode("utf-8")
    return out


@pytest.mark.parametrize("size", sorted(HUGE))
def test_huge_captions_are_refused_in_every_importer(size, tmp_path):
    caption = HUGE[size]
    # Flickr8k token file
    cid, line = first_candidate(FILES["flickr8k-expert"])
    directory = write_dir(tmp_path, with_caption(FILES["flickr8k-expert"], cid, caption))
    before = table_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "flickr8k-expert", str(directory), "--name", "huge")
    assert f"{directory / TOKEN}:{line}: caption of {cid!r} is longer than 5,000 characters ({len(caption):,})" == str(err.value)
    # THumB hypothesis and reference
    for name, field in ((JUDGMENTS, "hyp"), (REFS, "refs")):
        files = dict(FILES["thumb"])
        lines = files[name].decode().split("\n")
        obj = json.loads(lines[1])
        obj[field] = caption if field == "hyp" else [caption] + obj[field][1:]
        lines[1] = json.dumps(obj)
        files[name] = "\n".join(lines).encode()
        directory = write_dir(tmp_path, files)
        with pytest.raises(CommandError, match=rf"{re.escape(str(directory / name))}:2: .*is longer than 5,000 characters"):
            run_command("import_dataset", "thumb", str(directory), "--name", "huge")
    # COCO results
    path = tmp_path / fresh_name("res")
    path.write_text(json.dumps([{"image_id": 1, "caption": "a dog"}, {"image_id": 2, "caption": caption}]))
    with pytest.raises(CommandError, match=rf"{re.escape(str(path))}: entry 1: caption is longer than 5,000 characters"):
        run_command("import_coco", "--name", "huge", "--results", f"sys={path}")
    assert table_counts() == before


def test_caption_of_exactly_the_limit_is_stored(tmp_path):
    cid, _ = first_candidate(FILES["flickr8k-expert"])
    caption = ("a man \U0001f600 " * 1000)[:MAX_CAPTION_CHARS - 1] + "x"
    files = with_caption(FILES["flickr8k-expert"], cid, caption)
    ds = run_import("flickr8k-expert", write_dir(tmp_path, files), files)
    assert ds.candidates().get(key=cid).text == caption and len(caption) == MAX_CAPTION_CHARS


def test_nul_in_captions_is_refused_naming_file_and_line(tmp_path):
    cid, line = first_candidate(FILES["flickr8k-expert"])
    directory = write_dir(tmp_path, with_caption(FILES["flickr8k-expert"], cid, "a dog\x00runs"))
    before = table_counts()
    with pytest.raises(CommandError, match=rf"^{re.escape(str(directory / TOKEN))}:{line}: contains a NUL character"):
        run_command("import_dataset", "flickr8k-expert", str(directory), "--name", "nul")
    path = tmp_path / "nul.json"
    path.write_text(json.dumps([{"image_id": 7, "caption": "a dog\u0000runs"}]))  # the JSON escape \u0000
    with pytest.raises(CommandError, match=rf"^{re.escape(str(path))}: entry 0: caption contains a NUL character"):
        run_command("import_coco", "--name", "nul", "--results", f"sys={path}")
    path.write_text('[{"image_id": 7, "caption": "a dog \\ud83d runs"}]')  # a lone surrogate
    with pytest.raises(CommandError, match=r"entry 0: caption contains a lone surrogate \(U\+D83D\)"):
        run_command("import_coco", "--name", "nul", "--results", f"sys={path}")
    assert table_counts() == before


def tokenize_and_score(captions: list[str], references: list[str]) -> None:
    """The metrics' tokeniser and two scorers on stored Unicode captions: one output per caption,
    aligned (the plain captions around them tokenise as when alone), finite scores."""
    plain = ["A dog runs on the grass .", "Two children play in the snow ."]
    tokens = ptb_tokenize([plain[0], *captions, plain[1]])
    assert len(tokens) == len(captions) + 2 and [tokens[0], tokens[-1]] == ptb_tokenize(plain)
    refs = ptb_tokenize(references)
    per_item = [[tokens[0]]] + [refs] * (len(tokens) - 1)  # the first candidate is its own reference
    scores = cider_d(tokens, per_item)
    assert scores.shape == (len(tokens),) and np.isfinite(scores).all() and scores[0] > 1
    assert np.isfinite(bleu(tokens, per_item)).all()


def test_tokenizer_keeps_one_output_per_caption_whatever_the_line_separators():
    """Found while fuzzing: the Java PTB tokeniser also ends lines at U+2028, U+2029, U+0085, VT,
    FF and U+001C-U+001E, which split a caption in two and shifted every later caption's tokens
    onto the wrong caption, silently. Each such caption now tokenises as with a space."""
    separators = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\r", "\r\n", "\n"]
    captions = [f"a dog{sep}runs fast" for sep in separators] + ["two cats sleep", "\U0001f600 a man \u200d rides"]
    assert ptb_tokenize(captions) == ["a dog runs fast"] * len(separators) + ["two cats sleep", "a man rides"]


@fuzz_settings(12)
@given(captions=st.lists(UNICODE_TEXT.filter(lambda t: t.strip()), min_size=3, max_size=3))
def test_unicode_captions_round_trip_exactly_and_tokenize(captions, tmp_path):
    """Emoji, combining marks, right-to-left text, zero-width joiners, astral characters and
    Unicode line separators are stored exactly (Flickr8k: stripped; COCO: whitespace collapsed), and
    the metrics' tokeniser and scorers cope with them."""
    files = dict(FILES["flickr8k-expert"])
    pairs = [line.decode().split("\t")[:2] for line in files[EXPERT].split(b"\n") if line]
    rows = list(dict.fromkeys(cid for image, cid in pairs if not cid.startswith(image + "#")))[:3]
    for cid, caption in zip(rows, captions):
        files = with_caption(files, cid, caption.replace("\n", " ").replace("\r", " ").replace("\t", " "))
    ds = run_import("flickr8k-expert", write_dir(tmp_path, files), files)
    texts = [ds.candidates().filter(key=cid).first().text for cid in rows]
    assert texts == [c.replace("\n", " ").replace("\r", " ").replace("\t", " ").strip() for c in captions]
    results = tmp_path / fresh_name("res")
    results.write_text(json.dumps([{"image_id": 5, "caption": c} for c in captions], ensure_ascii=False), encoding="utf-8")
    name = fresh_name()
    import_coco(name, results=[SystemFile("unicode", results)])
    coco = Caption.objects.filter(image__dataset__name=name).order_by("key")
    assert [c.text for c in coco] == [" ".join(c.split()) for c in captions]
    refs = [c.text for c in ds.references()[:4]]
    tokenize_and_score(texts + [c.text for c in coco], refs)


# -------------------------------------------------------------------------------------------------
# COCO-format files: JSON trees of the wrong shape
# -------------------------------------------------------------------------------------------------
with tempfile.TemporaryDirectory() as _tmp:
    COCO_FILES = {p.name: json.loads(p.read_text()) for p in write_coco_files(Path(_tmp)).glob("*.json")}


def small_coco(name: str, n: int) -> object:
    data = COCO_FILES[name]
    if isinstance(data, dict):
        keep = {img["id"] for img in data["images"][:n]}
        return {"images": data["images"][:n], "annotations": [a for a in data["annotations"] if a["image_id"] in keep]}
    return data[: n * 4]


COCO_INPUTS = {"captions.json": small_coco("captions.json", 4), "thumb_models.json": small_coco("thumb_models.json", 4),
               "merge.json": small_coco("merge.json", 1)}


def json_paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from json_paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from json_paths(v, prefix + (i,))


@st.composite
def mutated_json(draw, obj):
    obj = json.loads(json.dumps(obj))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(json_paths(obj))
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "delete", "wrap", "to_dict", "to_list"]))
        if not path:
            obj = draw(JSON_VALUES) if op == "replace" else [obj] if op == "wrap" else obj
            continue
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        value = parent[key]
        if op == "delete":
            del parent[key]
        elif op == "replace":
            parent[key] = draw(JSON_VALUES)
        elif op == "wrap":
            parent[key] = [value]
        elif op == "to_dict" and isinstance(value, list):
            parent[key] = {str(i): v for i, v in enumerate(value)}
        elif op == "to_list" and isinstance(value, dict):
            parent[key] = list(value.values())
    return obj


def expected_coco(annotations, results) -> tuple[dict, dict]:
    refs = {}
    counts = Counter()
    for ann in annotations["annotations"]:
        key = coco_key(ann["image_id"])
        ann_id = str(ann["id"]) if "id" in ann else f"{key}-{counts[key]}"
        counts[key] += 1
        refs[(key, ann_id)] = norm(ann["caption"])
    sets = defaultdict(list)
    for entry in results:
        caps = entry["captions"] if "captions" in entry else [entry["caption"]]
        sets[coco_key(entry["image_id"])] += [norm(c) for c in caps]
    return refs, {(k, f"{j:03d}"): c for k, caps in sets.items() for j, c in enumerate(caps)}


@fuzz_settings(60)
@given(data=st.data())
def test_mutated_coco_json_imports_exactly_or_fails_clearly(data, tmp_path):
    results_name = data.draw(st.sampled_from(["thumb_models.json", "merge.json"]))
    ann = data.draw(mutated_json(COCO_INPUTS["captions.json"])) if data.draw(st.booleans()) else COCO_INPUTS["captions.json"]
    res = data.draw(mutated_json(COCO_INPUTS[results_name]))
    d = tmp_path / fresh_name("coco")
    d.mkdir()
    ann_path, res_path = d / "captions.json", d / results_name
    ann_path.write_text(json.dumps(ann, ensure_ascii=data.draw(st.booleans())), encoding="utf-8", errors="surrogatepass")
    res_path.write_text(json.dumps(res), encoding="utf-8")
    name = fresh_name()
    before = table_counts()
    try:
        run_command("import_coco", "--name", name, "--annotations", str(ann_path), "--results", f"model={res_path}")
    except CommandError as exc:
        assert str(ann_path) in str(exc) or str(res_path) in str(exc), str(exc)
        assert table_counts() == before
        event("refused")
        return
    refs, cands = expected_coco(ann, res)
    ds = Dataset.objects.get(name=name)
    assert {(c.image.key, c.key): c.text for c in ds.references().select_related("image")} == refs
    assert {(c.image.key, c.key): c.text for c in Caption.objects.filter(system__dataset=ds, system__name="model")
            .select_related("image")} == cands


@fuzz_settings(40)
@given(data=st.data())
def test_mutated_coco_bytes_fail_clearly(data, tmp_path):
    """Byte-level damage (truncation, random and invalid bytes, NUL, other encodings) of a results file."""
    files = {"merge.json": json.dumps(COCO_INPUTS["merge.json"]).encode()}
    for op in data.draw(st.lists(st.sampled_from(["truncate", "insert_bytes", "invalid_utf8", "nul", "bom", "crlf",
                                                  "utf16", "utf16le", "latin1"]), min_size=1, max_size=2)):
        files["merge.json"] = mutate_text(data.draw, files["merge.json"], op)
    path = tmp_path / fresh_name("merge")
    path.write_bytes(files["merge.json"])
    before = table_counts()
    try:
        sets = read_coco_results(path)
    except DatasetFormatError as exc:
        assert str(exc).startswith(str(path))
        assert table_counts() == before
        event("refused")
        return
    text = files["merge.json"].decode("utf-8").lstrip("\ufeff")
    assert sets == {coco_key(e["image_id"]): [norm(c) for c in e["captions"]] for e in json.loads(text)}


LABEL_ROWS = st.lists(
    st.tuples(
        st.one_of(st.integers(0, 5), st.sampled_from(["3", "COCO_val2014_000000000004.jpg", "x", "", "-1", "1.5"])),
        st.one_of(st.sampled_from(["dog", "Tennis  Racket", "person", " cat ", "", "a" * 101, "\u00e9l\u00e8ve"]),
                  UNICODE_TEXT),
        st.one_of(st.integers(-1, 3), st.sampled_from([2**31 - 1, 2**31, 10**30, "2", "", "x", 1.0, None])),
    ),
    min_size=1, max_size=6,
)


@fuzz_settings(50)
@given(rows=LABEL_ROWS, form=st.sampled_from(["csv", "json-list", "json-dict"]))
def test_object_labels_store_exactly_or_fail_clearly(rows, form, tmp_path):
    """Object label files (CSV, JSON list, JSON {image: {label: count}}) with odd ids, labels and counts."""
    base = tmp_path / fresh_name("base")
    base.write_text(json.dumps([{"image_id": i, "caption": "a thing"} for i in range(6)] + [{"image_id": "x", "caption": "b"}]))
    name = fresh_name()
    import_coco(name, results=[SystemFile("m", base)])
    path = tmp_path / fresh_name("objects")
    if form == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(["image_id", "label", "count"])
        writer.writerows([[i, label, "" if c is None else c] for i, label, c in rows])
        path.write_text(buf.getvalue(), encoding="utf-8")
    elif form == "json-list":
        path.write_text(json.dumps([{"image_id": i, "label": label, **({} if c is None else {"count": c})}
                                    for i, label, c in rows]))
    else:
        grouped = defaultdict(dict)
        for i, label, c in rows:
            grouped[str(i)][label] = c
        path.write_text(json.dumps(grouped))
    before = table_counts()
    try:
        import_coco(name, objects=path)
    except DatasetFormatError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        assert table_counts() == before
        event("refused")
        return
    # accepted: the counts per (image, normalised label) are what the file says
    want = Counter()
    if form == "json-dict":
        rows = [(i, label, c) for i, labels in grouped.items() for label, c in labels.items()]
    for i, label, c in rows:
        count = 1 if c in (None, "") else int(c)
        want[(coco_key(i), " ".join(label.lower().split()))] += count
    have = {(o.image.key, o.label): o.count for o in ObjectLabel.objects.filter(image__dataset__name=name).select_related("image")}
    known = set(Image.objects.filter(dataset__name=name).values_list("key", flat=True))
    assert have == {k: v for k, v in want.items() if k[0] in known}


@fuzz_settings(30)
@given(files=st.data())
def test_mutated_pope_file_fails_clearly_or_stores_its_yes_objects(files, tmp_path):
    lines = POPE.read_bytes().split(b"\n")[:30]
    data = b"\n".join(lines)
    for op in files.draw(st.lists(st.sampled_from(TEXT_OPS), min_size=1, max_size=2)):
        data = mutate_text(files.draw, data, op)
    path = tmp_path / fresh_name("pope")
    path.write_bytes(data)
    results = tmp_path / fresh_name("res")
    results.write_text(json.dumps([{"image_id": 310196, "caption": "a snowboarder"}]))
    name = fresh_name()
    import_coco(name, results=[SystemFile("m", results)])
    before = table_counts()
    try:
        import_coco(name, objects=path)
    except DatasetFormatError as exc:
        assert str(exc).startswith(str(path))
        assert table_counts() == before
        event("refused")
        return
    text = " ".join(data.decode("utf-8").lstrip("\ufeff").lower().split())
    for label in ObjectLabel.objects.filter(image__dataset__name=name).values_list("label", flat=True):
        assert f"is there a {label} in the image" in text or f"is there an {label} in the image" in text


# -------------------------------------------------------------------------------------------------
# Commands given hostile arguments and files
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["import_dataset", "flickr8k-expert", "{dir}", "--name", "x" * 101], "invalid --name"),
    (["import_dataset", "flickr8k-expert", "{dir}", "--name", "bad\x00name"], "invalid --name"),
    (["import_coco", "--name", "x" * 101, "--results", "m={dir}/r.json"], "invalid --name"),
    (["import_coco", "--name", "ok", "--results", "m={dir}/r.json", "--references-name", "r" * 101], "invalid references name"),
    (["import_coco", "--name", "ok", "--results", "m={dir}/missing.json"], "missing.json: file not found"),
])
def test_import_commands_refuse_bad_arguments(args, message, tmp_path):
    d = write_dir(tmp_path, FILES["flickr8k-expert"])
    (d / "r.json").write_text(json.dumps([{"image_id": 1, "caption": "a dog"}]))
    with pytest.raises(CommandError, match=re.escape(message)):
        run_command(*[a.replace("{dir}", str(d)) for a in args])
    assert table_counts()["Dataset"] == 0


@pytest.fixture
def small_dataset(tmp_path):
    files = FILES["flickr8k-expert"]
    run_command("import_dataset", "flickr8k-expert", str(write_dir(tmp_path, files)), "--name", "small")
    return Dataset.objects.get(name="small")


ATOMS = b"word,category,count\ndog,entity,120\nrunning,action,40\nred,attribute,\n"


CSV_OPS = ["truncate", "drop_line", "dup_line", "swap_lines", "insert_bytes", "invalid_utf8", "nul", "bom", "crlf",
           "cr", "utf16", "latin1", "csv_field"]


def mutate_csv(draw, blob: bytes, ops: list[str], max_ops: int) -> bytes:
    """Apply 1..max_ops mutations drawn from ``ops`` to a CSV file: the text mutations of
    mutate_text, or ``csv_field`` (one cell replaced by an odd value)."""
    for op in draw(st.lists(st.sampled_from(ops), min_size=1, max_size=max_ops)):
        if op == "csv_field":
            lines = blob.split(b"\n")
            i = _pick(draw, len(lines))
            cells = lines[i].split(b",")
            cells[_pick(draw, len(cells))] = draw(FIELD_VALUES).replace("\n", " ").encode("utf-8")
            lines[i] = b",".join(cells)
            blob = b"\n".join(lines)
        else:
            blob = mutate_text(draw, blob, op)
    return blob


@fuzz_settings(40)
@given(data=st.data())
def test_create_campaign_atoms_file_creates_exactly_or_fails_clearly(data, small_dataset, tmp_path):
    """create_campaign visual_atom --atoms FILE with mutated CSV files."""
    blob = ATOMS
    blob = mutate_csv(data.draw, blob, CSV_OPS, max_ops=3)
    path = tmp_path / fresh_name("atoms")
    path.write_bytes(blob)
    name = fresh_name("atoms-")
    before = table_counts()
    try:
        run_command("create_campaign", "visual_atom", "--dataset", "small", "--name", name, "--atoms", str(path))
    except CommandError as exc:
        assert "\n" not in str(exc)
        assert table_counts() == before
        event("refused")
        return
    text = blob.decode("utf-8").lstrip("\ufeff")
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if rows and rows[0][0].strip().lower() == "word":
        rows = rows[1:]
    campaign = Campaign.objects.get(name=name)
    atoms = {(i.payload["word"], i.payload["category"]): i.payload["count"] for i in campaign.items.filter(is_gold=False)}
    assert atoms == {(r[0].strip().lower(), r[1].strip().lower()): int(r[2]) if len(r) > 2 and r[2].strip() else None
                     for r in rows}


@pytest.mark.parametrize("extra, message", [
    (["--name", "x" * 101], "invalid --name"),
    (["--name", "a/b"], "invalid --name"),
    (["--title", "t" * 201], "--title must have at most 200 characters"),
    (["--k", "40000"], "--k must be between 1 and 32,767"),
    (["--cap", str(2**31)], "--cap must be between 1 and 2,147,483,647"),
    (["--minutes", "nan"], "--minutes must be between"),
    (["--minutes", "1e12"], "--minutes must be between"),
    (["--lifetime-days", "inf"], "--lifetime-days must be between"),
    (["--lifetime-days", "1e9"], "--lifetime-days must be between"),
    (["--reward", "100000"], "--reward must be an amount of dollars"),
    (["--reward", "NaN"], "--reward must be an amount of dollars"),
    (["--gold-every", "-1"], "--gold-every must be between 0 and 32,767"),
    (["--image-url", "https://x/{0}"], "may only use the placeholder {key}"),
    (["--image-url", "https://x/{key"], "the image URL template is not valid"),
])
def test_create_campaign_refuses_values_the_tables_cannot_hold(extra, message, small_dataset):
    args = ["create_campaign", "rating", "--dataset", "small", "--name", "ok", *extra]
    if "--name" in extra:
        del args[4:6]
    before = table_counts()
    with pytest.raises(CommandError, match=re.escape(message)):
        run_command(*args)
    assert table_counts() == before


def scores_csv(ds: Dataset) -> bytes:
    rows = ds.candidates().select_related("image").order_by("pk")
    return ("image,caption,score\n" + "".join(f"{c.image.key},{c.key},{len(c.text) / 100}\n" for c in rows)).encode()


@fuzz_settings(40)
@given(data=st.data())
def test_upload_scores_command_stores_exactly_or_fails_clearly(data, small_dataset, tmp_path):
    """upload_scores --file with mutated CSV files: stored scores equal the file's, or CommandError."""
    blob = scores_csv(small_dataset)
    blob = mutate_csv(data.draw, blob, [op for op in CSV_OPS if op != "cr"], max_ops=2)
    path = tmp_path / fresh_name("scores")
    path.write_bytes(blob)
    before = table_counts()
    try:
        run_command("upload_scores", "--dataset", "small", "--name", "Fuzz Metric", "--file", str(path))
    except CommandError as exc:
        assert "\n" not in str(exc)
        assert table_counts() == before
        event("refused")
        return
    text = blob.decode("utf-8").lstrip("\ufeff")
    rows = [r for r in csv.reader(io.StringIO(text, newline="")) if r and any(c.strip() for c in r)][1:]
    ids = {(c.image.key, c.key): c.pk for c in small_dataset.candidates().select_related("image")}
    run = MetricRun.objects.get(dataset=small_dataset, metric="user_fuzz_metric")
    assert dict(MetricScore.objects.filter(run=run).values_list("caption_id", "value")) == {
        ids[(r[0].strip(), r[1].strip())]: float(r[2]) for r in rows}
