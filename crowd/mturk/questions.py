"""What a HIT carries and what comes back: question XML, qualification requirements, the cost
estimate, and the QuestionFormAnswers parser. No Django, no network.

Sources: AWS MTurk API reference, data structures "ExternalQuestion", "HTMLQuestion",
"QuestionFormAnswers", "QualificationRequirement", "Locale"; MTurk pricing (requester fee 20 % of
reward and bonus, minimum $0.01 per assignment; +20 % for HITs with 10 or more assignments; +5 %
for Masters qualification).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from xml.sax.saxutils import escape

from .client import APPROVAL_RATE, LOCALE, MASTERS, NUMBER_APPROVED

EXTERNAL_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"
HTML_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2011-11-11/HTMLQuestion.xsd"
ANSWERS_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2005-10-01/QuestionFormAnswers.xsd"
PREVIEW_ASSIGNMENT = "ASSIGNMENT_ID_NOT_AVAILABLE"
MAX_QUESTION_CHARS = 131072  # CreateHIT's Question parameter limit


def external_question(url: str, frame_height: int = 0) -> str:
    """ExternalQuestion XML for ``url`` (https; MTurk appends assignmentId, hitId, turkSubmitTo and
    workerId itself). ``frame_height`` in pixels; 0 lets MTurk size the frame to the page."""
    if not url.startswith("https://"):
        raise ValueError(f"MTurk requires an https ExternalURL, got {url!r}")
    return (
        f'<ExternalQuestion xmlns="{EXTERNAL_NS}"><ExternalURL>{escape(url)}</ExternalURL>'
        f"<FrameHeight>{int(frame_height)}</FrameHeight></ExternalQuestion>"
    )


def html_question(html: str, frame_height: int = 0) -> str:
    """HTMLQuestion XML wrapping a complete HTML document (it must start with ``<!DOCTYPE html>``
    and post its form to ``/mturk/externalSubmit``). Raises ValueError when it is too long."""
    if not html.lstrip().lower().startswith("<!doctype html>"):
        raise ValueError("an HTMLQuestion document must start with <!DOCTYPE html>")
    body = html.replace("]]>", "]]]]><![CDATA[>")  # a CDATA section cannot contain its terminator
    xml = (
        f'<HTMLQuestion xmlns="{HTML_NS}"><HTMLContent><![CDATA[{body}]]></HTMLContent>'
        f"<FrameHeight>{int(frame_height)}</FrameHeight></HTMLQuestion>"
    )
    if len(xml) > MAX_QUESTION_CHARS:
        raise ValueError(f"the HTMLQuestion is {len(xml)} characters; MTurk accepts at most {MAX_QUESTION_CHARS}")
    return xml


def parse_answers(xml: str) -> dict[str, str]:
    """QuestionFormAnswers XML -> {QuestionIdentifier: value}. FreeText is taken as is; several
    SelectionIdentifier elements are joined with ``|``; an UploadedFileKey gives its key. Raises
    ValueError for XML that is not a QuestionFormAnswers document."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ValueError(f"the answer is not XML: {exc}") from None
    if root.tag.split("}")[-1] != "QuestionFormAnswers":
        raise ValueError(f"expected QuestionFormAnswers, got {root.tag.split('}')[-1]}")
    out = {}
    for answer in root:
        if answer.tag.split("}")[-1] != "Answer":
            continue
        name, values = None, []
        for child in answer:
            tag = child.tag.split("}")[-1]
            if tag == "QuestionIdentifier":
                name = (child.text or "").strip()
            elif tag in ("FreeText", "SelectionIdentifier", "OtherSelectionText", "UploadedFileKey"):
                values.append(child.text or "")
        if name:
            out[name] = "|".join(values)
    return out


def answers_xml(fields: dict[str, str]) -> str:
    """QuestionFormAnswers XML for form ``fields`` the way MTurk builds it from an externalSubmit
    POST (one Answer with FreeText per field). Used by the fake MTurk of the tests and the docs."""
    parts = "".join(
        f"<Answer><QuestionIdentifier>{escape(k)}</QuestionIdentifier><FreeText>{escape(v)}</FreeText></Answer>"
        for k, v in fields.items()
    )
    return f'<?xml version="1.0" encoding="UTF-8" standalone="no"?><QuestionFormAnswers xmlns="{ANSWERS_NS}">{parts}</QuestionFormAnswers>'


