"""Set-level metric runs planned when a caption-set campaign is created (issue 17).

A diversity campaign (:mod:`crowd.kinds.diversity`) collects human judgments of how diverse each
caption set is. The study exists to validate the set-level diversity measures against those
judgments -- Self-CIDEr, LSA and mBLEU (Wang & Chan, CVPR 2019, "Describing like humans: on
diversity in image captioning", Sec. 5.3 and Table 2) -- so their runs are planned and started as
soon as such a campaign is created, and its report (:func:`analysis.campaigns.campaign_report`)
can correlate them with the judgments without a separate ``compute_metrics`` step.

Wiring (the layering rule of ``docs/architecture.md``: ``crowd`` must not import ``metrics``):
``crowd`` sends nothing new. This module receives Django's own ``post_save`` signal of
:class:`crowd.models.Campaign` (connected in :meth:`metrics.apps.MetricsConfig.ready`), and only for
a newly created campaign whose kind rates caption sets (``"set"`` in
:attr:`crowd.kinds.TaskKind.metric_levels`) and has a criterion listed in
:data:`CRITERION_DIRECTIONS`. The runs are planned and started in ``transaction.on_commit``, i.e.
after the campaign's creation has committed: a creation that rolls back (a bad option, no
pictures) plans nothing. With a broker (``CELERY_BROKER_URL``) the runs are queued for the
workers; without one (the quick start) they are computed in the creating process before
``create_campaign`` returns (seconds for the bundled datasets: 2,000 sets of Flickr8k-Expert in
about 5 s). Runs that are already done are not computed again (:func:`metrics.pipeline.plan_runs`
gets or creates one run per metric and parameters), so creating a second campaign costs nothing.
The runs use the default parameters every report reads (the dataset's own document frequencies)
and the campaign's ``captions_per_set`` (the ``m`` of the runs), so the scores are those of the
captions the raters were shown. A metric the dataset cannot support (Self-CIDEr without reference
captions for its document frequencies) is skipped with a warning; nothing here ever makes the
campaign's creation fail.
"""
from __future__ import annotations

import logging

from django.db import transaction

from . import pipeline
from captioneval.metrics.registry import METRICS

log = logging.getLogger("metrics.campaigns")

#: numeric criterion of caption-set judgments -> the :attr:`captioneval.metrics.base.Metric.higher`
#: direction of the set-level measures those judgments validate (Wang & Chan 2019, Table 2:
#: Self-CIDEr, LSA and mBLEU are all "more diverse"; set accuracy, "better", is not a diversity measure)
CRITERION_DIRECTIONS = {"diversity": "more diverse"}


def measures_of(criterion: str, levels=("set",)) -> list[str]:
    """Keys of the registered metrics at ``levels`` that measure ``criterion`` (their ``higher`` is
    the direction :data:`CRITERION_DIRECTIONS` gives it), in registry order; [] for a criterion
    not listed there. For ``"diversity"``: self_cider, lsa, mbleu_1..4, mbleu_mix (and any
    registered set-level plugin declaring "more diverse")."""
    direction = CRITERION_DIRECTIONS.get(criterion)
    if direction is None:
        return []
    return [key for key, m in METRICS.items() if m.level in levels and m.higher == direction]


def campaign_m(campaign) -> int | None:
    """Captions per set the campaign's raters saw (its ``captions_per_set`` option), or None for
    all; the ``m`` of the set-level runs that match its judgments."""
    m = (campaign.options or {}).get("captions_per_set")
    return int(m) if m else None


def set_metrics_for(campaign) -> list[str]:
    """The set-level metric keys a campaign's judgments validate: those measuring one of its kind's
    numeric criteria (:func:`measures_of`), for kinds that rate caption sets; [] otherwise."""
    from crowd.kinds import kind_of

    spec = kind_of(campaign)
    if "set" not in spec.metric_levels:
        return []
    keys: list[str] = []
    for criterion in spec.metric_criteria:
        keys += [k for k in measures_of(criterion) if k not in keys]
    return keys


def plan_campaign_runs(campaign) -> list:
    """Plan (get or create) the runs of :func:`set_metrics_for` on the campaign's dataset with the
    campaign's ``m``; returns the :class:`metrics.models.MetricRun` list (done ones included).
    Each metric is planned on its own, so one the dataset cannot support (PipelineError, logged)
    leaves the others planned."""
    runs = []
    for key in set_metrics_for(campaign):
        try:
            runs += pipeline.plan_runs(campaign.dataset.name, [key], m=campaign_m(campaign))
        except pipeline.PipelineError as exc:
            log.warning("campaign %s: %s not computed: %s", campaign.name, key, exc)
    return runs


def start_campaign_runs(campaign) -> list:
    """Plan (:func:`plan_campaign_runs`) and start the runs that are not done yet
    (:func:`metrics.tasks.start_runs`: queued with a broker, computed here without one). Returns the
    runs started. Never raises for a run's failure: an in-process run that fails is marked failed
    with its error (the campaign report then names the missing metric)."""
    from .tasks import start_runs

    todo = [r for r in plan_campaign_runs(campaign) if r.status != r.DONE]
    if todo:
        start_runs(todo)
    return todo


def on_campaign_saved(sender, instance, created: bool = False, raw: bool = False, **kwargs) -> None:
    """``post_save`` receiver for :class:`crowd.models.Campaign`: for a newly created campaign
    (not a fixture load, ``raw``) that rates caption sets, start its set-level metric runs once the
    creating transaction commits (see the module docstring). Logs, never raises."""
    if not created or raw:
        return
    try:
        wanted = set_metrics_for(instance)
    except Exception:  # noqa: BLE001 - e.g. a kind no longer registered: nothing to plan
        log.exception("campaign %s: its kind's metric levels could not be read", instance.name)
        return
    if not wanted:
        return
    pk = instance.pk

    def start():
        from crowd.models import Campaign

        campaign = Campaign.objects.filter(pk=pk).select_related("dataset").first()
        if campaign is None:
            return
        try:
            start_campaign_runs(campaign)
        except Exception:  # noqa: BLE001 - a metric problem must never undo or fail a campaign
            log.exception("campaign %s: set-level metric runs could not be started", campaign.name)

    transaction.on_commit(start)
