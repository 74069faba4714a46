"""Description collection (Kershaw & Bober 2019, "The Lexical Gap", Sec. 3.1; van Miltenburg et
al.'s elicitation instruction "Describe this image as if describing it to a friend"): free text,
one description per rater and image.

Checks: at least ``min_words`` words (default 5; words of any script, see
:func:`crowd.kinds.base.words`) and at most ``max_chars`` characters (default 500) after whitespace
is collapsed; no NUL character (U+0000, which PostgreSQL cannot store); not a duplicate (same words, ignoring case and punctuation) of a caption the image already has or of
another rater's description. Each counted description becomes a caption of a new human system named
after the campaign (``campaign-<name>``), which metrics can use as references or as candidates.
No gold items and no agreement statistic (free text).
"""
from __future__ import annotations

from .base import (
    AnswerError,
    CampaignSpecError,
    ItemSpec,
    TaskKind,
    image_fields,
    pick_images,
    register,
    words,
)

MIN_WORDS, MAX_CHARS = 5, 500
FILLERS = ["on a sunny day", "in the middle of the picture", "while others watch", "near the edge of the frame",
           "as seen from the side", "in the foreground"]


def system_name(campaign) -> str:
    """The name of the human system that holds ``campaign``'s collected descriptions."""
    return f"campaign-{campaign.name}"


def caption_key(assignment_id: int) -> str:
    """The key of the caption recorded for the assignment ``assignment_id``."""
    return f"assignment-{assignment_id}"


class Description(TaskKind):
    """Free-text description of an image; unit: the image; no criteria, gold or agreement; each
    counted description is recorded as a caption (see the module docstring)."""

    name = "description"
    title = "Describe the image"
    unit = "image"
    criteria = ()
    agreement_level = None
    aggregation = "none"
    template = "crowd/tasks/description.html"
    template_version = "description-1"
    shows_images = True
    default_k = 5
    instructions = "Describe this image as if describing it to a friend. Write one or two full sentences."

    def build_items(self, dataset, options, rng):
        min_words = options.get("min_words", MIN_WORDS)
        if min_words < 1:
            raise CampaignSpecError("min_words must be at least 1")
        return [ItemSpec(f"image-{im.key}", image_fields(im, options.get("image_url"))) for im in pick_images(dataset, options, rng)]

    def prepare(self, campaign):
        from crowd.models import System

        name = system_name(campaign)
        if System.objects.filter(dataset=campaign.dataset, name=name).exists():
            raise CampaignSpecError(f"dataset {campaign.dataset.name!r} already has a system named {name!r}")
        System.objects.create(
            dataset=campaign.dataset, name=name, kind=System.HUMAN,
            description=f"Descriptions collected by campaign {campaign.name!r}: {self.instructions}",
        )

    def context(self, payload, order):
        return {"max_chars": MAX_CHARS}

    def clean(self, payload, order, data, *, item=None):
        text = " ".join(str(data.get("description") or "").split())
        options = item.campaign.options if item is not None else {}
        min_words = options.get("min_words", MIN_WORDS)
        max_chars = options.get("max_chars", MAX_CHARS)
        if "\x00" in text:
            raise AnswerError({"description": "the text contains a NUL character (U+0000); remove it"})
        if len(text) > max_chars:
            raise AnswerError({"description": f"at most {max_chars} characters, please"})
        if len(words(text)) < min_words:
            raise AnswerError({"description": f"write at least {min_words} words"})
        if item is not None:
            from crowd.models import Caption

            mine = words(text)
            for other in Caption.objects.filter(image_id=payload["image"]).values_list("text", flat=True):
                if words(other) == mine:
                    raise AnswerError({"description": "this repeats an existing caption of the image; use your own words"})
        return {"text": text}

    def record(self, assignment, answer):
        from crowd.models import Caption, System

        system = System.objects.get(dataset=assignment.campaign.dataset, name=system_name(assignment.campaign))
        Caption.objects.create(
            image_id=assignment.item.payload["image"], system=system, key=caption_key(assignment.pk),
            text=answer["text"],
        )

    def release(self, campaign, worker, assignment_ids):
        """Also remove the captions the released assignments added to the campaign's system."""
        from crowd.models import Caption

        super().release(campaign, worker, assignment_ids)
        Caption.objects.filter(system__dataset=campaign.dataset, key__in=[caption_key(i) for i in assignment_ids]).delete()

    def simulation_hints(self, campaign):
        refs = {}
        for image_id, text in campaign.dataset.references().values_list("image_id", "text"):
            refs.setdefault(image_id, []).append(text)
        return {"references": refs}

    def simulate(self, payload, order, rng, profile, hints):
        refs = hints.get("references", {}).get(payload["image"]) or [f"a photo numbered {payload['image_key']}"]
        if profile.spammer:
            return {"description": "good"}
        base = rng.choice(refs).rstrip(" .")
        return {"description": f"{base} {rng.choice(FILLERS)} {rng.randint(1, 10**6)} ."}


register(Description())
