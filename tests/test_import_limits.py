"""Import caps, duplicate JSON keys and short echoes (issue 21, "Import limits").

The reproductions of the issue, on real data (COCO-format files built from the bundled THumB and
Self-CIDEr data by tests/coco_sets.py, the Flickr8k, THumB and PASCAL-50S files) and PostgreSQL:
a COCO file with one image and more references than the cap, a file over the size cap, a file
with more captions than the cap, a duplicate ``"annotations"`` key, a 5,000-digit rating. Every
refusal leaves every table unchanged and names the cap's value and its setting.
"""
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
from django.apps import apps
from django.core.management.base import CommandError
from django.test import override_settings

from crowd.importers.base import (
    LIMIT_DEFAULTS,
    CaptionCounter,
    CaptionSpec,
    DatasetFormatError,
    DuplicateKeyError,
    Importer,
    ParsedDataset,
    SystemSpec,
    check_file_size,
    import_limit,
    json_loads,
    shorten,
)
from crowd.models import Caption, Dataset, Image, System
from metrics.uploads import UploadError, upload_scores

from .coco_sets import MERGE, THUMB, THUMB_REFS, thumb_refs, write_coco_files
from .conftest import ROOT, run_command, write_subset

pytestmark = pytest.mark.django_db

PASCAL = ROOT / "data" / "pascal50s"
THUMB_DIR = THUMB.parent
SETTING_HINT = "raise it in the environment to import more"


def all_counts() -> dict[str, int]:
    """Rows of every table of every installed app."""
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


@pytest.fixture
def coco_dir(tmp_path):
    return write_coco_files(tmp_path)


@pytest.fixture
def seeded(coco_dir):
    """A database that already holds a dataset (the 30 COCO images, references and two systems),
    so that "unchanged" is checked against real rows."""
    run_command("import_coco", "--name", "existing", "--annotations", str(coco_dir / "captions.json"),
                "--results", f"merge={coco_dir / 'merge.json'}", "--results", f"thumb={coco_dir / 'thumb_models.json'}")
    counts = all_counts()
    assert counts["crowd.Caption"] == 30 * 4 + 30 * 10 + 30 * 4
    return counts


def one_image_annotations(path: Path, n_references: int) -> tuple[int, list[str]]:
    """A COCO caption annotation file with one image holding ``n_references`` real COCO captions
    (THumB's references of the first images, all given to the first image). Returns (image id,
    captions)."""
    refs = thumb_refs()
    image = next(iter(refs))
    texts = [text for caps in refs.values() for text in caps][:n_references]
    assert len(texts) == n_references
    path.write_text(json.dumps({
        "images": [{"id": image, "file_name": f"COCO_val2014_{image:012d}.jpg"}],
        "annotations": [{"id": image * 100 + k, "image_id": image, "caption": t} for k, t in enumerate(texts)],
    }))
    return image, texts


# -------------------------------------------------------------------------------------------------
# References per image
# -------------------------------------------------------------------------------------------------
@override_settings(IMPORT_MAX_REFERENCES_PER_IMAGE=7)
def test_one_image_with_more_references_than_the_cap_is_refused_and_nothing_changes(seeded, tmp_path):
    """The issue's reproduction (450,000 references for one image) at a small cap: 12 references
    for one image, cap 7."""
    path = tmp_path / "one_image.json"
    image, _ = one_image_annotations(path, 12)
    with pytest.raises(CommandError) as err:
        run_command("import_coco", "--name", "flood", "--annotations", str(path))
    assert str(err.value) == (
        f"{path}: image '{image}' has 12 reference captions: the cap is 7 references per image "
        f"(setting IMPORT_MAX_REFERENCES_PER_IMAGE; {SETTING_HINT})"
    )
    assert all_counts() == seeded


@override_settings(IMPORT_MAX_REFERENCES_PER_IMAGE=7)
def test_an_image_with_exactly_the_cap_of_references_is_stored(tmp_path):
    path = tmp_path / "seven.json"
    image, texts = one_image_annotations(path, 7)
    run_command("import_coco", "--name", "seven", "--annotations", str(path))
    ds = Dataset.objects.get(name="seven")
    assert list(ds.references().order_by("key").values_list("text", flat=True)) == [" ".join(t.split()) for t in texts]
    assert Image.objects.filter(dataset=ds).get().key == str(image)


