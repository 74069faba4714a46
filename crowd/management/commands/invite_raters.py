"""python manage.py invite_raters --campaign NAME -n 10 [--label L] [--base-url http://host:8000]

Prints one invitation link per line. Each link belongs to a new local rater who is a rater of
campaign NAME only (:func:`crowd.engine.invite_workers`): ``/rate/`` lists only that campaign for
them, and any other campaign answers 404. The links are written to the campaign's audit trail as
the campaign page's are (``invite``, the label as target; actor ``command line``).
"""
from django.core.management.base import BaseCommand, CommandError

from crowd import audit, engine
from crowd.models import Campaign


class Command(BaseCommand):
    help = "Print invitation links for new local raters of a campaign (each link rates that campaign only)."

    def add_arguments(self, parser):
        parser.add_argument("--campaign", required=True)
        parser.add_argument("-n", type=int, default=1)
        parser.add_argument("--label", default="")
        parser.add_argument("--base-url", default="http://127.0.0.1:8000")

    def handle(self, *args, **o):
        campaign = Campaign.objects.filter(name=o["campaign"]).first()
        if campaign is None:
            raise CommandError(f"unknown campaign {o['campaign']!r}")
        if not 1 <= o["n"] <= 10_000:
            raise CommandError("-n must be between 1 and 10000")
        try:
            workers = engine.invite_workers(o["n"], label=o["label"], campaign=campaign)
        except engine.EngineError as exc:
            raise CommandError(str(exc)) from None
        audit.record(campaign, None, "invite", target=o["label"], actor=audit.COMMAND_LINE,
                     detail={"links": o["n"], "command": "manage.py invite_raters"})
        for w in workers:
            self.stdout.write(f"{o['base_url'].rstrip('/')}/rate/join/{w.token}/?next=/rate/{campaign.name}/")
