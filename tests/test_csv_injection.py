"""CSV formula injection (OWASP): every CSV the platform writes for a spreadsheet user neutralises
text cells starting with = + - @ tab or CR (a leading quote), leaves numbers alone, and the files the
platform reads back (atoms CSV, MTurk batch results) round-trip exactly.

The data are real: a Flickr8k-Expert subset whose image keys, system names, captions, uploaded metric
names and collected answers are formulas (tests/hostile.py), with campaigns run through crowd.engine.
"""
import csv
import io
import json

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.utils.html import escape
from hypothesis import given
from hypothesis import strategies as st

from crowd import engine
from crowd.export import COLUMNS
from crowd.models import Assignment, Campaign, Item
from crowd.simulate import simulate
from captioneval.utils.csvsafe import TRIGGERS, is_number_text, needs_quote, neutralise, restore, writer
from captioneval.kernels.atoms import read_atoms_csv

from .conftest import run_command
from .hostile import FORMULAS, hostile_dataset, upload_metric

pytestmark = pytest.mark.django_db
ATOM_PREFIX = "@user and a -happy dog"  # spaCy reads "@user" (entity) and "-happy" (attribute)


def parse_safe(text: str) -> list[list[str]]:
    """Rows of a CSV text; fails on a cell a spreadsheet would run as a formula."""
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows, "empty CSV"
    for row in rows:
        for cell in row:
            assert cell[:1] not in TRIGGERS or is_number_text(cell), f"formula-like cell {cell!r} in {row}"
    return rows


def as_dicts(rows):
    return [dict(zip(rows[0], r)) for r in rows[1:]]


def live_without_all_pictures(campaign):
    """Put a draft campaign live without the publishing check (crowd.images.campaign_image_problem,
    tested in test_image_sources.py): one hostile key here, '=HYPERLINK("http://x","y")', has a '//'
    that no image URL may carry (crowd.kinds.base.quote_key), so the engine rightly refuses to publish
    a campaign that shows it; these tests are about the CSV exports of the answers."""
    Campaign.objects.filter(pk=campaign.pk).update(state=Campaign.LIVE)
    campaign.refresh_from_db()
    return campaign


@pytest.fixture
def ds(tmp_path):
    return hostile_dataset(tmp_path, "formulas", FORMULAS, reference_prefix=ATOM_PREFIX)


@pytest.fixture
def alice():
    user = User.objects.create_user("alice", password="pw")
    client = Client()
    client.force_login(user)
    return user, client


# --- the helper ---------------------------------------------------------------------------------------
@given(st.text())
def test_neutralise_then_restore_is_exact_and_never_leaves_a_formula(text):
    cell = neutralise(text)
    assert restore(cell) == text
    assert cell[:1] not in TRIGGERS or is_number_text(cell)
    assert cell in (text, "'" + text)


@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers())
def test_numbers_stay_numbers(x):
    assert neutralise(x) == x  # values: untouched
    assert neutralise(repr(x)) == repr(x) and restore(repr(x)) == repr(x)  # their text: untouched too


def test_the_owasp_examples():
    for p in FORMULAS:
        assert neutralise(p) == "'" + p and restore("'" + p) == p
    for number in ("-0.25", "+3", "1e-3", "-.5", "-12", "0.123", "-1.5E+07"):
        assert neutralise(number) == number and not needs_quote(number)
    for text in ("-inf", "-nan", "- 1", "-1,000", "+", "-", "@", "'", "''", "a=b", "", " =1"):
        assert restore(neutralise(text)) == text
    assert neutralise("-inf") == "'-inf" and neutralise(" =1") == " =1" and neutralise(None) is None
    buf = io.StringIO()
    writer(buf).writerows([["=1+2", -0.123, None, "ok"]])
    assert buf.getvalue() == "'=1+2,-0.123,,ok\r\n"
    # a CR inside a cell is quoted even with "\n" line ends (csv.writer alone would not), so it cannot
    # end the row and start the next one with "=1"
    buf = io.StringIO()
    writer(buf, lineterminator="\n").writerows([["key\r=1", "x"], ["next", "y"]])
    assert list(csv.reader(io.StringIO(buf.getvalue(), newline=""))) == [["key\r=1", "x"], ["next", "y"]]


