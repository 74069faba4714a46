"""Published Flickr8k-Expert correlations (Kendall tau-c x 100): Hessel et al. 2021, CLIPScore, Table 1.
The same values are in github.com/YuigaWada/CaptionEvalKit-for-VLMs,
benchmarks/expected/*/flickr8k-ex.json."""
TAU_C_X100 = {"bleu_1": 32.3, "bleu_4": 30.8, "rouge_l": 32.3, "meteor": 41.8, "cider_d": 43.9}
TOLERANCE = 0.1


def check_published(report: dict) -> dict:
    """Return {metric: (ours x100, published)} and assert each is within the tolerance."""
    assert report["n_pairs"] == 5664 and report["n_ratings"] == 16992
    got = {m: (100 * report["metrics"][m]["kendall_tau_c"], v) for m, v in TAU_C_X100.items()}
    bad = {m: g for m, g in got.items() if abs(g[0] - g[1]) > TOLERANCE + 1e-9}
    assert not bad, f"tau-c x100 off the published values: {bad}"
    return got
