"""import_dataset flickr8k-expert: counts of the standard protocol, atomicity, idempotence, errors."""
import pytest
from django.core.management.base import CommandError

from crowd.models import Caption, Dataset, HumanJudgment, Image, System

from .conftest import run_command

pytestmark = pytest.mark.django_db


def table_counts():
    return (Dataset.objects.count(), Image.objects.count(), System.objects.count(), Caption.objects.count(),
            HumanJudgment.objects.count())


def test_full_import_follows_the_standard_protocol(flickr8k_dir):
    out = run_command("import_dataset", "flickr8k-expert", str(flickr8k_dir), "--name", "f8k")
    ds = Dataset.objects.get(name="f8k")
    assert ds.candidates().count() == 5664
    assert HumanJudgment.objects.filter(caption__image__dataset=ds).count() == 16992
    assert ds.images.count() == 1000
    assert ds.references().count() == 5000
    assert "excluded 158 pairs" in out
    # No candidate is one of its own image's references.
    for cap in ds.candidates().select_related("image")[:6000]:
        assert not cap.key.startswith(cap.image.key + "#")
    # Ratings are the expert scale, three per candidate.
    scores = set(HumanJudgment.objects.values_list("score", flat=True))
    assert scores <= {1.0, 2.0, 3.0, 4.0}
    first = Caption.objects.get(image__key="1056338697_4f7d7ce270.jpg", key="2549968784_39bfbe44f9.jpg#2")
    assert sorted(first.judgments.values_list("score", flat=True)) == [1.0, 1.0, 1.0]
    token_line = next(
        line for line in (flickr8k_dir / "Flickr8k.token.txt").read_text().splitlines()
        if line.startswith("2549968784_39bfbe44f9.jpg#2\t")
    )
    assert first.text == token_line.split("\t")[1].strip()


def test_import_twice_does_not_duplicate(subset_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    before = table_counts()
    out = run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    assert "already imported" in out
    assert table_counts() == before


def test_same_name_different_data_is_refused(subset_dir, flickr8k_dir):
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    before = table_counts()
    with pytest.raises(CommandError, match="already exists with different data"):
        run_command("import_dataset", "flickr8k-expert", str(flickr8k_dir), "--name", "sub")
    assert table_counts() == before


@pytest.mark.parametrize(
    "filename, line_no, replacement, message",
    [
        ("ExpertAnnotations.txt", 3000, "1056338697_4f7d7ce270.jpg\tbad\t1\t1", "expected 5 TAB-separated fields"),
        ("ExpertAnnotations.txt", 5822, None, "rating '7' is not an integer from 1 to 4"),
        ("ExpertAnnotations.txt", 10, "1056338697_4f7d7ce270.jpg\tnope.jpg#9\t1\t1\t1", "not found in Flickr8k.token.txt"),
        ("Flickr8k.token.txt", 123, "no tab on this line", "found no TAB"),
        ("Flickr8k.token.txt", 77, "bad-id\tA dog .", "malformed caption id"),
    ],
)
def test_malformed_file_imports_nothing_and_names_file_and_line(copy_dir, filename, line_no, replacement, message):
    path = copy_dir / filename
    lines = path.read_text().splitlines()
    if replacement is None:  # change the last rating of the line to an invalid value
        fields = lines[line_no - 1].split("\t")
        fields[-1] = "7"
        replacement = "\t".join(fields)
    lines[line_no - 1] = replacement
    path.write_text("\n".join(lines) + "\n")
    before = table_counts()
    with pytest.raises(CommandError) as err:
        run_command("import_dataset", "flickr8k-expert", str(copy_dir), "--name", "broken")
    text = str(err.value)
    assert f"{filename}:{line_no}:" in text and message in text
    assert "\n" not in text
    assert table_counts() == before


def test_missing_file_and_directory(copy_dir, tmp_path):
    (copy_dir / "ExpertAnnotations.txt").unlink()
    with pytest.raises(CommandError, match=r"ExpertAnnotations.txt: file not found"):
        run_command("import_dataset", "flickr8k-expert", str(copy_dir), "--name", "x")
    with pytest.raises(CommandError, match="directory not found"):
        run_command("import_dataset", "flickr8k-expert", str(tmp_path / "nope"), "--name", "x")
    assert table_counts() == (0, 0, 0, 0, 0)


def test_empty_file_and_unknown_kind(copy_dir):
    (copy_dir / "ExpertAnnotations.txt").write_text("")
    with pytest.raises(CommandError, match="no judgments found"):
        run_command("import_dataset", "flickr8k-expert", str(copy_dir), "--name", "x")
    with pytest.raises(CommandError, match="unknown dataset kind 'coco'"):
        run_command("import_dataset", "coco", str(copy_dir), "--name", "x")
    with pytest.raises(CommandError, match="invalid --name"):
        run_command("import_dataset", "flickr8k-expert", str(copy_dir), "--name", "a b")
    assert table_counts() == (0, 0, 0, 0, 0)


def test_invalid_utf8_is_reported_with_its_line(copy_dir):
    path = copy_dir / "Flickr8k.token.txt"
    data = path.read_bytes().split(b"\n")
    data[41] = data[41] + b"\xff\xfe"
    path.write_bytes(b"\n".join(data))
    with pytest.raises(CommandError, match=r"Flickr8k.token.txt:42: not valid UTF-8"):
        run_command("import_dataset", "flickr8k-expert", str(copy_dir), "--name", "x")
