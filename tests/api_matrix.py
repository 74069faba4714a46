"""The REST API's permission matrix: for every endpoint, the status each kind of client gets.

``tests/test_api_permissions.py`` sends every row's request as each of :data:`USERS` against one
:class:`World` and checks the status; ``tests/test_api_schema.py`` checks that every operation of the
schema has a row (so a new endpoint cannot go untested). Add a row per endpoint (and per method).

Who is who (:func:`build_world`):

``anonymous``
    no token.
``rater``
    a logged-in account that owns no campaign and is not staff (local raters' accounts are such).
``other_owner``
    owns another campaign (``world.other_campaign``) on the same dataset.
``owner``
    owns ``world.campaign``.
``staff``
    ``is_staff`` (not a superuser): may import datasets and start metric runs
    (:func:`metrics.jobs.can_compute`, :func:`crowd.views.judgments_upload.is_staff`); campaigns follow
    the owner pages' rule (:func:`crowd.views.owner.owned_campaign`: owners and superusers).

A row's ``path`` is formatted with the world's names (``{dataset}``, ``{run}``, ``{campaign}``,
``{other_campaign}``, ``{import_job}``: an import job of staff's, ``{owner_invitation}``: owner's invitation of
``rater`` to co-own the campaign); ``body`` (a function of the world, or None) gives the request's data: a dict
sent as JSON, or with ``multipart=True`` as a multipart form (file values: ``(name, bytes)``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

USERS = ("anonymous", "rater", "other_owner", "owner", "staff")


def everyone(status: int) -> dict[str, int]:
    """The same status for every client."""
    return dict.fromkeys(USERS, status)


def staff_only(ok: int) -> dict[str, int]:
    """Writes only staff may make: 401 anonymous, 403 other accounts, ``ok`` for staff."""
    return {"anonymous": 401, "rater": 403, "other_owner": 403, "owner": 403, "staff": ok}


def owners_only(ok: int, superuser_too: bool = False) -> dict[str, int]:
    """A campaign's resource: 401 anonymous, 404 for accounts that do not own it (the owner pages
    answer 404, not 403, so that names do not leak), ``ok`` for its owner."""
    return {"anonymous": 401, "rater": 404, "other_owner": 404, "owner": ok, "staff": ok if superuser_too else 404}


@dataclass
class World:
    """What the matrix's requests name: users and their tokens, a COCO dataset with a model system
    (``model``) and a finished BLEU-1 run, and one campaign each for ``owner`` and ``other_owner``."""

    users: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    dataset: str = "api-world"
    system: str = "model"
    run: int = 0
    campaign: str = "api-owned"
    other_campaign: str = "api-other"
    import_job: int = 0
    owner_invitation: int = 0
    files: Path | None = None

    def names(self) -> dict:
        return {"dataset": self.dataset, "run": self.run, "campaign": self.campaign,
                "other_campaign": self.other_campaign, "system": self.system, "import_job": self.import_job,
                "owner_invitation": self.owner_invitation}


@dataclass(frozen=True)
class Row:
    method: str
    path: str
    expect: dict[str, int]
    body: Callable[[World], dict] | None = None
    multipart: bool = False

    def url(self, world: World) -> str:
        return self.path.format(**world.names())

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


def _coco_upload(world: World) -> dict:
    """A new model's COCO results for the world's images (the same captions as ``model``, another name)."""
    return {"format": "coco", "name": world.dataset, "system": "model-b",
            "results": ("results.json", (world.files / "thumb_models.json").read_bytes())}


ROWS: list[Row] = [
    # datasets, systems, captions (api/datasets.py)
    Row("GET", "/api/datasets/", everyone(200)),
    Row("GET", "/api/datasets/{dataset}/", everyone(200)),
    Row("GET", "/api/datasets/no-such-dataset/", everyone(404)),
    Row("POST", "/api/datasets/", staff_only(201), _coco_upload, multipart=True),
    Row("GET", "/api/datasets/{dataset}/systems/", everyone(200)),
    Row("GET", "/api/datasets/{dataset}/captions/", everyone(200)),
    Row("DELETE", "/api/datasets/{dataset}/", {"anonymous": 401, "rater": 403, "other_owner": 403, "owner": 403,
                                              "staff": 405}),
    # background imports of large uploads (api/imports.py): the world's job is staff's
    Row("GET", "/api/imports/", {"anonymous": 401, "rater": 200, "other_owner": 200, "owner": 200, "staff": 200}),
    Row("GET", "/api/imports/{import_job}/", {"anonymous": 401, "rater": 404, "other_owner": 404, "owner": 404,
                                              "staff": 200}),
    # metric runs (api/runs.py)
    Row("GET", "/api/runs/", everyone(200)),
    Row("GET", "/api/runs/{run}/", everyone(200)),
    Row("POST", "/api/runs/", staff_only(202), lambda w: {"dataset": w.dataset, "metrics": ["bleu_1"]}),
    Row("GET", "/api/runs/{run}/scores/", everyone(200)),
    Row("GET", "/api/runs/{run}/scores/csv/", everyone(200)),
    # --- reports and campaigns (api/reports.py, api/campaigns.py; helper C) --------------------------
    # reports are public, as the dashboard pages; the world's dataset has no human judgments and one
    # candidate system, so each dataset report answers the problem its page shows (409), for every client alike
    *[Row("GET", f"/api/reports/{kind}/{{dataset}}/", everyone(409))
      for kind in ("correlation", "benchmark", "leaderboard", "diversity")],
    Row("GET", "/api/reports/comparison/", everyone(200)),  # every dataset: api-world listed as skipped
    Row("GET", "/api/reports/correlation/no-such-dataset/", everyone(404)),
    Row("GET", "/api/reports/status/{run}/", everyone(404)),  # the world stores no report: no such id
    # campaigns: logged-in users only; a campaign is its owners' (superusers'), others get 404
    Row("GET", "/api/campaigns/", {"anonymous": 401, "rater": 200, "other_owner": 200, "owner": 200, "staff": 200}),
    Row("POST", "/api/campaigns/", {"anonymous": 401, "rater": 201, "other_owner": 201, "owner": 201, "staff": 201},
        lambda w: {"kind": "rating", "dataset": w.dataset, "name": "api-matrix-new", "images": 2}),
    Row("GET", "/api/campaigns/{campaign}/", owners_only(200)),
    Row("GET", "/api/campaigns/{other_campaign}/", {"anonymous": 401, "rater": 404, "other_owner": 200, "owner": 404,
                                                    "staff": 404}),
    Row("POST", "/api/campaigns/{campaign}/state/", owners_only(200), lambda w: {"state": "finished", "confirm": True}),
    *[Row("GET", f"/api/campaigns/{{campaign}}/{part}/", owners_only(200))
      for part in ("progress", "report", "judgments", "workers")],
    Row("GET", "/api/campaigns/no-such-campaign/", owners_only(404)),
    # co-owner invitations (api/owners.py): a campaign's are its owners'; those received, every account's own
    Row("GET", "/api/campaigns/{campaign}/owner-invitations/", owners_only(200)),
    Row("POST", "/api/campaigns/{campaign}/owner-invitations/", owners_only(201), lambda w: {"username": "someone"}),
    Row("DELETE", "/api/campaigns/{campaign}/owner-invitations/{owner_invitation}/", owners_only(200)),
    Row("GET", "/api/owner-invitations/", {"anonymous": 401, "rater": 200, "other_owner": 200, "owner": 200,
                                           "staff": 200}),
    # only the invited user answers an invitation: to anyone else it is missing (404)
    *[Row("POST", f"/api/owner-invitations/{{owner_invitation}}/{answer}/", {"anonymous": 401, "rater": 200,
                                                                             "other_owner": 404, "owner": 404,
                                                                             "staff": 404})
      for answer in ("accept", "decline")],
    # --- end of helper C's block ------------------------------------------------------------------------
    # other routes
    Row("GET", "/api/schema/", everyone(200)),
    Row("GET", "/api/no-such-resource/", everyone(404)),
]


def build_world(directory: Path) -> World:
    """Create the matrix's world in the database (the caller wraps it in a transaction or keeps it):
    users with tokens, dataset ``api-world`` imported from the bundled COCO-format files
    (``tests/coco_sets.py``: 30 images, their references, four THumB models' captions as system
    ``model``), a BLEU-1 run computed in-process, two draft rating campaigns and the owner's invitation
    of ``rater`` to co-own the first."""
    from django.contrib.auth.models import User
    from api.account import create_token

    from api.models import ImportJob
    from crowd import engine, owners
    from crowd.importers.coco import SystemFile, import_coco
    from crowd.models import Dataset
    from metrics import pipeline, tasks

    from .coco_sets import write_coco_files

    world = World(files=write_coco_files(directory))
    for name in USERS[1:]:
        user = User.objects.create_user(f"api-{name}", password="pw", is_staff=(name == "staff"))
        world.users[name] = user
        world.tokens[name] = create_token(user)
    import_coco(world.dataset, world.files / "captions.json", [SystemFile(world.system, world.files / "thumb_models.json")])
    dataset = Dataset.objects.get(name=world.dataset)
    runs = pipeline.plan_runs(world.dataset, ["bleu_1"])
    tasks.start_runs(runs)
    world.run = runs[0].pk
    world.import_job = ImportJob.objects.create(user=world.users["staff"], name=world.dataset, format="coco",
                                                status=ImportJob.DONE, message="imported").pk
    campaign = engine.create_campaign(dataset, "rating", name=world.campaign, owners=[world.users["owner"]],
                                      options={"images": 2})
    world.owner_invitation = owners.invite(campaign, world.users["rater"].get_username(), world.users["owner"]).pk
    engine.create_campaign(dataset, "rating", name=world.other_campaign, owners=[world.users["other_owner"]],
                           options={"images": 2})
    return world


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory):
    """The matrix's world, created once per test module that imports this fixture and deleted after
    it (each test's own writes are rolled back by the ``db`` fixture)."""
    from crowd.models import Campaign, Dataset

    with django_db_blocker.unblock():
        w = build_world(tmp_path_factory.mktemp("api-world"))
    yield w
    with django_db_blocker.unblock():
        Campaign.objects.filter(name__in=[w.campaign, w.other_campaign]).delete()
        Dataset.objects.filter(name=w.dataset).delete()
        for user in w.users.values():
            user.delete()


def request(client, row: Row, world: World, user: str):
    """Send ``row``'s request as ``user`` with Django's test ``client``; returns the response."""
    headers = {} if user == "anonymous" else {"HTTP_AUTHORIZATION": f"Token {world.tokens[user]}"}
    method = getattr(client, row.method.lower())
    data = row.body(world) if row.body else None
    if data is None:
        return method(row.url(world), **headers)
    if row.multipart:
        from django.core.files.uploadedfile import SimpleUploadedFile

        form = {k: SimpleUploadedFile(v[0], v[1]) if isinstance(v, tuple) else v for k, v in data.items()}
        return method(row.url(world), form, **headers)
    return method(row.url(world), json.dumps(data), content_type="application/json", **headers)
