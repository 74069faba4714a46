"""Relevance and thoroughness of one caption for an image, each on a 1-5 scale (the COMPOSITE
protocol of Aditya et al. 2015, "From images to sentences through scene description graphs using
commonsense reasoning and knowledge", also used by Madhyastha, Wang & Specia, ACL 2019, "VIFIDEL").

Relevance: how well the caption describes what is in the image (1 = not at all, 5 = perfectly).
Thoroughness: how much of the image's content the caption covers (1 = almost nothing, 5 = all the
important content). Aggregate = mean per caption and criterion. Agreement: Krippendorff's alpha
with the ordinal distance, per criterion. Gold: a caption of another image (sharing no content word
with this image's references) must get relevance 1.
"""
from __future__ import annotations

from .base import (
    AnswerError,
    CampaignSpecError,
    ItemSpec,
    Scale,
    TaskKind,
    Unit,
    default_gold,
    image_fields,
    parse_number,
    pick_images,
    register,
    words,
)

STOP = frozenset("a an the of in on at to and with is are its it his her their for from by".split())


class Rating(TaskKind):
    """Relevance and thoroughness of one caption, 1-5 each; unit: the caption (see the module
    docstring)."""

    name = "rating"
    title = "Relevance and thoroughness"
    unit = "caption"
    criteria = ("relevance", "thoroughness")
    SCALE = (1, 5)
    scales = {"relevance": Scale(*SCALE), "thoroughness": Scale(*SCALE)}
    metric_criteria = criteria
    agreement_level = "ordinal"
    template = "crowd/tasks/rating.html"
    template_version = "rating-1"
    shows_images = True
    instructions = (
        "Look at the image and read the caption. Rate its relevance: how well does the caption "
        "describe what is in the image? (1 = not at all, 5 = perfectly). Rate its thoroughness: how "
        "much of the image's important content does the caption cover? (1 = almost nothing, 5 = all "
        "of it). Grammar and style do not matter."
    )

    def build_items(self, dataset, options, rng):
        from crowd.models import Caption

        images = pick_images(dataset, options, rng)
        cands = list(
            dataset.candidates().filter(image__in=images).select_related("image", "system").order_by("image__key", "key")
        )
        if not cands:
            raise CampaignSpecError(f"dataset {dataset.name!r} has no candidate captions for the chosen images")
        items = [
            ItemSpec(
                f"caption-{c.pk}",
                {**image_fields(c.image, options.get("image_url")), "caption": c.pk, "system": c.system_id, "text": c.text},
            )
            for c in cands
        ]
        refs = {}
        for image_id, text in dataset.references().values_list("image_id", "text"):
            refs.setdefault(image_id, set()).update(w for w in words(text) if w not in STOP)
        pool = list(Caption.objects.filter(image__dataset=dataset).values_list("image_id", "text"))
        n_gold = options.get("gold", default_gold(len(items)))
        for g in range(n_gold):
            for _ in range(200):
                target = rng.choice(items).payload
                other_image, text = rng.choice(pool)
                content = {w for w in words(text) if w not in STOP}
                if other_image != target["image"] and not (content & refs.get(target["image"], set())):
                    break
            else:
                raise CampaignSpecError("could not find captions unrelated to the images for gold items")
            payload = {k: target[k] for k in ("image", "image_key", "image_url")} | {
                "caption": None, "system": None, "text": text,
            }
            items.append(ItemSpec(f"gold-{g + 1}", payload, gold={"relevance": 1}))
        return items

    def context(self, payload, order):
        return {"text": payload["text"], "criteria": [
            {"field": "relevance", "label": "Relevance", "low": "not at all relevant", "high": "perfectly relevant"},
            {"field": "thoroughness", "label": "Thoroughness", "low": "covers almost nothing", "high": "covers everything important"},
        ], "scale": list(range(self.SCALE[0], self.SCALE[1] + 1))}

    def clean(self, payload, order, data, *, item=None):
        errors = {}
        answer = {c: parse_number(data, c, *self.SCALE, errors, integer=True) for c in self.criteria}
        if errors:
            raise AnswerError(errors)
        return answer

    def check_gold(self, answer, gold):
        return answer["relevance"] == gold["relevance"]

    def units(self, item_key, payload, answer):
        return [Unit(item_key, c, answer[c]) for c in self.criteria]

    def record(self, assignment, answer):
        from crowd.models import HumanJudgment

        p = assignment.item.payload
        HumanJudgment.objects.bulk_create([
            HumanJudgment(
                image_id=p["image"], system_id=p["system"], caption_id=p["caption"], criterion=c,
                rater=assignment.worker.rater_id, score=float(answer[c]), source=f"campaign:{assignment.campaign.name}",
                campaign=assignment.campaign,
            )
            for c in self.criteria
        ])

    def simulation_hints(self, campaign):
        """Latent relevance per caption id: the imported mean judgment of the caption rescaled to
        1-5 when the dataset has one (e.g. Flickr8k-Expert quality 1-4), else none."""
        from django.db.models import Avg

        from crowd.models import HumanJudgment

        ds = campaign.dataset
        if ds.scale_min is None or ds.scale_max is None or ds.scale_max <= ds.scale_min:
            return {}
        imported = HumanJudgment.objects.filter(image__dataset=ds, campaign__isnull=True, caption__isnull=False)
        if ds.criterion:  # the dataset's main criterion, as analysis.reports.dataset_judgments reads it
            imported = imported.filter(criterion=ds.criterion)
        rows = imported.values("caption_id").annotate(mean=Avg("score"))
        lo, hi = ds.scale_min, ds.scale_max
        return {"latent": {r["caption_id"]: 1 + 4 * (r["mean"] - lo) / (hi - lo) for r in rows}}

    def simulate(self, payload, order, rng, profile, hints):
        if profile.spammer:
            return {c: str(rng.randint(*self.SCALE)) for c in self.criteria}
        if payload["caption"] is None:  # a caption of another image: an attentive rater says 1
            return {c: "1" for c in self.criteria}
        else:
            latent = hints.get("latent", {}).get(payload["caption"], hints.get("latent", {}).get(str(payload["caption"]), 3.0))
        out = {}
        for c in self.criteria:
            value = latent + rng.gauss(0, profile.noise * 4)
            out[c] = str(int(min(5, max(1, round(value)))))
        return out


register(Rating())