@override_settings(IMPORT_MAX_REFERENCES_PER_IMAGE=4)
def test_the_reference_cap_applies_to_import_dataset_formats_too(seeded):
    """PASCAL-50S samples --references per image: 5 over a cap of 4 is refused by the base's
    check_limits, naming the first image of pair_pascal.mat."""
    with pytest.raises(CommandError, match=(
        r"pair_pascal\.mat: image '\S+\.jpg' has 5 reference captions: the cap is 4 references per image "
        r"\(setting IMPORT_MAX_REFERENCES_PER_IMAGE; ")):
        run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "p5")
    assert all_counts() == seeded
    run_command("import_dataset", "pascal50s", str(PASCAL), "--name", "p4", "--references", "4")
    ds = Dataset.objects.get(name="p4")
    assert ds.references().count() == 4 * ds.images.count() == 4000


def test_a_subclass_check_limits_keeps_the_base_caps(tmp_path):
    """check_limits is the one place for whole-import caps; a subclass adds its own and calls super()."""

    class Capped(Importer):
        kind = "capped-toy"

        def check_limits(self, parsed):
            super().check_limits(parsed)
            if len(parsed.references) > 100:
                raise DatasetFormatError(parsed.source, "more than 100 references")

    refs = thumb_refs()
    image = str(next(iter(refs)))
    parsed = ParsedDataset(
        source=tmp_path / "x.json", images=[image], systems=[SystemSpec("refs", System.HUMAN)], reference_system="refs",
        references=[CaptionSpec(image, "refs", str(k), t) for k, t in enumerate(refs[int(image)] * 2)],
    )
    with override_settings(IMPORT_MAX_REFERENCES_PER_IMAGE=7):
        with pytest.raises(DatasetFormatError, match=f"image '{image}' has 8 reference captions: the cap is 7"):
            Capped().save("capped", parsed)
    assert not Dataset.objects.exists()
    assert Capped().save("capped", parsed).counts["reference captions"] == 8


# -------------------------------------------------------------------------------------------------
# File size
# -------------------------------------------------------------------------------------------------
def _size_cases(coco_dir: Path):
    return [
        (["import_dataset", "flickr8k-expert", str(ROOT / "data" / "flickr8k"), "--name", "f"],
         ROOT / "data" / "flickr8k" / "Flickr8k.token.txt"),
        (["import_dataset", "thumb", str(THUMB_DIR), "--name", "t"], THUMB),
        (["import_dataset", "pascal50s", str(PASCAL), "--name", "p"], PASCAL / "pascal50S.mat"),
        (["import_coco", "--name", "c", "--annotations", str(coco_dir / "captions.json")], coco_dir / "captions.json"),
        (["import_coco", "--name", "c", "--results", f"m={MERGE}"], MERGE),
        (["import_coco", "--name", "existing", "--objects", str(coco_dir / "objects.csv")], coco_dir / "objects.csv"),
    ]


@pytest.mark.parametrize("case", range(6))
def test_a_file_over_the_size_cap_is_refused_naming_cap_and_setting(case, seeded, coco_dir):
    """The cap is one byte below the size of the file each importer would read last (or first)."""
    args, big = _size_cases(coco_dir)[case]
    size = big.stat().st_size
    with override_settings(IMPORT_MAX_FILE_BYTES=size - 1):
        with pytest.raises(CommandError) as err:
            run_command(*args)
    assert str(err.value) == (
        f"{big}: the file has {size:,} bytes, too large: the cap is {size - 1:,} bytes per file "
        f"(setting IMPORT_MAX_FILE_BYTES; {SETTING_HINT})"
    )
    assert all_counts() == seeded
    with override_settings(IMPORT_MAX_FILE_BYTES=size):  # a file of exactly the cap passes
        assert check_file_size(big) == size


def test_the_size_cap_refuses_a_file_before_reading_it(seeded, tmp_path):
    """A (sparse) file one byte over the default cap of 512 MiB is refused from its size on disk:
    the refusal allocates a few kilobytes, not the half gigabyte reading it would."""
    cap = import_limit("IMPORT_MAX_FILE_BYTES")
    assert cap == LIMIT_DEFAULTS["IMPORT_MAX_FILE_BYTES"] == 512 * 1024 * 1024
    huge = tmp_path / "captions_huge.json"
    with huge.open("wb") as handle:
        handle.truncate(cap + 1)
    tracemalloc.start()
    try:
        with pytest.raises(CommandError, match=rf"the file has {cap + 1:,} bytes, too large: the cap is {cap:,} bytes"):
            run_command("import_coco", "--name", "huge", "--annotations", str(huge))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * 1024 * 1024
    assert all_counts() == seeded


