"""Caption-set diversity reports (Wang & Chan, CVPR 2019) from stored set- and system-level runs.

* :func:`diversity_summary` -- per system: mean Self-CIDEr, LSA and mBLEU diversity over its caption
  sets, mean accuracy (CIDEr-D against the references; the reference system's own row is the
  leave-one-out human accuracy), the F-score of diversity and accuracy, vocabulary size and the
  lexical measures with the Lexical Gap where those runs exist.
* :func:`image_detail` -- one image: each system's caption set with its Self-CIDEr and LSA values,
  each caption's coordinates on the five strongest latent semantics (radar chart) and a 2-D map of
  all the image's captions (multidimensional scaling of their CIDEr-D kernel).

Both are public pages' data: they leave out the systems of campaigns whose results are not
published (:func:`crowd.privacy.private_system_ids`).

The F-score (Wang & Chan 2019, Sec. 5) is F = (1 + beta^2) div acc / (beta^2 div + acc) with the
system means of Self-CIDEr diversity and accuracy; the paper uses beta^2 = 5.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from captioneval.stats import finite_or_none
from crowd.models import Caption, Dataset, Image, ObjectLabel
from crowd.privacy import private_system_ids, public_systems
from metrics import pipeline
from metrics.models import MetricRun, SetScore, SystemScore
from captioneval.kernels import diversity as kernels
from captioneval.metrics.registry import LEXICAL_MEASURES, METRICS

from .reports import ReportError

SET_COLUMNS = ("self_cider", "lsa", "mbleu_4", "mbleu_mix", "set_accuracy")
DEFAULT_BETA2 = 5.0


def find_run(dataset: Dataset, metric: str, m: int | None = None, cider_df: str | None = None) -> MetricRun | None:
    """The done run of ``metric`` on ``dataset`` with these parameters (default: m = all, the
    dataset's own document frequencies, default vectors), or None."""
    supplied = pipeline.read_document_frequency(cider_df) if cider_df else None
    params = pipeline.run_params(dataset, metric, supplied, m=m)
    return MetricRun.objects.filter(
        dataset=dataset, metric=metric, version=METRICS[metric].version,
        params_key=pipeline.run_identity(params), status=MetricRun.DONE,
    ).first()


_num = finite_or_none  # None unless finite (captioneval.stats.finite_or_none)


def diversity_summary(dataset_name: str, m: int | None = None, beta2: float = DEFAULT_BETA2, cider_df: str | None = None) -> dict:
    """Per-system diversity, accuracy and F-score of ``dataset_name``.

    Returns ``{"dataset", "m", "beta2", "reference_system", "runs": {metric: run id},
    "systems": [{"system", "kind", "is_reference", "n_sets", "self_cider", "lsa", "mbleu_4",
    "mbleu_mix", "set_accuracy", "f_score", "vocabulary", "ttr", ..., "ldr_mtld", "lexical_gap_mtld", ...}]}``
    (means over the system's caption sets that have a value; None where a run is missing).

    Raises PipelineError (unknown dataset, bad ``cider_df``), ValueError (beta2 <= 0) or ReportError
    when no set-level run is done (the message gives the command to run).
    """
    if not beta2 > 0:
        raise ValueError(f"beta2 must be positive, got {beta2!r}")
    dataset = pipeline.get_dataset(dataset_name)
    runs = {k: find_run(dataset, k, m, cider_df) for k in SET_COLUMNS}
    runs = {k: r for k, r in runs.items() if r is not None}
    if not runs:
        raise ReportError(
            f"no caption-set diversity has been computed on dataset {dataset.name!r}; run: python manage.py "
            f"compute_metrics --dataset {dataset.name} --metric diversity{f' --m {m}' if m else ''} --wait"
        )
    system_runs = {k: find_run(dataset, k) for k in ("vocabulary", *LEXICAL_MEASURES)}
    system_runs = {k: r for k, r in system_runs.items() if r is not None}
    means: dict[str, dict[int, float]] = {}
    counts: dict[int, int] = defaultdict(int)
    for key, run in runs.items():
        per_system = defaultdict(list)
        for system_id, value in SetScore.objects.filter(run=run).values_list("system_id", "value"):
            if np.isfinite(value):
                per_system[system_id].append(value)
            if key == next(iter(runs)):
                counts[system_id] += 1
        means[key] = {s: float(np.mean(v)) for s, v in per_system.items()}
    sys_values = {
        key: {s.system_id: s for s in SystemScore.objects.filter(run=run)} for key, run in system_runs.items()
    }
    systems = []
    for system in public_systems(dataset).order_by("name"):
        row = {
            "system": system.name, "kind": system.kind, "is_reference": system.pk == dataset.reference_system_id,
            "n_sets": counts.get(system.pk, 0),
        }
        for key in SET_COLUMNS:
            row[key] = _num(means.get(key, {}).get(system.pk))
        div, acc = row["self_cider"], row["set_accuracy"]
        row["f_score"] = _num(kernels.f_score(np.array([div]), np.array([acc]), beta2)[0]) if None not in (div, acc) else None
        for key, by_system in sys_values.items():
            score = by_system.get(system.pk)
            row[key] = _num(score.value) if score else None
            if key != "vocabulary" and score is not None:
                row[f"ldr_{key}"] = score.details.get("ldr")
                row[f"lexical_gap_{key}"] = score.details.get("lexical_gap")
        systems.append(row)
    return {
        "dataset": dataset.name, "m": m, "beta2": beta2,
        "reference_system": getattr(dataset.reference_system, "name", None),
        "runs": {k: r.pk for k, r in {**runs, **system_runs}.items()},
        "systems": systems,
    }


def word_frequency_curves(dataset: Dataset) -> dict[str, tuple[int, list[int]]]:
    """{system name: (vocabulary size, sorted word counts)} from the done ``vocabulary`` run (public
    systems only); the counts are the curve the run stores (its first 2,000 ranks), the size is the
    run's value (every distinct word). ReportError if none."""
    run = find_run(dataset, "vocabulary")
    if run is None:
        raise ReportError(f"the vocabulary has not been computed on {dataset.name!r}; run: python manage.py "
                          f"compute_metrics --dataset {dataset.name} --metric vocabulary --wait")
    return {
        name: (int(value), details.get("frequencies", []))
        for name, value, details in SystemScore.objects.filter(run=run).exclude(system_id__in=private_system_ids(dataset))
        .order_by("system__name").values_list("system__name", "value", "details")
    }


def image_detail(dataset: Dataset, image: Image, m: int | None = None, k: int = 5, document_frequency=None) -> dict:
    """Everything the per-image page shows (see the module docstring). It reads the stored tokens
    (tokenising captions that have none) and builds the dataset's document frequencies, so pages
    read it from its cached report (:mod:`analysis.cached_reports`) instead of calling it.

    ``document_frequency``: a callable returning the dataset's set-level CIDEr-D document
    frequencies (:func:`metrics.pipeline._document_frequency_for_sets`), to share one table across
    the images of a dataset; default: build it here.

    Returns ``{"image", "objects": [(label, count)], "systems": [{"system", "is_reference",
    "captions": [str], "self_cider", "lsa", "radar_lsa": (m, k) list or None}], "mds": {"xy": (n, 2)
    list, "groups": [system], "captions": [str]} or None}``. Radar coordinates need at least 2
    captions; the MDS map at least 3 captions on the image. Captions of the systems of campaigns
    whose results are not published are left out (:func:`crowd.privacy.private_system_ids`).
    """
    rows = list(
        Caption.objects.filter(image=image).exclude(system_id__in=private_system_ids(dataset)).order_by("system__name", "key").values_list("id", "system_id", "system__name", "text")
    )
    tokens = pipeline._ensure_tokens(dataset, [r[0] for r in rows]) if rows else {}
    by_system: dict[tuple[int, str], list[tuple[str, str]]] = defaultdict(list)
    for cid, sid, name, text in rows:
        by_system[(sid, name)].append((text, tokens[cid]))
    values = {}
    for key in ("self_cider", "lsa"):
        run = find_run(dataset, key, m)
        if run is not None:
            values[key] = dict(SetScore.objects.filter(run=run, image=image).values_list("system_id", "value"))
    systems, all_tokens, all_groups, all_texts = [], [], [], []
    for (sid, name), caps in by_system.items():
        caps = caps[:m] if m else caps
        entry = {
            "system": name, "is_reference": sid == dataset.reference_system_id, "captions": [t for t, _ in caps],
            "self_cider": _num(values.get("self_cider", {}).get(sid)), "lsa": _num(values.get("lsa", {}).get(sid)),
            "radar_lsa": None,
        }
        if len(caps) >= 2:
            try:
                entry["radar_lsa"] = kernels.latent_coordinates([t for _, t in caps], method="lsa", k=k).tolist()
            except ValueError:  # e.g. every word is a stop word
                entry["radar_lsa"] = None
        systems.append(entry)
        all_tokens += [t for _, t in caps]
        all_groups += [name] * len(caps)
        all_texts += [t for t, _ in caps]
    mds = None
    if len(all_tokens) >= 3:
        df = document_frequency() if document_frequency else pipeline._document_frequency_for_sets(dataset)
        kernel = kernels.self_cider_kernel(all_tokens, df)
        mds = {"xy": kernels.mds_coordinates(kernel).tolist(), "groups": all_groups, "captions": all_texts}
    objects = list(ObjectLabel.objects.filter(image=image).values_list("label", "count"))
    return {"image": image.key, "objects": objects, "systems": systems, "mds": mds}
