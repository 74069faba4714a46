"""The importer base (crowd/importers/base.py): the registry, an importer written in one class (the
worked example of docs/architecture.md), and the rules every importer gets from the base:
validate everything before writing, write in one transaction, idempotent re-import, a taken name
refused, errors that name file and line. The toy format is built from the real Flickr8k-Expert rows."""
import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from django.core.management.base import CommandError
from django.db import DatabaseError

import crowd.importers
from crowd.importers import IMPORTER_OPTIONS, IMPORTERS, DatasetExistsError, DatasetFormatError
from crowd.importers.base import (
    REGISTRY,
    CaptionSpec,
    Importer,
    JudgmentSpec,
    ParsedDataset,
    SystemSpec,
    check_text,
    read_lines,
)
from crowd.models import Caption, Dataset, HumanJudgment, Image, ObjectLabel, PairwiseJudgment, System

from .conftest import FLICKR8K, run_command

pytestmark = pytest.mark.django_db

IMPORTERS_DIR = Path(crowd.importers.__file__).parent


def table_counts():
    return tuple(m.objects.count() for m in (Dataset, Image, System, Caption, HumanJudgment, PairwiseJudgment, ObjectLabel))


def write_ratings(directory: Path, n_lines: int = 30) -> Path:
    """``ratings.tsv``: image TAB caption TAB rating, from the first ``n_lines`` Flickr8k-Expert
    pairs (the candidate's text from the token file, the first expert's rating)."""
    texts = dict(line.split("\t", 1) for line in (FLICKR8K / "Flickr8k.token.txt").read_text().splitlines())
    rows = [line.split("\t") for line in (FLICKR8K / "ExpertAnnotations.txt").read_text().splitlines()[:n_lines]]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ratings.tsv").write_text("".join(f"{i}\t{texts[c].strip()}\t{r1}\n" for i, c, r1, _, _ in rows))
    return directory


@pytest.fixture
def toy_format():
    """Register the worked example's importer for one test: one class, ``parse`` only."""

    class TsvRatingsImporter(Importer):
        """``ratings.tsv``: image TAB caption TAB rating (1-4), one rated caption a line."""

        format = "tsv-ratings"
        files = ("ratings.tsv",)
        counts = {"images": "images", "captions": "candidates", "ratings": "judgments"}

        def parse(self, paths, **options):
            path = paths["ratings.tsv"]
            images, captions, judgments = [], [], []
            for lineno, line in enumerate(read_lines(path), start=1):
                fields = line.split("\t")
                if len(fields) != 3 or fields[2] not in {"1", "2", "3", "4"}:
                    raise DatasetFormatError(path, "expected image TAB caption TAB rating 1-4", lineno)
                image, text, rating = fields
                key = f"line-{lineno}"
                images += [image] if image not in images else []
                captions.append(CaptionSpec(image, "model", key, check_text(text, path, "caption", lineno)))
                judgments.append(JudgmentSpec(image, "model", key, "quality", "rater_1", float(rating), "tsv"))
            return ParsedDataset(
                source=path, images=images, systems=[SystemSpec("model", System.MODEL)], captions=captions,
                judgments=judgments, criterion="quality", scale_min=1, scale_max=4,
                protocol={"task": "rating", "rows": "rating", "headline": "kendall_tau_c", "criteria": ["quality"]},
            )

    assert IMPORTERS["tsv-ratings"].__class__ is TsvRatingsImporter  # registered by defining the class
    yield TsvRatingsImporter
    REGISTRY.pop("tsv-ratings")


def test_registry_holds_every_importer_module_and_its_options():
    found = {}
    for module in pkgutil.iter_modules([str(IMPORTERS_DIR)]):
        mod = importlib.import_module(f"crowd.importers.{module.name}")
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if issubclass(cls, Importer) and cls.__module__ == mod.__name__ and cls.format:
                found[cls.format] = cls
    assert set(found) == {"flickr8k-expert", "flickr8k-crowdflower", "judgments", "pascal50s", "thumb"}
    assert {fmt: type(imp) for fmt, imp in IMPORTERS.items()} == found
    assert IMPORTER_OPTIONS == {"pascal50s": ("references", "seed")}
    assert "coco" not in IMPORTERS  # COCO extends datasets through its own command
    with pytest.raises(ValueError, match="two importers for format 'thumb'"):
        type("AnotherThumb", (Importer,), {"format": "thumb"})


