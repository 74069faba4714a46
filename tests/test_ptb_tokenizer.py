"""The pure-Python PTB tokeniser (captioneval/text/ptb.py) against pycocoevalcap's Java tokeniser.

Every caption and reference of every bundled dataset, the hand-written hostile corpus
(tests/data/hostile_captions.json) and a few thousand generated combinations of tricky pieces are
tokenised by both implementations (Java once per batch) and must come out identical. Expected
values in the small tests were produced by the Java tokeniser (the reference), and are checked
against it again here."""
import importlib.util
import json
import os
import random
import subprocess
import sys

import pytest

from captioneval.text import ptb, tokenizer
from captioneval.text.tokenizer import ptb_tokenize, ptb_tokenize_java

from .conftest import ROOT

_spec = importlib.util.spec_from_file_location("tokenizer_equality", ROOT / "benchmarks" / "tokenizer_equality.py")
equality = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(equality)


def python_tokenize(texts):
    ptb._CACHE.clear()  # tokenise every caption afresh, then once more from the cache
    first = ptb.tokenize(texts)
    assert ptb.tokenize(texts) == first
    return first


def assert_equal(texts):
    java = ptb_tokenize_java(texts)
    python = python_tokenize(texts)
    bad = [(t, j, p) for t, j, p in zip(texts, java, python) if j != p]
    assert not bad, f"{len(bad)} of {len(texts)} differ, e.g. {bad[:5]}"
    assert len(python) == len(texts)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(equality.DATASETS))
def test_python_equals_java_on_bundled_data(name):
    texts = equality.DATASETS[name]()
    assert len(texts) > 0
    assert_equal(texts)


#: Tricky pieces, glued at random with spaces, no space, tabs, non-breaking spaces or line breaks.
PIECES = [
    "a", "A", "I", "The", "dog", "U.S.", "Mr.", "etc.", "ca.", "no.", "5", "12", "1,000", "3.5", "1/2", "\u00bd", "(", ")",
    "[", "]", "{", "}", '"', "'", "`", "''", "``", "'s", "n't", "can't", "cannot", "gonna", "-", "--", "---", ".", "..",
    "...", ",", ";", ":", "!", "?", "&", "&amp;", "<", ">", "<b>", "</b>", "<a href='x'>", "<a b='", "c'>", "@", "#",
    "$", "\u00a3", "\u20ac", "*", "/", "\\", "=", "+", "%", "~", "^", "_", "|", ":)", "^_^", "\u00a0", "\u2026", "\u2013",
    "\u2014", "\u2018", "\u2019", "\u201c", "\u201d", "\u00ad", "\u200b", "\U0001F600", "http://x.com", "www.y.org",
    "a@b.com", "file.txt", "t-shirt", "x-", "AT&T", "Ph.D.", "p.m.", "B.", "It", "He", "Inc.", "Co.", "Ltd", "555-1234",
    "12/25/2014", "\u00e9", "e\u0301", "\u03a3", "\u5317", "colour", "1", "0", "o'clock", "y'all", "d'", "Cap'n",
    "\u0131", "\u017f", "\u212a", "&quot;", "&apos;", "\u2044", "\u00a0\u00a0", "\u3000", "\x85",
]


def generated_captions(n: int, seed: int) -> list[str]:
    words = [w for h in equality.hostile_captions() for w in h.split(" ") if w]
    rng = random.Random(seed)
    seps = [" ", " ", " ", "", "", "\u00a0", "  ", "\t", "\n"]
    out = []
    for _ in range(n):
        parts = [rng.choice(PIECES) if rng.random() < 0.6 else rng.choice(words) for _ in range(rng.randint(1, 8))]
        out.append(parts[0] + "".join(rng.choice(seps) + p for p in parts[1:]))
    return out


@pytest.mark.slow
def test_python_equals_java_on_generated_combinations():
    assert_equal(generated_captions(6000, seed=18))