# --- campaign exports ------------------------------------------------------------------------------------
def test_judgment_exports_neutralise_collected_answers(ds, alice):
    user, client = alice
    desc = live_without_all_pictures(engine.create_campaign(ds, "description", name="desc", owners=[user], k=1,
                                                            gold_every=0))
    worker = engine.invite_workers(1, label=FORMULAS[0])[0]
    for p in FORMULAS:
        a = engine.accept(desc, worker)
        engine.submit(a.pk, worker, {"description": f"{p} a dog runs over the grass"})
    text = client.get("/campaigns/desc/judgments.csv").content.decode()
    rows = parse_safe(text)
    assert rows[0] == COLUMNS and len(rows) == 1 + len(FORMULAS)
    raw = [json.loads(line) for line in client.get("/campaigns/desc/judgments.jsonl").content.decode().splitlines()]
    # the stored answers are the payloads (whitespace collapsed, as the description form does)
    assert sorted(r["value"] for r in raw) == sorted(" ".join(f"{p} a dog runs over the grass".split()) for p in FORMULAS)
    for row, record in zip(as_dicts(rows), raw):
        assert row["value"] == "'" + record["value"]  # every answer starts with = + - @ or '
        assert row["worker"] == record["worker"] and float(row["work_seconds"]) == record["work_seconds"]
    assert run_command("export_campaign", "desc") == text


def test_visual_atoms_csv_round_trips_into_a_campaign_and_its_aggregates(ds, alice, tmp_path):
    user, client = alice
    path = tmp_path / "atoms.csv"
    out = run_command("visual_atoms", "--dataset", "formulas", "--top", "15", "--out", str(path))
    assert f"--atoms {path}" in out
    rows = parse_safe(path.read_text(encoding="utf-8"))
    words = {(restore(r[0]), r[1]) for r in rows[1:]}
    assert {("@user", "entity"), ("-happy", "attribute")} <= words
    assert {"'@user", "'-happy"} <= {r[0] for r in rows}
    assert {(a.word, a.category) for a in read_atoms_csv(path)} == words
    run_command("create_campaign", "visual_atom", "--dataset", "formulas", "--name", "atoms", "--atoms", str(path),
                "--owner", "alice", "--live")
    campaign = Campaign.objects.get(name="atoms")
    items = {(i.payload["word"], i.payload["category"]) for i in Item.objects.filter(campaign=campaign, is_gold=False)}
    assert items == words  # the campaign asks about "@user", not "'@user"
    simulate(campaign, raters=3, seed=1)
    div = live_without_all_pictures(engine.create_campaign(ds, "diversity", name="div", owners=[user], k=2))
    simulate(div, raters=3, seed=2)
    for name in ("atoms", "div"):
        for url in (f"/campaigns/{name}/aggregate.csv", f"/campaigns/{name}/judgments.csv"):
            response = client.get(url)
            assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
            assert len(parse_safe(response.content.decode())) > 5
    dawid = as_dicts(parse_safe(client.get("/campaigns/atoms/aggregate.csv?method=dawid_skene").content.decode()))
    assert {r["unit"] for r in dawid} >= {"atom-entity-@user", "atom-attribute--happy"}


def test_mturk_batch_file_round_trips_through_the_results_import(ds, alice, tmp_path):
    user, client = alice
    with override_settings(MTURK_CLIENT_FACTORY="tests.fake_mturk.fake_client"):
        campaign = engine.create_campaign(ds, "description", name="mt-desc", owners=[user], k=1, gold_every=0,
                                          provider=Campaign.MTURK)
        hostile = campaign.items.order_by("pk").first()
        Item.objects.filter(pk=hostile.pk).update(key=FORMULAS[6])  # an item id that looks like a formula
        run_command("mturk", "export-website", "mt-desc", "--out", str(tmp_path / "site"))
        text = (tmp_path / "site" / "input.csv").read_bytes().decode()
        batch = campaign.mturk_batches.get()
        assert client.get(f"/campaigns/mt-desc/mturk/batch/{batch.pk}/input.csv").content.decode() == text
        assert "${item_key}" not in (tmp_path / "site" / "layout.html").read_text()
        rows = as_dicts(parse_safe(text))
        assert len(rows) == len(FORMULAS)
        keys = {i.pk: i for i in campaign.items.all()}
        for row in rows:
            item = next(i for i in keys.values() if i.key == restore(row["item_key"]))
            # image keys go into the layout's HTML as they are: HTML-escaped, then neutralised
            assert row["image_key"] == neutralise(escape(item.payload["image_key"]))
        assert {r["image_key"] for r in rows} >= {"'" + escape(p) for p in FORMULAS[:7]}
        assert "'" + FORMULAS[6] in {r["item_key"] for r in rows}
        # MTurk echoes every input cell as Input.<column>; the answer is what the worker typed
        results = io.StringIO()
        out = csv.DictWriter(results, fieldnames=["HITId", "AssignmentId", "WorkerId", "AssignmentStatus",
                                                  "WorkTimeInSeconds", *[f"Input.{k}" for k in rows[0]],
                                                  "Answer.description"])
        out.writeheader()
        for n, row in enumerate(rows):
            out.writerow({"HITId": f"HIT{n:027d}", "AssignmentId": f"ASG{n:027d}", "WorkerId": "AWORKERCSV01",
                          "AssignmentStatus": "Submitted", "WorkTimeInSeconds": "20",
                          **{f"Input.{k}": v for k, v in row.items()},
                          "Answer.description": f"'=as typed by worker {n} a dog runs over the grass"})
        (tmp_path / "results.csv").write_text(results.getvalue(), encoding="utf-8")
        report = run_command("mturk", "import-results", "mt-desc", str(tmp_path / "results.csv"))
    assert f"{len(rows)} rows: imported {len(rows)}" in report
    a = Assignment.objects.get(campaign=campaign, item_id=hostile.pk)
    n = next(n for n, row in enumerate(rows) if restore(row["item_key"]) == FORMULAS[6])
    assert a.answer == {"text": f"'=as typed by worker {n} a dog runs over the grass"}  # Answer.* kept as typed