def locale_values(locales) -> list[dict]:
    """["US", "US-NY", "GB"] -> MTurk Locale structures ({"Country": "US", "Subdivision": "NY"})."""
    out = []
    for loc in locales:
        country, _, sub = str(loc).strip().upper().partition("-")
        if len(country) != 2 or not country.isalpha() or (sub and (len(sub) != 2 or not sub.isalnum())):
            raise ValueError(f"bad locale {loc!r}: use ISO 3166 codes like 'US' or 'US-NY'")
        out.append({"Country": country, **({"Subdivision": sub} if sub else {})})
    return out


def qualification_requirements(
    environment: str, *, min_approval_rate=None, min_approved_hits=None, locales=(), masters=False,
    qualification_id: str = "",
) -> list[dict]:
    """QualificationRequirements for CreateHITType. Requirements hide the HIT from workers who do
    not meet them (ActionsGuarded ``DiscoverPreviewAndAccept``). The Masters id depends on
    ``environment``."""
    reqs = []
    guard = {"ActionsGuarded": "DiscoverPreviewAndAccept"}
    if min_approval_rate is not None:
        if not 0 <= int(min_approval_rate) <= 100:
            raise ValueError("the approval rate is a percentage (0-100)")
        reqs.append({"QualificationTypeId": APPROVAL_RATE, "Comparator": "GreaterThanOrEqualTo",
                     "IntegerValues": [int(min_approval_rate)], **guard})
    if min_approved_hits is not None:
        reqs.append({"QualificationTypeId": NUMBER_APPROVED, "Comparator": "GreaterThanOrEqualTo",
                     "IntegerValues": [int(min_approved_hits)], **guard})
    if locales:
        reqs.append({"QualificationTypeId": LOCALE, "Comparator": "In", "LocaleValues": locale_values(locales), **guard})
    if masters:
        reqs.append({"QualificationTypeId": MASTERS[environment], "Comparator": "Exists", **guard})
    if qualification_id:
        reqs.append({"QualificationTypeId": qualification_id, "Comparator": "Exists", **guard})
    return reqs


CENT = Decimal("0.01")


@dataclass
class CostEstimate:
    """What a batch costs (US dollars): ``assignments`` paid assignments of ``reward`` each, MTurk's
    fee per assignment (``fee_rate`` of the reward, at least $0.01) and the total."""

    hits: int
    assignments: int
    reward: Decimal
    fee_rate: Decimal
    fee_per_assignment: Decimal
    rewards: Decimal
    fees: Decimal
    total: Decimal

    def lines(self) -> list[str]:
        return [
            f"{self.hits} HITs, {self.assignments} assignments at ${self.reward} each",
            f"rewards ${self.rewards}, MTurk fees ${self.fees} ({self.fee_rate * 100:.0f} % per assignment, "
            f"${self.fee_per_assignment} each), total ${self.total}",
        ]


def fee_rate(max_assignments: int, masters: bool) -> Decimal:
    """MTurk's commission: 20 %, +20 % when a HIT has 10 or more assignments, +5 % with Masters."""
    rate = Decimal("0.20")
    if max_assignments >= 10:
        rate += Decimal("0.20")
    if masters:
        rate += Decimal("0.05")
    return rate


def cost_estimate(hit_assignments: list[int], reward, *, masters: bool = False) -> CostEstimate:
    """Cost of HITs with the given MaxAssignments each, at ``reward`` dollars per assignment."""
    reward = Decimal(str(reward)).quantize(CENT)
    if reward < 0:
        raise ValueError("the reward cannot be negative")
    rewards = fees = Decimal(0)
    rate_max = Decimal(0)
    per = Decimal(0)
    for n in hit_assignments:
        rate = fee_rate(n, masters)
        fee = max(CENT, (reward * rate).quantize(CENT, rounding=ROUND_HALF_UP))
        rewards += reward * n
        fees += fee * n
        rate_max, per = max(rate_max, rate), max(per, fee)
    return CostEstimate(len(hit_assignments), sum(hit_assignments), reward, rate_max, per, rewards, fees, rewards + fees)