# -------------------------------------------------------------------------------------------------
# Captions per file
# -------------------------------------------------------------------------------------------------
@override_settings(IMPORT_MAX_CAPTIONS=10)
def test_captions_are_counted_while_a_line_file_is_read(seeded, tmp_path):
    """Flickr8k.token.txt: the 11th caption line is where the file is refused."""
    directory = write_subset(tmp_path / "sub", 5)
    token = directory / "Flickr8k.token.txt"
    assert len(token.read_text().splitlines()) > 11
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "flickr8k-expert", str(directory), "--name", "sub")
    assert str(err.value) == (
        f"{token}:11: more than 10 captions in one file: the cap is 10 captions per file "
        f"(setting IMPORT_MAX_CAPTIONS; {SETTING_HINT})"
    )
    assert all_counts() == seeded


def test_thumb_judgments_are_refused_at_the_line_past_the_caption_cap(seeded):
    """2,000 references (500 lines) pass a cap of 2,499; the 2,500th caption line does not."""
    with override_settings(IMPORT_MAX_CAPTIONS=2499):
        with pytest.raises(CommandError, match=rf"^{THUMB}:2500: more than 2,499 captions in one file: the cap is 2,499 "):
            run_command("import_dataset", "thumb", str(THUMB_DIR), "--name", "thumb")
    assert all_counts() == seeded


def test_a_coco_results_file_of_exactly_the_caption_cap_is_stored(seeded, coco_dir):
    results = coco_dir / "merge_as_results.json"
    n = len(json.loads(results.read_text()))
    assert n == 300
    with override_settings(IMPORT_MAX_CAPTIONS=n - 1):
        with pytest.raises(CommandError, match=rf"^{results}: more than 299 captions in one file: .*IMPORT_MAX_CAPTIONS"):
            run_command("import_coco", "--name", "existing", "--results", f"merged={results}")
        assert all_counts() == seeded
    with override_settings(IMPORT_MAX_CAPTIONS=n):
        run_command("import_coco", "--name", "existing", "--results", f"merged={results}")
    assert Caption.objects.filter(system__name="merged", system__dataset__name="existing").count() == 300


def test_defaults_admit_coco_2014_and_settings_come_from_the_environment():
    """COCO 2014: 414,113 + 202,654 = 616,767 captions in train and val, at most 7 per image;
    PASCAL-50S: 50 sentences per image. The settings read the environment with these defaults."""
    from django.conf import settings

    assert LIMIT_DEFAULTS == {"IMPORT_MAX_FILE_BYTES": 536_870_912, "IMPORT_MAX_CAPTIONS": 1_000_000,
                              "IMPORT_MAX_REFERENCES_PER_IMAGE": 50}
    for name, default in LIMIT_DEFAULTS.items():
        assert getattr(settings, name) == default
    counter = CaptionCounter("captions_trainval2014.json")
    counter.add(414_113)
    counter.add(202_654)
    with pytest.raises(DatasetFormatError, match="more than 1,000,000 captions in one file"):
        counter.add(1_000_000 - 616_767 + 1)
    assert import_limit("IMPORT_MAX_REFERENCES_PER_IMAGE") >= 50 > 7
    with override_settings(IMPORT_MAX_CAPTIONS=0), pytest.raises(ValueError, match="IMPORT_MAX_CAPTIONS must be a positive"):
        import_limit("IMPORT_MAX_CAPTIONS")


# -------------------------------------------------------------------------------------------------
# Duplicate JSON keys
# -------------------------------------------------------------------------------------------------
def _line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)