# --- analysis downloads and commands ------------------------------------------------------------------------
def _number(cell):
    return None if cell == "" else float(cell)


def test_analysis_downloads_and_commands(ds, tmp_path):
    run_command("compute_metrics", "--dataset", "formulas", "--metric", "bleu_4", "self_cider", "lsa", "set_accuracy",
                "vocabulary", "--wait")
    negative = upload_metric(ds, tmp_path, FORMULAS[0], -1.0)
    positive = upload_metric(ds, tmp_path, FORMULAS[3], 1.0)
    client = Client()

    # correlations.csv: metric names neutralised, every number as in the JSON report (negatives too)
    report = client.get("/datasets/formulas/correlations.json").json()
    rows = as_dicts(parse_safe(client.get("/datasets/formulas/correlations.csv").content.decode()))
    by_key = {r["metric"]: r for r in rows}
    assert by_key[negative]["name"] == "'" + FORMULAS[0] and by_key[positive]["name"] == "'" + FORMULAS[3]
    assert report["metrics"][negative]["pearson"] < -0.5
    for key, m in report["metrics"].items():
        for s in ("pearson", "spearman", "kendall_tau_b", "kendall_tau_c"):
            assert _number(by_key[key][s]) == m[s]
    assert by_key[negative]["pearson"].startswith("-")

    # diversity.csv: system names neutralised, numbers unchanged
    summary = client.get("/datasets/formulas/diversity.json").json()
    rows = as_dicts(parse_safe(client.get("/datasets/formulas/diversity.csv").content.decode()))
    assert {r["system"] for r in rows} == {"'" + FORMULAS[i] for i in (0, 1, 2)}
    for r, s in zip(rows, summary["systems"]):
        assert restore(r["system"]) == s["system"]
        assert _number(r["self_cider"]) == s["self_cider"] and _number(r["set_accuracy"]) == s["set_accuracy"]

    # compare.csv (the matrix of every metric on every benchmark)
    q = "?resamples=100&permutations=100"
    matrix = client.get("/compare.json" + q).json()
    rows = as_dicts(parse_safe(client.get("/compare.csv" + q).content.decode()))
    names = {r["metric"]: r["name"] for r in rows}
    assert names[negative] == "'" + FORMULAS[0] and names[positive] == "'" + FORMULAS[3]
    cells = {(r["metric"], r["benchmark"]): r for r in rows}
    checked = 0
    for m in matrix["rows"]:
        for column, cell in m["cells"].items():
            assert _number(cells[(m["metric"], column)]["value"]) == cell["value"]
            checked += 1
    assert checked >= 3

    # manage.py correlate --format csv (benchmark report and --compare), printed and --out
    args = ["correlate", "--dataset", "formulas", "--resamples", "50", "--permutations", "50"]
    as_json = json.loads(run_command(*args, "--format", "json"))
    printed = run_command(*args, "--format", "csv")
    run_command(*args, "--format", "csv", "--out", str(tmp_path / "bench.csv"))
    assert (tmp_path / "bench.csv").read_bytes().decode() == printed
    rows = as_dicts(parse_safe(printed))
    assert {restore(r["name"]) for r in rows} >= {FORMULAS[0], FORMULAS[3]}
    negatives = 0
    for r in rows:
        m = as_json["metrics"][r["metric"]][r["level"]]
        value = m["values"].get(r["statistic"], m.get("pairwise", {}).get(r["statistic"]))
        assert _number(r["value"]) == value
        negatives += r["value"].startswith("-")
    assert negatives >= 4  # the negatively correlated upload: numbers, left as they are
    compared = parse_safe(run_command("correlate", "--compare", "--format", "csv", "--resamples", "50",
                                      "--permutations", "50"))
    assert {c for row in compared for c in row} >= {"'" + FORMULAS[0], "'" + FORMULAS[3]}