@pytest.mark.slow
def test_tags_running_over_several_captions():
    """A quoted attribute value may run over line ends: Java then tokenises several captions as one."""
    rng = random.Random(7)
    atoms = ["<a b='", "c'>", '<x y="', '">', "dog", "The", "I.", "U.S.", "<b>", "'", '"', "z", "<", ">", "A", "5", "ca.",
             "<a b='x'>", "it's"]
    texts = [" ".join(rng.choice(atoms) for _ in range(rng.randint(1, 4))) for _ in range(3000)]
    assert_equal(texts)


def test_hostile_corpus_is_large_and_covers_the_tricky_characters():
    hostile = equality.hostile_captions()
    assert len(hostile) >= 300 and len(set(hostile)) == len(hostile)
    joined = "".join(hostile)
    for ch in "\u00a0\u00ad\u200b\u2018\u2019\u201c\u201d\u201e\u2013\u2014\u00bd\u00a3\u20ac\n\r\u2028&<>*/\\\U0001F600":
        assert ch in joined, repr(ch)


# (captions, tokens): Java 3.4.1 output (checked again below).
CONTEXT_CASES = [
    # a one-letter acronym at the end of a caption: "b" before a caption starting with "The", else "b."
    (["plan B.", "The end"], ["plan b", "the end"]),
    (["plan B.", "the end"], ["plan b.", "the end"]),
    (["plan B."], ["plan b."]),
    # ca. before a number on the next line stays an abbreviation
    (["made ca.", "1900 or so"], ["made ca.", "1900 or so"]),
    (["made ca.", "around 1900"], ["made ca", "around 1900"]),
    # a tag with a quoted attribute value spanning two captions
    (["x <a b='c", "d'> y"], ["x <a\u00a0b='c", "d'> y"]),
    (["Hello, world. I can't go (now)!", "colour grey 1/2 \u00bd \u00a35 \u20ac3 \"quote\" it's",
      "U.S. Mr. Smith etc. The end", "gonna CANNOT \U0001F600 \u2018a\u2019 \u201eb\u201f"],
     ["hello world i ca n't go -lrb- now -rrb-", "colour grey 1/2 1/2 # 5 $ 3 quote it 's",
      "u.s. mr. smith etc. the end", "gon na can not a \u201e b \u201f"]),
    (["", " ", "\n", "a\nb", "\u00a0x\u00a0"], ["", "", "", "a b", "x"]),
]


@pytest.mark.parametrize("texts,expected", CONTEXT_CASES)
def test_context_cases(texts, expected):
    assert ptb_tokenize_java(texts) == expected
    assert python_tokenize(texts) == expected
    assert [ptb.tokenize([t] + texts[1:])[0] for t in texts[:1]] == expected[:1]  # cached, same context


#: Captions at the edges of the whole-batch plain-caption path (ptb._plain_batch) and of the ASCII rule set:
#: the special words and abbreviations it must leave to the lexer, punctuation and hyphens it must refuse,
#: line breaks and non-ASCII characters in the same batch (which make it filter the batch first).
PLAIN_EDGE_CASES = [
    "A dog runs .", "A dog runs.", "a  dog ,  runs !", " lead and trail ", "", " ", ".", ", ; : ! ?",
    "dog. cat, cow; a: b! c?",
    "t-shirt. x-ray, re-gonna", "gimme; more", "Gimme the ball", "scannot gonna-be wanna", "lemme go", "GOTTA go!",
    "the cannot.", "swimming tennis dinner running", "Mr. Smith", "plan B.", "plan b. The end", "etc. and so on",
    "made ca. 5", "Inc. co. Pty. vs. Az. az. Miss. miss.", "a-", "-a", "a--b", "a -b", "a- b", "a.b", "a..", "a .. b",
    "word!?", "one,two", "x-.", "end -", "a\nb dog", "tab\there", "\tlead tab", "caf\u00e9 au lait", "\ufffd dog .",
    "price \u20ac 5", "\u00bd cup", "the U.S. flag", "it's a man's dog", "a dog .", "I.", "He said so",
    "a person 's hand .", "'s", "'s dog", "dog 's", "dog 's.", "dog 'S", "B. 's", "etc. 's", "x 's 's", "dog. 's ,",
    "dog '", "dog 'ss", "dog ''s", "cannot 's", "a dog's bone.", "grass.", "Mr.", "the end.",
]


