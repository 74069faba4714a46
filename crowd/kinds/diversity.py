"""Caption-set diversity (Wang & Chan, CVPR 2019, "Describing like humans: on diversity in image
captioning", Sec. 5.3 human evaluation).

One image and several caption sets (e.g. the human references and each model's set) are shown
together; the rater scores each set's diversity in [0, 1], where diversity means the captions use
different words, phrases and sentence structures and describe different aspects (semantics) of the
image. Default 3 raters per image; aggregate = mean per set. Agreement: Krippendorff's alpha with
the interval distance. Gold: a set of identical captions must get a diversity near 0 (at most 0.2).
"""
from __future__ import annotations

import itertools

from .base import (
    AnswerError,
    CampaignSpecError,
    ItemSpec,
    Scale,
    Shown,
    TaskKind,
    Unit,
    default_gold,
    image_fields,
    parse_number,
    pick_images,
    register,
    words,
)

GOLD_MAX = 0.2


def latent_diversity(captions: list[str]) -> float:
    """The simulator's notion of diversity: 1 - mean pairwise Jaccard similarity of word sets
    (0 for identical captions, 1 for captions sharing no word)."""
    sets = [set(words(c)) for c in captions]
    pairs = list(itertools.combinations(sets, 2))
    if not pairs:
        return 0.0
    sim = [len(a & b) / len(a | b) if a | b else 1.0 for a, b in pairs]
    return 1.0 - sum(sim) / len(sim)


class Diversity(TaskKind):
    """Diversity of each caption set of an image, 0-1; unit: the caption set of one system for one
    image (see the module docstring)."""

    name = "diversity"
    title = "Caption-set diversity"
    unit = "caption_set"
    criteria = ("diversity",)
    scales = {"diversity": Scale(0.0, 1.0)}
    metric_criteria = ("diversity",)
    agreement_level = "interval"
    template = "crowd/tasks/diversity.html"
    template_version = "diversity-1"
    shows_images = True
    instructions = (
        "You will see an image and several sets of captions written for it. For each set, rate how "
        "diverse its captions are, from 0 (all captions say the same thing in the same words) to 1 "
        "(every caption is different). Captions are diverse when they use different words, different "
        "phrases and different sentence structures, and when they describe different aspects of the "
        "image (different objects, actions or details). Do not judge whether the captions are correct "
        "or well written, only how different they are from each other."
    )

    def build_items(self, dataset, options, rng):
        systems = list(dataset.systems.order_by("name"))
        wanted = options.get("systems")
        if wanted:
            by_name = {s.name: s for s in systems}
            unknown = [n for n in wanted if n not in by_name]
            if unknown:
                raise CampaignSpecError(
                    f"unknown system(s) {', '.join(unknown)} in dataset {dataset.name!r}; "
                    f"it has: {', '.join(by_name)}"
                )
            systems = [by_name[n] for n in wanted]
        m = options.get("captions_per_set")
        if m is not None and m < 2:
            raise CampaignSpecError("a caption set needs at least 2 captions (captions_per_set >= 2)")
        images = pick_images(dataset, options, rng)
        captions = {}
        from crowd.models import Caption

        for c in Caption.objects.filter(image__in=images, system__in=systems).order_by("key"):
            captions.setdefault((c.image_id, c.system_id), []).append([c.pk, c.text])
        items = []
        for image in images:
            sets = []
            for s in systems:
                caps = captions.get((image.pk, s.pk), [])
                if len(caps) >= 2:
                    sets.append({"system": s.pk, "name": s.name, "captions": caps[:m] if m else caps})
            if len(sets) >= 1:
                items.append(ItemSpec(f"image-{image.key}", {**image_fields(image, options.get("image_url")), "sets": sets}))
        if not items:
            raise CampaignSpecError(
                f"no image of dataset {dataset.name!r} has a caption set of at least 2 captions for the chosen systems"
            )
        n_gold = options.get("gold", default_gold(len(items)))
        for g in range(n_gold):
            base = rng.choice(items).payload
            real = rng.choice(base["sets"])
            copy = rng.choice(real["captions"])[1]
            size = len(real["captions"])
            gold_sets = [{"system": None, "name": "identical", "captions": [[None, copy]] * size}, real]
            payload = {k: base[k] for k in ("image", "image_key", "image_url")} | {"sets": gold_sets}
            items.append(ItemSpec(f"gold-{g + 1}", payload, gold={"set": 0, "max": GOLD_MAX}))
        return items

    def presentation_order(self, payload, rng):
        order = list(range(len(payload["sets"])))
        rng.shuffle(order)
        return {"sets": order}

    def context(self, payload, order):
        shown = [payload["sets"][i] for i in order["sets"]]
        return {
            "sets": [
                {"field": f"set_{pos}", "label": f"Set {pos + 1}", "captions": [t for _, t in s["captions"]]}
                for pos, s in enumerate(shown)
            ]
        }

    def clean(self, payload, order, data, *, item=None):
        errors = {}
        scores = [None] * len(payload["sets"])
        for pos, index in enumerate(order["sets"]):
            value = parse_number(data, f"set_{pos}", 0.0, 1.0, errors)
            if value is not None:
                scores[index] = round(value, 4)
        if errors:
            raise AnswerError(errors)
        return {"scores": scores}

    def check_gold(self, answer, gold):
        return answer["scores"][gold["set"]] <= gold["max"]

    def units(self, item_key, payload, answer):
        return [
            Unit(f"{item_key}/{s['name']}", "diversity", v)
            for s, v in zip(payload["sets"], answer["scores"])
        ]

    def record(self, assignment, answer):
        from crowd.models import HumanJudgment

        payload = assignment.item.payload
        HumanJudgment.objects.bulk_create([
            HumanJudgment(
                image_id=payload["image"], system_id=s["system"], caption=None, criterion="diversity",
                rater=assignment.worker.rater_id, score=v, source=f"campaign:{assignment.campaign.name}",
                campaign=assignment.campaign,
            )
            for s, v in zip(payload["sets"], answer["scores"]) if s["system"] is not None
        ])

    def unit_captions(self, campaign):
        """{"<image id>/<system id>": ids of every caption of that system for that image in the
        dataset} (a per-caption metric is compared through its mean over the set)."""
        from crowd.models import Caption

        members = {}
        rows = Caption.objects.filter(image__dataset=campaign.dataset).values_list("pk", "image_id", "system_id")
        for pk, image_id, system_id in rows:
            members.setdefault(f"{image_id}/{system_id}", []).append(pk)
        return members

    def shown(self, order, answer):
        """The score given to the set shown at each screen position (1 = first)."""
        return Shown(scores={pos + 1: answer["scores"][index] for pos, index in enumerate(order["sets"])},
                     n_shown=len(order["sets"]))

    def simulate(self, payload, order, rng, profile, hints):
        data = {}
        for pos, index in enumerate(order["sets"]):
            texts = [t for _, t in payload["sets"][index]["captions"]]
            value = rng.random() if profile.spammer else latent_diversity(texts) + rng.gauss(0, profile.noise)
            data[f"set_{pos}"] = f"{min(1.0, max(0.0, value)):.2f}"
        return data


register(Diversity())