def test_a_duplicate_annotations_key_is_refused_with_key_and_line(seeded, coco_dir, tmp_path):
    """``"annotations": [...], "annotations": []``: json.loads keeps the empty list (the issue's
    "no caption annotations"); the importer names the key and the lines of both occurrences."""
    data = json.loads((coco_dir / "captions.json").read_text())
    text = json.dumps(data, indent=1)
    assert text.endswith("\n}")
    text = text[:-2] + ',\n "annotations": []\n}'
    assert json.loads(text)["annotations"] == []
    path = tmp_path / "dup.json"
    path.write_text(text)
    first = _line_col(text, text.index('"annotations"'))
    second = _line_col(text, text.rindex('"annotations"'))
    assert first[0] < second[0] and second[1] == first[1] == 2
    with pytest.raises(CommandError) as err:
        run_command("import_coco", "--name", "dup", "--annotations", str(path))
    assert str(err.value) == (
        f"{path}:{second[0]}: not valid JSON: duplicate key 'annotations' at column 2 "
        f"(also given at line {first[0]}, column 2 of the same object)"
    )
    assert all_counts() == seeded


def test_a_duplicate_key_inside_an_annotation_names_its_line_and_columns(seeded, coco_dir, tmp_path):
    data = json.loads((coco_dir / "captions.json").read_text())
    text = json.dumps(data)  # one line, as COCO ships its files
    ann = data["annotations"][17]
    entry = json.dumps(ann)
    twice = entry[:-1] + ', "caption": "a second caption"}'
    assert text.count(entry) == 1
    text = text.replace(entry, twice)
    path = tmp_path / "dup_caption.json"
    path.write_text(text)
    start = text.index(twice)
    first_col = start + twice.index('"caption"') + 1
    second_col = start + twice.rindex('"caption"') + 1
    with pytest.raises(CommandError) as err:
        run_command("import_coco", "--name", "dup", "--annotations", str(path))
    assert str(err.value) == (
        f"{path}:1: not valid JSON: duplicate key 'caption' at column {second_col:,} "
        f"(also given at column {first_col:,} of the same object)"
    )
    assert all_counts() == seeded


def test_duplicate_keys_in_json_lines_and_object_label_files(seeded, coco_dir, tmp_path):
    """THumB's JSON lines name the file's line; an object-label JSON file is not mistaken for a
    POPE file (JSON lines) because of its duplicate."""
    directory = tmp_path / "thumb"
    shutil.copytree(THUMB_DIR, directory)
    lines = (directory / THUMB.name).read_text().splitlines()
    lines[6] = lines[6][:-1] + ', "P": 5.0}'
    (directory / THUMB.name).write_text("\n".join(lines) + "\n")
    col2 = lines[6].rindex('"P"') + 1
    col1 = lines[6].index('"P"') + 1
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "thumb", str(directory), "--name", "thumb")
    assert str(err.value) == (
        f"{directory / THUMB.name}:7: not valid JSON: duplicate key 'P' at column {col2} "
        f"(also given at column {col1} of the same object)"
    )
    labels: dict[str, dict[str, int]] = {}
    for row in (coco_dir / "objects.csv").read_text().splitlines()[1:]:
        image, label, count = row.split(",")
        labels.setdefault(image, {})[label] = int(count)
    text = json.dumps(labels, indent=2)
    inner = next(block for block in (json.dumps(b, indent=2).replace("\n", "\n  ") for b in labels.values())
                 if block.count("\n") >= 3 and text.count(block) == 1)  # an image with 2+ labels, unique
    label = json.loads(inner).popitem()[0]
    twice = inner[:-4] + f',\n    "{label}": 3\n  }}'
    text = text.replace(inner, twice)
    path = tmp_path / "labels.json"
    path.write_text(text)
    start = text.index(twice)
    first = _line_col(text, start + twice.index(f'"{label}"'))
    second = _line_col(text, start + twice.rindex(f'"{label}"'))
    with pytest.raises(CommandError) as err:
        run_command("import_coco", "--name", "existing", "--objects", str(path))
    assert str(err.value) == (
        f"{path}:{second[0]}: not valid JSON: duplicate key '{label}' at column 5 "
        f"(also given at line {first[0]}, column 5 of the same object)"
    )
    assert all_counts() == seeded


def test_json_loads_reads_real_files_as_json_loads_does():
    for text in (MERGE.read_text(), *THUMB_REFS.read_text().splitlines()[:50], *THUMB.read_text().splitlines()[:50]):
        assert json_loads(text) == json.loads(text)
    nested = '[{"a": 1}, {"b": {"c": [1, {"d": 2, "d": 3}]}}]'
    with pytest.raises(DuplicateKeyError) as err:
        json_loads(nested)
    assert (err.value.key, err.value.lineno, err.value.first_lineno) == ("d", 1, 1)
    assert (err.value.first_colno, err.value.colno) == (nested.index('"d"') + 1, nested.rindex('"d"') + 1) == (29, 37)


