"""The learned metrics through the library and the command line: ``captioneval.evaluate(...,
images=DIR, options=...)`` and ``captioneval evaluate --images DIR --model KEY=SPEC``, on the tiny
seeded CLIP of tests/learned_models.py (its real on-disk formats, loaded by the real loading code) and
eight small JPEG/PNG pictures generated from a fixed seed (no picture is bundled with the repository).

The scores are those the unmodified reference code produced on the same model and pictures
(tests/data/learned_goldens_clip.json, within 1e-6 as in test_learned_clip.py), whatever way the
pictures are given (a folder with the COCO ``file_name``s, a folder of files named by image id, a
list). A missing or unreadable picture is one error naming each caption and file."""
from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests import learned_models as lm

GOLDEN = json.loads((Path(__file__).parent / "data/learned_goldens_clip.json").read_text("utf-8"))
TOL = 1e-6


pytestmark = pytest.mark.usefixtures("learned_offline")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny-clip-library")
    return {"weights": lm.write_tiny_clip(root), "images": lm.write_tiny_images(root / "images"), "root": root}


def coco_files(tiny, folder: Path) -> tuple[Path, Path]:
    """A COCO annotation file and a results file of the golden rows: one image id per row (1..12),
    ``file_name`` the generated picture of the row, its references as the annotations."""
    rows = GOLDEN["rows"]
    images = [{"id": i + 1, "file_name": tiny["images"][r["image"]].name} for i, r in enumerate(rows)]
    anns = [{"id": 100 * (i + 1) + k, "image_id": i + 1, "caption": ref}
            for i, r in enumerate(rows) for k, ref in enumerate(r["references"])]
    ann = folder / "captions.json"
    ann.write_text(json.dumps({"images": images, "annotations": anns}), "utf-8")
    res = folder / "results.json"
    res.write_text(json.dumps([{"image_id": i + 1, "caption": r["candidate"]} for i, r in enumerate(rows)]), "utf-8")
    return ann, res


def cli(argv: list[str]) -> tuple[int, str, str]:
    from captioneval.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_evaluate_with_images_equals_the_reference_code(tiny):
    import captioneval

    rows = GOLDEN["rows"]
    ids = [f"row-{i}" for i in range(len(rows))]
    options = {"clip_s": {"model": str(tiny["weights"]["openai"]), "device": "cpu"},
               "ref_clip_s": {"model": str(tiny["weights"]["openai"]), "device": "cpu"},
               "pac_s": {"model": str(tiny["weights"]["pac"]), "device": "cpu"},
               "ref_pac_s": {"model": str(tiny["weights"]["pac"]), "device": "cpu"}}
    result = captioneval.evaluate([r["candidate"] for r in rows], [r["references"] for r in rows],
                                  metrics=["clip_s", "ref_clip_s", "pac_s", "ref_pac_s", "bleu_4"], ids=ids,
                                  images=[tiny["images"][r["image"]] for r in rows], options=options)
    assert result.metrics == ["clip_s", "ref_clip_s", "pac_s", "ref_pac_s", "bleu_4"]
    for key in ("clip_s", "ref_clip_s", "pac_s", "ref_pac_s"):
        got, expected = result.scores[key], np.asarray(GOLDEN[key])
        assert got.shape == (12,) and np.max(np.abs(got - expected)) <= TOL, key
        assert result.corpus[key] == pytest.approx(float(np.mean(got)), abs=1e-12)
        assert result.signatures[key]["device"] == "cpu" and result.signatures[key]["weights_sha256"]
    assert result.names["ref_pac_s"] == "RefPAC-S"
    assert result.to_dict()["captions"][0]["id"] == "row-0"


def test_images_given_as_a_folder_by_file_name_or_by_id(tiny, tmp_path):
    import captioneval
    from captioneval.evaluate import image_sources

    rows = GOLDEN["rows"]
    model = {"clip_s": {"model": str(tiny["weights"]["openai"]), "device": "cpu"}}
    # a folder of files named by image id (1.png, 2.jpg, ...), found without file names
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    for i, r in enumerate(rows):
        src = tiny["images"][r["image"]]
        shutil.copy(src, by_id / f"{i + 1}{src.suffix}")
    candidates = {i + 1: r["candidate"] for i, r in enumerate(rows)}
    references = {i + 1: r["references"] for i, r in enumerate(rows)}
    got = captioneval.evaluate(candidates, references, metrics=["clip_s"], images=by_id, options=model)
    assert np.max(np.abs(got.scores["clip_s"] - np.asarray(GOLDEN["clip_s"]))) <= TOL
    assert image_sources(by_id, [1, 2])[1] == str(by_id / f"2{tiny['images'][rows[1]['image']].suffix}")
    # the same folder under the generated names, found through image_files (COCO's file_name)
    named = {i + 1: tiny["images"][r["image"]].name for i, r in enumerate(rows)}
    again = captioneval.evaluate(candidates, references, metrics=["clip_s"], images=tiny["images"][0].parent,
                                 image_files=named, options=model)
    assert np.array_equal(again.scores["clip_s"], got.scores["clip_s"])