@pytest.mark.slow
def test_plain_batch_edge_cases():
    assert_equal(PLAIN_EDGE_CASES)
    assert_equal(PLAIN_EDGE_CASES[::-1])  # other neighbours
    for text in PLAIN_EDGE_CASES:  # one by one: a batch of one caption
        assert_equal([text])


def test_cache_keeps_the_context_apart():
    ptb._CACHE.clear()
    assert ptb.tokenize(["x I.", "The dog"]) == ["x i", "the dog"]
    assert ptb.tokenize(["x I.", "the dog"]) == ["x i.", "the dog"]
    assert ptb.tokenize(["x I."]) == ["x i."]
    assert ptb.tokenize(["x I.", "The dog"]) == ["x i", "the dog"]


def test_lone_surrogate_is_refused_by_both():
    with pytest.raises(UnicodeEncodeError):
        ptb_tokenize_java(["a \ud800 b"])
    with pytest.raises(UnicodeEncodeError):
        ptb.tokenize(["a \ud800 b"])


def test_empty_input():
    assert ptb.tokenize([]) == [] and ptb_tokenize([], implementation="python") == []


def test_dispatcher_and_versions():
    texts = ["A dog's (big) ball.", "U.S. etc."]
    assert ptb_tokenize(texts, implementation="python") == ptb_tokenize(texts, implementation="java") == [
        "a dog 's -lrb- big -rrb- ball", "u.s. etc."]
    assert ptb_tokenize(texts) == ptb_tokenize(texts, implementation=tokenizer.DEFAULT_IMPLEMENTATION)
    with pytest.raises(ValueError, match="implementation"):
        ptb_tokenize(texts, implementation="perl")
    assert tokenizer.IMPLEMENTATIONS == ("python", "java")
    assert tokenizer.JAVA_VERSION == "pycocoevalcap-1.2/stanford-corenlp-3.4.1"
    assert ptb.PTB_PYTHON_VERSION == "captioneval-ptb/1"
    expected = {"java": tokenizer.JAVA_VERSION, "python": ptb.PTB_PYTHON_VERSION}[tokenizer.DEFAULT_IMPLEMENTATION]
    assert tokenizer.TOKENIZER_VERSION == expected
    assert tokenizer.java_available()
    assert tokenizer._SENTINEL == ptb.SENTINEL
    assert tokenizer._LINE_BREAKS == ptb._LINE_BREAKS


def _import_tokenizer(value: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CAPTIONEVAL_TOKENIZER", None)
    if value is not None:
        env["CAPTIONEVAL_TOKENIZER"] = value
    code = ("import captioneval.text.tokenizer as t; "
            "print(t.DEFAULT_IMPLEMENTATION, t.TOKENIZER_VERSION, t.ptb_tokenize(['A dog.'])[0])")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_environment_variable_chooses_the_default():
    out = _import_tokenizer(None)  # the Python tokenizer is the default: equal to Java everywhere it was checked
    assert out.returncode == 0 and out.stdout.split() == ["python", "captioneval-ptb/1", "a", "dog"]
    out = _import_tokenizer("java")
    assert out.returncode == 0 and out.stdout.split() == ["java", "pycocoevalcap-1.2/stanford-corenlp-3.4.1", "a", "dog"]
    out = _import_tokenizer("python")
    assert out.returncode == 0 and out.stdout.split() == ["python", "captioneval-ptb/1", "a", "dog"]
    out = _import_tokenizer("jython")
    assert out.returncode != 0
    assert "ValueError" in out.stderr and "CAPTIONEVAL_TOKENIZER" in out.stderr and "'python'" in out.stderr


def test_benchmark_quick_json(tmp_path):
    path = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "benchmarks/tokenizer_equality.py", "--quick", "--json", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(path.read_text())
    assert set(data) == {"captions", "differing", "ratio"}
    assert data["captions"] == equality.QUICK_SAMPLE and data["differing"] == 0
    assert isinstance(data["ratio"], float) and data["ratio"] > 0
    assert "0 differing" in proc.stdout
