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
"""
from __future__ import annotations

import importlib

from django.core.management.base import BaseCommand, CommandError

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
        entry[1](options, self.stdout)
