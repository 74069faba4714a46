"""Submission, bonus and webhook-subscription endpoints of the fake Prolific API, validating
requests as Prolific's API reference documents them ("Submissions", "Bonuses", "Webhooks").

    GET   submissions/?study=ID                 list (paginated; ``study`` required)
    GET   submissions/{id}/                     one submission
    POST  submissions/{id}/transition/          {"action": APPROVE | REJECT[, "rejection_category", "message"]}
                                                REJECT needs a documented category and a message of >= 100
                                                characters; only from AWAITING REVIEW; repeating the transition
                                                that already happened is a no-op (idempotent, as documented)
    POST  submissions/bulk-approve/             {"submission_ids": [...]} or {"study_id", "participant_ids": [...]}
    POST  submissions/{id}/request-return/      {"request_return_reasons": [text, ...]}: only for AWAITING REVIEW;
                                                the submission stays AWAITING REVIEW with ``return_requested``
                                                set (the participant returns it or not); recorded in
                                                ``fake.return_requests``
    POST  studies/{id}/screen-out-submissions/  {"submission_ids": [...], "bonus_per_submission": 0.15[,
                                                "increase_places": bool]}: the amount in MAJOR units, below the
                                                reward and, when the study has a FIXED_SCREEN_OUT_PAYMENT code,
                                                equal to its fixed_screen_out_reward; the submissions (ACTIVE or
                                                AWAITING REVIEW, of that study) become SCREENED OUT and are paid
                                                it: recorded in ``fake.screen_outs``
    POST  submissions/bonus-payments/           {"study_id", "csv_bonuses": "participant_id,amount\\n..."}:
                                                amounts are decimals in MAJOR units ("1.50"); the fake refuses
                                                anything else, unknown participants, and (stricter than Prolific)
                                                a whole number above 20, which looks like minor units
    POST  bulk-bonus-payments/{id}/pay/         pays; NOT idempotent, here too: every call pays again and is
                                                recorded in ``fake.pay_calls``
    GET   bulk-bonus-payments/{id}/             the bulk bonus with its ``status`` (CREATED, PAID)
    GET   hooks/event-types/ ; POST hooks/secrets/ ; GET/POST hooks/subscriptions/
"""
from __future__ import annotations

import re
from decimal import Decimal

from .server import Invalid, NotFound, new_id, now_iso, route

SUB = r"submissions/(?P<id>[0-9a-f]{24})/"
HEX24 = re.compile(r"^[0-9a-f]{24}$")
REJECTION_CATEGORIES = {"BAD_CODE", "FAILED_CHECK", "FAILED_INSTRUCTIONS", "INCOMP_LONGITUDINAL", "LOW_EFFORT",
                        "MALINGERING", "NO_CODE", "NO_DATA", "OTHER", "TOO_QUICKLY", "TOO_SLOWLY", "UNSUPP_DEVICE"}
TARGET = {"APPROVE": "APPROVED", "REJECT": "REJECTED"}
AMOUNT = re.compile(r"^\d{1,6}(\.\d{1,2})?$")
WHOLE_CAP = 20  # a whole-number bonus above this looks like minor units (pence typed as pounds)
EVENT_TYPES = ["submission.status.change", "study.status.change", "study.progress.change"]


def _stored(store: dict, key: str, what: str) -> dict:
    if key not in store:
        raise NotFound(f"{what} {key} not found")
    return store[key]


def _sub(fake, sid: str) -> dict:
    return _stored(fake.submissions, sid, "submission")


@route("GET", r"submissions/")
def list_submissions(fake, match, body, query):
    study_id = query.get("study", "")
    if not HEX24.match(study_id):
        raise Invalid("the query parameter study (a study id) is required")
    fake.study(study_id)
    rows = [dict(s) for s in fake.submissions.values() if s["study_id"] == study_id]
    return 200, fake.paginate(rows, query, "submissions/")


@route("GET", SUB)
def get_submission(fake, match, body, query):
    return 200, dict(_sub(fake, match["id"]))


@route("POST", SUB + r"transition/")
def transition_submission(fake, match, body, query):
    sub = _sub(fake, match["id"])
    unknown = set(body) - {"action", "message", "rejection_category"}
    if unknown:
        raise Invalid(f"unknown fields: {', '.join(sorted(unknown))}")
    action = body.get("action")
    if action not in TARGET:
        raise Invalid("action must be APPROVE or REJECT")
    if action == "REJECT":
        if body.get("rejection_category") not in REJECTION_CATEGORIES:
            raise Invalid("rejection_category is required for REJECT and must be one of the documented categories")
        message = body.get("message")
        if not isinstance(message, str) or len(message) < 100:
            raise Invalid("message is required for REJECT and must be at least 100 characters long")
    elif "rejection_category" in body:
        raise Invalid("rejection_category is only for REJECT")
    if sub["status"] == TARGET[action]:
        return 200, dict(sub)  # idempotent: the same request again is ignored
    if sub["status"] != "AWAITING REVIEW":
        raise Invalid(f"a submission in status {sub['status']} cannot be transitioned to {TARGET[action]}")
    sub["status"] = TARGET[action]
    if action == "REJECT":
        sub["rejection_category"], sub["rejection_message"] = body["rejection_category"], body["message"]
    fake._refresh_study(sub["study_id"])
    return 200, dict(sub)