def test_an_importer_in_one_class_is_found_by_the_command(toy_format, tmp_path):
    directory = write_ratings(tmp_path / "toy")
    out = run_command("import_dataset", "tsv-ratings", str(directory), "--name", "toy")
    assert out.strip() == "dataset 'toy' imported 5 images, 30 captions, 30 ratings"
    ds = Dataset.objects.get(name="toy")
    assert ds.kind == "tsv-ratings" and ds.protocol["headline"] == "kendall_tau_c" and ds.reference_system is None
    lines = (directory / "ratings.tsv").read_text().splitlines()
    assert len({line.split("\t")[0] for line in lines}) == 5  # the first 30 expert pairs judge 5 images
    stored = HumanJudgment.objects.filter(image__dataset=ds).order_by("id")
    assert [(j.image.key, j.caption.text, j.score) for j in stored] == [
        (i, t, float(r)) for i, t, r in (line.split("\t") for line in lines)
    ]
    # The same file under the same name: nothing changes.
    before = table_counts()
    out = run_command("import_dataset", "tsv-ratings", str(directory), "--name", "toy")
    assert "already imported (identical files), nothing changed: 5 images, 30 captions, 30 ratings" in out
    assert table_counts() == before
    # Other data under the taken name: refused, nothing changes; under a new name: imported.
    write_ratings(directory, 20)
    with pytest.raises(CommandError, match="dataset 'toy' already exists with different data"):
        run_command("import_dataset", "tsv-ratings", str(directory), "--name", "toy")
    with pytest.raises(DatasetExistsError):
        IMPORTERS["tsv-ratings"](directory, "toy")
    assert table_counts() == before
    run_command("import_dataset", "tsv-ratings", str(directory), "--name", "toy-20")
    assert Dataset.objects.get(name="toy-20").candidates().count() == 20
    # A format's name taken by another importer's data is refused too.
    with pytest.raises(CommandError, match="dataset 'toy' already exists with different data"):
        run_command("import_dataset", "flickr8k-expert", str(FLICKR8K), "--name", "toy")


def test_errors_name_file_and_line_and_write_nothing(toy_format, tmp_path):
    directory = write_ratings(tmp_path / "toy")
    path = directory / "ratings.tsv"
    lines = path.read_text().splitlines()
    lines[6] = lines[6].rsplit("\t", 1)[0] + "\t7"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "tsv-ratings", str(directory), "--name", "bad")
    assert str(err.value) == f"{path}:7: expected image TAB caption TAB rating 1-4"
    with pytest.raises(CommandError, match="directory not found"):
        run_command("import_dataset", "tsv-ratings", str(tmp_path / "nope"), "--name", "bad")
    path.unlink()
    with pytest.raises(CommandError, match="ratings.tsv: file not found"):
        run_command("import_dataset", "tsv-ratings", str(directory), "--name", "bad")
    assert table_counts() == (0,) * 7


def _parsed(tmp_path, **changes) -> ParsedDataset:
    parsed = IMPORTERS["tsv-ratings"].parse({"ratings.tsv": write_ratings(tmp_path / "toy") / "ratings.tsv"})
    parsed.fingerprint = "0" * 64
    for name, value in changes.items():
        setattr(parsed, name, value)
    return parsed


def test_the_whole_parse_is_validated_before_the_first_row(toy_format, tmp_path):
    importer = IMPORTERS["tsv-ratings"]
    good = _parsed(tmp_path)
    cases = {
        "a judgment names an unknown caption": _parsed(
            tmp_path, judgments=[*good.judgments, JudgmentSpec(good.images[0], "model", "line-99", "quality", "r", 1.0)]
        ),
        "names an unknown image": _parsed(tmp_path, captions=[*good.captions, CaptionSpec("nope.jpg", "model", "k", "t")]),
        "is listed twice": _parsed(tmp_path, captions=[*good.captions, good.captions[0]]),
        "reference system 'refs' is not among the systems": _parsed(tmp_path, reference_system="refs"),
        "longer than 255 characters": _parsed(tmp_path, images=[*good.images, "x" * 256]),
    }
    for message, parsed in cases.items():
        with pytest.raises(DatasetFormatError, match=message) as err:
            importer.save("v", parsed)
        assert str(err.value).startswith(str(good.source))
    assert table_counts() == (0,) * 7
    assert importer.save("v", good).created and table_counts()[:5] == (1, 5, 1, 30, 30)


def test_check_limits_is_the_place_for_size_caps(toy_format, tmp_path):
    class Capped(toy_format):
        format = None

        def check_limits(self, parsed):
            if len(parsed.captions) > 25:
                raise DatasetFormatError(parsed.source, "more than 25 captions")

    with pytest.raises(DatasetFormatError, match="ratings.tsv: more than 25 captions"):
        Capped()(write_ratings(tmp_path / "toy"), "capped")
    assert table_counts() == (0,) * 7


def test_a_failure_while_writing_leaves_the_database_unchanged(toy_format, tmp_path):
    """The judgments are written last: a database error there rolls back the dataset, images and
    captions written before it in the same transaction."""
    good = _parsed(tmp_path)
    too_long = [JudgmentSpec(j.image, j.system, j.caption, "q" * 51, j.rater, j.score) for j in good.judgments]
    with pytest.raises(DatabaseError):
        IMPORTERS["tsv-ratings"].save("rolled-back", _parsed(tmp_path, judgments=too_long))
    assert table_counts() == (0,) * 7


def test_importers_import_only_the_base_and_crowd_models():
    """No importer imports another importer (no import loops inside the package), metrics or analysis."""
    allowed_local = {"crowd.models", "crowd.importers.base"}
    for path in IMPORTERS_DIR.glob("*.py"):
        module = f"crowd.importers.{path.stem}" if path.stem != "__init__" else "crowd.importers"
        package = "crowd.importers" if path.stem == "__init__" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{parent}.{base}" if base else parent
                names = [base]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                assert not name.startswith(("metrics", "analysis")), f"{path.name} imports {name}"
                if name.startswith("crowd"):
                    assert name in allowed_local and name != module, f"{path.name} imports {name}"
