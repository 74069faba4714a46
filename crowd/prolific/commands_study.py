"""Subcommands of ``manage.py prolific`` for the study itself:

    manage.py prolific create CAMPAIGN --reward-pence 150 --minutes 12 --site-url https://eval.example.org \\
        [--places N] [--filters FILE.json] [--device desktop --device tablet] [--screen-out-pence 15] \\
        [--auto-approve] [--name TEXT] [--description TEXT] [--dry-run]
    manage.py prolific cost CAMPAIGN
    manage.py prolific publish CAMPAIGN [--yes] [--dry-run]   # shows the cost; asks unless --yes
    manage.py prolific pause | resume | stop CAMPAIGN [--dry-run]
    manage.py prolific add-places CAMPAIGN N [--dry-run]
    manage.py prolific show CAMPAIGN

The API token comes from the environment (``PROLIFIC_TOKEN``). :data:`SUBCOMMANDS` maps each
name to ``(add_arguments(parser), handle(options, stdout))``; errors are one-line CommandErrors.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.management.base import CommandError

from crowd.models import Campaign, ProlificStudy

from . import study as st
from crowd.prolific_client import ProlificAPI, ProlificError

ERRORS = (st.StudyError, ProlificError, ValueError)


def _campaign_arg(parser, dry_run: bool = True) -> None:
    if not any(getattr(a, "dest", None) == "campaign" for a in parser._actions):
        parser.add_argument("campaign", help="the campaign's name")
    if dry_run:
        parser.add_argument("--dry-run", action="store_true", help="send nothing; print the request")


def _campaign(options) -> Campaign:
    campaign = Campaign.objects.filter(name=options["campaign"]).first()
    if campaign is None:
        raise CommandError(f"no campaign named {options['campaign']!r}")
    if campaign.provider != Campaign.PROLIFIC:
        raise CommandError(f"campaign {campaign.name} uses the {campaign.provider} provider; "
                           "create it with --provider prolific")
    return campaign


def _study(options) -> ProlificStudy:
    campaign = _campaign(options)
    study = st.study_of(campaign)
    if study is None or not study.study_id:
        raise CommandError(f"campaign {campaign.name} has no study on Prolific yet (manage.py prolific create)")
    return study


def _api(campaign, options, stdout) -> ProlificAPI:
    return ProlificAPI(campaign=campaign, dry_run=bool(options.get("dry_run")),
                       echo=lambda line: stdout.write(line + "\n"))


def one_line_errors(errors: tuple):
    """Decorator for a subcommand's ``handle(options, stdout)``: any of ``errors`` becomes a
    CommandError of one line (at most 500 characters)."""
    def decorate(fn):
        def handle(options, stdout):
            try:
                fn(options, stdout)
            except errors as exc:
                raise CommandError(" ".join(str(exc).split())[:500]) from None
        return handle
    return decorate


_run = one_line_errors(ERRORS)


def _status_line(study: ProlificStudy) -> str:
    return (f"study {study.study_id or '(not created)'} {study.status or ''}: {study.places} places, reward "
            f"{st.money(study.reward)} {study.currency}, {study.estimated_minutes} min").replace("  ", " ")


# -- create ----------------------------------------------------------------------------------------
def create_args(parser):
    _campaign_arg(parser)
    parser.add_argument("--reward-pence", type=int, required=True, help="reward per participant in pence/cents")
    parser.add_argument("--minutes", type=int, required=True, help="estimated completion time in minutes")
    parser.add_argument("--site-url", required=True, help="public https root of this site")
    parser.add_argument("--places", type=int, help="participants (default: from items x k and the bundle)")
    parser.add_argument("--filters", help="JSON file with a list of Prolific filters")
    parser.add_argument("--device", action="append", choices=st.DEVICES, help="allowed device (repeat; default desktop)")
    parser.add_argument("--screen-out-pence", type=int, help="fixed pay of a screened-out participant (default reward/10)")
    parser.add_argument("--auto-approve", action="store_true", help="approve completed submissions automatically")
    parser.add_argument("--name", help="the study's public name (default: the campaign title)")
    parser.add_argument("--description", help="the study's public description")


@_run
def create_handle(options, stdout):
    campaign = _campaign(options)
    filters = ()
    if options.get("filters"):
        try:
            filters = json.loads(Path(options["filters"]).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CommandError(f"{options['filters']}: {' '.join(str(exc).split())}") from None
    api = _api(campaign, options, stdout)
    study = st.create_draft(
        campaign, api, reward=options["reward_pence"], estimated_minutes=options["minutes"],
        site_url=options["site_url"], places=options.get("places"), filters=filters,
        devices=tuple(options.get("device") or ("desktop",)), name=options.get("name"),
        description=options.get("description"), screen_out_reward=options.get("screen_out_pence"),
        auto_approve=bool(options.get("auto_approve")))
    if api.dry_run:
        stdout.write("dry run: nothing was sent and nothing stored\n")
        return
    stdout.write(f"created draft {_status_line(study)}\n")
    for outcome, code in study.completion_codes.items():
        stdout.write(f"  completion code {outcome}: {code}\n")
    stdout.write(f"next: manage.py prolific cost {campaign.name}, then manage.py prolific publish {campaign.name}\n")


# -- cost ------------------------------------------------------------------------------------------
def cost_args(parser):
    _campaign_arg(parser, dry_run=False)


@_run
def cost_handle(options, stdout):
    study = _study(options)
    answer = st.cost(study, _api(study.campaign, options, stdout))
    for line in st.cost_lines(study, answer):
        stdout.write(line + "\n")


# -- publish ---------------------------------------------------------------------------------------
def publish_args(parser):
    _campaign_arg(parser)
    parser.add_argument("--yes", action="store_true", help="publish without asking (the cost is still shown)")


def _confirm(campaign_name: str, stdout) -> bool:
    stdin = sys.stdin
    if not (hasattr(stdin, "isatty") and stdin.isatty()):
        raise CommandError("publishing spends real money: confirm with --yes (stdin is not a terminal, so I cannot ask)")
    stdout.write(f"Publish on Prolific and pay these participants? Type the campaign name ({campaign_name}) to confirm: ")
    stdout.flush() if hasattr(stdout, "flush") else None
    return stdin.readline().strip() == campaign_name


@_run
def publish_handle(options, stdout):
    study = _study(options)
    api = _api(study.campaign, options, stdout)
    if study.published_at or study.status not in ("", "UNPUBLISHED"):
        raise CommandError(f"study {study.study_id} is already published ({study.status or 'published'})")
    if not api.dry_run:
        stdout.write("Publishing spends real money:\n")
        for line in st.cost_lines(study, st.cost(study, api)):
            stdout.write("  " + line + "\n")
    confirmed = bool(options.get("yes")) or api.dry_run or _confirm(study.campaign.name, stdout)
    if not confirmed:
        raise CommandError("not confirmed; nothing was published")
    st.publish(study, api, confirmed=True, user=options.get("user") or "command line")
    if api.dry_run:
        stdout.write("dry run: nothing was sent\n")
        return
    stdout.write(f"published {_status_line(study)}; campaign {study.campaign.name} is live\n")


# -- pause, resume, stop, add places, show ------------------------------------------------------------
def _simple(fn, verb):
    @_run
    def handle(options, stdout):
        study = _study(options)
        api = _api(study.campaign, options, stdout)
        fn(study, api)
        stdout.write(("dry run: nothing was sent" if api.dry_run else f"{verb}: {_status_line(study)}") + "\n")
    return handle


def add_places_args(parser):
    _campaign_arg(parser)
    parser.add_argument("n", type=int, help="how many places to add")


@_run
def add_places_handle(options, stdout):
    study = _study(options)
    api = _api(study.campaign, options, stdout)
    st.add_places(study, api, options["n"])
    stdout.write(("dry run: nothing was sent" if api.dry_run else f"places raised: {_status_line(study)}") + "\n")


def show_args(parser):
    _campaign_arg(parser, dry_run=False)


@_run
def show_handle(options, stdout):
    campaign = _campaign(options)
    study = st.study_of(campaign)
    if study is None:
        stdout.write(f"campaign {campaign.name} has no Prolific study yet (manage.py prolific create)\n")
        return
    if study.study_id:
        remote = st.refresh(study, _api(campaign, options, stdout))
        left = st.places_left(study, remote)
        stdout.write(_status_line(study) + (f", {left} places left" if left is not None else "") + "\n")
    else:
        stdout.write(_status_line(study) + "\n")
    stdout.write(f"campaign state {campaign.state}; published {study.published_at or 'no'}"
                 + (f" by {study.published_by}" if study.published_by else "") + "\n")
    for outcome, code in (study.completion_codes or {}).items():
        stdout.write(f"  completion code {outcome}: {code}\n")
    if study.cost:
        stdout.write("last cost: " + "; ".join(st.cost_lines(study, study.cost)) + "\n")


SUBCOMMANDS = {
    "create": (create_args, create_handle),
    "cost": (cost_args, cost_handle),
    "publish": (publish_args, publish_handle),
    "pause": (_campaign_arg, _simple(st.pause, "paused")),
    "resume": (_campaign_arg, _simple(st.resume, "resumed")),
    "stop": (_campaign_arg, _simple(st.stop, "stopped")),
    "add-places": (add_places_args, add_places_handle),
    "show": (show_args, show_handle),
}
