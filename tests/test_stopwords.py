"""The English stop list shipped with captioneval (captioneval/kernels/data/english_stop_words.txt) is
scikit-learn's ``ENGLISH_STOP_WORDS``, word for word, with its provenance and licence notice; VIFIDEL
and LSA use it, so scikit-learn is only a test dependency (the reference these tests compare with)."""
import re
import subprocess
import sys

import pytest
from sklearn.feature_extraction import _stop_words
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS as SKLEARN_STOP_WORDS

from captioneval.kernels import diversity, stopwords, vifidel

from .conftest import ROOT

DATA = ROOT / "captioneval" / "kernels" / "data" / "english_stop_words.txt"


def test_the_shipped_list_is_scikit_learns():
    assert stopwords.ENGLISH_STOP_WORDS == SKLEARN_STOP_WORDS
    assert len(stopwords.ENGLISH_STOP_WORDS) == 318
    assert isinstance(stopwords.ENGLISH_STOP_WORDS, frozenset)
    words = [line for line in DATA.read_text("utf-8").splitlines() if line and not line.startswith("#")]
    assert words == sorted(SKLEARN_STOP_WORDS)  # one a line, sorted, each once


def test_the_file_names_its_source_and_carries_the_bsd_notice():
    header = "\n".join(line for line in DATA.read_text("utf-8").splitlines() if line.startswith("#"))
    version = re.search(r"SOURCE: scikit-learn (\S+), file (\S+),", header)
    assert version, header[:300]
    assert version.group(2) == "sklearn/feature_extraction/_stop_words.py"
    assert _stop_words.__file__.replace("\\", "/").endswith(version.group(2))
    # the origin of the list, quoted from the comment above scikit-learn's list
    def words(text):
        return " ".join(text.replace("#", " ").split())

    source = open(_stop_words.__file__, encoding="utf-8").read()
    origin = words(re.search(r"^# This list of English stop words.*?(?=^[^#])", source, re.S | re.M).group(0))
    assert "Glasgow Information Retrieval Group" in origin and "ir.dcs.gla.ac.uk" in origin
    assert origin in words(header)
    for clause in ("BSD 3-Clause License", "The scikit-learn developers",
                   "Redistributions of source code must retain the above copyright notice",
                   "Neither the name of the copyright holder nor the names of its", '"AS IS"'):
        assert clause in header, clause
    assert re.fullmatch(r"\d+\.\d+\.\d+", version.group(1)), version.group(1)


def test_vifidel_and_lsa_use_the_shipped_list():
    assert vifidel.STOP_WORDS is stopwords.ENGLISH_STOP_WORDS
    # "fire" and "top" are stop words of this list (the reference code drops them too)
    assert vifidel.content_words("A fire truck on top of the hill") == ["truck", "hill"]
    caps = ["a dog runs on the grass", "the dog is running", "two dogs play in the snow", "a cat sleeps"]
    default = diversity.latent_coordinates(caps, "lsa", k=3)
    explicit = diversity.latent_coordinates(caps, "lsa", k=3, stop_words=SKLEARN_STOP_WORDS)
    assert default.tolist() == explicit.tolist()
    assert default.tolist() != diversity.latent_coordinates(caps, "lsa", k=3, stop_words=()).tolist()


def test_the_kernels_import_without_scikit_learn():
    """VIFIDEL's and LSA's modules run with scikit-learn made unimportable."""
    code = (
        "import sys\n"
        "sys.modules['sklearn'] = None\n"
        "from captioneval.kernels import vifidel, diversity\n"
        "print(len(vifidel.STOP_WORDS), vifidel.content_words('a dog on top of a red fire hydrant'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "318 ['dog', 'red', 'hydrant']"


@pytest.mark.parametrize("text, message", [
    ("a\nthe\na\n", "1 repeated word"),
    ("# header\na\ntwo words\n", "line 3: one word a line expected"),
])
def test_read_stop_words_rejects_a_malformed_list(text, message):
    with pytest.raises(ValueError, match=message):
        stopwords.read_stop_words(text)
    assert stopwords.read_stop_words("# comment\n\n the \nof\n") == {"the", "of"}
