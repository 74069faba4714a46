"""The metrics the platform knows, their versions, and one entry point per level to score with them.

A metric *key* (``bleu_4``, ``cider_d``, ``self_cider``, ``mtld``...) names one number per unit of
its *level*:

* ``caption`` -- one per candidate caption (BLEU, METEOR, ROUGE-L, CIDEr-D, VIFIDEL): :func:`score`;
* ``set`` -- one per caption set, i.e. the captions of one system for one image (Self-CIDEr, LSA and
  mBLEU diversity, set accuracy; Wang & Chan 2019): :func:`score_sets`;
* ``system`` -- one per system's caption corpus (vocabulary size, TTR, MTLD... with the Lexical Gap
  against the references; Kershaw & Bober 2019): :func:`score_systems`.

The *version* string is stored with every run: it changes whenever the numbers a metric produces
could change, so results of different versions are never mixed. ``GROUPS`` names sets of keys for the
command line (``--metric diversity``).

Plugins: other distributions add caption-level metrics through the entry-point group
``captioneval.metrics`` (:mod:`metrics.scorers.plugins`). :func:`load_plugins`, run when this module
is imported, adds each valid one to :data:`METRICS` (level ``caption``, family ``plugin:<distribution>``,
its own version string) and :data:`PLUGINS`; a broken one is logged and listed in
:data:`UNAVAILABLE` / :data:`PLUGIN_PROBLEMS` with the reason, and never breaks the built-ins.

Django-free: everything works on plain lists of PTB-tokenised strings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import plugins as _plugins
from .coco import PYCOCOEVALCAP_VERSION


@dataclass(frozen=True)
class Metric:
    """Description of one metric.

    key : identifier used on the command line, in the database and in JSON output.
    name : the field's standard name, for tables and plots.
    family : scorers computed together (BLEU-1..4 come out of one pass).
    version : implementation version stored with each run.
    range : (low, high) of the per-caption score.
    needs_corpus : True when a score depends on dataset-wide statistics (CIDEr-D's document
        frequencies, also behind Self-CIDEr and set accuracy), so a chunk needs them.
    level : "caption", "set" or "system" (see the module docstring).
    needs_objects : True for metrics that compare captions with the image's object labels (VIFIDEL).
    higher : what a higher value means ("better", "more diverse", "more similar"; "worse" for a
        plugin metric whose scores fall as quality rises, see :func:`is_reversed`).
    """

    key: str
    name: str
    family: str
    version: str
    range: tuple[float, float]
    needs_corpus: bool = False
    description: str = ""
    level: str = "caption"
    needs_objects: bool = False
    higher: str = "better"


class UnknownMetricError(ValueError):
    """The metric key is not one the platform knows."""


class MetricUnavailableError(ValueError):
    """The metric exists in the field but cannot run in this installation (the message says why)."""


METRICS: dict[str, Metric] = {
    **{
        f"bleu_{n}": Metric(
            f"bleu_{n}", f"BLEU-{n}", "bleu", PYCOCOEVALCAP_VERSION, (0.0, 1.0),
            description=f"Sentence BLEU-{n} (Papineni et al. 2002) from pycocoevalcap, closest ref length.",
        )
        for n in range(1, 5)
    },
    "meteor": Metric(
        "meteor", "METEOR", "meteor", f"{PYCOCOEVALCAP_VERSION}/meteor-1.5", (0.0, 1.0),
        description="METEOR 1.5 (Denkowski & Lavie 2014), -l en -norm, from pycocoevalcap.",
    ),
    "rouge_l": Metric(
        "rouge_l", "ROUGE-L", "rouge", PYCOCOEVALCAP_VERSION, (0.0, 1.0),
        description="ROUGE-L F-measure, beta = 1.2 (Lin 2004), from pycocoevalcap.",
    ),
    "cider_d": Metric(
        "cider_d", "CIDEr-D", "cider", "captioneval-cider-d/1", (0.0, 10.0),
        needs_corpus=True,
        description="CIDEr-D (Vedantam et al. 2015), our vectorised implementation, equal to "
        "pycocoevalcap's Cider per caption.",
    ),
}

DIVERSITY_VERSION = "captioneval-diversity/1"
LEXICAL_VERSION = "captioneval-lexical/1+lexicalrichness-0.5.1"
VIFIDEL_VERSION = "captioneval-vifidel/1"

METRICS.update({
    "self_cider": Metric(
        "self_cider", "Self-CIDEr", "self_cider", DIVERSITY_VERSION, (0.0, 1.0), needs_corpus=True, level="set",
        higher="more diverse",
        description="Self-CIDEr diversity of a caption set (Wang & Chan, CVPR 2019, Eq. 5-7): kernelised LSA "
        "over the CIDEr-D kernel, -log(r)/log(m).",
    ),
    "lsa": Metric(
        "lsa", "LSA diversity", "lsa", DIVERSITY_VERSION, (0.0, 1.0), level="set", higher="more diverse",
        description="LSA diversity (Wang & Chan 2019, Sec. 3.1): singular values of the word-count matrix.",
    ),
    **{
        f"mbleu_{n}": Metric(
            f"mbleu_{n}", f"1 - mBLEU-{n}", "mbleu", DIVERSITY_VERSION, (0.0, 1.0), level="set", higher="more diverse",
            description=f"mBLEU-{n} diversity 1 - (1/m) sum_i BLEU-{n}(c_i, C minus c_i) (Shetty et al. 2017; "
            "Wang & Chan 2019).",
        )
        for n in range(1, 5)
    },
    "mbleu_mix": Metric(
        "mbleu_mix", "1 - mBLEU-mix", "mbleu", DIVERSITY_VERSION, (0.0, 1.0), level="set", higher="more diverse",
        description="1 - mean of mBLEU-1..4 (Wang & Chan 2019).",
    ),
    "set_accuracy": Metric(
        "set_accuracy", "Accuracy (CIDEr-D)", "set_accuracy", "captioneval-cider-d/1", (0.0, 10.0),
        needs_corpus=True, level="set",
        description="Mean CIDEr-D of the set's captions against the references (Wang & Chan 2019, Sec. 5); for "
        "the reference set itself the leave-one-out human accuracy.",
    ),
    "vocabulary": Metric(
        "vocabulary", "Vocabulary size", "vocabulary", DIVERSITY_VERSION, (0.0, float("inf")), level="system",
        higher="more diverse",
        description="Distinct words in a system's captions, with its word-frequency curve (Wang & Chan 2019, Figs. 2-3).",
    ),
    **{
        key: Metric(
            key, name, "lexical", LEXICAL_VERSION, rng, level="system", higher="more diverse",
            description=f"{name} of the system's caption corpus (lexicalrichness), with the lexical diversity "
            "ratio l_d against the references and the Lexical Gap L_g (Kershaw & Bober 2019).",
        )
        for key, name, rng in [
            ("ttr", "TTR", (0.0, 1.0)), ("root_ttr", "Root TTR", (0.0, float("inf"))),
            ("log_ttr", "Log TTR", (0.0, 1.0)), ("hdd", "HD-D", (0.0, 1.0)), ("mtld", "MTLD", (0.0, float("inf"))),
        ]
    },
    "vifidel": Metric(
        "vifidel", "VIFIDEL", "vifidel", VIFIDEL_VERSION, (0.0, 1.0), needs_objects=True, higher="more faithful",
        description="VIFIDEL (Madhyastha et al., ACL 2019): word mover's similarity between the caption and the "
        "image's object labels; the raw distance is kept with each score.",
    ),
    "vifidel_ref": Metric(
        "vifidel_ref", "VIFIDEL (reference-weighted)", "vifidel", VIFIDEL_VERSION, (0.0, 1.0), needs_objects=True,
        higher="more faithful",
        description="VIFIDEL with word importance weights from the reference captions (Madhyastha et al. 2019, Sec. 3).",
    ),
})

LEXICAL_MEASURES = ("ttr", "root_ttr", "log_ttr", "hdd", "mtld")

UNAVAILABLE: dict[str, str] = {
    "spice": (
        "SPICE is unavailable: its jar downloads Stanford CoreNLP 3.6.0 at start-up, which no package "
        "registry provides and this platform never fetches at run time"
    ),
}

#: the COCO caption metrics, computed when no metric is named
DEFAULT_METRICS: tuple[str, ...] = ("bleu_1", "bleu_2", "bleu_3", "bleu_4", "meteor", "rouge_l", "cider_d")

#: names usable in place of metric keys on the command line and in forms
GROUPS: dict[str, tuple[str, ...]] = {
    "coco": DEFAULT_METRICS,
    "diversity": ("self_cider", "lsa", "mbleu_1", "mbleu_2", "mbleu_3", "mbleu_4", "mbleu_mix", "set_accuracy", "vocabulary"),
    "lexical": LEXICAL_MEASURES,
    "fidelity": ("vifidel", "vifidel_ref"),
}


assert not set(GROUPS) & set(METRICS), "a group name must not shadow a metric key"

#: the platform's own metrics and unavailable keys, before plugins are added
BUILTIN_METRICS: dict[str, Metric] = dict(METRICS)
BUILTIN_UNAVAILABLE: dict[str, str] = dict(UNAVAILABLE)
#: plugin key -> :class:`metrics.scorers.plugins.LoadedPlugin` (metric, entry point, distribution)
PLUGINS: dict[str, _plugins.LoadedPlugin] = {}
#: entry-point name -> why that plugin is unavailable (also in :data:`UNAVAILABLE` unless the name
#: is a built-in key)
PLUGIN_PROBLEMS: dict[str, str] = {}


def load_plugins(entry_points=None) -> _plugins.Discovery:
    """(Re)discover the plugin metrics of the ``captioneval.metrics`` entry-point group and update
    :data:`METRICS`, :data:`PLUGINS`, :data:`PLUGIN_PROBLEMS` and :data:`UNAVAILABLE` in place (so
    modules holding references to these dicts see the change); previously loaded plugins that are
    gone are removed. Runs once when this module is imported; call it again after installing a
    plugin in a running process, or in tests after changing ``sys.path``.

    ``entry_points`` : the entry points to consider (default: the installed ones).

    Returns the :class:`metrics.scorers.plugins.Discovery`. Never raises for a broken plugin (it is
    logged as a warning and listed as unavailable); built-in metrics are never replaced.
    """
    import importlib

    importlib.invalidate_caches()
    found = _plugins.discover(set(BUILTIN_METRICS) | set(GROUPS) | set(BUILTIN_UNAVAILABLE), entry_points)
    for key in [k for k in METRICS if k not in BUILTIN_METRICS]:
        del METRICS[key]
    UNAVAILABLE.clear()
    UNAVAILABLE.update(BUILTIN_UNAVAILABLE)
    PLUGINS.clear()
    PLUGIN_PROBLEMS.clear()
    for key, plugin in found.loaded.items():
        m = plugin.metric
        METRICS[key] = Metric(
            key, m.name, f"plugin:{plugin.distribution}", m.version, (float(m.range[0]), float(m.range[1])),
            needs_corpus=m.needs_corpus, description=m.description, level="caption", higher=m.higher,
        )
        PLUGINS[key] = plugin
    for name, reason in found.problems.items():
        PLUGIN_PROBLEMS[name] = reason
        if name not in BUILTIN_METRICS and name not in BUILTIN_UNAVAILABLE and name not in GROUPS:
            UNAVAILABLE[name] = reason
    return found


def is_plugin(key: str) -> bool:
    """True when ``key`` is a metric contributed by a plugin distribution."""
    return key in PLUGINS


def is_reversed(key: str) -> bool:
    """True when a *lower* value of metric ``key`` means a better caption (``higher == "worse"``);
    correlations of such a metric with human quality judgments are expected to be negative."""
    return key in METRICS and METRICS[key].higher == "worse"


def expand(keys) -> list[str]:
    """Replace group names (:data:`GROUPS`) by their keys, keeping order and dropping repeats."""
    out = []
    for key in keys:
        out.extend(GROUPS.get(key, (key,)))
    return list(dict.fromkeys(out))


def keys_at(level: str) -> list[str]:
    """Keys of the metrics of one level, in registry order."""
    return [k for k, m in METRICS.items() if m.level == level]


def get_metric(key: str) -> Metric:
    """Return the :class:`Metric` for ``key``.

    Raises
    ------
    MetricUnavailableError
        for a known metric that cannot run here (SPICE), with the reason.
    UnknownMetricError
        for any other unknown key; the message lists the known keys.
    """
    if key in METRICS:
        return METRICS[key]
    if key in UNAVAILABLE:
        raise MetricUnavailableError(UNAVAILABLE[key])
    raise UnknownMetricError(f"unknown metric {key!r}; known metrics: {', '.join(METRICS)}")


def score(
    key: str,
    candidates: Sequence[str],
    references: Sequence[Sequence[str]],
    document_frequency=None,
) -> np.ndarray:
    """Score each candidate against its references with metric ``key``.

    Parameters
    ----------
    candidates : length-n sequence of PTB-tokenised captions.
    references : length-n sequence of non-empty lists of PTB-tokenised reference captions.
    document_frequency : :class:`metrics.scorers.cider.DocumentFrequency` or None
        CIDEr-D only: the document-frequency table. None = computed from ``references`` (the COCO
        default); pass the dataset-wide table when scoring one chunk of a dataset. Ignored by
        plugin metrics.

    Plugin metrics (:data:`PLUGINS`) call the plugin's ``score(candidates, references)`` with lists
    of the same tokenised strings and check that it returned one finite float per candidate within
    its declared range.

    Returns
    -------
    ndarray of shape (n,), float64, within ``get_metric(key).range``.

    Raises
    ------
    UnknownMetricError, MetricUnavailableError, ValueError (bad input), JavaMissingError (METEOR),
    :class:`metrics.scorers.plugins.PluginError` (a plugin failed or returned bad scores; the message
    names the plugin and its distribution).
    """
    metric = get_metric(key)
    if key in PLUGINS:
        if len(candidates) != len(references):
            raise ValueError(f"{len(candidates)} candidates but {len(references)} reference lists")
        return _plugins.call_scorer(PLUGINS[key], candidates, references)
    if metric.family == "bleu":
        from .coco import bleu

        return bleu(candidates, references, n=4)[int(key[-1]) - 1]
    if metric.family == "meteor":
        from .coco import meteor

        return meteor(candidates, references)
    if metric.family == "rouge":
        from .coco import rouge_l

        return rouge_l(candidates, references)
    if metric.family == "cider":
        from .cider import cider_d

        return cider_d(candidates, references, df=document_frequency)
    raise ValueError(f"{key!r} is a {metric.level}-level metric; use score_sets/score_systems/score_vifidel")


def score_vifidel(
    key: str,
    texts: Sequence[str],
    objects: Sequence[dict],
    references: Sequence[Sequence[str]] | None = None,
    vectors: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """VIFIDEL of each caption against its image's object labels (Madhyastha et al. 2019).

    Parameters
    ----------
    texts : n raw captions (VIFIDEL does its own word processing; see :mod:`metrics.scorers.vifidel`).
    objects : n mappings label -> instance count.
    references : n lists of reference captions (``vifidel_ref`` only: importance weights).
    vectors : word-vector file, or None for the bundled GloVe 6B 50-d.

    Returns ``(similarity, distance)``, two float64 arrays (n,): the similarity exp(-WMD) in (0, 1]
    that correlations use, and the raw word mover's distance; NaN where no score is possible (no
    known word in the caption, no objects).
    """
    from . import embeddings, vifidel

    metric = get_metric(key)
    if metric.family != "vifidel":
        raise ValueError(f"{key!r} is not a VIFIDEL metric")
    if key == "vifidel_ref" and references is None:
        raise ValueError("vifidel_ref needs the reference captions of each caption")
    kv = embeddings.load_vectors(vectors)
    batch = vifidel.vifidel_many(
        list(texts), list(objects), [list(r) for r in references] if key == "vifidel_ref" else None, vectors=kv
    )
    return batch.similarity, batch.distance


def score_sets(
    key: str,
    sets: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]] | None = None,
    document_frequency=None,
    m: int | None = None,
    is_reference: Sequence[bool] | None = None,
) -> np.ndarray:
    """Score caption sets with the set-level metric ``key``.

    Parameters
    ----------
    sets : n_sets lists of PTB-tokenised captions (a system's captions for one image, in key order).
    references : n_sets lists of tokenised references of each set's image (``set_accuracy`` only;
        an empty list gives NaN: nothing to compare with).
    document_frequency : :class:`metrics.scorers.cider.DocumentFrequency` (``self_cider`` and
        ``set_accuracy``; required for ``self_cider``).
    m : use the first ``m`` captions of each set (None: all). Sets with fewer than 2 captions give NaN
        for the diversity metrics (diversity is undefined for one caption).
    is_reference : per set, True when the set *is* the image's references (``set_accuracy`` then gives
        the leave-one-out human accuracy, Wang & Chan 2019 Sec. 5).

    Returns ndarray (n_sets,), float64, NaN where undefined.
    """
    from . import diversity

    metric = get_metric(key)
    if metric.level != "set":
        raise ValueError(f"{key!r} is not a set-level metric")
    sets = [list(s[:m]) if m else list(s) for s in sets]
    out = np.full(len(sets), np.nan)
    if metric.family == "set_accuracy":
        if references is None:
            raise ValueError("set_accuracy needs the references of each set")
        flags = list(is_reference) if is_reference is not None else [False] * len(sets)
        model = [i for i, s in enumerate(sets) if references[i] and not flags[i]]
        human = [i for i, s in enumerate(sets) if flags[i] and len(sets[i]) >= 2]
        if model:
            out[model] = diversity.accuracy([sets[i] for i in model], [references[i] for i in model], df=document_frequency)
        if human:
            out[human] = diversity.leave_one_out_accuracy([sets[i] for i in human], df=document_frequency)
        return out
    ok = [i for i, s in enumerate(sets) if len(s) >= 2]
    if not ok:
        return out
    chosen = [sets[i] for i in ok]
    if metric.family == "self_cider":
        if document_frequency is None:
            raise ValueError("Self-CIDEr needs a document-frequency table")
        out[ok] = diversity.self_cider(chosen, document_frequency)
    elif metric.family == "lsa":
        out[ok] = diversity.lsa_diversity(chosen)
    elif metric.family == "mbleu":
        column = 4 if key == "mbleu_mix" else int(key[-1]) - 1
        out[ok] = diversity.mbleu(chosen)[:, column]
    return out


def score_systems(key: str, corpora: Sequence[Sequence[str]], reference_corpora: Sequence[Sequence[str]] | None = None):
    """Score each system's caption corpus with the system-level metric ``key``.

    Parameters
    ----------
    corpora : per system, its PTB-tokenised captions. MTLD depends on the order: the pipeline passes
        the first caption of every image, then the second..., the order that mixes images (image
        by image, MTLD on THumB's references halves: 26.6 instead of 54.9).
    reference_corpora : the reference captions as R corpora of one reference per image (the k-th
        reference of every image); the reference value L(c_r) is the mean of L over them, so that it
        is measured on a corpus of the size of a one-caption-per-image system (TTR-type measures
        fall with corpus size). None or empty: no ratio.

    Returns a list of ``(value, details)``: for ``vocabulary`` value = distinct words and details =
    ``{"n_tokens", "frequencies": [sorted word counts, most frequent first, at most 2,000 ranks],
    "top": [[word, count] x 20]}``; for the lexical measures value = L(corpus) and details =
    ``{"reference": L(c_r), "ldr": l_d = L(c_m) / L(c_r), "lexical_gap": L_g}`` (Kershaw & Bober 2019,
    Eqs. 1-2; mu = 0.81, alpha = 5), None/NaN where a corpus is too short for the measure (HD-D
    needs 42 tokens).
    """
    metric = get_metric(key)
    if metric.level != "system":
        raise ValueError(f"{key!r} is not a system-level metric")
    if metric.family == "vocabulary":
        from .diversity import vocabulary

        out = []
        for corpus in corpora:
            size, counts = vocabulary(corpus)
            ranked = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
            out.append((float(size), {
                "n_tokens": int(sum(counts.values())),
                "frequencies": [c for _, c in ranked[:2000]],
                "top": [[w, c] for w, c in ranked[:20]],
            }))
        return out
    from . import lexical

    refs = [list(c) for c in (reference_corpora or []) if c]
    ref_values = [lexical.corpus_diversity(c, key) for c in refs]
    ref_values = [v for v in ref_values if np.isfinite(v)]
    ref_value = float(np.mean(ref_values)) if ref_values else float("nan")
    out = []
    for corpus in corpora:
        value = lexical.corpus_diversity(list(corpus), key) if corpus else float("nan")
        ratio = value / ref_value if ref_value and np.isfinite(ref_value) and np.isfinite(value) else float("nan")
        gap = float(lexical.lexical_gap(ratio)) if np.isfinite(ratio) else float("nan")
        out.append((float(value), {"reference": _finite(ref_value), "ldr": _finite(ratio), "lexical_gap": _finite(gap)}))
    return out


def _finite(x: float) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


load_plugins()  # last: a plugin may import this module while it loads
