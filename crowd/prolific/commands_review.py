"""Subcommands of ``manage.py prolific`` for submissions, review, bonuses and webhooks:

    manage.py prolific sync CAMPAIGN                      # poll Prolific's submissions now
    manage.py prolific approve CAMPAIGN SUBMISSION_ID...  # bulk approve (reviewable ones only)
    manage.py prolific reject CAMPAIGN SUBMISSION_ID --category LOW_EFFORT --message "... >= 100 chars"
    manage.py prolific review CAMPAIGN --min-gold-accuracy 0.7 --max-attention-failures 1 --min-seconds 3
                                                      # lists the plan (a dry run); --yes sends it
    manage.py prolific bonus CAMPAIGN FILE.csv [--key K] [--reason R]   # creates the bulk bonus (pays nothing)
    manage.py prolific pay CAMPAIGN BONUS_ID              # pays it once (reads Prolific's state first if unsure)
    manage.py prolific reconcile CAMPAIGN
    manage.py prolific hooks CAMPAIGN [--subscribe https://host/prolific-hooks/ --workspace ID]

:data:`SUBCOMMANDS` maps each name to ``(add_arguments(parser), handle(options, stdout))``; the
command (crowd/management/commands/prolific.py) dispatches to it. Errors are one-line
``CommandError``\\ s.
"""
from __future__ import annotations

import os
from pathlib import Path

from django.core.management.base import CommandError

from crowd.models import Campaign, ProlificBonus, ProlificEvent, ProlificStudy

from . import bonuses, reconcile, review
from crowd.prolific_client import ProlificAPI, ProlificError
from .sync import SyncError, sync_study
from .webhooks import EVENT_TYPES

from .commands_study import one_line_errors

ERRORS = (review.ReviewError, bonuses.BonusError, SyncError, ProlificError, ValueError)


def _campaign_arg(parser) -> None:
    if not any(getattr(a, "dest", None) == "campaign" for a in parser._actions):
        parser.add_argument("campaign", help="the campaign's name")


def _study(options) -> ProlificStudy:
    campaign = Campaign.objects.filter(name=options["campaign"]).first()
    if campaign is None:
        raise CommandError(f"no campaign named {options['campaign']!r}")
    if campaign.provider != Campaign.PROLIFIC:
        raise CommandError(f"campaign {campaign.name} does not use Prolific (provider {campaign.provider})")
    study = ProlificStudy.objects.filter(campaign=campaign).first()
    if study is None or not study.study_id:
        raise CommandError(f"campaign {campaign.name} has no study on Prolific yet (manage.py prolific create)")
    return study


def _api(study) -> ProlificAPI:
    try:
        return ProlificAPI(campaign=study.campaign)
    except ProlificError as exc:
        raise CommandError(str(exc)) from None


_run = one_line_errors(ERRORS)


# -- sync ------------------------------------------------------------------------------------------
def sync_args(parser):
    """Poll Prolific's submissions of the study now (statuses, released work)."""
    _campaign_arg(parser)


@_run
def sync_handle(options, stdout):
    """Run ``manage.py prolific sync`` (see :func:`sync_args`)."""
    study = _study(options)
    r = sync_study(study, _api(study))
    stdout.write(f"listed {r['listed']}, new {r['created']}, changed {r['changed']}, released {r['released']}, "
                 f"errors {len(r['errors'])}\n")
    for sid, why in r["errors"]:
        stdout.write(f"  error {sid}: {why}\n")


# -- approve / reject ------------------------------------------------------------------------------
def approve_args(parser):
    """Bulk approve submissions awaiting review (ids as Prolific reported them)."""
    _campaign_arg(parser)
    parser.add_argument("submissions", nargs="+", help="submission ids (as Prolific reported them)")


@_run
def approve_handle(options, stdout):
    """Run ``manage.py prolific approve`` (see :func:`approve_args`)."""
    study = _study(options)
    r = review.bulk_approve(study, _api(study), options["submissions"])
    stdout.write(f"approved {len(r['approved'])}, skipped {len(r['skipped'])}\n")
    for sid, why in r["skipped"]:
        stdout.write(f"  skipped {sid}: {why}\n")


def reject_args(parser):
    """Reject one submission with a category and a message of at least 100 characters."""
    _campaign_arg(parser)
    parser.add_argument("submission", help="the submission id")
    parser.add_argument("--category", required=True, help=", ".join(review.REJECTION_CATEGORIES))
    parser.add_argument("--message", required=True,
                        help=f"shown to the participant, at least {review.MIN_MESSAGE} characters")


@_run
def reject_handle(options, stdout):
    """Run ``manage.py prolific reject`` (see :func:`reject_args`)."""
    category, message = review.check_rejection(options["category"], options["message"])
    study = _study(options)
    sub = study.submissions.filter(submission_id=options["submission"]).first()
    if sub is None:
        raise CommandError(f"no submission {options['submission']!r} reported by Prolific for this study (sync first?)")
    review.reject(sub, _api(study), category, message)
    stdout.write(f"rejected {sub.submission_id} ({category}); its counted work went back to the pool\n")


# -- review by rules -------------------------------------------------------------------------------
def review_args(parser):
    """Review submissions awaiting review by rules: a dry run listing what would be paid and why
    (the default); --yes sends it."""
    _campaign_arg(parser)
    parser.add_argument("--min-gold-accuracy", type=float, default=None, help="reject below this gold accuracy (0-1)")
    parser.add_argument("--max-attention-failures", type=int, default=None,
                        help="reject above this many failed attention checks (default: the campaign's)")
    parser.add_argument("--min-seconds", type=float, default=None,
                        help="reject a median below this many seconds per task")
    parser.add_argument("--dry-run", action="store_true", help="list the plan and send nothing (the default)")
    parser.add_argument("--yes", action="store_true", help="send the plan (after listing it)")


