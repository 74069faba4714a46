"""A toy task kind in one file, the worked example of docs/architecture.md ("adding a task kind"):
rate the fluency of one caption from 1 (not fluent) to 3 (fluent).

Everything the platform needs from a kind is declared here: the rated unit (a caption), the
criterion and its scale, which criteria are numeric judgments to correlate with the metrics, the
agreement distance, the items, the form check, where answers are recorded, and a simulated rater.
The campaign report, quality control and the engine then work with it unchanged
(tests/test_task_kind_plugin_point.py). A kind inside the platform is the same file in
``crowd/kinds/``, where it is found automatically; this one lives with the tests and is registered
when the test imports it.
"""
from __future__ import annotations

from crowd.kinds import AnswerError, CampaignSpecError, ItemSpec, Scale, TaskKind, Unit, register
from crowd.kinds.base import image_fields, parse_number, pick_images


class Fluency(TaskKind):
    """Fluency of a candidate caption, 1-3, one judgment per rater and caption; mean per caption."""

    name = "toy_fluency"
    title = "Fluency (toy)"
    unit = "caption"
    criteria = ("fluency",)
    scales = {"fluency": Scale(1, 3)}
    metric_criteria = ("fluency",)
    agreement_level = "ordinal"
    template = "crowd/tasks/rating.html"  # the rating form: one row of radio buttons per criterion
    template_version = "toy-fluency-1"
    instructions = "Read the caption. How fluent is it? 1 = not fluent, 3 = perfectly fluent."

    def build_items(self, dataset, options, rng):
        """One item per candidate caption of the chosen images; no gold items."""
        images = pick_images(dataset, options, rng)
        captions = dataset.candidates().filter(image__in=images).select_related("image").order_by("image__key", "key")
        items = [
            ItemSpec(f"caption-{c.pk}", {**image_fields(c.image, options.get("image_url")), "caption": c.pk, "system": c.system_id,
                                         "text": c.text})
            for c in captions
        ]
        if not items:
            raise CampaignSpecError(f"dataset {dataset.name!r} has no candidate captions for the chosen images")
        return items

    def context(self, payload, order):
        return {"text": payload["text"], "scale": [1, 2, 3], "criteria": [
            {"field": "fluency", "label": "Fluency", "low": "not fluent", "high": "perfectly fluent"}]}

    def clean(self, payload, order, data, *, item=None):
        errors = {}
        value = parse_number(data, "fluency", 1, 3, errors, integer=True)
        if errors:
            raise AnswerError(errors)
        return {"fluency": value}

    def units(self, item_key, payload, answer):
        return [Unit(item_key, "fluency", answer["fluency"])]

    def record(self, assignment, answer):
        from crowd.models import HumanJudgment

        p = assignment.item.payload
        HumanJudgment.objects.create(
            image_id=p["image"], system_id=p["system"], caption_id=p["caption"], criterion="fluency",
            rater=assignment.worker.rater_id, score=float(answer["fluency"]),
            source=f"campaign:{assignment.campaign.name}", campaign=assignment.campaign,
        )

    def simulate(self, payload, order, rng, profile, hints):
        return {"fluency": str(rng.randint(1, 3))}


register(Fluency())
