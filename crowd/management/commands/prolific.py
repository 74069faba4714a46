"""Run a campaign on Prolific from the command line (docs/prolific.md).

    manage.py prolific create CAMPAIGN --reward-pence 150 --minutes 12 --site-url https://host [--dry-run]
    manage.py prolific cost CAMPAIGN
    manage.py prolific publish CAMPAIGN [--yes]        # shows the cost, asks for confirmation
    manage.py prolific pause | resume | stop | show CAMPAIGN
    manage.py prolific add-places CAMPAIGN N
    manage.py prolific sync | approve | reject | review | bonus | pay | reconcile | hooks CAMPAIGN ...

The API token comes from the environment (``PROLIFIC_TOKEN``) and is never stored. The
subcommands live in :mod:`crowd.prolific.commands_study` (the study) and
:mod:`crowd.prolific.commands_review` (submissions, review, bonuses, webhooks): each module's
``SUBCOMMANDS`` maps a name to ``(add_arguments(parser), handle(options, stdout))``.

A subcommand that did what the owner's Prolific page writes to the campaign's audit trail
(:data:`crowd.audit.PROVIDER_ACTIONS`: publish, stop, add-places, approve, review with ``--yes``,
reject, pay) writes the same entry once it succeeded (:func:`audit_entry`), with actor
``command line``; a dry run, a review's preview and a refused or failed command write none.
"""
from __future__ import annotations

import importlib

from django.core.management.base import BaseCommand, CommandError

from crowd import audit
from crowd.models import Campaign
from crowd.prolific import commands_study

MODULES = ("crowd.prolific.commands_review",)


def subcommands() -> dict:
    """Every subcommand: the study ones, then those of the optional modules that exist."""
    found = dict(commands_study.SUBCOMMANDS)
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        found.update(module.SUBCOMMANDS)
    return found


class _Kept:
    """The command's stdout, keeping what the subcommand wrote (the result lines the audit entry keeps)."""

    def __init__(self, out):
        self.out, self.written = out, []

    def write(self, text, *args, **kwargs):
        self.written.append(str(text))
        return self.out.write(text, *args, **kwargs)

    def flush(self):
        self.out.flush()

    def lines(self) -> list[str]:
        return [line for line in "".join(self.written).splitlines() if line.strip()]


def audit_target(options) -> str:
    """What the subcommand acted on, as the page's audit entry names it: the submissions approved or
    rejected, the bonus paid (as given: its Prolific id or ledger key); empty for the others."""
    action = options["action"]
    if action == "approve":
        return ", ".join(options["submissions"])[:200]
    return {"reject": options.get("submission", ""), "pay": options.get("bonus", "")}.get(action, "")[:200]


def audit_entry(options, lines: list[str]):
    """After a subcommand succeeded: the audit entry of what it did that cannot be undone, as the
    Prolific page writes it (:func:`crowd.audit.record_provider_action`, actor ``command line``), or
    None when it did nothing such (a dry run, a review without ``--yes``, another subcommand)."""
    action = options["action"]
    if options.get("dry_run") or (action == "review" and not options.get("yes")):
        return None
    campaign = Campaign.objects.filter(name=options.get("campaign", "")).first()
    if campaign is None:
        return None
    return audit.record_provider_action(campaign, None, Campaign.PROLIFIC, action, lines,
                                        target=audit_target(options), command=f"manage.py prolific {action}")


class Command(BaseCommand):
    help = "Create, cost, publish, pause, resume, stop a campaign's Prolific study; sync, review and pay it."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for name, (add_args, _) in subcommands().items():
            add_args(sub.add_parser(name, help=(add_args.__doc__ or "").strip().split("\n")[0] or None))

    def handle(self, *args, **options):
        entry = subcommands().get(options["action"])
        if entry is None:
            raise CommandError(f"unknown subcommand {options['action']!r}")
        out = _Kept(self.stdout)
        entry[1](options, out)
        audit_entry(options, out.lines())
