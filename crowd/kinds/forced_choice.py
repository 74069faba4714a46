"""Forced choice: which of two captions, B or C, is more similar to reference caption A
(PASCAL-50S, Vedantam et al., CVPR 2015, "CIDEr: Consensus-based image description evaluation",
Sec. 4; as used by Madhyastha, Wang & Specia, ACL 2019, "VIFIDEL", Sec. 4.2). The image is shown
when it has a URL.

Items: per image, A is a reference caption drawn with the campaign seed and (B, C) a pair of other
captions of the image (other references and candidates). B/C sides are swapped at random per
assignment. Aggregate: majority vote (Dawid-Skene as an option on the campaign page). Agreement:
Krippendorff's alpha, nominal distance. Gold: B (or C) is a copy of A and must win.
"""
from __future__ import annotations

from .base import (
    AnswerError,
    CampaignSpecError,
    ItemSpec,
    PairVotes,
    Scale,
    Shown,
    TaskKind,
    Unit,
    default_gold,
    image_fields,
    pick_images,
    register,
    words,
)


def overlap(a: str, b: str) -> float:
    """Jaccard similarity of the word sets of ``a`` and ``b`` (1.0 when both have no word), in [0, 1];
    the simulated rater's notion of closeness."""
    wa, wb = set(words(a)), set(words(b))
    return len(wa & wb) / len(wa | wb) if wa | wb else 1.0


class ForcedChoice(TaskKind):
    """Which of captions B and C is closer to reference A; unit: the caption pair (see the module
    docstring)."""

    name = "forced_choice"
    title = "Forced choice: which caption is closer to A"
    unit = "caption_pair"
    criteria = ("choice",)
    scales = {"choice": Scale(labels=("b", "c"))}
    agreement_level = "nominal"
    aggregation = "majority"
    report_section = "forced_choice"
    template = "crowd/tasks/forced_choice.html"
    template_version = "forced-choice-1"
    instructions = (
        "Read sentence A. Then choose which of the two other sentences, B or C, is more similar to A: "
        "the one that describes the same image content in the most similar way. You must choose one, "
        "even when they seem equally close."
    )

    def build_items(self, dataset, options, rng):
        from crowd.models import Caption

        images = pick_images(dataset, options, rng)
        per_image = options.get("pairs_per_image", 1)
        if per_image < 1:
            raise CampaignSpecError("pairs_per_image must be at least 1")
        caps = {}
        for c in Caption.objects.filter(image__in=images).order_by("key").values("pk", "image_id", "system_id", "text"):
            caps.setdefault(c["image_id"], []).append(c)
        ref_system = dataset.reference_system_id
        items = []
        for image in images:
            pool = caps.get(image.pk, [])
            refs = [c for c in pool if c["system_id"] == ref_system]
            if not refs or len(pool) < 3:
                continue
            a = rng.choice(refs)
            others = [c for c in pool if c["pk"] != a["pk"]]
            pairs = [(b, c) for i, b in enumerate(others) for c in others[i + 1:]]
            for b, c in rng.sample(pairs, min(per_image, len(pairs))):
                items.append(ItemSpec(
                    f"pair-{a['pk']}-{b['pk']}-{c['pk']}",
                    {**image_fields(image, options.get("image_url")),
                     "a": [a["pk"], a["text"]], "b": [b["pk"], b["text"]], "c": [c["pk"], c["text"]]},
                ))
        if not items:
            raise CampaignSpecError(
                f"no image of dataset {dataset.name!r} has a reference caption and two other captions"
            )
        n_gold = options.get("gold", default_gold(len(items)))
        for g in range(n_gold):
            base = rng.choice(items).payload
            copy_side = rng.choice(["b", "c"])
            other = base["b"] if copy_side == "c" else base["c"]
            payload = {k: base[k] for k in ("image", "image_key", "image_url", "a")}
            payload[copy_side] = [None, base["a"][1]]
            payload["c" if copy_side == "b" else "b"] = other
            items.append(ItemSpec(f"gold-{g + 1}", payload, gold={"choice": copy_side}))
        return items

    def presentation_order(self, payload, rng):
        return {"sides": ["b", "c"] if rng.random() < 0.5 else ["c", "b"]}

    def context(self, payload, order):
        return {
            "a": payload["a"][1],
            "options": [
                {"value": str(pos + 1), "label": "BC"[pos], "text": payload[side][1]}
                for pos, side in enumerate(order["sides"])
            ],
        }

    def clean(self, payload, order, data, *, item=None):
        raw = (data.get("choice") or "").strip()
        if raw not in ("1", "2"):
            raise AnswerError({"choice": "choose B or C"})
        return {"choice": order["sides"][int(raw) - 1], "position": int(raw)}

    def check_gold(self, answer, gold):
        return answer["choice"] == gold["choice"]

    def units(self, item_key, payload, answer):
        return [Unit(item_key, "choice", answer["choice"])]

    def record(self, assignment, answer):
        from crowd.models import PairwiseJudgment

        p = assignment.item.payload
        PairwiseJudgment.objects.create(
            reference_id=p["a"][0], caption_b_id=p["b"][0], caption_c_id=p["c"][0],
            rater=assignment.worker.rater_id, choice=answer["choice"],
            source=f"campaign:{assignment.campaign.name}", campaign=assignment.campaign,
        )

    def pair_votes(self, campaign):
        """Counted votes per (reference A, B, C) from ``PairwiseJudgment``, in the order the
        pairs are first met."""
        from crowd.models import PairwiseJudgment

        votes = {}
        for ref, b, c, choice in PairwiseJudgment.objects.filter(campaign=campaign).values_list(
            "reference_id", "caption_b_id", "caption_c_id", "choice"
        ):
            votes.setdefault((ref, b, c), [0, 0])[0 if choice == "b" else 1] += 1
        return [PairVotes(b, c, nb, nc) for (_, b, c), (nb, nc) in votes.items()]

    def shown(self, order, answer):
        """The screen position (1 = first shown) of the caption chosen, out of 2."""
        return Shown(chosen=answer["position"], n_shown=len(order["sides"]))

    def simulate(self, payload, order, rng, profile, hints):
        if profile.spammer:
            return {"choice": rng.choice(["1", "2"])}
        a = payload["a"][1]
        scores = [overlap(a, payload[side][1]) + rng.gauss(0, profile.noise) for side in order["sides"]]
        if payload[order["sides"][0]][1] == a or payload[order["sides"][1]][1] == a:  # a copy: obvious
            scores = [float(payload[side][1] == a) for side in order["sides"]]
        return {"choice": "1" if scores[0] >= scores[1] else "2"}


register(ForcedChoice())