def test_cli_evaluate_images(tiny, tmp_path):
    ann, res = coco_files(tiny, tmp_path)
    out = tmp_path / "scores.json"
    code, stdout, stderr = cli(["evaluate", "--annotations", str(ann), "--results", str(res), "--metric", "clip_s",
                                "ref_pac_s", "--images", str(tiny["images"][0].parent),
                                "--model", f"clip_s={tiny['weights']['openai']}",
                                "--model", f"ref_pac_s={tiny['weights']['pac']}", "--device", "cpu",
                                "--out", str(out)])
    assert code == 0, stderr
    data = json.loads(out.read_text("utf-8"))
    assert set(data["corpus"]) == {"clip_s", "ref_pac_s"}
    assert data["corpus"]["clip_s"]["name"] == "CLIP-S"
    assert "weights_sha256:" in data["corpus"]["clip_s"]["signature_string"]
    for key in ("clip_s", "ref_pac_s"):
        got = np.asarray([row[key] for row in data["captions"]])
        assert np.max(np.abs(got - np.asarray(GOLDEN[key]))) <= TOL
    assert [row["image_id"] for row in data["captions"]] == list(range(1, 13))


def test_a_missing_or_unreadable_image_is_one_error_naming_each(tiny, tmp_path):
    import captioneval
    from captioneval.errors import InputError

    folder = tmp_path / "pictures"
    folder.mkdir()
    shutil.copy(tiny["images"][0], folder / "1.png")
    (folder / "2.jpg").write_text("not a picture")
    model = {"clip_s": {"model": str(tiny["weights"]["openai"]), "device": "cpu"}}
    with pytest.raises(InputError) as err:
        captioneval.evaluate({1: "a dog", 2: "a cat", 3: "a bird"}, {1: ["x"], 2: ["y"], 3: ["z"]},
                             metrics=["clip_s"], images=folder, options=model)
    message = str(err.value)
    assert message.startswith("images: 2 image(s) cannot be scored by CLIP-S")
    assert f"caption 2: {folder / '2.jpg'}: not a readable image" in message
    assert f"caption 3: {folder / '3.jpg'}: file not found" in message and "caption 1:" not in message
    # the command line says the same on one line, exit code 2
    ann, res = coco_files(tiny, tmp_path)
    code, _, stderr = cli(["evaluate", "--annotations", str(ann), "--results", str(res), "--metric", "clip_s",
                           "--images", str(folder), "--model", f"clip_s={tiny['weights']['openai']}"])
    assert code == 2 and len(stderr.strip().splitlines()) == 1
    assert stderr.startswith("captioneval: error: images: 12 image(s) cannot be scored by CLIP-S")


def test_learned_metric_usage_errors(tiny, tmp_path):
    import captioneval
    from captioneval.errors import MetricError

    with pytest.raises(MetricError, match="clip_s needs the image of each caption: pass images=FOLDER"):
        captioneval.evaluate(["a dog"], [["a dog runs"]], metrics=["clip_s"])
    with pytest.raises(MetricError, match="options given for pac_s, which is not among the metrics asked for"):
        captioneval.evaluate(["a dog"], [["a dog runs"]], metrics=["bleu_1"], options={"pac_s": {"model": "x"}})
    with pytest.raises(MetricError, match="CLIP-S: ClipS has no metric attribute 'colour'"):
        captioneval.evaluate(["a dog"], [["a dog runs"]], metrics=["clip_s"], images=[tiny["images"][0]],
                             options={"clip_s": {"colour": "red"}})
    ann, res = coco_files(tiny, tmp_path)
    code, _, stderr = cli(["evaluate", "--annotations", str(ann), "--results", str(res), "--metric", "clip_s",
                           "--images", str(tmp_path), "--model", "clip_s"])
    assert code == 2 and "--model: expected KEY=SPEC" in stderr
    # weights that are absent: one line saying which file to put where, exit code 2
    code, _, stderr = cli(["evaluate", "--annotations", str(ann), "--results", str(res), "--metric", "clip_s",
                           "--images", str(tiny["images"][0].parent), "--model", f"clip_s={tmp_path / 'none.pt'}"])
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and "none.pt" in stderr


def test_speed_benchmark_script(tmp_path):
    """benchmarks/learned_metrics_speed.py on a tiny model (--small; the real ViT-B/32 size is for hand
    runs): the reference way and ours give the same CLIP-S, and a new system encodes no picture."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "speed.json"
    proc = subprocess.run([sys.executable, str(root / "benchmarks/learned_metrics_speed.py"), "--small", "--images", "3",
                           "--captions-per-image", "2", "--json", str(out)], capture_output=True, text=True, cwd=root,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(out.read_text("utf-8"))
    assert summary["rows"] == 6 and summary["images"] == 3 and summary["model"] == "small"
    assert summary["images_encoded_new_system"] == 0 and summary["max_abs_diff"] <= 1e-6
    assert summary["reference_s"] > 0 and summary["ours_s"] > 0 and summary["new_system_s"] > 0
    assert f"ratio (reference / ours): {summary['ratio']:.1f}x" in proc.stdout