@_run
def review_handle(options, stdout):
    """Run ``manage.py prolific review`` (see :func:`review_args`): the plan (per submission what
    it pays and why, then the total) is always printed first; nothing is sent without ``--yes``."""
    if options["yes"] and options.get("dry_run"):
        raise CommandError("--dry-run and --yes contradict each other: give one")
    study = _study(options)
    verdicts = review.rule_verdicts(study, min_gold_accuracy=options["min_gold_accuracy"],
                                    max_attention_failures=options["max_attention_failures"],
                                    min_seconds=options["min_seconds"])
    for line in review.plan_lines(study, verdicts, limit=len(verdicts)):
        stdout.write(line + "\n")
    if not options["yes"]:
        stdout.write(f"PREVIEW (dry run): {len(verdicts)} submissions, nothing sent (add --yes to send this plan)\n")
        return
    r = review.bulk_review(study, _api(study), verdicts)
    stdout.write(review.result_line(r) + "\n")
    for sid, why in r["failed"]:
        stdout.write(f"  failed {sid}: {why}\n")


# -- bonuses ---------------------------------------------------------------------------------------
def bonus_args(parser):
    """Create a bulk bonus from a CSV of participant_id,amount (major units); pays nothing."""
    _campaign_arg(parser)
    parser.add_argument("csv", help="file of 'participant_id,amount' lines, amounts in major units (1.50)")
    parser.add_argument("--key", default="", help="idempotency key (default: derived from the lines)")
    parser.add_argument("--reason", default="")


@_run
def bonus_handle(options, stdout):
    """Run ``manage.py prolific bonus`` (see :func:`bonus_args`)."""
    study = _study(options)
    path = Path(options["csv"])
    try:
        if path.stat().st_size > 1024 * 1024:
            raise CommandError("the bonus file is larger than 1 MB")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"cannot read {path}: {exc}") from None
    b = bonuses.create_bonus(study, _api(study), text, request_key=options["key"], reason=options["reason"])
    stdout.write(f"bonus {b.bonus_id} ({b.state}): {len(b.entries)} participants, total {b.total} {study.currency}; "
                 f"pay it with: manage.py prolific pay {study.campaign.name} {b.bonus_id}\n")


def pay_args(parser):
    """Pay a created bonus once (reads Prolific's state first if a pay call was lost)."""
    _campaign_arg(parser)
    parser.add_argument("bonus", help="the bulk bonus id (or our ledger key)")


@_run
def pay_handle(options, stdout):
    """Run ``manage.py prolific pay`` (see :func:`pay_args`)."""
    study = _study(options)
    ref = options["bonus"]
    b = (ProlificBonus.objects.filter(study=study, bonus_id=ref).first()
         or ProlificBonus.objects.filter(study=study, request_key=ref).first())
    if b is None:
        raise CommandError(f"no bonus {ref!r} in this study's ledger")
    b = bonuses.pay(b, _api(study))
    stdout.write(f"bonus {b.bonus_id}: {b.state}\n")


# -- reconcile / hooks -----------------------------------------------------------------------------
def reconcile_args(parser):
    """Compare Prolific's submissions and bonuses with our sessions and ledger."""
    _campaign_arg(parser)


@_run
def reconcile_handle(options, stdout):
    """Run ``manage.py prolific reconcile`` (see :func:`reconcile_args`)."""
    study = _study(options)
    for line in reconcile.lines(reconcile.reconcile(study, _api(study))):
        stdout.write(line + "\n")


def hooks_args(parser):
    """Show the webhook set-up and last events; --subscribe URL to subscribe to the events."""
    _campaign_arg(parser)
    parser.add_argument("--subscribe", default="", metavar="URL",
                        help="subscribe this https URL (ending in /prolific-hooks/) to the submission and study events")
    parser.add_argument("--workspace", default="", help="the Prolific workspace id (needed with --subscribe)")


@_run
def hooks_handle(options, stdout):
    """Run ``manage.py prolific hooks`` (see :func:`hooks_args`)."""
    study = _study(options)
    configured = "yes" if os.environ.get("PROLIFIC_WEBHOOK_SECRET") else "NO (set PROLIFIC_WEBHOOK_SECRET)"
    stdout.write(f"webhook secret configured: {configured}\n")
    events = ProlificEvent.objects.order_by("-pk")[:10]
    stdout.write(f"last events received: {ProlificEvent.objects.count()} in all\n")
    for e in events:
        stdout.write(f"  {e.received_at:%Y-%m-%d %H:%M:%S} {e.event_type} {e.resource_id} "
                     f"{'processed' if e.processed else 'NOT processed'}\n")
    url = options["subscribe"].strip()
    if not url:
        return
    if not url.startswith("https://") or not url.rstrip("/").endswith("prolific-hooks"):
        raise CommandError("the URL must be public https and end in /prolific-hooks/")
    if not options["workspace"].strip():
        raise CommandError("--workspace is needed to subscribe")
    api = _api(study)
    for event_type in [t for t in EVENT_TYPES if t != "study.progress.change"]:
        api.request("POST", "hooks/subscriptions/", json={"event_type": event_type, "target_url": url,
                                                         "workspace_id": options["workspace"].strip()})
        stdout.write(f"subscribed {event_type} -> {url} (confirm it on Prolific if asked)\n")


SUBCOMMANDS = {
    "sync": (sync_args, sync_handle),
    "approve": (approve_args, approve_handle),
    "reject": (reject_args, reject_handle),
    "review": (review_args, review_handle),
    "bonus": (bonus_args, bonus_handle),
    "pay": (pay_args, pay_handle),
    "reconcile": (reconcile_args, reconcile_handle),
    "hooks": (hooks_args, hooks_handle),
}