@route("POST", r"submissions/bulk-approve/")
def bulk_approve(fake, match, body, query):
    if set(body) == {"submission_ids"}:
        ids = body["submission_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
            raise Invalid("submission_ids must be a non-empty list of ids")
        subs = [fake.submissions.get(x) for x in ids]
        missing = [x for x, s in zip(ids, subs) if s is None]
    elif set(body) == {"study_id", "participant_ids"}:
        fake.study(str(body["study_id"]))
        pids = body["participant_ids"]
        if not isinstance(pids, list) or not pids or not all(isinstance(x, str) for x in pids):
            raise Invalid("participant_ids must be a non-empty list of ids")
        by_pid = {s["participant_id"]: s for s in fake.submissions.values() if s["study_id"] == body["study_id"]}
        subs = [by_pid.get(p) for p in pids]
        missing = [p for p, s in zip(pids, subs) if s is None]
    else:
        raise Invalid("send either submission_ids, or study_id and participant_ids")
    if len(subs) > 1000:
        raise Invalid("at most 1000 ids per request")
    if missing:
        raise Invalid(f"unknown ids: {', '.join(missing[:20])}")
    wrong = [s["id"] for s in subs if s["status"] not in ("AWAITING REVIEW", "APPROVED")]
    if wrong:
        raise Invalid(f"submissions not awaiting review: {', '.join(wrong[:20])}")
    for s in subs:
        s["status"] = "APPROVED"
        fake._refresh_study(s["study_id"])
    return 200, "The request to bulk approve has been made successfully."


@route("POST", SUB + r"request-return/")
def request_return(fake, match, body, query):
    sub = _sub(fake, match["id"])
    reasons = body.get("request_return_reasons")
    if set(body) != {"request_return_reasons"} or not isinstance(reasons, list) or not reasons \
            or not all(isinstance(r, str) and r.strip() for r in reasons):
        raise Invalid("the body must be {request_return_reasons: [non-empty strings]}")
    if sub["status"] != "AWAITING REVIEW":
        raise Invalid(f"a return can only be requested for a submission awaiting review, not {sub['status']}")
    sub["return_requested"], sub["request_return_reasons"] = now_iso(), list(reasons)
    fake.return_requests.append(sub["id"])
    return 200, {"id": sub["id"], "status": sub["status"], "participant": sub["participant_id"],
                 "return_requested": sub["return_requested"]}


def _fixed_screen_out(study: dict):
    for entry in study.get("completion_codes") or []:
        for action in entry.get("actions") or []:
            if action.get("action") == "FIXED_SCREEN_OUT_PAYMENT":
                return action.get("fixed_screen_out_reward")
    return None


@route("POST", r"studies/(?P<id>[0-9a-f]{24})/screen-out-submissions/")
def screen_out_submissions(fake, match, body, query):
    study = fake.study(match["id"])
    unknown = set(body) - {"submission_ids", "bonus_per_submission", "increase_places"}
    if unknown:
        raise Invalid(f"unknown fields: {', '.join(sorted(unknown))}")
    ids, amount = body.get("submission_ids"), body.get("bonus_per_submission")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
        raise Invalid("submission_ids must be a non-empty list of ids")
    if not isinstance(body.get("increase_places", False), bool):
        raise Invalid("increase_places must be a boolean")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount <= 0:
        raise Invalid("bonus_per_submission must be a positive amount in major units, e.g. 0.15")
    value = Decimal(str(amount))
    if value != value.quantize(Decimal("0.01")) or value * 100 >= study["reward"]:
        raise Invalid("bonus_per_submission is in major units (two decimals) and must be below the reward")
    fixed = _fixed_screen_out(study)
    if fixed is not None and value * 100 != fixed:
        raise Invalid(f"this study pays a fixed screen-out reward of {fixed} (minor units), not {amount}")
    subs = [fake.submissions.get(x) for x in ids]
    if any(s is None or s["study_id"] != study["id"] for s in subs):
        raise Invalid("every submission must belong to the study")
    wrong = [s["id"] for s in subs if s["status"] not in ("ACTIVE", "AWAITING REVIEW")]
    if wrong:
        raise Invalid(f"submissions that cannot be screened out: {', '.join(wrong[:20])}")
    for s in subs:
        s["status"] = "SCREENED OUT"
        fake.screen_outs.append((s["id"], f"{value:.2f}"))
    fake._refresh_study(study["id"])
    return 200, {"message": "The request to bulk screen out has been made successfully.",
                 "payment_per_participant": {"amount": float(value), "currency": study.get("currency", "GBP")}}


@route("POST", r"submissions/bonus-payments/")
def create_bonus(fake, match, body, query):
    if set(body) != {"study_id", "csv_bonuses"}:
        raise Invalid("the body must have exactly study_id and csv_bonuses")
    study = fake.study(str(body["study_id"]))
    text = body["csv_bonuses"]
    if not isinstance(text, str) or not text.strip():
        raise Invalid("csv_bonuses must be a non-empty string of 'participant_id,amount' lines")
    subs = [s for s in fake.submissions.values() if s["study_id"] == study["id"]]
    known = {s["participant_id"] for s in subs} | {s["id"] for s in subs}
    entries, total = [], Decimal("0")
    for n, line in enumerate(text.strip().split("\n"), 1):
        parts = line.strip().split(",")
        if len(parts) != 2:
            raise Invalid(f"line {n}: expected 'participant_id,amount'")
        pid, amount = parts[0].strip(), parts[1].strip()
        if pid not in known:
            raise Invalid(f"line {n}: {pid} did not take part in study {study['id']}")
        if not AMOUNT.match(amount):
            raise Invalid(f"line {n}: the amount {amount!r} must be a decimal in the study currency, e.g. 1.50")
        value = Decimal(amount)
        if value <= 0:
            raise Invalid(f"line {n}: the amount must be positive")
        if "." not in amount and value > WHOLE_CAP:
            raise Invalid(f"line {n}: {amount} looks like minor units; amounts are major units (1.50 = 1.50)")
        entries.append({"participant_id": pid, "amount": f"{value:.2f}"})
        total += value
    fees = (total / 3).quantize(Decimal("0.01"))
    bonus = {"id": new_id(), "study": study["id"], "amount": float(total), "fees": float(fees),
             "total_amount": float(total + fees), "vat": 0.0, "status": "CREATED", "entries": entries,
             "created_at": now_iso(), "times_paid": 0}
    fake.bonuses[bonus["id"]] = bonus
    return 201, dict(bonus)


def _bonus(fake, bid: str) -> dict:
    return _stored(fake.bonuses, bid, "bulk bonus payment")


@route("POST", r"bulk-bonus-payments/(?P<id>[0-9a-f]{24})/pay/")
def pay_bonus(fake, match, body, query):
    bonus = _bonus(fake, match["id"])
    if body:
        raise Invalid("the pay call takes no body")
    bonus["times_paid"] += 1  # not idempotent: a second call pays again
    bonus["status"], bonus["paid_at"] = "PAID", now_iso()
    fake.pay_calls.append(bonus["id"])
    return 202, f"Bulk bonus payment with ID {bonus['id']} is being processed asynchronously."


@route("GET", r"bulk-bonus-payments/(?P<id>[0-9a-f]{24})/")
def get_bonus(fake, match, body, query):
    return 200, dict(_bonus(fake, match["id"]))


@route("GET", r"hooks/event-types/")
def event_types(fake, match, body, query):
    return 200, {"results": [{"event_type": t, "description": t} for t in EVENT_TYPES]}


@route("POST", r"hooks/secrets/")
def create_secret(fake, match, body, query):
    if set(body) != {"workspace_id"} or not isinstance(body["workspace_id"], str):
        raise Invalid("the body must be {workspace_id}")
    return 200, {"id": new_id(), "value": fake.webhook_secret, "workspace_id": body["workspace_id"]}


@route("GET", r"hooks/subscriptions/")
def list_subscriptions(fake, match, body, query):
    return 200, fake.paginate([dict(h) for h in fake.hooks.values()], query, "hooks/subscriptions/")


@route("POST", r"hooks/subscriptions/")
def create_subscription(fake, match, body, query):
    unknown = set(body) - {"event_type", "target_url", "workspace_id", "is_enabled"}
    if unknown or not {"event_type", "target_url", "workspace_id"} <= set(body):
        raise Invalid("the body needs event_type, target_url and workspace_id (and optionally is_enabled)")
    if body["event_type"] not in EVENT_TYPES:
        raise Invalid(f"unknown event type {body['event_type']!r}")
    if not isinstance(body["target_url"], str) or not body["target_url"].startswith("https://"):
        raise Invalid("target_url must use https:// and be publicly accessible")
    hook = {"id": new_id(), "event_type": body["event_type"], "target_url": body["target_url"],
            "workspace_id": body["workspace_id"], "is_enabled": bool(body.get("is_enabled", True))}
    fake.hooks[hook["id"]] = hook
    return 201, {"results": [dict(h) for h in fake.hooks.values()]}
