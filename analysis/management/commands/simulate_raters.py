"""python manage.py simulate_raters --campaign NAME [--raters 20] [--spammers 2] [--url http://...]

Simulated raters (:func:`crowd.simulate.simulate`) work on a live campaign, then the campaign report
(:func:`analysis.campaigns.campaign_report`: progress, Krippendorff's alpha, human ceiling,
metric-human correlations; for each metric also the Wang & Chan 2019 Table 2 protocol on unit
means: Pearson, Spearman and the average per-image Spearman) is printed. A diversity campaign's
report correlates the set-level diversity measures (Self-CIDEr, LSA, mBLEU), computed when the
campaign was created (:mod:`metrics.campaigns`); the accuracy metrics are left out with a note.

The command lives in the ``analysis`` app because it prints an analysis report: ``crowd`` sits
below ``analysis`` in the layering (``tests/test_layering.py``) and must not import it.
"""
from django.core.management.base import BaseCommand, CommandError

from analysis.campaigns import campaign_report
from crowd.models import Campaign
from crowd.simulate import Faults, simulate


def x100(value) -> str:
    """A correlation x100 with one decimal, or "n/a" when undefined (None)."""
    return "n/a" if value is None else f"{100 * value:.1f}"


class Command(BaseCommand):
    """``simulate_raters``: options and output as documented in the README (one summary line, then
    progress, agreement, ceiling and correlations of the campaign report). CommandError for an
    unknown campaign, bad rater counts, or a campaign that is not live."""

    help = "Simulate raters working on a live campaign through the rater pages (for demos and tests)."

    def add_arguments(self, parser):
        parser.add_argument("--campaign", required=True)
        parser.add_argument("--raters", type=int, default=20)
        parser.add_argument("--spammers", type=int, default=0, help="how many of them answer at random")
        parser.add_argument("--url", default=None, help="server base URL (default: in-process, no server)")
        parser.add_argument("--threads", type=int, default=None, help="concurrent raters with --url")
        parser.add_argument("--noise", type=float, default=0.1)
        parser.add_argument("--double-submit", type=float, default=0.0)
        parser.add_argument("--return-rate", type=float, default=0.0)
        parser.add_argument("--abandon", type=float, default=0.0, help="share of tasks left to expire")
        parser.add_argument("--seed", type=int, default=0)

    def handle(self, *args, **o):
        campaign = Campaign.objects.filter(name=o["campaign"]).first()
        if campaign is None:
            raise CommandError(f"unknown campaign {o['campaign']!r}")
        if o["raters"] < 1 or not 0 <= o["spammers"] <= o["raters"]:
            raise CommandError("need at least 1 rater and 0 <= spammers <= raters")
        faults = Faults(double_submit=o["double_submit"], return_task=o["return_rate"], abandon=o["abandon"])
        try:
            result = simulate(campaign, raters=o["raters"], spammers=o["spammers"], url=o["url"],
                              threads=o["threads"], faults=faults, seed=o["seed"], noise=o["noise"])
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(result))
        report = campaign_report(campaign)
        p = report["progress"]
        self.stdout.write(f"progress: {p['judgments']:,}/{p['needed']:,} judgments, {p['complete_items']:,}/{p['items']:,} items complete")
        for criterion, a in report["agreement"].items():
            alpha = "n/a" if a["alpha"] is None else f"{a['alpha']:.3f}"
            self.stdout.write(f"Krippendorff's alpha ({criterion}, {a['level']}): {alpha} over {a['units']} units")
        for criterion, metrics in report["correlations"].items():
            ceiling = report["ceiling"].get(criterion, {}).get("kendall_tau_b")
            if ceiling is not None:
                self.stdout.write(f"human ceiling ({criterion}, split-half Kendall tau-b): {100 * ceiling:.1f}")
            for m in metrics.values():
                self.stdout.write(f"  {m['name']:<10} vs {criterion}: Kendall tau-b {x100(m['kendall_tau_b'])}, "
                                  f"Pearson {x100(m['pearson'])} ({m['n_ratings']} ratings); "
                                  f"on unit means Pearson {x100(m['per_unit_mean']['pearson'])}, "
                                  f"Spearman {x100(m['per_unit_mean']['spearman'])} ({m['per_unit_mean']['n_units']} units), "
                                  f"per-image Spearman {x100(m['per_image']['spearman'])} "
                                  f"({m['per_image']['n_images']} images)")
        for note in report["notes"]:
            self.stdout.write(f"note: {note}")
