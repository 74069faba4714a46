"""Tests for captioneval.stats.agreement (Krippendorff's alpha, split-half reliability, majority
vote, Dawid-Skene).

Reference values come from published examples (Krippendorff 2011), from independent pure-Python
implementations written here (coincidence matrix, split-half means, one EM pass), from NLTK's
AnnotationTask and from scipy.stats; never from earlier outputs of the code under test.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.stats as st

from captioneval.stats import (
    ALPHA_LEVELS,
    DawidSkeneResult,
    SplitHalfResult,
    agreement,
    dawid_skene,
    krippendorff_alpha,
    krippendorff_alpha_from_triples,
    majority_vote,
    majority_vote_shares,
    split_half_reliability,
)
from captioneval.stats.agreement import (
    _ratio_expected_exact,
    _ratio_expected_quadrature,
    _split_half_cells,
    _split_half_distribution,
)

# ----------------------------------------------------------------------------- reference data

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: 4 coders (rows)
# x 12 units (columns), None = missing.
_ = None
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, _, _, _],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, _, 3],
    [_, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, _],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, _],
]
KRIPPENDORFF_2011_ALPHA = {"nominal": 0.743, "ordinal": 0.815, "interval": 0.849}

# Krippendorff (2011), section A: two observers, binary data, 10 units; nominal alpha = 0.095.
BINARY_2011 = [
    [0, 1, 0, 0, 0, 0, 0, 0, 1, 0],
    [1, 1, 1, 0, 0, 1, 0, 0, 0, 0],
]


# ----------------------------------------------------------------------------- brute force alpha


def brute_delta2(c, k, level, values, marg):
    """Krippendorff (2011) section E difference functions, literally."""
    if level == "nominal":
        return 0.0 if c == k else 1.0
    if level == "interval":
        return (c - k) ** 2
    if level == "ratio":
        return 0.0 if c + k == 0 else ((c - k) / (c + k)) ** 2
    # ordinal: (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2 over the values present
    lo, hi = sorted((values.index(c), values.index(k)))
    return (sum(marg[g] for g in values[lo:hi + 1]) - (marg[c] + marg[k]) / 2.0) ** 2


def brute_alpha(matrix, level):
    """Pure-Python coincidence-matrix alpha (Krippendorff 2011, section C). None/nan = missing."""
    n_units = len(matrix[0])
    units = []
    for u in range(n_units):
        vals = [row[u] for row in matrix if row[u] is not None and not (isinstance(row[u], float) and math.isnan(row[u]))]
        if len(vals) >= 2:
            units.append(vals)
    values = sorted({v for u in units for v in u})
    o = defaultdict(float)
    for vals in units:
        m = len(vals)
        for i in range(m):
            for j in range(m):
                if i != j:
                    o[(vals[i], vals[j])] += 1.0 / (m - 1)
    marg = {c: sum(o[(c, k)] for k in values) for c in values}
    n = sum(marg.values())
    d_o = sum(o[(c, k)] * brute_delta2(c, k, level, values, marg) for c in values for k in values)
    d_e = sum(marg[c] * marg[k] * brute_delta2(c, k, level, values, marg) for c in values for k in values)
    if d_e == 0:
        return math.nan
    return 1.0 - (n - 1) * d_o / d_e


def random_matrix(rng, n_coders, n_units, kind, p_missing=0.3):
    """Reliability data with structure (unit effect + coder noise) and missing values."""
    truth = rng.random(n_units)
    out = []
    for _c in range(n_coders):
        row = []
        for u in range(n_units):
            if rng.random() < p_missing:
                row.append(None)
                continue
            x = min(max(truth[u] + rng.normal(0, 0.25), 0.0), 1.0)
            if kind == "int":
                row.append(int(1 + round(4 * x)))  # 1..5
            elif kind == "cont2":
                row.append(round(x, 2))  # slider with ties
            else:
                row.append(float(x))  # continuous, nearly all distinct
        out.append(row)
    return out


def to_triples(matrix, unit_fmt="u{}", coder_fmt="c{}"):
    return [
        (unit_fmt.format(u), coder_fmt.format(c), v)
        for c, row in enumerate(matrix)
        for u, v in enumerate(row)
        if v is not None
    ]


# ----------------------------------------------------------------------------- alpha: published


@pytest.mark.parametrize("level", sorted(KRIPPENDORFF_2011_ALPHA))
def test_alpha_krippendorff_2011_published_values(level):
    alpha = krippendorff_alpha(KRIPPENDORFF_2011, level)
    assert round(alpha, 3) == KRIPPENDORFF_2011_ALPHA[level]
    assert alpha == pytest.approx(brute_alpha(KRIPPENDORFF_2011, level), abs=1e-12)


@pytest.mark.parametrize("level", ALPHA_LEVELS)
def test_alpha_krippendorff_2011_from_triples_and_nan_matrix(level):
    expected = brute_alpha(KRIPPENDORFF_2011, level)
    triples = to_triples(KRIPPENDORFF_2011)
    random.Random(3).shuffle(triples)
    assert krippendorff_alpha_from_triples(triples, level) == pytest.approx(expected, abs=1e-12)
    as_nan = np.array([[np.nan if v is None else v for v in row] for row in KRIPPENDORFF_2011])
    assert krippendorff_alpha(as_nan, level) == pytest.approx(expected, abs=1e-12)
    # units x coders transposed input would be a different (wrong) question: check it differs
    assert krippendorff_alpha(as_nan.T, level) != pytest.approx(expected, abs=1e-3)


def test_alpha_krippendorff_2011_binary_example():
    alpha = krippendorff_alpha(BINARY_2011, "nominal")
    assert round(alpha, 3) == 0.095
    # by hand (Krippendorff 2011, section A): o_00 = 10, o_01 = o_10 = 4, o_11 = 2, n = 20
    assert alpha == pytest.approx(1 - (20 - 1) * 4 / (14 * 6), abs=1e-12)


# ----------------------------------------------------------------------------- alpha: brute force


@pytest.mark.parametrize("level", ALPHA_LEVELS)
@pytest.mark.parametrize("kind", ["int", "cont2", "cont"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_equals_brute_force_coincidence_matrix(level, kind, seed):
    rng = np.random.default_rng(seed)
    matrix = random_matrix(rng, n_coders=int(rng.integers(2, 7)), n_units=40, kind=kind)
    expected = brute_alpha(matrix, level)
    assert math.isfinite(expected)
    assert krippendorff_alpha(matrix, level) == pytest.approx(expected, abs=1e-10)
    assert krippendorff_alpha_from_triples(to_triples(matrix), level) == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize("kind", ["int", "cont2", "cont"])
def test_alpha_ratio_quadrature_path_equals_brute_force(kind, monkeypatch):
    rng = np.random.default_rng(11)
    matrix = random_matrix(rng, 4, 40, kind)
    expected = brute_alpha(matrix, "ratio")
    monkeypatch.setattr(agreement, "RATIO_EXACT_MAX_VALUES", 0)  # force the quadrature
    assert krippendorff_alpha(matrix, "ratio") == pytest.approx(expected, abs=1e-10)


@pytest.mark.parametrize(
    "values",
    [
        lambda r: r.random(3000),
        lambda r: 1000.0 + r.random(3000),  # close values: tiny differences
        lambda r: np.concatenate([[0.0], 10.0 ** r.uniform(-6, 6, 3000)]),  # wide range and a zero
        lambda r: np.arange(0.0, 21.0),
    ],
)
def test_ratio_expected_quadrature_equals_exact_sum(values):
    rng = np.random.default_rng(5)
    distinct = np.unique(values(rng))
    n_c = rng.integers(1, 6, distinct.size).astype(float)
    exact = _ratio_expected_exact(distinct, n_c)
    # independent check of the exact sum on a small prefix, pair by pair
    k = min(30, distinct.size)
    by_hand = sum(
        n_c[i] * n_c[j] * (0.0 if distinct[i] + distinct[j] == 0 else ((distinct[i] - distinct[j]) / (distinct[i] + distinct[j])) ** 2)
        for i in range(k) for j in range(k)
    )
    assert _ratio_expected_exact(distinct[:k], n_c[:k]) == pytest.approx(by_hand, rel=1e-12)
    assert _ratio_expected_quadrature(distinct, n_c) == pytest.approx(exact, rel=1e-11)


def test_alpha_ratio_large_number_of_values_both_paths_agree(monkeypatch):
    rng = np.random.default_rng(8)
    n_units, n_coders = 1500, 3
    truth = rng.random(n_units)
    data = truth[None, :] + rng.normal(0, 0.1, (n_coders, n_units))
    data = np.abs(data)
    data[rng.random(data.shape) < 0.2] = np.nan
    default = krippendorff_alpha(data, "ratio")  # > 2048 distinct values: quadrature
    monkeypatch.setattr(agreement, "RATIO_EXACT_MAX_VALUES", 10**9)
    exact = krippendorff_alpha(data, "ratio")
    assert default == pytest.approx(exact, abs=1e-12)
    assert 0.5 < exact < 1.0


def test_alpha_matches_nltk_annotation_task():
    from nltk.metrics.agreement import AnnotationTask
    from nltk.metrics.distance import binary_distance, interval_distance

    for seed in range(4):
        rng = np.random.default_rng(100 + seed)
        for kind, level, distance in [
            ("int", "nominal", binary_distance),
            ("int", "interval", interval_distance),
            ("cont2", "interval", interval_distance),
            ("cont", "interval", interval_distance),
        ]:
            matrix = random_matrix(rng, 5, 60, kind)
            # NLTK triples are (coder, item, label)
            task = AnnotationTask(
                data=[(c, u, v) for (u, c, v) in to_triples(matrix)], distance=distance
            )
            assert krippendorff_alpha(matrix, level) == pytest.approx(task.alpha(), abs=1e-10)


# ----------------------------------------------------------------------------- alpha: properties


def test_alpha_invariances():
    rng = np.random.default_rng(21)
    matrix = random_matrix(rng, 4, 50, "int")
    arr = np.array([[np.nan if v is None else v for v in row] for row in matrix], dtype=float)
    # interval alpha is invariant under affine maps, ordinal under monotone maps,
    # nominal under relabelling (here to strings)
    assert krippendorff_alpha(3.5 * arr - 2, "interval") == pytest.approx(krippendorff_alpha(arr, "interval"), abs=1e-12)
    assert krippendorff_alpha(np.exp(arr), "ordinal") == pytest.approx(krippendorff_alpha(arr, "ordinal"), abs=1e-12)
    names = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    labelled = [[None if v is None else names[v] for v in row] for row in matrix]
    assert krippendorff_alpha(labelled, "nominal") == pytest.approx(krippendorff_alpha(arr, "nominal"), abs=1e-12)
    trip = [(u, c, v) for (u, c, v) in to_triples(labelled)]
    assert krippendorff_alpha_from_triples(trip, "nominal") == pytest.approx(krippendorff_alpha(arr, "nominal"), abs=1e-12)
    # ordinal is not invariant under a non-monotone relabelling (so the test above can fail)
    swapped = np.where(arr == 1, 5, np.where(arr == 5, 1, arr))
    assert krippendorff_alpha(swapped, "ordinal") != pytest.approx(krippendorff_alpha(arr, "ordinal"), abs=1e-3)


def test_alpha_unpairable_units_and_missing_triples_are_ignored():
    base = krippendorff_alpha(KRIPPENDORFF_2011, "interval")
    # an extra unit coded by one coder only changes nothing
    extended = [row + [None] for row in KRIPPENDORFF_2011]
    extended[0][-1] = 5
    assert krippendorff_alpha(extended, "interval") == pytest.approx(base, abs=1e-12)
    triples = to_triples(KRIPPENDORFF_2011) + [("u99", "c0", 4), ("u3", "c9", None), ("u4", "c9", float("nan"))]
    assert krippendorff_alpha_from_triples(triples, "interval") == pytest.approx(base, abs=1e-12)
    arr = np.array([[np.nan if v is None else v for v in row] for row in KRIPPENDORFF_2011], dtype=float)
    numeric_triples = np.array([(u, c, arr[c, u]) for c in range(4) for u in range(12)])  # nan kept
    assert krippendorff_alpha_from_triples(numeric_triples, "interval") == pytest.approx(base, abs=1e-12)


def test_alpha_perfect_agreement_and_undefined_case():
    assert krippendorff_alpha([[1, 2, 3, None], [1, 2, 3, 4]], "nominal") == 1.0
    assert krippendorff_alpha([[0.2, 0.7, 0.9], [0.2, 0.7, 0.9]], "interval") == pytest.approx(1.0)
    # all pairable values identical: expected disagreement 0, alpha undefined -> nan
    for level in ALPHA_LEVELS:
        assert math.isnan(krippendorff_alpha([[3, 3, 3, 1], [3, 3, 3, None]], level))
    # systematic disagreement is negative
    assert krippendorff_alpha([[1, 2, 1, 2], [2, 1, 2, 1]], "nominal") < 0


@pytest.mark.parametrize(
    "data, level, match",
    [
        (KRIPPENDORFF_2011, "cardinal", "unknown level"),
        ([[1, None, 3], [None, 2, None]], "interval", "pairable"),
        ([[None, None]], "nominal", "pairable"),
        ([1, 2, 3], "interval", "2-D"),
        ([[1, -2, 3], [1, 2, 3]], "ratio", "non-negative"),
        ([["a", "b"], ["a", "c"]], "interval", "numeric"),
        ([[1.0, math.inf], [1.0, 2.0]], "interval", "inf"),
    ],
)
def test_alpha_errors(data, level, match):
    with pytest.raises(ValueError, match=match):
        krippendorff_alpha(data, level)


def test_alpha_from_triples_errors():
    with pytest.raises(ValueError, match="more than one value"):
        krippendorff_alpha_from_triples([("u1", "a", 1), ("u1", "a", 2), ("u1", "b", 2)], "nominal")
    with pytest.raises(ValueError, match="unit, coder, value"):
        krippendorff_alpha_from_triples([("u1", "a", 1), ("u1", "b")], "nominal")
    with pytest.raises(ValueError, match="shape"):
        krippendorff_alpha_from_triples(np.zeros((4, 2)), "nominal")
    with pytest.raises(ValueError, match="unknown level"):
        krippendorff_alpha_from_triples([("u1", "a", 1), ("u1", "b", 1)], "Nominal")
    with pytest.raises(ValueError, match="pairable"):
        krippendorff_alpha_from_triples([], "nominal")
    with pytest.raises(ValueError, match="numeric"):
        krippendorff_alpha_from_triples([("u1", "a", "x"), ("u1", "b", "y")], "ordinal")


def test_alpha_100k_triples_is_order_invariant():
    """100,000 triples (the size of a large campaign): finite, and the same for any row order.

    Speed is measured in benchmarks/agreement_speed.py, not here.
    """
    rng = np.random.default_rng(0)
    n_units, n_coders, per_unit = 20_000, 300, 5
    units = np.repeat(np.arange(n_units), per_unit)
    coders = np.concatenate([rng.choice(n_coders, per_unit, replace=False) for _ in range(n_units)])
    truth = rng.integers(1, 21, n_units)
    values = np.clip(truth[units] + rng.integers(-2, 3, units.size), 1, 20)
    triples = list(zip(units.tolist(), coders.tolist(), values.tolist()))
    assert len(triples) == 100_000
    perm = rng.permutation(len(triples))
    shuffled = [triples[i] for i in perm]
    for level in ALPHA_LEVELS:
        alpha = krippendorff_alpha_from_triples(triples, level)
        assert math.isfinite(alpha) and 0.0 < alpha < 1.0, level
        assert krippendorff_alpha_from_triples(shuffled, level) == pytest.approx(alpha, abs=1e-12)


# ----------------------------------------------------------------------------- split-half


def make_ratings(rng, n_items, raters_per_item, n_raters=40, noise=1.0, repeat_p=0.0):
    items, raters, scores = [], [], []
    truth = rng.normal(size=n_items)
    for i in range(n_items):
        m = raters_per_item(i) if callable(raters_per_item) else raters_per_item
        for r in rng.choice(n_raters, m, replace=False):
            reps = 2 if rng.random() < repeat_p else 1
            for _r in range(reps):
                items.append(f"img{i:03d}")
                raters.append(f"w{r}")
                scores.append(float(truth[i] + rng.normal(0, noise)))
    return items, raters, scores


def test_split_half_matches_naive_per_split_computation():
    rng = np.random.default_rng(4)
    items, raters, scores = make_ratings(rng, 25, lambda i: 1 + i % 7, repeat_p=0.2)
    n_splits, seed = 60, 9
    res = split_half_reliability(items, raters, scores, n_splits=n_splits, seed=seed, confidence=0.9)

    # independent: rater means per (item, rater), items with >= 2 distinct raters
    by_cell = defaultdict(list)
    for i, r, s in zip(items, raters, scores):
        by_cell[(i, r)].append(s)
    raters_of = defaultdict(set)
    for i, r in by_cell:
        raters_of[i].add(r)
    kept = sorted(i for i in raters_of if len(raters_of[i]) >= 2)
    assert res.n_items == len(kept)
    assert res.n_ratings == sum(1 for i in items if i in set(kept))

    cells = _split_half_cells(items, raters, np.asarray(scores))
    assert sorted(zip(cells.item_label, cells.rater_label)) == sorted(k for k in by_cell if k[0] in set(kept))
    for il, rl, sc in zip(cells.item_label, cells.rater_label, cells.score):
        assert sc == pytest.approx(np.mean(by_cell[(il, rl)]), abs=1e-12)
    p, s, k, masks = _split_half_distribution(cells.item, cells.score, n_splits, seed, keep_masks=True)

    sizes_seen = defaultdict(set)
    for split in range(n_splits):
        half_a, half_b = defaultdict(list), defaultdict(list)
        for c, in_a in enumerate(masks[split]):
            key = (cells.item_label[c], cells.rater_label[c])
            (half_a if in_a else half_b)[key[0]].append(np.mean(by_cell[key]))
        a, b = [], []
        for item in kept:
            m = len(raters_of[item])
            assert {len(half_a[item]), len(half_b[item])} == {m // 2, m - m // 2}
            sizes_seen[item].add(len(half_a[item]))
            a.append(np.mean(half_a[item]))
            b.append(np.mean(half_b[item]))
        assert p[split] == pytest.approx(st.pearsonr(a, b).statistic, abs=1e-12)
        assert s[split] == pytest.approx(st.spearmanr(a, b).statistic, abs=1e-12)
        assert k[split] == pytest.approx(st.kendalltau(a, b, variant="b").statistic, abs=1e-12)
    # with an odd number of raters, each half sometimes gets the extra rater
    for item in kept:
        m = len(raters_of[item])
        assert sizes_seen[item] == ({m // 2, m - m // 2})

    assert res.pearson == pytest.approx(p.mean(), abs=1e-12)
    assert res.spearman == pytest.approx(s.mean(), abs=1e-12)
    assert res.kendall_tau_b == pytest.approx(k.mean(), abs=1e-12)
    assert res.spearman_brown == pytest.approx(2 * p.mean() / (1 + p.mean()), abs=1e-12)
    assert res.ci["pearson"] == pytest.approx(tuple(np.quantile(p, [0.05, 0.95])), abs=1e-12)
    assert res.ci["kendall_tau_b"] == pytest.approx(tuple(np.quantile(k, [0.05, 0.95])), abs=1e-12)
    lo, hi = np.quantile(p, [0.05, 0.95])
    assert res.ci["spearman_brown"] == pytest.approx((2 * lo / (1 + lo), 2 * hi / (1 + hi)), abs=1e-12)


def test_split_half_assignment_is_uniform():
    # 3 items with 4 raters: each rater should be in half A about half of the time, and every one of
    # the C(4,2) = 6 partitions should occur about equally often
    items = [f"i{i}" for i in range(3) for _r in range(4)]
    raters = [f"r{r}" for _i in range(3) for r in range(4)]
    scores = list(np.arange(12.0))
    cells = _split_half_cells(items, raters, np.asarray(scores))
    n = 6000
    _p, _s, _k, masks = _split_half_distribution(cells.item, cells.score, n, 1, keep_masks=True)
    assert masks.reshape(n, 3, 4).sum(axis=2).tolist() == [[2, 2, 2]] * n
    freq = masks.mean(axis=0)
    assert np.all(np.abs(freq - 0.5) < 0.03)
    partitions = Counter(tuple(row[:4]) for row in masks)
    assert len(partitions) == 6
    assert all(abs(c / n - 1 / 6) < 0.03 for c in partitions.values())


def test_split_half_recovers_known_reliability():
    # score = true value (var 1) + noise (var 1.5^2); 10 raters per item: a half mean of 5 ratings
    # correlates with another at 1 / (1 + 2.25 / 5); the full mean's reliability is 1 / (1 + 2.25 / 10)
    rng = np.random.default_rng(7)
    items, raters, scores = make_ratings(rng, 3000, 10, n_raters=100, noise=1.5)
    res = split_half_reliability(items, raters, scores, n_splits=50)
    assert res.pearson == pytest.approx(1 / (1 + 2.25 / 5), abs=0.03)
    assert res.spearman_brown == pytest.approx(1 / (1 + 2.25 / 10), abs=0.03)
    assert res.ci["pearson"][0] <= res.pearson <= res.ci["pearson"][1]
    assert res.kendall_tau_b < res.spearman


def test_split_half_perfect_raters_and_properties():
    rng = np.random.default_rng(2)
    truth = rng.random(30)
    items = [i for i in range(30) for _r in range(4)]
    raters = [r for _i in range(30) for r in range(4)]
    scores = [truth[i] for i in items]
    res = split_half_reliability(items, raters, scores, n_splits=20)
    for name in ("pearson", "spearman", "kendall_tau_b", "spearman_brown"):
        assert getattr(res, name) == pytest.approx(1.0)
        assert res.ci[name] == pytest.approx((1.0, 1.0))

    items, raters, scores = make_ratings(np.random.default_rng(3), 40, lambda i: 1 + i % 5, repeat_p=0.1)
    a = split_half_reliability(items, raters, scores, n_splits=30, seed=5)
    b = split_half_reliability(items, raters, scores, n_splits=30, seed=5)
    assert a == b
    order = np.random.default_rng(0).permutation(len(items))
    c = split_half_reliability([items[i] for i in order], [raters[i] for i in order], [scores[i] for i in order], n_splits=30, seed=5)
    assert c.n_items == a.n_items and c.n_ratings == a.n_ratings
    assert c.pearson == pytest.approx(a.pearson, abs=1e-12)
    assert c.spearman == pytest.approx(a.spearman, abs=1e-12)
    assert c.kendall_tau_b == pytest.approx(a.kendall_tau_b, abs=1e-12)
    d = split_half_reliability(items, raters, scores, n_splits=30, seed=6)
    assert d.pearson != a.pearson
    # items rated by one rater only (even twice) are dropped
    e = split_half_reliability(items + ["solo", "solo"], raters + ["w1", "w1"], scores + [0.0, 9.0], n_splits=30, seed=5)
    assert (e.n_items, e.n_ratings, e.pearson) == (a.n_items, a.n_ratings, a.pearson)


def test_split_half_result_to_dict():
    items, raters, scores = make_ratings(np.random.default_rng(1), 20, 4)
    res = split_half_reliability(items, raters, scores, n_splits=10, seed=3, confidence=0.8)
    assert isinstance(res, SplitHalfResult)
    with pytest.raises(Exception):
        res.pearson = 0.0  # frozen
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["n_items"] == 20 and d["n_ratings"] == 80 and d["n_splits"] == 10 and d["seed"] == 3
    assert d["confidence"] == 0.8
    assert d["pearson"] == pytest.approx(res.pearson)
    assert d["ci"]["spearman"] == pytest.approx(list(res.ci["spearman"]))
    assert set(d["ci"]) == {"pearson", "spearman", "kendall_tau_b", "spearman_brown"}
    nan_res = SplitHalfResult(3, 6, 1, 0, math.nan, math.nan, math.nan, math.nan, {"pearson": (math.nan, math.nan)})
    nd = nan_res.to_dict()
    assert nd["pearson"] is None and nd["ci"]["pearson"] == [None, None]
    json.dumps(nd, allow_nan=False)


def test_split_half_constant_halves_give_nan_not_error():
    # all scores equal: every half's item means are constant, so every correlation is undefined
    items = [i for i in range(5) for _r in range(2)]
    raters = [r for _i in range(5) for r in range(2)]
    res = split_half_reliability(items, raters, [1.0] * 10, n_splits=5)
    assert math.isnan(res.pearson) and math.isnan(res.kendall_tau_b) and math.isnan(res.spearman_brown)
    assert res.to_dict()["pearson"] is None


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((["a", "b"], ["x"], [1.0, 2.0]), {}, "length"),
        ((["a", "a", "b", "b"], ["x", "y", "x", "y"], [1, 2, 3, 4]), {}, "at least 3 items"),
        ((["a", "a", "b", "b", "c"], ["x", "x", "x", "y", "x"], [1, 2, 3, 4, 5]), {}, "at least 3 items"),
        ((["a", "a"], ["x", "y"], [1.0, math.nan]), {}, "finite"),
        ((["a", "a"], ["x", "y"], ["p", "q"]), {}, "numeric"),
        ((list("aabbcc"), list("xyxyxy"), range(6)), {"n_splits": 0}, "n_splits"),
        ((list("aabbcc"), list("xyxyxy"), range(6)), {"confidence": 1.0}, "confidence"),
    ],
)
def test_split_half_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        split_half_reliability(*args, **kwargs)


def test_split_half_20k_ratings_200_splits():
    """20,000 ratings, 200 splits: the correlation between halves is what theory says.

    Speed is measured in benchmarks/agreement_speed.py, not here.
    """
    rng = np.random.default_rng(0)
    n_items = 4000
    items = np.repeat(np.arange(n_items), 5)
    raters = np.concatenate([rng.choice(500, 5, replace=False) for _ in range(n_items)])
    scores = rng.normal(size=n_items)[items] + rng.normal(size=items.size)
    res = split_half_reliability(items, raters, scores, n_splits=200)
    assert res.n_ratings == 20_000 and res.n_items == n_items
    assert res.pearson == pytest.approx(1 / (1 + 1 / 2.5), abs=0.03)  # halves of 2 and 3 ratings


# ----------------------------------------------------------------------------- majority vote


def test_majority_vote_and_shares():
    items = ["a", "a", "a", "b", "b", "c", "c", "c", "c"]
    labels = ["x", "y", "y", "z", "x", "y", "x", "y", "x"]
    assert majority_vote(items, labels) == {"a": "y", "b": "x", "c": "x"}  # ties -> smallest label
    shares = majority_vote_shares(items, labels)
    assert shares == {"a": {"x": pytest.approx(1 / 3), "y": pytest.approx(2 / 3)},
                      "b": {"x": 0.5, "z": 0.5}, "c": {"x": 0.5, "y": 0.5}}
    assert list(shares["b"]) == ["x", "z"]
    # numeric labels: smallest in numeric order, not string order
    assert majority_vote([1, 1], [10, 9]) == {1: 9}


def test_majority_vote_random_ties():
    items = [i for i in range(200) for _k in range(2)]
    labels = ["p", "q"] * 200  # every item tied
    first = majority_vote(items, labels, tie="first")
    assert set(first.values()) == {"p"}
    r1 = majority_vote(items, labels, tie="random", seed=1)
    assert r1 == majority_vote(items, labels, tie="random", seed=1)
    assert r1 != majority_vote(items, labels, tie="random", seed=2)
    assert 70 < sum(v == "p" for v in r1.values()) < 130
    # a clear winner is never replaced by a random choice
    assert majority_vote(["a", "a", "a"], ["q", "q", "p"], tie="random", seed=4) == {"a": "q"}


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((["a"], ["x"]), {"tie": "last"}, "tie"),
        ((["a", "b"], ["x"]), {}, "length"),
        (([], []), {}, "no votes"),
        ((["a", "b"], ["x", None]), {}, "None"),
        ((["a", "b"], [1.0, math.nan]), {}, "nan"),
    ],
)
def test_majority_vote_errors(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        majority_vote(*args, **kwargs)


# ----------------------------------------------------------------------------- Dawid-Skene


def simulate_workers(seed, n_items=300, n_classes=3, kinds=("good",) * 3 + ("random",) * 2):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, n_classes, n_items)
    items, workers, labels = [], [], []
    for w, kind in enumerate(kinds):
        for i in range(n_items):
            if kind == "good":
                lab = truth[i] if rng.random() < 0.9 else rng.choice([c for c in range(n_classes) if c != truth[i]])
            elif kind == "random":
                lab = rng.integers(0, n_classes)
            elif kind == "adversarial":
                lab = (truth[i] + 1) % n_classes
            else:  # perfect
                lab = truth[i]
            items.append(f"it{i}")
            workers.append(f"{kind}{w}")
            labels.append(f"class{int(lab)}")
    return items, workers, labels, {f"it{i}": f"class{int(t)}" for i, t in enumerate(truth)}


def accuracy(pred, truth):
    return sum(pred[i] == truth[i] for i in truth) / len(truth)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spam", ["random", "adversarial"])
def test_dawid_skene_beats_majority_vote_with_spammers(seed, spam):
    items, workers, labels, truth = simulate_workers(seed, kinds=("good",) * 3 + (spam,) * 2)
    ds = dawid_skene(items, workers, labels)
    mv = majority_vote(items, labels)
    assert ds.converged and ds.n_iter < 100
    assert accuracy(ds.labels, truth) >= accuracy(mv, truth)
    assert accuracy(ds.labels, truth) >= 0.95
    for w, acc in ds.worker_accuracy.items():
        if w.startswith("good"):
            assert acc == pytest.approx(0.9, abs=0.05)
        else:
            assert acc < 0.5
    assert all(v == pytest.approx(1 / 3, abs=0.1) for v in ds.priors.values())
    for post in ds.posteriors.values():
        assert sum(post.values()) == pytest.approx(1.0)
    for conf in ds.confusion.values():
        assert conf.shape == (3, 3)
        assert np.allclose(conf.sum(axis=1), 1.0)
    if spam == "adversarial":
        adv = next(w for w in ds.confusion if w.startswith("adversarial"))
        # learned: true class j is answered as j + 1
        assert all(ds.confusion[adv][j, (j + 1) % 3] > 0.9 for j in range(3))
        assert accuracy(ds.labels, truth) > accuracy(mv, truth)


def test_dawid_skene_perfect_workers_equals_majority_vote():
    items, workers, labels, truth = simulate_workers(5, n_items=100, kinds=("perfect",) * 4)
    ds = dawid_skene(items, workers, labels)
    assert ds.labels == majority_vote(items, labels) == truth
    assert all(max(p.values()) > 0.999 for p in ds.posteriors.values())
    assert ds.classes == ("class0", "class1", "class2")


def test_dawid_skene_deterministic_and_json():
    items, workers, labels, _truth = simulate_workers(9, n_items=80)
    a = dawid_skene(items, workers, labels)
    b = dawid_skene(items, workers, labels)
    assert isinstance(a, DawidSkeneResult)
    assert a.to_dict() == b.to_dict()
    d = json.loads(json.dumps(a.to_dict(), allow_nan=False))
    assert d["classes"] == ["class0", "class1", "class2"]
    assert len(d["confusion"]["good0"]) == 3 and d["n_iter"] == a.n_iter


def naive_dawid_skene(items, workers, labels, n_steps, s):
    """Pure-Python EM of Dawid & Skene (1979) from majority-vote shares, with pseudo-count s."""
    classes = sorted(set(labels))
    item_set = sorted(set(items))
    worker_set = sorted(set(workers))
    K = len(classes)
    votes = defaultdict(Counter)
    for i, l in zip(items, labels):
        votes[i][l] += 1
    T = {i: {c: votes[i][c] / sum(votes[i].values()) for c in classes} for i in item_set}
    for _step in range(n_steps):
        priors = {c: (sum(T[i][c] for i in item_set) + s) / (len(item_set) + K * s) for c in classes}
        conf = {}
        for w in worker_set:
            rows = [(i, l) for i, ww, l in zip(items, workers, labels) if ww == w]
            conf[w] = {}
            for j in classes:
                denom = sum(T[i][j] for i, _l in rows) + K * s
                conf[w][j] = {l: (sum(T[i][j] for i, ll in rows if ll == l) + s) / denom for l in classes}
        loglik = 0.0
        newT = {}
        for i in item_set:
            logp = {j: math.log(priors[j]) for j in classes}
            for ii, w, l in zip(items, workers, labels):
                if ii == i:
                    for j in classes:
                        logp[j] += math.log(conf[w][j][l])
            top = max(logp.values())
            z = sum(math.exp(v - top) for v in logp.values())
            loglik += top + math.log(z)
            newT[i] = {j: math.exp(logp[j] - top) / z for j in classes}
        T = newT
    return T, priors, conf, loglik


@pytest.mark.parametrize("n_steps", [1, 3])
def test_dawid_skene_matches_naive_em(n_steps):
    items, workers, labels, _truth = simulate_workers(12, n_items=40, kinds=("good", "good", "random", "adversarial"))
    # drop some answers so workers see different items, and add a repeated answer
    keep = [k for k in range(len(items)) if (k * 7) % 5 != 0]
    items = [items[k] for k in keep] + ["it3"]
    workers = [workers[k] for k in keep] + ["good0"]
    labels = [labels[k] for k in keep] + ["class2"]
    res = dawid_skene(items, workers, labels, max_iter=n_steps, tol=0.0, smoothing=0.3)
    T, priors, conf, loglik = naive_dawid_skene(items, workers, labels, n_steps, 0.3)
    assert res.n_iter == n_steps and not res.converged
    for i in T:
        for c in res.classes:
            assert res.posteriors[i][c] == pytest.approx(T[i][c], abs=1e-12)
    for c in res.classes:
        assert res.priors[c] == pytest.approx(priors[c], abs=1e-12)
    for w in conf:
        for j_idx, j in enumerate(res.classes):
            for l_idx, l in enumerate(res.classes):
                assert res.confusion[w][j_idx, l_idx] == pytest.approx(conf[w][j][l], abs=1e-12)
        expected_acc = sum(priors[j] * conf[w][j][j] for j in res.classes)
        assert res.worker_accuracy[w] == pytest.approx(expected_acc, abs=1e-12)
    assert res.log_likelihood == pytest.approx(loglik, rel=1e-12)
    assert res.labels == {i: max(res.classes, key=lambda c: (T[i][c], -res.classes.index(c))) for i in T}


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"smoothing": 0.0}, "smoothing"),
    ],
)
def test_dawid_skene_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dawid_skene(["a", "a"], ["w1", "w2"], ["x", "y"], **kwargs)
    with pytest.raises(ValueError, match="length"):
        dawid_skene(["a", "a"], ["w1"], ["x", "y"])
    with pytest.raises(ValueError, match="None"):
        dawid_skene(["a", "a"], ["w1", "w2"], ["x", None])


def test_package_does_not_import_django():
    import subprocess
    import sys

    code = (
        "import sys, captioneval.stats.agreement as a; "
        "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).resolve().parents[1]))