# -------------------------------------------------------------------------------------------------
# Short echoes
# -------------------------------------------------------------------------------------------------
def test_a_5000_digit_rating_is_echoed_shortened(tmp_path):
    directory = write_subset(tmp_path / "sub", 5)
    expert = directory / "ExpertAnnotations.txt"
    lines = expert.read_text().splitlines()
    fields = lines[0].split("\t")
    fields[2] = "1" * 5000
    lines[0] = "\t".join(fields)
    expert.write_text("\n".join(lines) + "\n")
    before = all_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "flickr8k-expert", str(directory), "--name", "sub")
    message = str(err.value)
    assert message == f"{expert}:1: expert 1 rating '{'1' * 60}'… (5,000 characters) is not an integer from 1 to 4"
    assert len(message) - len(str(expert)) < 150  # the 5,000 digits are not echoed
    assert all_counts() == before


def test_long_values_in_other_importers_and_commands_are_shortened(seeded, coco_dir, tmp_path):
    objects = tmp_path / "objects.csv"
    rows = (coco_dir / "objects.csv").read_text().splitlines()
    image, label, _ = rows[3].split(",")
    rows[3] = f"{image},{label},{'9' * 5000}"
    objects.write_text("\n".join(rows) + "\n")
    with pytest.raises(CommandError) as err:
        run_command("import_coco", "--name", "existing", "--objects", str(objects))
    assert str(err.value) == f"{objects}:4: count '{'9' * 60}'… (5,000 characters) is not an integer"
    directory = tmp_path / "thumb"
    shutil.copytree(THUMB_DIR, directory)
    lines = (directory / THUMB.name).read_text().splitlines()
    row = json.loads(lines[0])
    row["P"] = int("4" * 4000)  # a valid JSON integer (under Python's 4,300 digits), beyond a float
    lines[0] = json.dumps(row)
    (directory / THUMB.name).write_text("\n".join(lines) + "\n")
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "thumb", str(directory), "--name", "thumb")
    assert str(err.value) == f"{directory / THUMB.name}:1: P must be a finite number, got {'4' * 60}… (4,000 digits)"
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "flickr8k-expert", str(ROOT / "data" / "flickr8k"), "--name", "n" * 5000)
    assert str(err.value).startswith(f"invalid --name '{'n' * 60}'… (5,000 characters): use letters")
    assert all_counts() == seeded


def test_upload_errors_shorten_a_5000_digit_score_and_a_long_key(subset_dir, tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    ds = Dataset.objects.get(name="sub")
    image, key = ds.candidates().order_by("id").values_list("image__key", "key").first()
    before = all_counts()
    path = tmp_path / "scores.csv"
    path.write_text(f"image,caption,score\n{image},{key},{'1' * 5000}\n")
    with pytest.raises(UploadError) as err:
        upload_scores("sub", path, "My Metric")
    assert str(err.value) == f"line 2: score '{'1' * 60}'… (5,000 characters) is not a finite number"
    path.write_text(f"image,caption,score\n{'x' * 5000},{key},0.5\n")
    with pytest.raises(UploadError) as err:
        upload_scores("sub", path, "My Metric")
    assert str(err.value) == f"line 2: unknown image '{'x' * 60}'… (5,000 characters) (not an image of dataset 'sub')"
    assert all_counts() == before


def test_shorten_keeps_short_values_exact_and_messages_on_one_line():
    assert shorten("COCO_val2014_000000000974.jpg") == repr("COCO_val2014_000000000974.jpg")
    assert shorten(3.5) == "3.5" and shorten(None) == "None" and shorten([1, "a"]) == "[1, 'a']"
    assert shorten("a" * 60) == repr("a" * 60)
    assert shorten("a" * 61) == f"'{'a' * 60}'… (61 characters)"
    assert "\n" not in shorten("line\n" * 100) and "\n" not in shorten("line\n" * 100, quote=False)
    assert shorten(10 ** 5000) == "an integer of about 5,001 digits"
    assert shorten("0." + "3" * 80, quote=False) == "0." + "3" * 58 + "… (82 characters)"
