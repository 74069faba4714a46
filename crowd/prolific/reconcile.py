"""Prolific's records of a study against ours: what each side has that the other lacks or
contradicts. Nothing is guessed or paid here; the report lists, the owner decides.

Checks (each a list of rows in the report):

* ``prolific_only``: submissions Prolific lists with no session of ours (a participant who never
  reached us, or a session opened under another participant id) -- never approved or bonused;
* ``ours_only``: our sessions of the campaign with a submission id Prolific does not list;
* ``status_mismatches``: Prolific says finished (AWAITING REVIEW, APPROVED, REJECTED...) while our
  session is still open; our session ended but Prolific still shows the participant working;
  RETURNED / TIMED-OUT / REJECTED whose work was not released;
* ``code_mismatches``: the completion code Prolific recorded differs from the one we gave;
* ``approved_failed_attention``: approved (by Prolific or by us) although the session failed its
  attention checks;
* ``bonuses``: ledger bonuses whose state disagrees with Prolific's (ours paid / theirs not, or the
  reverse; ``paying`` with Prolific's answer).
"""
from __future__ import annotations

from crowd.models import ParticipantSession, ProlificBonus, ProlificStudy, ProlificSubmission

from .bonuses import remote_paid
from .sync import OPEN_STATUSES, RELEASES, SyncError, apply_submission

CHECKS = ("prolific_only", "ours_only", "status_mismatches", "code_mismatches", "approved_failed_attention", "bonuses")


def reconcile(study: ProlificStudy, api, *, check_bonuses: bool = True) -> dict:
    """List the study's submissions from Prolific (all pages; each record applied as the sync
    does), compare with our sessions and the bonus ledger. Returns {"listed": n, "errors": [...],
    <check>: [[...], ...] for each of :data:`CHECKS`, "ok": bool}. Raises the client's
    ProlificError if the list cannot be read."""
    from crowd.prolific_client import ProlificError

    report = {"listed": 0, "errors": [], **{c: [] for c in CHECKS}}
    listed = set()
    for record in api.list_submissions(study.study_id):
        report["listed"] += 1
        try:
            sub = apply_submission(study, record)
        except SyncError as exc:
            report["errors"].append([str(record.get("id", ""))[:64] if isinstance(record, dict) else "", str(exc)])
            continue
        listed.add(sub.submission_id)
    campaign = study.campaign
    subs = (ProlificSubmission.objects.filter(study=study, submission_id__in=listed)
            .select_related("session").order_by("pk"))
    for sub in subs:
        s = sub.session
        if s is None:
            report["prolific_only"].append([sub.submission_id, sub.participant_id, sub.status])
            continue
        if sub.status not in OPEN_STATUSES and sub.status not in RELEASES and s.is_open:
            report["status_mismatches"].append([sub.submission_id, sub.status, "our session is still open"])
        elif sub.status in OPEN_STATUSES and not s.is_open:
            report["status_mismatches"].append([sub.submission_id, sub.status, f"our session ended ({s.outcome})"])
        if sub.status in RELEASES and sub.released_at is None:
            report["status_mismatches"].append([sub.submission_id, sub.status, "its work was not released"])
        if sub.study_code and sub.study_code != s.completion_code:
            report["code_mismatches"].append([sub.submission_id, sub.study_code, s.completion_code or "(none given)"])
        approved = sub.status == "APPROVED" or sub.review_action == "APPROVE"
        failed = (s.outcome == ParticipantSession.FAILED_ATTENTION
                  or s.attention_failures > campaign.attention_max_failures)
        if approved and failed:
            report["approved_failed_attention"].append([sub.submission_id, sub.participant_id, s.attention_failures])
    ours = (ParticipantSession.objects.filter(campaign=campaign).exclude(provider_ref="")
            .exclude(provider_ref__in=listed).order_by("pk"))
    report["ours_only"] = [[s.provider_ref, s.worker.external_id, s.outcome or s.stage]
                           for s in ours.select_related("worker")]
    if check_bonuses:
        for b in ProlificBonus.objects.filter(study=study).exclude(bonus_id="").order_by("pk"):
            try:
                paid = remote_paid(api.get_bonus(b.bonus_id))
            except ProlificError as exc:
                report["errors"].append([b.bonus_id, f"bonus state unreadable: {exc}"])
                continue
            theirs = {True: "paid", False: "not paid", None: "unknown"}[paid]
            ours_paid = b.state == ProlificBonus.PAID
            if ours_paid != (paid is True) or b.state == ProlificBonus.PAYING:
                report["bonuses"].append([b.bonus_id, b.state, theirs])
    report["ok"] = not (report["errors"] or any(report[c] for c in CHECKS))
    return report


def lines(report: dict) -> list[str]:
    """The report as text lines (command output and the owner page)."""
    out = [f"Prolific submissions listed {report.get('listed', 0)}; "
           + ", ".join(f"{c.replace('_', ' ')} {len(report.get(c, []))}" for c in CHECKS)
           + f"; errors {len(report.get('errors', []))}; {'OK' if report.get('ok') else 'MISMATCHES'}"]
    for c in (*CHECKS, "errors"):
        out += [f"  {c.replace('_', ' ')}: {' '.join(map(str, row))}" for row in report.get(c, [])[:100]]
    return out
