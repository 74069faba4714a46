"""Simulated raters finish under the production rate limit (issue 17, "also fix").

``simulate_raters --raters 12 --double-submit 0.2 --return-rate 0.1 --abandon 0.1`` on a 30-image
rating campaign, on the embedded SQLite database with in-process tasks (the quick start), used to
crash with ``AttributeError: 'NoneType' object has no attribute 'group'``: the in-process transport
read the rate limiter's 429 page as a task page. Both transports now share one retry policy
(:class:`crowd.simulate.PatientTransport`) that waits out ``Retry-After``.

The run happens in a subprocess on a fresh SQLite file with ``RATER_RATE_LIMIT`` unset, i.e. the
production default of ``evalsite/settings.py`` (this test process's conftest switches the limit
off, which does not reach the subprocess). Time is simulated: the limiter's clock
(``crowd.ratelimit.time``) and the simulator's one place of waiting
(``PatientTransport.sleep``) share a clock that moves only when a rater waits, so each rater's
counter really fills up (20 images, k = 2, 8 raters: over 120 requests a minute for some raters, who
wait a whole window, as with the 30 images and 12 raters this test used before) and every
wait really ends the limiter's window, without the test taking minutes of wall-clock time. The SQLite file is a
copy of the session's migrated one (tests/sqlite_var.py) rather than a migrate of its own.
"""
import json
import os
import subprocess
import sys

from .conftest import ROOT, write_subset
from .sqlite_var import migrated_var

SCRIPT = r"""
import io, json, os
from collections import Counter
from django.conf import settings
from django.core.management import call_command
from django.db.models import Count, Q

subset = os.environ["SIMULATION_SUBSET"]
assert settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"), settings.DATABASES["default"]["ENGINE"]
assert settings.CELERY_TASK_ALWAYS_EAGER
assert os.path.isfile(settings.DATABASES["default"]["NAME"])  # migrated (tests/sqlite_var.py)
quiet = io.StringIO()
call_command("import_dataset", "flickr8k-expert", subset, "--name", "f30", stdout=quiet)
call_command("create_campaign", "rating", "--dataset", "f30", "--name", "rate30", "--images", "20", "--k", "2",
             "--image-url", "http://127.0.0.1:9/{key}", "--live", stdout=quiet)

import crowd.ratelimit
import crowd.simulate


class Clock:
    # starts on a window boundary of every rate (1.8e9 s is a whole number of minutes and hours)
    now = 1_800_000_000.0
    waits = []

    def time(self):
        return self.now

    def sleep(self, seconds):
        self.waits.append(seconds)
        self.now += seconds


clock = Clock()
crowd.ratelimit.time = clock
crowd.simulate.PatientTransport.sleep = staticmethod(clock.sleep)

out = io.StringIO()
call_command("simulate_raters", "--campaign", "rate30", "--raters", "8", "--double-submit", "0.2",
             "--return-rate", "0.1", "--abandon", "0.1", stdout=out)

from crowd.engine import campaign_counts
from crowd.models import Assignment, Campaign, HumanJudgment, Item

campaign = Campaign.objects.get(name="rate30")
counted = Counter(dict(Item.objects.filter(campaign=campaign, is_gold=False)
                       .annotate(n=Count("assignments", filter=Q(assignments__counted=True)))
                       .values_list("key", "n")))
pairs = Counter(Assignment.objects.filter(campaign=campaign, counted=True).values_list("item_id", "worker_id"))
print(json.dumps({
    "rate": settings.RATER_RATE_LIMIT,
    "output": out.getvalue(),
    "waits": clock.waits,
    "counts": campaign_counts(campaign),
    "k": campaign.judgments_per_item,
    "state": campaign.state,
    "counted_per_item": sorted(set(counted.values())),
    "worker_twice_on_item": sum(1 for n in pairs.values() if n > 1),
    "judgments": HumanJudgment.objects.filter(campaign=campaign).count(),
    "criteria": sorted(set(HumanJudgment.objects.filter(campaign=campaign).values_list("criterion", flat=True))),
}))
"""


def test_simulated_raters_wait_out_the_default_rate_limit_and_all_finish_on_sqlite(tmp_path):
    subset = write_subset(tmp_path / "flickr8k-20", 20)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CACHE_URL", "RATER_RATE_LIMIT")}
    env["EVALSITE_VAR_DIR"] = str(migrated_var(tmp_path / "var"))
    env["SIMULATION_SUBSET"] = str(subset)
    done = subprocess.run([sys.executable, "manage.py", "shell", "-c", SCRIPT], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "AttributeError" not in done.stderr
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    summary = facts["output"].splitlines()[0]
    # the production default, and it did bite: raters were refused and waited for the window to end
    assert facts["rate"] == "120/m"
    assert facts["waits"] and all(0 < w <= 30 for w in facts["waits"]), facts["waits"]
    assert sum(facts["waits"]) >= 60, facts["waits"]  # at least one whole window waited out
    assert f"retried {len(facts['waits'])}" in summary, summary
    # every simulated rater finished: the campaign is complete, nobody stopped on an error page
    assert summary.endswith("stopped because: finished 8"), summary
    assert "http_" not in summary, summary
    counts = facts["counts"]
    assert counts["items"] >= 100  # 20 images x about 5.6 judged candidates each
    assert counts["judgments"] == counts["needed"] == counts["items"] * facts["k"], counts
    assert counts["complete_items"] == counts["items"], counts
    assert facts["counted_per_item"] == [facts["k"]]  # exactly k counted judgments on every item
    assert facts["worker_twice_on_item"] == 0
    assert facts["state"] == "finished"  # a complete local campaign closes itself
    # the faults happened, and none of them stored an answer twice
    for event in ("submitted", "double", "returned", "abandoned", "late"):
        assert f" {event} " in summary, (event, summary)
    assert facts["judgments"] == counts["judgments"] * len(facts["criteria"]), facts
    assert f"progress: {counts['needed']:,}/{counts['needed']:,} judgments" in facts["output"]
