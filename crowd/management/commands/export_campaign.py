"""python manage.py export_campaign NAME [--format csv|jsonl] [--output FILE]"""
from django.core.management.base import BaseCommand, CommandError

from crowd import export
from crowd.models import Campaign


class Command(BaseCommand):
    help = "Export a campaign's answers in long format (one row per rated unit) as CSV or JSONL."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--format", choices=["csv", "jsonl"], default="csv")
        parser.add_argument("--output", default="-")

    def handle(self, *args, **o):
        campaign = Campaign.objects.filter(name=o["name"]).first()
        if campaign is None:
            raise CommandError(f"unknown campaign {o['name']!r}")
        text = export.to_csv(campaign) if o["format"] == "csv" else export.to_jsonl(campaign)
        if o["output"] == "-":
            self.stdout.write(text, ending="")
        else:
            with open(o["output"], "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
