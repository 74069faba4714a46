"""Run a campaign on Amazon Mechanical Turk from the command line.

    manage.py mturk settings NAME --public-url https://host --approval-rate 95 --locales US,GB
    manage.py mturk estimate NAME
    manage.py mturk publish NAME --dry-run          # prints every request, sends nothing
    manage.py mturk golive NAME --confirm NAME      # shows the cost, then switches to live
    manage.py mturk collect NAME                    # results + reconciliation report
    manage.py mturk review NAME --min-gold 0.7 --dry-run
    manage.py mturk bonus NAME --amount 0.10 --reason "accurate work" --min-gold 0.9
    manage.py mturk send-bonuses NAME
    manage.py mturk block | notify | expire | extend NAME ...
    manage.py mturk export-website NAME --out DIR   # layout.html + input.csv for the requester website
    manage.py mturk import-results NAME results.csv

Credentials come from the standard AWS chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, ~/.aws/credentials).

An action that the owner's MTurk page writes to the campaign's audit trail
(:data:`crowd.audit.PROVIDER_ACTIONS`: publish, review, send-bonuses, block, notify, expire) writes
the same entry once it succeeded, with actor ``command line``; a dry run and a refused command write none.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from crowd import audit
from crowd.models import Campaign, MTurkConfig
from crowd.mturk import publish as pub
from crowd.mturk import review, website
from crowd.mturk.client import MTurkAPI, MTurkError
from crowd.mturk.collect import collect
from crowd.mturk.questions import locale_values

DRY = {"publish", "collect", "review", "send-bonuses", "block", "notify", "expire", "extend", "import-results"}


class Command(BaseCommand):
    help = "Publish, collect, review and pay a campaign on Amazon Mechanical Turk (sandbox by default)."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        subs = {}
        for name, text in [
            ("settings", "show or change the campaign's MTurk settings"),
            ("estimate", "cost of publishing the unpublished items"),
            ("golive", "switch to live MTurk after showing the cost (needs --confirm NAME)"),
            ("sandbox", "switch back to the sandbox"),
            ("publish", "publish a batch of HITs (or resume --batch)"),
            ("collect", "collect results and reconcile them with ours"),
            ("review", "approve/reject submitted assignments by rules"),
            ("bonus", "grant a bonus in the ledger to approved work (send with send-bonuses)"),
            ("send-bonuses", "send the ledger's pending bonuses"),
            ("block", "block on MTurk the workers blocked by quality control"),
            ("notify", "message the campaign's workers"),
            ("expire", "expire every HIT of the campaign now"),
            ("extend", "extend every HIT's expiration"),
            ("export-website", "write layout.html and input.csv of a new requester-website batch"),
            ("import-results", "import a requester-website batch results CSV"),
        ]:
            p = sub.add_parser(name, help=text)
            p.add_argument("campaign")
            if name in DRY:
                p.add_argument("--dry-run", action="store_true", help="send nothing; print what would be sent")
            subs[name] = p
        s = subs["settings"]
        s.add_argument("--question-type", choices=["external", "html"])
        s.add_argument("--public-url", help="https address of this platform (ExternalQuestion)")
        s.add_argument("--frame-height", type=int)
        s.add_argument("--description")
        s.add_argument("--keywords")
        s.add_argument("--lifetime-days", type=float)
        s.add_argument("--auto-approve-days", type=float)
        s.add_argument("--gold-assignments", type=int)
        s.add_argument("--approval-rate", type=int, help="minimum approval rate in %% (-1: none)")
        s.add_argument("--approved-hits", type=int, help="minimum number of approved HITs (-1: none)")
        s.add_argument("--locales", help="comma-separated, e.g. US,GB,US-NY ('' for none)")
        s.add_argument("--masters", action="store_true", default=None)
        s.add_argument("--no-masters", dest="masters", action="store_false")
        s.add_argument("--qualification", help="our own qualification type id in the current environment")
        subs["golive"].add_argument("--confirm", default="", help="the campaign name, typed again")
        for name in ("publish", "export-website", "estimate"):
            subs[name].add_argument("--limit", type=int, help="only the first N unpublished items (a pilot)")
        subs["publish"].add_argument("--batch", help="resume this batch id")
        subs["review"].add_argument("--min-gold", type=float, help="reject workers whose gold accuracy is below")
        subs["review"].add_argument("--keep-blocked", action="store_true", help="do not reject blocked workers' work")
        b = subs["bonus"]
        b.add_argument("--amount", required=True)
        b.add_argument("--reason", required=True)
        b.add_argument("--label", default="bonus")
        b.add_argument("--min-gold", type=float, default=0.0)
        n = subs["notify"]
        n.add_argument("--subject", required=True)
        n.add_argument("--message", required=True)
        n.add_argument("--workers", help="comma-separated WorkerIds (default: every worker of the campaign)")
        subs["extend"].add_argument("--hours", type=float, required=True)
        subs["export-website"].add_argument("--out", required=True, help="directory for layout.html and input.csv")
        subs["import-results"].add_argument("file")

    def handle(self, *args, **o):
        try:
            campaign = Campaign.objects.get(name=o["campaign"])
        except Campaign.DoesNotExist:
            raise CommandError(f"no campaign named {o['campaign']!r}") from None
        if campaign.provider != Campaign.MTURK:
            raise CommandError(f"campaign {campaign.name!r} uses the {campaign.provider} provider; create it with --provider mturk")
        try:
            lines = self.run(campaign, o["action"], o)
        except (pub.PublishError, review.ReviewError, MTurkError, ValueError) as exc:
            raise CommandError(str(exc)) from None
        if not o.get("dry_run"):  # a dry run sends nothing
            audit.record_provider_action(campaign, None, Campaign.MTURK, o["action"], lines,
                                         command=f"manage.py mturk {o['action']}")
        for line in lines:
            self.stdout.write(str(line))

    def api(self, campaign, o):
        return MTurkAPI.for_campaign(campaign, dry_run=o.get("dry_run", False))

    def run(self, campaign, action, o) -> list[str]:
        config = pub.config_for(campaign)
        if action == "settings":
            return self.settings(config, o)
        if action == "estimate":
            items = pub.unpublished_items(campaign)
            return pub.estimate(campaign, items[:o["limit"]] if o["limit"] else items).lines()
        if action == "golive":
            self.stdout.write("Publishing on LIVE MTurk pays real workers with real money:")
            for line in pub.estimate(campaign).lines():
                self.stdout.write("  " + line)
            pub.confirm_live(campaign, o["confirm"], "command line")
            return ["environment: live (confirmed); `mturk publish` now publishes on live MTurk"]
        if action == "sandbox":
            pub.set_environment(campaign, MTurkConfig.SANDBOX)
            return ["environment: sandbox"]
        if action == "export-website":
            batch = website.export_batch(campaign, limit=o["limit"])
            out = Path(o["out"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "layout.html").write_text(website.layout_html(campaign), encoding="utf-8")
            (out / "input.csv").write_text(website.input_csv(batch), encoding="utf-8")
            return [f"batch {batch.batch_id}: {batch.hits.count()} rows", f"wrote {out / 'layout.html'} and {out / 'input.csv'}"]
        if action == "import-results":
            try:
                data = Path(o["file"]).read_bytes()
            except OSError as exc:
                raise CommandError(f"{o['file']}: {exc}") from None
            report = website.import_results(campaign, data, dry_run=o["dry_run"])
            if not report.ok:
                raise CommandError("\n".join(report.lines()))
            return report.lines()
        if action == "bonus":
            try:
                amount = Decimal(o["amount"])
            except InvalidOperation:
                raise CommandError(f"--amount {o['amount']!r} is not a number of dollars") from None
            return review.grant_bonuses(campaign, amount, o["reason"], o["label"], min_gold_accuracy=o["min_gold"]).lines()
        api = self.api(campaign, o)
        if action == "publish":
            batch = None
            if o["batch"]:
                batch = campaign.mturk_batches.filter(batch_id=o["batch"]).first()
                if batch is None:
                    raise CommandError(f"no batch {o['batch']!r} in campaign {campaign.name!r}")
            progress = (lambda d, n: self.stderr.write(f"\r{d}/{n} HITs", ending="")) if not o["dry_run"] else None
            report = pub.publish_batch(campaign, api, batch=batch, limit=o["limit"], progress=progress)
            return report.lines() + (["would send:", report.calls] if o["dry_run"] else [])
        if action == "collect":
            report = collect(campaign, api)
            return report.lines() + (["would send:", api.describe()] if o["dry_run"] else [])
        if action == "review":
            decisions = review.plan_review(campaign, min_gold_accuracy=o["min_gold"], reject_blocked=not o["keep_blocked"])
            return [d.line() for d in decisions] + review.apply_review(campaign, api, decisions).lines()
        if action == "send-bonuses":
            return review.send_bonuses(campaign, api).lines()
        if action == "block":
            return review.block_workers(campaign, api).lines()
        if action == "notify":
            workers = [w.strip() for w in o["workers"].split(",") if w.strip()] if o["workers"] else None
            return review.notify_workers(campaign, api, o["subject"], o["message"], workers).lines()
        if action == "expire":
            return review.update_expiration(campaign, api).lines()
        if action == "extend":
            return review.update_expiration(campaign, api, extend_seconds=int(o["hours"] * 3600)).lines()
        raise CommandError(f"unknown action {action}")

    def settings(self, config: MTurkConfig, o) -> list[str]:
        simple = {"question_type": "question_type", "public_url": "public_url", "frame_height": "frame_height",
                  "description": "description", "keywords": "keywords", "gold_assignments": "gold_assignments",
                  "masters": "masters"}
        for opt, attr in simple.items():
            if o.get(opt) is not None:
                setattr(config, attr, o[opt])
        if config.public_url and not config.public_url.startswith("https://"):
            raise CommandError("--public-url must be https (MTurk loads ExternalQuestion pages only over https)")
        if o.get("lifetime_days") is not None:
            config.hit_lifetime_seconds = int(o["lifetime_days"] * 86400)
        if o.get("auto_approve_days") is not None:
            config.auto_approval_seconds = int(o["auto_approve_days"] * 86400)
        for opt, attr in (("approval_rate", "min_approval_rate"), ("approved_hits", "min_approved_hits")):
            if o.get(opt) is not None:
                setattr(config, attr, None if o[opt] < 0 else o[opt])
        if o.get("locales") is not None:
            config.locales = [x.strip().upper() for x in o["locales"].split(",") if x.strip()]
            locale_values(config.locales)
        if o.get("qualification") is not None:
            config.qualification_ids = dict(config.qualification_ids or {}) | {config.environment: o["qualification"]}
        config.save()
        return [
            f"environment {config.environment}{' (confirmed)' if config.live_confirmed_at else ''}, "
            f"question {config.question_type}, public URL {config.public_url or '(none)'}",
            f"approval rate >= {config.min_approval_rate}, approved HITs >= {config.min_approved_hits}, "
            f"locales {','.join(config.locales) or 'any'}, masters {config.masters}, "
            f"qualification {(config.qualification_ids or {}).get(config.environment) or '(none)'}",
            f"HIT lifetime {config.hit_lifetime_seconds} s, auto-approval after {config.auto_approval_seconds} s",
        ]
