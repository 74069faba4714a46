"""python manage.py create_campaign KIND --dataset NAME --name SLUG [options]

Every option is checked before anything is written; a bad value (a name that is not a slug, a
number outside what the campaign tables hold, an atoms file that is not UTF-8 CSV, an image URL
template that is not http:// or https://) is a one-line CommandError and nothing is created.

Kinds that show images (rating, diversity, description) go ``--live`` only with a picture for every
item: from the dataset's image source (``set_image_source``), ``--image-url TEMPLATE`` (this
campaign only) or ``--images-dir DIR`` (becomes the dataset's image source; refused when the
dataset already has another one). Otherwise the command exits non-zero with one line saying how to
give one (:func:`crowd.images.campaign_image_problem`).
"""
import csv
import math
import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from crowd import engine, images
from crowd.kinds import KINDS, CampaignSpecError
from crowd.kinds.base import check_url_template
from crowd.kinds.visual_atom import atoms_text
from crowd.models import Campaign, Dataset
from crowd.views.owner import read_atoms


class Command(BaseCommand):
    help = (
        "Create a rating campaign from an imported dataset, e.g. a caption-set diversity campaign: "
        "create_campaign diversity --dataset flickr8k-expert --name div-100 --images 100 --owner alice --live"
    )

    def add_arguments(self, parser):
        parser.add_argument("kind", choices=list(KINDS))
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--name", required=True, help="campaign name (slug, unique)")
        parser.add_argument("--title", default="")
        parser.add_argument("--owner", action="append", default=[], help="username of an owner (repeatable)")
        parser.add_argument("--k", type=int, default=None, help="judgments per item (default: the kind's, 3 or 5)")
        parser.add_argument("--images", type=int, default=None, help="random sample of this many images (default all)")
        parser.add_argument("--systems", default="", help="diversity: comma-separated system names (default all)")
        parser.add_argument("--captions-per-set", type=int, default=None, help="diversity: first m captions of a set")
        parser.add_argument("--pairs-per-image", type=int, default=None, help="forced choice: (B, C) pairs per image")
        parser.add_argument("--atoms", default=None, help="visual atoms: CSV file of word,category[,count]")
        parser.add_argument("--image-url", default="",
                            help="image URL template: http:// or https:// with {key} (percent-encoded), "
                                 "e.g. https://host/images/{key}")
        parser.add_argument("--images-dir", default="",
                            help="a local folder of the pictures (file names = image keys), served by the "
                                 "platform; becomes the dataset's image source")
        parser.add_argument("--gold", type=int, default=None, help="number of gold items (default 5%% of items, >= 2)")
        parser.add_argument("--gold-every", type=int, default=10, help="a gold item every n tasks (0: none)")
        parser.add_argument("--cap", type=int, default=None, help="at most this many items per worker")
        parser.add_argument("--minutes", type=float, default=10, help="time a worker has for one task")
        parser.add_argument("--lifetime-days", type=float, default=None)
        parser.add_argument("--reward", default="0", help="reward per assignment in USD")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--live", action="store_true", help="publish at once (default: draft)")
        parser.add_argument("--provider", choices=["local", "mturk", "prolific"], default="local",
                            help="where the workers come from: the local rater pool, Mechanical Turk "
                                 "(then see `manage.py mturk`) or Prolific (then see `manage.py prolific`)")
        # the participant journey (crowd.journey)
        parser.add_argument("--bundle", type=int, default=0,
                            help="tasks per participant session, 0-1000 (default 0: no bundle)")
        parser.add_argument("--session-minutes", type=int, default=0,
                            help="time budget of one participant session in minutes, 0-1440 (default 0: none)")
        parser.add_argument("--consent-file", default="",
                            help="UTF-8 text file of the consent shown before any task (at most 20,000 characters)")
        parser.add_argument("--practice", type=int, default=0,
                            help="practice items with known answers before the tasks, 0-100 (extra gold items)")
        parser.add_argument("--practice-pass", type=float, default=0.8,
                            help="share of practice items a participant must get right, in (0, 1] (default 0.8)")
        parser.add_argument("--attention-max-failures", type=int, default=1,
                            help="failed attention checks (gold items) a session tolerates, 0-1000 (default 1)")

    @staticmethod
    def check_options(o) -> None:
        """Raise CommandError for an option value the campaign tables cannot hold."""
        if not re.fullmatch(r"[-a-zA-Z0-9_]{1,100}", o["name"]):
            raise CommandError(f"invalid --name {o['name'][:120]!r}: use 1-100 letters, digits, '-' and '_'")
        if len(o["title"]) > 200 or "\x00" in o["title"]:
            raise CommandError("--title must have at most 200 characters and no NUL character")
        limits = {"k": (1, 32767), "cap": (1, 2**31 - 1), "gold_every": (0, 32767),
                  "gold": (0, 100_000)}
        for key, (lo, hi) in limits.items():
            if o[key] is not None and not lo <= o[key] <= hi:
                raise CommandError(f"--{key.replace('_', '-')} must be between {lo} and {hi:,}, got {o[key]}")
        if not (math.isfinite(o["minutes"]) and 10 <= 60 * o["minutes"] <= 2**31 - 1):
            raise CommandError(f"--minutes must be between 1/6 and {(2**31 - 1) // 60:,}, got {o['minutes']}")
        days = o["lifetime_days"]
        if days is not None and not (math.isfinite(days) and 0 <= days <= 36500):
            raise CommandError(f"--lifetime-days must be between 0 and 36,500, got {days}")
        try:
            reward = Decimal(str(o["reward"]))
        except InvalidOperation:
            reward = None
        if reward is None or not reward.is_finite() or not 0 <= reward < 10000:
            raise CommandError(f"--reward must be an amount of dollars from 0 to 9999.99, got {str(o['reward'])[:50]!r}")
        if o["image_url"]:
            try:
                check_url_template(o["image_url"])
            except CampaignSpecError as exc:
                raise CommandError(f"--image-url: {exc}") from None
        if o["image_url"] and o["images_dir"]:
            raise CommandError("give either --image-url or --images-dir, not both")
        if o["images_dir"] and not Path(o["images_dir"]).expanduser().is_dir():
            raise CommandError(f"--images-dir {o['images_dir'][:200]!r} is not an existing folder")
        o["consent_text"] = Command.read_consent(o["consent_file"]) if o["consent_file"] else ""
        for key, option in (("bundle", "--bundle"), ("session_minutes", "--session-minutes"),
                            ("practice", "--practice"), ("practice_pass", "--practice-pass"),
                            ("attention_max_failures", "--attention-max-failures"), ("consent_text", "--consent-file")):
            try:
                engine.check_journey_options(**{"bundle_size" if key == "bundle" else key: o[key]})
            except CampaignSpecError as exc:
                raise CommandError(f"{option}: {exc}") from None

    @staticmethod
    def create(dataset, o, owners, options) -> Campaign:
        """The campaign of the command's options ``o`` (checked by :meth:`check_options`; the same
        names serve the API, :func:`api.campaigns.create`) on ``dataset``, owned by ``owners``
        (users), with the kind ``options`` (images, systems, atoms...): :func:`crowd.engine.create_campaign`,
        ``--minutes`` as seconds, ``--lifetime-days`` as a timedelta (0 or None: no expiry),
        ``--live`` as the state. Raises CampaignSpecError or ImageSourceError for a campaign the
        options cannot make; the caller holds the transaction."""
        return engine.create_campaign(
            dataset, o["kind"], name=o["name"], title=o["title"], owners=owners, k=o["k"],
            per_worker_cap=o["cap"], assignment_seconds=int(60 * o["minutes"]),
            lifetime=timedelta(days=o["lifetime_days"]) if o["lifetime_days"] else None,
            reward=o["reward"], options=options, seed=o["seed"], gold_every=o["gold_every"],
            state=Campaign.LIVE if o["live"] else Campaign.DRAFT, provider=o["provider"],
            bundle_size=o["bundle"], session_minutes=o["session_minutes"], consent_text=o["consent_text"],
            practice=o["practice"], practice_pass=o["practice_pass"],
            attention_max_failures=o["attention_max_failures"],
        )

    @staticmethod
    def read_consent(path: str) -> str:
        """The consent text of ``--consent-file``: a readable UTF-8 text file of at most
        ``engine.MAX_CONSENT_CHARS`` characters, not empty, without NUL; CommandError (one line)
        otherwise. Windows line ends become ``\\n``."""
        file = Path(path).expanduser()
        try:
            if file.stat().st_size > 4 * engine.MAX_CONSENT_CHARS + 4:
                raise CommandError(f"--consent-file {path[:200]!r} is longer than {engine.MAX_CONSENT_CHARS:,} characters")
            text = file.read_bytes().decode("utf-8-sig")
        except OSError as exc:
            raise CommandError(f"--consent-file {path[:200]!r}: cannot read it ({exc.strerror or exc})") from None
        except UnicodeDecodeError:
            raise CommandError(f"--consent-file {path[:200]!r} is not UTF-8 text") from None
        text = text.replace("\r\n", "\n").strip()
        if not text:
            raise CommandError(f"--consent-file {path[:200]!r} is empty")
        if "\x00" in text:
            raise CommandError(f"--consent-file {path[:200]!r} is not text (it has a NUL character)")
        if len(text) > engine.MAX_CONSENT_CHARS:
            raise CommandError(f"--consent-file {path[:200]!r} has {len(text):,} characters; at most "
                               f"{engine.MAX_CONSENT_CHARS:,} are allowed")
        return text

    @staticmethod
    def use_images_dir(dataset, images_dir: str) -> None:
        """Make ``images_dir`` the dataset's image source (a local folder); CommandError when the
        dataset already has another source (change it with set_image_source)."""
        folder = str(Path(images_dir).expanduser().resolve())
        current = (dataset.image_source, dataset.image_location)
        if current[0] and current != (images.FOLDER, folder):
            raise CommandError(
                f"dataset {dataset.name!r} already has an image source ({images.source_for(dataset).describe()}); "
                f"change it with: python manage.py set_image_source {dataset.name} --images-dir {images_dir}")
        images.set_source(dataset, images_dir=folder)

    def handle(self, *args, **o):
        self.check_options(o)
        dataset = Dataset.objects.filter(name=o["dataset"]).first()
        if dataset is None:
            known = ", ".join(Dataset.objects.values_list("name", flat=True)) or "none imported"
            raise CommandError(f"unknown dataset {o['dataset']!r} (datasets: {known})")
        User = get_user_model()
        owners = []
        for username in o["owner"]:
            user = User.objects.filter(username=username).first()
            if user is None:
                raise CommandError(f"unknown user {username!r}; create it with: python manage.py createsuperuser")
            owners.append(user)
        options = {}
        for key in ("images", "captions_per_set", "pairs_per_image", "gold"):
            if o[key] is not None:
                options[key] = o[key]
        if o["systems"]:
            options["systems"] = [s.strip() for s in o["systems"].split(",") if s.strip()]
        if o["image_url"]:
            options["image_url"] = o["image_url"]
        if o["atoms"]:
            path = Path(o["atoms"])
            try:
                options["atoms"] = read_atoms(atoms_text(path.read_bytes(), str(path)))
            except OSError as exc:
                raise CommandError(f"{path}: cannot read atoms ({exc})") from None
            except CampaignSpecError as exc:
                raise CommandError(str(exc)) from None
            except csv.Error as exc:
                raise CommandError(f"{path}: not a valid CSV file ({exc})") from None
        try:
            with transaction.atomic():  # a folder given with --images-dir is kept only with the campaign
                if o["images_dir"]:
                    self.use_images_dir(dataset, o["images_dir"])
                campaign = self.create(dataset, o, owners, options)
        except (CampaignSpecError, images.ImageSourceError) as exc:
            raise CommandError(str(exc)) from None
        counts = engine.campaign_counts(campaign)
        self.stdout.write(
            f"campaign {campaign.name!r} ({campaign.kind}, {campaign.state}): {counts['items']:,} items + "
            f"{counts['gold_items']} gold, k = {campaign.judgments_per_item}, {counts['needed']:,} judgments needed"
        )
        if o["practice"] or o["bundle"] or o["consent_text"]:
            self.stdout.write(
                f"participant sessions: bundle {o['bundle'] or 'none'}, time budget "
                f"{str(o['session_minutes']) + ' min' if o['session_minutes'] else 'none'}, consent "
                f"{'yes' if o['consent_text'] else 'no'}, {o['practice']} practice items (pass mark "
                f"{o['practice_pass']:g}), at most {o['attention_max_failures']} failed attention checks")
        if not owners:
            self.stdout.write("no owner given: only superusers see it on /campaigns/ (add --owner USERNAME)")
