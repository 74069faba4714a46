"""Visual-atom vote (Yao et al., BMVC 2016, "Oracle Performance for Visual Captioning", Sec. 5.1:
the visual atoms -- entities, actions and attributes -- of captions):
for each of a dataset's most frequent atoms, is the word *visual*, i.e. could you see it in an
image? Answers yes/no; aggregate = majority vote; the campaign page reports the share of atoms voted
visual per category. Agreement: Krippendorff's alpha, nominal distance.

The atoms are given to the campaign as (word, category[, count]) rows; until automatic atom
extraction lands (issue 5) they come from a CSV file. Gold: words whose answer is not in doubt
(``dog`` is visual, ``idea`` is not); a campaign may supply its own.
"""
from __future__ import annotations

import re

from .base import AnswerError, CampaignSpecError, ItemSpec, Scale, TaskKind, Unit, register

CATEGORIES = ("entity", "action", "attribute")
DEFAULT_GOLD = [
    ("dog", "entity", True), ("red", "attribute", True), ("running", "action", True),
    ("idea", "entity", False), ("yesterday", "attribute", False), ("believing", "action", False),
]
ABSTRACT = frozenset("idea yesterday believing thought reason time fact hope opinion meaning".split())


class VisualAtom(TaskKind):
    """Is this word visual (yes/no); unit: the word, in its category (see the module docstring)."""

    name = "visual_atom"
    title = "Is this word visual?"
    unit = "word"
    criteria = ("visual",)
    scales = {"visual": Scale(labels=(0, 1))}
    agreement_level = "nominal"
    aggregation = "majority"
    report_section = "visual_atoms"
    template = "crowd/tasks/visual_atom.html"
    template_version = "visual-atom-1"
    instructions = (
        "You will see a word that occurs in image captions, with its kind (a thing, an action or a "
        "property) and example captions. Answer Yes if what the word names can be seen in a "
        "photograph (for example 'dog', 'red', 'jumping'), and No if it cannot (for example 'idea', "
        "'yesterday', 'believing')."
    )

    def build_items(self, dataset, options, rng):
        from crowd.models import Caption

        atoms = options.get("atoms") or []
        if not atoms:
            raise CampaignSpecError("a visual-atom campaign needs atoms: --atoms FILE with rows word,category[,count]")
        items, seen = [], set()
        for n, row in enumerate(atoms, start=1):
            word, category, count = _atom_row(n, row)
            if (word, category) in seen:
                raise CampaignSpecError(f"atom {n}: {word!r} ({category}) is listed twice")
            seen.add((word, category))
            alternatives = "|".join(re.escape(form) for form in word_forms(word))
            examples = list(
                Caption.objects.filter(image__dataset=dataset, text__iregex=rf"\m({alternatives})\M"
                                       if _is_postgres() else rf"\b({alternatives})\b")
                .order_by("pk").values_list("text", flat=True)[:3]
            )
            items.append(ItemSpec(f"atom-{category}-{word}", {"word": word, "category": category, "count": count,
                                                                "examples": examples}))
        gold = options.get("gold_atoms", DEFAULT_GOLD)
        for g, (word, category, visual) in enumerate(gold, start=1):
            items.append(ItemSpec(f"gold-{g}", {"word": word, "category": category, "count": None, "examples": []},
                                  gold={"visual": bool(visual)}))
        return items

    def context(self, payload, order):
        label = {"entity": "a thing", "action": "an action", "attribute": "a property"}[payload["category"]]
        return {"word": payload["word"], "category": label, "examples": payload["examples"]}

    def clean(self, payload, order, data, *, item=None):
        raw = (data.get("visual") or "").strip()
        if raw not in ("yes", "no"):
            raise AnswerError({"visual": "answer Yes or No"})
        return {"visual": raw == "yes"}

    def check_gold(self, answer, gold):
        return answer["visual"] == gold["visual"]

    def units(self, item_key, payload, answer):
        return [Unit(item_key, "visual", int(answer["visual"]))]

    def summary(self, campaign, aggregate):
        """{category: {"visual": atoms voted visual by the majority, "atoms": atoms with a
        majority, "share": visual / atoms}}, categories in name order (gold items left out)."""
        majority = aggregate().get("visual", {})
        items = {it.key: it.payload for it in campaign.items.filter(is_gold=False)}
        per = {}
        for key, label in majority.items():
            cat = items[key]["category"] if key in items else None
            if cat:
                counts = per.setdefault(cat, [0, 0])
                counts[0] += int(label == 1)
                counts[1] += 1
        return {cat: {"visual": v, "atoms": n, "share": v / n} for cat, (v, n) in sorted(per.items())}

    def simulate(self, payload, order, rng, profile, hints):
        if profile.spammer:
            return {"visual": rng.choice(["yes", "no"])}
        visual = payload["word"] not in ABSTRACT
        if rng.random() < profile.noise:
            visual = not visual
        return {"visual": "yes" if visual else "no"}


MAX_WORD_CHARS = 80  # the item key "atom-<category>-<word>" has at most 100 characters


def _atom_row(n: int, row) -> tuple[str, str, int | None]:
    """``(word, category, count)`` of the ``n``-th atoms row ``[word, category[, count, ...]]``
    (word and category stripped and lower-cased, count None when absent or empty). Raises
    CampaignSpecError naming the row for fewer than 2 cells, an empty word, a word longer than
    :data:`MAX_WORD_CHARS` or holding a NUL character, an unknown category or a count that is
    not a non-negative integer of at most 15 digits."""
    if isinstance(row, (str, bytes)) or not hasattr(row, "__len__") or len(row) < 2:
        raise CampaignSpecError(f"atom {n}: need a word and a category in {', '.join(CATEGORIES)}, got {str(row)[:100]}")
    word, category = str(row[0]).strip().lower(), str(row[1]).strip().lower()
    if not word or category not in CATEGORIES:
        raise CampaignSpecError(f"atom {n}: need a word and a category in {', '.join(CATEGORIES)}, got {str(row)[:100]}")
    if len(word) > MAX_WORD_CHARS or "\x00" in word:
        raise CampaignSpecError(f"atom {n}: the word must have at most {MAX_WORD_CHARS} characters and no NUL character")
    raw = str(row[2]).strip() if len(row) > 2 and row[2] is not None else ""
    if raw and not re.fullmatch(r"[0-9]{1,15}", raw):
        raise CampaignSpecError(f"atom {n}: count must be a non-negative integer, got {raw[:50]!r}")
    return word, category, int(raw) if raw else None


def atoms_text(data: bytes, source: str) -> str:
    """The text of the atoms CSV file ``source`` from its bytes: UTF-8 (a byte-order mark is
    dropped). Raises CampaignSpecError naming ``source`` (and the line) for another encoding
    (UTF-16, Latin-1...) or a NUL character."""
    from pathlib import Path

    from crowd.importers.base import DatasetFormatError, decode_text

    try:
        return decode_text(Path(source), data)
    except DatasetFormatError as exc:
        raise CampaignSpecError(f"atoms file {exc}") from None


def word_forms(lemma: str) -> list[str]:
    """The lemma and its inflections (lemminflect: ride -> rides, rode, riding, ridden), longest
    first, so that example captions are found for atoms extracted as lemmas."""
    from lemminflect import getAllInflections

    forms = {lemma} | {f.lower() for fs in getAllInflections(lemma).values() for f in fs}
    return sorted(forms, key=lambda f: (-len(f), f))


def _is_postgres() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


register(VisualAtom())
