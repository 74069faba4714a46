"""Owner pages: the campaigns a user owns, creating one in a few clicks (with a preview of a
rendered task), state changes (Finish asks for a confirmation), invitation links (listed, copied,
revoked), co-owners (invited by an owner, accepted by the invited user: :mod:`crowd.owners`), worker overrides with an audit trail (:mod:`crowd.audit`), the owner's preview of a task
as a rater sees it, a small status endpoint the campaign page polls, and exports. The campaign's dashboard (progress, quality, agreement, correlations with
metrics), its report as JSON and its charts read the cached campaign report, so they live in
analysis (:mod:`analysis.campaign_views`) under the same ``crowd:`` URL names.

A campaign and everything about it is visible only to its owners: anyone else gets 404, so
campaign names do not leak. Its data reaches the public pages only once an owner publishes its
results (:mod:`crowd.privacy`).
"""
from __future__ import annotations

import csv
import io
import random

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from crowd import audit, engine, export, images, owners, privacy, quality
from crowd.kinds import KINDS, CampaignSpecError, get_kind
from crowd.kinds.base import check_url_template
from crowd.kinds.visual_atom import atoms_text
from crowd.models import AuditEntry, Campaign, Dataset, Item
from captioneval.utils import csvsafe


def owned_campaign(request, name) -> Campaign:
    """The campaign ``name`` if the logged-in user may see it (:func:`crowd.privacy.visible_campaigns`:
    an owner or a superuser); Http404 otherwise."""
    campaign = privacy.visible_campaigns(request.user).filter(name=name).select_related("dataset").first()
    if campaign is None:
        raise Http404("no such campaign")
    return campaign


#: kinds whose items carry an image (the "images" fields of the form apply), kinds whose build
#: reads ``options["gold"]`` (the number of gold items), and the fields only one kind reads
IMAGE_KINDS = sorted({k for k, v in KINDS.items() if getattr(v, "shows_images", False)}
                     | ({"description", "rating", "forced_choice", "diversity"} & set(KINDS)))
GOLD_KINDS = sorted({"rating", "forced_choice", "diversity"} & set(KINDS))
#: the form's field groups: (legend, kinds it applies to (None: every kind), field names)
FIELD_GROUPS = [
    ("Every campaign", None, ["name", "title", "dataset", "kind", "k", "per_worker_cap", "assignment_minutes", "reward",
                              "provider", "min_seconds_per_task", "seed"]),
    ("Images", IMAGE_KINDS, ["images", "image_url"]),
    ("Gold items (quality checks)", GOLD_KINDS, ["gold"]),
    ("Caption-set diversity", ["diversity"], ["systems", "captions_per_set"]),
    ("Visual atoms", ["visual_atom"], ["atoms"]),
    ("Participant journey (local pool and Prolific)", None,
     ["bundle_size", "session_minutes", "consent_text", "practice", "practice_pass", "attention_max_failures"]),
]
#: the journey fields of the form -> the keyword of :func:`crowd.engine.check_journey_options` they fill
JOURNEY_FIELDS = ("bundle_size", "session_minutes", "consent_text", "practice", "practice_pass", "attention_max_failures")


def _journey_check(name: str, value):
    """``value`` of the journey field ``name`` checked alone by :func:`crowd.engine.check_journey_options`
    (the field's own error, not another's)."""
    try:
        engine.check_journey_options(**{name: value})
    except CampaignSpecError as exc:
        raise forms.ValidationError(str(exc)) from None
    return value


class CampaignForm(forms.Form):
    name = forms.SlugField(max_length=100, help_text="letters, digits, - and _; used in URLs")
    title = forms.CharField(max_length=200, required=False)
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.all(), to_field_name="name")
    kind = forms.ChoiceField(choices=[(k, v.title) for k, v in KINDS.items()])
    k = forms.IntegerField(min_value=1, max_value=50, initial=3, label="judgments per item (k)")
    images = forms.IntegerField(min_value=1, required=False, help_text="a random sample of this many images (empty: all)")
    per_worker_cap = forms.IntegerField(min_value=1, max_value=2**31 - 1, required=False)
    assignment_minutes = forms.IntegerField(min_value=1, max_value=24 * 60, initial=10)
    reward = forms.DecimalField(min_value=0, max_digits=6, decimal_places=2, initial=0, help_text="US dollars per assignment (Mechanical Turk; a Prolific reward is set on its Prolific page)")
    provider = forms.ChoiceField(choices=Campaign.PROVIDERS, initial=Campaign.LOCAL, required=False,
                                 help_text="who rates: raters you invite, or participants recruited on Prolific or "
                                           "Mechanical Turk (those are published from their own page)")
    min_seconds_per_task = forms.FloatField(
        min_value=0, max_value=3600, required=False, label="too fast below (seconds per task)",
        help_text="speed check: answers faster than this are flagged (empty: the platform default; 0: no check)")
    gold = forms.IntegerField(min_value=0, max_value=10000, required=False, label="gold items",
                              help_text="how many gold items (answers known) to add; at most the number of real items "
                                        "(empty: 5% of the items, at least 5)")
    systems = forms.CharField(required=False, help_text="diversity: comma-separated system names (empty: all)")
    captions_per_set = forms.IntegerField(min_value=2, required=False, help_text="diversity: first m captions of each set")
    image_url = forms.CharField(max_length=2000, required=False,
                                help_text="image URL template with {key}, e.g. https://host/images/{key}")
    atoms = forms.FileField(required=False, help_text="visual atoms: CSV rows word,category[,count]")
    seed = forms.IntegerField(initial=0)
    bundle_size = forms.IntegerField(
        required=False, initial=0, label="tasks per session", widget=forms.NumberInput(attrs={"min": 0, "max": 1000}),
        help_text="a participant does this many tasks, then gets a completion page (0: no limit)")
    session_minutes = forms.IntegerField(
        required=False, initial=0, label="session time (minutes)", widget=forms.NumberInput(attrs={"min": 0, "max": 1440}),
        help_text="time budget of one session (0: none)")
    consent_text = forms.CharField(
        required=False, strip=True, widget=forms.Textarea(attrs={"rows": 4, "maxlength": engine.MAX_CONSENT_CHARS}),
        help_text="shown first; participants must agree before any task (empty: no consent page)")
    practice = forms.IntegerField(
        required=False, initial=0, label="practice items", widget=forms.NumberInput(attrs={"min": 0, "max": 100}),
        help_text="items with known answers, shown with feedback before the tasks (0: none)")
    practice_pass = forms.FloatField(
        required=False, initial=0.8, label="practice pass mark",
        widget=forms.NumberInput(attrs={"min": 0.05, "max": 1, "step": 0.05}),
        help_text="share of practice answers needed to go on, e.g. 0.8 (above 0, at most 1)")
    attention_max_failures = forms.IntegerField(
        required=False, initial=1, label="attention checks missed",
        widget=forms.NumberInput(attrs={"min": 0, "max": 1000}),
        help_text="failed attention checks tolerated in a session; one more ends it")

    def clean_bundle_size(self):
        return _journey_check("bundle_size", self.cleaned_data.get("bundle_size") or 0)

    def clean_session_minutes(self):
        return _journey_check("session_minutes", self.cleaned_data.get("session_minutes") or 0)

    def clean_consent_text(self):
        return _journey_check("consent_text", (self.cleaned_data.get("consent_text") or "").replace("\r\n", "\n"))

    def clean_practice(self):
        return _journey_check("practice", self.cleaned_data.get("practice") or 0)

    def clean_practice_pass(self):
        value = self.cleaned_data.get("practice_pass")
        return _journey_check("practice_pass", 0.8 if value is None else value)

    def clean_attention_max_failures(self):
        value = self.cleaned_data.get("attention_max_failures")
        return _journey_check("attention_max_failures", 1 if value is None else value)

    def journey(self) -> dict:
        """The journey keywords of :func:`crowd.engine.create_campaign` from the cleaned data."""
        return {name: self.cleaned_data[name] for name in JOURNEY_FIELDS}

    def clean_image_url(self):
        """Only http(s) templates with a plain {key} (:func:`crowd.kinds.base.check_url_template`)."""
        value = self.cleaned_data.get("image_url", "")
        if value:
            try:
                check_url_template(value)
            except CampaignSpecError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value

    def groups(self) -> list[dict]:
        """The fields by group for the template: ``{"legend", "kinds" (space-separated, "" for
        every kind), "fields" (bound fields)}``."""
        return [{"legend": legend, "kinds": " ".join(kinds) if kinds else "",
                 "fields": [self[name] for name in names]} for legend, kinds, names in FIELD_GROUPS]


def read_atoms(text: str) -> list[list[str]]:
    """Rows of an atoms CSV (word,category[,count]); a header row starting with 'word' is skipped.
    The format is the one ``visual_atoms --out`` writes, so its formula-neutralising quote is undone
    (:func:`captioneval.utils.csvsafe.restore`)."""
    rows = [csvsafe.restore_row(r) for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if rows and rows[0][0].strip().lower() == "word":
        rows = rows[1:]
    return rows


def options_from(data: dict, atoms_text: str | None = None) -> dict:
    options = {}
    for key in ("images", "captions_per_set"):
        if data.get(key):
            options[key] = data[key]
    if data.get("systems"):
        options["systems"] = [s.strip() for s in data["systems"].split(",") if s.strip()]
    if data.get("image_url"):
        options["image_url"] = data["image_url"]
    if data.get("gold") is not None and data["kind"] in GOLD_KINDS:
        options["gold"] = data["gold"]
    if data.get("min_seconds_per_task") is not None:
        options["min_seconds_per_task"] = data["min_seconds_per_task"]
    if atoms_text:
        options["atoms"] = read_atoms(atoms_text)
    return options


def check_built_items(form: CampaignForm, items) -> None:
    """Form errors for items built from the form's settings (nothing is written): more gold items
    than real ones in a kind whose gold count the form sets (field ``gold``), or a kind that shows images whose items have no picture
    (field ``image_url``: the campaign could not be published, :func:`crowd.engine.set_state`)."""
    d = form.cleaned_data
    n_gold = sum(1 for it in items if it.gold is not None)
    n_real = len(items) - n_gold
    if n_gold > n_real and d["kind"] in GOLD_KINDS:  # other kinds' gold is fixed (e.g. visual atoms' checks)
        given = d.get("gold") is not None
        form.add_error("gold", (
            f"{n_gold} gold items for {n_real} real items: gold items are quality checks, at most as many as the "
            f"real items; " + ("lower this number" if given else f"give at most {n_real} here (the default is 5% of "
                               "the items, at least 5)") + " or sample more images."))
    if d["kind"] in IMAGE_KINDS and getattr(KINDS[d["kind"]], "shows_images", False):
        lacking = sum(1 for it in items if it.payload.get("image_key") and not it.payload.get("image_url"))
        if lacking:
            ds = d["dataset"].name
            form.add_error("image_url", (
                f"{KINDS[d['kind']].title} shows images, but dataset {ds!r} has no image source ({lacking} of "
                f"{len(items)} items would have no picture, and raters could not answer): give an image URL "
                f"template here, or give the dataset a source first (python manage.py set_image_source {ds} "
                "--image-url TEMPLATE or --images-dir DIR, or upload its pictures)."))


def task_context(campaign_like, kind: str, payload: dict) -> dict:
    """The context of ``templates/crowd/owner/_task_preview.html``: a task of ``kind`` for
    ``payload`` rendered with the kind's own template, in a fixed presentation order (seed 0)."""
    spec = get_kind(kind)
    order = spec.presentation_order(payload, random.Random(0))
    return {"preview_campaign": campaign_like, "payload": payload, "task": spec.context(payload, order),
            "kind_template": spec.template, "data": {}, "errors": {}}


@login_required
@require_http_methods(["GET", "POST"])
def campaign_new(request):
    """The new-campaign form. ``Preview`` (``preview`` in the POST) builds the items of the
    settings without writing anything and shows the first real item as a rater would see it;
    ``Create`` creates the campaign as a draft. Both refuse more gold items than real ones and a
    kind that shows images with no picture for its items (400, field errors)."""
    form = CampaignForm(request.POST or None, request.FILES or None)
    preview = None
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            atoms = atoms_text(d["atoms"].read(), d["atoms"].name) if d.get("atoms") else None
            options = options_from(d, atoms)
            if options.get("min_seconds_per_task") is not None:
                options["min_seconds_per_task"] = quality.check_min_seconds(options["min_seconds_per_task"])
            items = get_kind(d["kind"]).build_items(d["dataset"], dict(options), random.Random(d["seed"]))
            images.fill_urls(d["dataset"], [it.payload for it in items])  # as create_campaign: the dataset's source
            check_built_items(form, items)
            if not form.errors and "preview" in request.POST:
                real = [it for it in items if it.gold is None] or items
                preview = task_context(
                    {"title": d["title"] or f"{KINDS[d['kind']].title}: {d['dataset'].name}",
                     "instructions": KINDS[d["kind"]].instructions, "kind": d["kind"]},
                    d["kind"], real[0].payload)
                preview["counts"] = {"real": sum(1 for it in items if it.gold is None),
                                     "gold": sum(1 for it in items if it.gold is not None)}
            elif not form.errors:
                campaign = engine.create_campaign(
                    d["dataset"], d["kind"], name=d["name"], title=d["title"], owners=[request.user], k=d["k"],
                    per_worker_cap=d["per_worker_cap"], assignment_seconds=60 * d["assignment_minutes"],
                    reward=d["reward"], options=options, seed=d["seed"], provider=d["provider"] or Campaign.LOCAL,
                    **form.journey(),
                )
                messages.success(request, f"Campaign {campaign.name} created as a draft with {campaign.items.count()} items.")
                return redirect("crowd:campaign", name=campaign.name)
        except CampaignSpecError as exc:  # practice items the kind cannot give: next to that field
            form.add_error("practice" if d.get("practice") and "practice" in str(exc) else None, str(exc))
        except csv.Error as exc:  # e.g. a field beyond the csv module's size limit
            form.add_error("atoms", f"{d['atoms'].name}: not a valid CSV file ({exc})")
    return render(request, "crowd/owner/new.html", {"form": form, "preview": preview},
                  status=400 if form.errors else 200)


# --- the campaign page's console ----------------------------------------------------------------------
def invitation_rows(request, campaign: Campaign) -> list[dict]:
    """The campaign's invitation links for its owners (:func:`crowd.audit.invitations`), each with
    its absolute URL (empty once revoked)."""
    next_url = reverse("crowd:next", kwargs={"name": campaign.name})
    rows = []
    for inv in audit.invitations(campaign):
        url = (request.build_absolute_uri(reverse("crowd:join", kwargs={"token": inv.token})) + f"?next={next_url}"
               if inv.token else "")
        rows.append({"worker": inv.worker, "url": url, "state": inv.state, "tasks": inv.tasks,
                     "created_at": inv.created_at, "revoked_at": inv.revoked_at})
    return rows


def speed_floor(campaign: Campaign) -> float:
    """The campaign's "too fast" threshold in seconds per task (:func:`crowd.quality.min_seconds_per_task`)."""
    return quality.min_seconds_per_task(campaign)


def console_context(request, campaign: Campaign, workers: list[dict]) -> dict:
    """What the campaign page adds for the console: invitation links (the ones just created are
    marked new), where each rater stands now (:func:`crowd.engine.rater_counts`, the rows the page's
    script refreshes from ``status.json``), the owners and the open co-owner invitations, the audit trail (last 50 entries), the speed threshold with each worker row flagged
    ``too_fast_median`` when its median seconds per task is under it, and the overrides each worker
    row offers. Cheap: a few queries, no report."""
    new = set(request.session.pop("new_invites", None) or [])
    floor = speed_floor(campaign)
    for w in workers:
        w["too_fast_median"] = bool(floor and w.get("median_seconds") is not None and w["median_seconds"] < floor)
        w["overrides"] = (["unblock", "count"] if w.get("status") == "blocked" else ["block", "uncount", "count"])
    links = invitation_rows(request, campaign) if campaign.provider == Campaign.LOCAL else []
    for row in links:
        row["new"] = row["url"] in new
    raters = engine.rater_counts(campaign)
    return {
        "invitations": links, "new_invites": len(new), "speed_floor": floor,
        "raters": raters, "awaiting_gold": engine.awaiting_total(raters),
        "gold_required": engine.gold_checks_required(campaign),
        "audit_entries": AuditEntry.objects.filter(campaign=campaign)[:50],
        "transition_labels": transition_labels(campaign),
        "owner_names": sorted(campaign.owners.values_list("username", flat=True)),
        "owner_invitations": [i for i in owners.invitations(campaign) if i.state == i.PENDING],
        "owner_invitation_days": owners.INVITATION_DAYS,
    }


def transition_labels(campaign: Campaign) -> list[tuple[str, str]]:
    """(state, button label) of every state ``campaign`` may move to, Finish last."""
    out = []
    for t in sorted(engine.TRANSITIONS[campaign.state], key=lambda s: s == Campaign.FINISHED):
        label = {"live": "Resume" if campaign.state == Campaign.PAUSED else "Publish", "paused": "Pause",
                 "finished": "Finish"}.get(t, t)
        out.append((t, label))
    return out


def confirmation(request, campaign: Campaign, *, title: str, consequences: list[str], button: str,
                 action: str, fields: dict):
    """The confirmation page of an irreversible action (works without JavaScript): the same POST
    again with ``confirmed=yes``. Views call it when the POST lacks ``confirmed``."""
    return render(request, "crowd/owner/confirm.html", {
        "campaign": campaign, "title": title, "consequences": consequences, "button": button, "action": action,
        "fields": fields,
    })


def confirmed(request) -> bool:
    return request.POST.get("confirmed") == "yes"


@login_required
@require_POST
def campaign_state(request, name):
    """POST ``state``: move the campaign (publish, pause, resume, finish). Finishing is
    irreversible: without ``confirmed=yes`` the answer is a confirmation page and nothing changes."""
    campaign = owned_campaign(request, name)
    state = request.POST.get("state", "")
    if state == Campaign.FINISHED and campaign.state != Campaign.FINISHED and not confirmed(request):
        counts = engine.campaign_counts(campaign)
        return confirmation(request, campaign, title=f"Finish {campaign.name}?", consequences=[
            "Finishing is final: a finished campaign cannot be published or resumed again.",
            f"Raters get no more tasks, and answers to tasks they hold now are refused "
            f"({counts['by_state'].get('accepted', 0)} tasks are held now).",
            f"{counts['complete_items']} of {counts['items']} items are complete "
            f"({counts['judgments']} of {counts['needed']} judgments).",
        ], button="Finish the campaign", action=reverse("crowd:campaign-state", kwargs={"name": campaign.name}),
            fields={"state": state})
    before = campaign.state
    try:
        engine.set_state(campaign, state)
    except engine.EngineError as exc:
        messages.error(request, str(exc))
    else:
        if before != campaign.state:
            verb = {"live": "resume" if before == Campaign.PAUSED else "publish", "paused": "pause",
                    "finished": "finish"}[campaign.state]
            audit.record(campaign, request.user, verb, detail={"from": before, "to": campaign.state})
        messages.success(request, f"Campaign {campaign.name} is now {campaign.state}.")
    return redirect("crowd:campaign", name=campaign.name)


@login_required
@require_POST
def campaign_publish_results(request, name):
    """POST (owner only, CSRF): publish the campaign's results, so its data (a description
    campaign's system and texts) appears on the public pages (:mod:`crowd.privacy`); recorded in
    the audit trail (``publish-results``). Without ``confirmed=yes`` the answer is a confirmation
    page saying what becomes public, and nothing changes (with JavaScript the page's dialog asks
    instead). Undone by :func:`campaign_unpublish_results`."""
    campaign = owned_campaign(request, name)
    if campaign.results_published_at is None and not confirmed(request):
        texts = (f" (the raters' descriptions, as the system campaign-{campaign.name})"
                 if campaign.kind == "description" else "")
        return confirmation(request, campaign, title=f"Publish the results of {campaign.name}?", consequences=[
            f"Anyone, logged in or not, will see this campaign's data on the public dataset, image and diversity "
            f"pages and their downloads{texts}.",
            "You can make them private again from this page (Make private again), but what was public meanwhile "
            "may have been copied.",
            "Both steps are recorded in the audit trail.",
        ], button="Publish the results", action=reverse("crowd:campaign-publish-results", kwargs={"name": campaign.name}),
            fields={})
    privacy.publish_results(campaign, request.user)
    messages.success(request, f"The results of {campaign.name} are public. Make private again undoes it.")
    return redirect("crowd:campaign", name=campaign.name)


@login_required
@require_POST
def campaign_unpublish_results(request, name):
    """POST (owner only, CSRF): make the campaign's published results private again
    (:func:`crowd.privacy.unpublish_results`, audited as ``unpublish-results``); a campaign whose
    results are not public is left as it is."""
    campaign = owned_campaign(request, name)
    was_public = campaign.results_published_at is not None
    privacy.unpublish_results(campaign, request.user)
    messages.success(request, f"The results of {campaign.name} are private again: the public pages no longer show "
                              "them." if was_public else f"The results of {campaign.name} were not public.")
    return redirect("crowd:campaign", name=campaign.name)


@login_required
@require_POST
def campaign_invite(request, name):
    """POST ``n`` (1-500) and ``label``: create invitation links bound to this campaign. They are
    listed on the campaign page from then on (the new ones marked), with copy and revoke buttons."""
    campaign = owned_campaign(request, name)
    try:
        n = int(request.POST.get("n", "1"))
    except ValueError:
        n = 0
    if not 1 <= n <= 500:
        messages.error(request, "the number of invitation links must be between 1 and 500")
        return redirect("crowd:campaign", name=campaign.name)
    label = request.POST.get("label", "").strip()[:50]
    try:  # links bound to this campaign: their raters see and do this campaign only
        workers = engine.invite_workers(n, label=label, campaign=campaign)
    except engine.EngineError as exc:  # e.g. an MTurk campaign: its workers come from MTurk
        messages.error(request, str(exc))
        return redirect("crowd:campaign", name=campaign.name)
    audit.record(campaign, request.user, "invite", target=label, detail={"links": n})
    next_url = reverse("crowd:next", kwargs={"name": campaign.name})
    request.session["new_invites"] = [
        request.build_absolute_uri(reverse("crowd:join", kwargs={"token": w.token})) + f"?next={next_url}"
        for w in workers
    ]
    messages.success(request, f"{n} invitation links created; they are listed under Invitation links.")
    return redirect(reverse("crowd:campaign", kwargs={"name": campaign.name}) + "#invitations")


@login_required
@require_POST
def campaign_owners(request, name):
    """POST ``username``: invite that user to co-own the campaign (:func:`crowd.owners.invite`); the
    message is the same whether or not an account of that name exists. POST ``revoke`` (an
    invitation's id): revoke that open invitation. Errors change nothing."""
    campaign = owned_campaign(request, name)
    try:
        if "revoke" in request.POST:
            row = owners.revoke(campaign, request.POST["revoke"], request.user)
            messages.success(request, f"The invitation of {row.username} is revoked.")
        else:
            row = owners.invite(campaign, request.POST.get("username", ""), request.user)
            messages.success(request, f"{row.username} is invited until {row.expires_at:%Y-%m-%d}: if an account of "
                                      "that name exists, its user sees the invitation on their campaign list and "
                                      "becomes a co-owner on accepting it.")
    except engine.EngineError as exc:
        messages.error(request, str(exc))
    return redirect(reverse("crowd:campaign", kwargs={"name": campaign.name}) + "#owners")


@login_required
@require_POST
def owner_invitation_answer(request, pk):
    """POST ``answer`` = ``accept`` or ``decline``: the logged-in user answers their open co-owner
    invitation ``pk`` (:func:`crowd.owners.accept` / :func:`crowd.owners.decline`); accepted, they
    go to the campaign's page. Someone else's invitation answers 404 like a missing one."""
    answer = request.POST.get("answer", "")
    if answer not in ("accept", "decline"):
        messages.error(request, "answer accept or decline")
        return redirect("crowd:campaigns")
    try:
        row = (owners.accept if answer == "accept" else owners.decline)(pk, request.user)
    except owners.NoSuchInvitation:
        raise Http404("no such invitation") from None
    except engine.EngineError as exc:
        messages.error(request, str(exc))
        return redirect("crowd:campaigns")
    if answer == "decline":
        messages.success(request, f"You declined to co-own {row.campaign.name}.")
        return redirect("crowd:campaigns")
    messages.success(request, f"You are now an owner of {row.campaign.name}.")
    return redirect("crowd:campaign", name=row.campaign.name)


@login_required
@require_http_methods(["GET", "POST"])
def campaign_invitations(request, name):
    """GET: the campaign's invitation links (state, copy buttons, revoke forms). POST ``worker``
    (its id) and optional ``reason``: revoke that link (:func:`crowd.audit.revoke_invitation`);
    irreversible, so without ``confirmed=yes`` the answer is a confirmation page."""
    campaign = owned_campaign(request, name)
    if request.method == "GET":
        return render(request, "crowd/owner/invitations.html", {
            "campaign": campaign, "invitations": invitation_rows(request, campaign)
            if campaign.provider == Campaign.LOCAL else []})
    worker = request.POST.get("worker", "")
    row = next((r for r in invitation_rows(request, campaign) if str(r["worker"].pk) == worker), None)
    if row is None or row["state"] == "revoked":
        messages.error(request, "no such invitation link, or it was revoked already")
        return redirect(reverse("crowd:campaign", kwargs={"name": campaign.name}) + "#invitations")
    if not confirmed(request):
        label = f"{row['worker'].rater_id}" + (f" ({row['worker'].label})" if row["worker"].label else "")
        return confirmation(request, campaign, title=f"Revoke the invitation link of {label}?", consequences=[
            "Revoking is final: the link stops working at once and cannot be made to work again.",
            "Its holder no longer sees or does this campaign; a task they hold now is returned to the pool.",
            f"Answers already given ({row['tasks']} tasks taken) stay as they are; use the worker overrides to "
            "uncount them.",
        ], button="Revoke the link", action=reverse("crowd:campaign-invitations", kwargs={"name": campaign.name}),
            fields={"worker": worker, "reason": request.POST.get("reason", "")[:1000]})
    try:
        audit.revoke_invitation(campaign, row["worker"].pk, request.user, request.POST.get("reason", ""))
    except engine.EngineError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"The invitation link of {row['worker'].rater_id} is revoked.")
    return redirect(reverse("crowd:campaign", kwargs={"name": campaign.name}) + "#invitations")


@login_required
@require_http_methods(["GET", "POST"])
def campaign_workers(request, name):
    """GET: the override form (any worker of the campaign). POST ``worker`` (rater id), ``action``
    (block, unblock, count, uncount) and a required ``reason``: apply the override and record it in
    the audit trail (:func:`crowd.audit.override_worker`); errors change nothing."""
    campaign = owned_campaign(request, name)
    if request.method == "GET":
        from crowd.models import Worker

        workers = Worker.objects.filter(assignments__campaign=campaign).distinct().order_by("provider", "external_id")
        statuses = dict(campaign.worker_statuses.values_list("worker_id", "state"))
        return render(request, "crowd/owner/workers.html", {
            "campaign": campaign, "overrides": audit.OVERRIDES,
            "workers": [{"id": w.rater_id, "label": w.label, "status": statuses.get(w.pk, "ok")} for w in workers],
            "audit_entries": AuditEntry.objects.filter(campaign=campaign)[:200],
        })
    try:
        worker = audit.campaign_worker(campaign, request.POST.get("worker", ""))
        message = audit.override_worker(campaign, worker, request.POST.get("action", ""), request.user,
                                        request.POST.get("reason", ""))
    except engine.EngineError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, message)
    return redirect(reverse("crowd:campaign", kwargs={"name": campaign.name}) + "#workers")


@login_required
@require_GET
def campaign_status(request, name):
    """JSON of the live counts the campaign page polls (no report is computed): ``state``,
    ``items``, ``complete_items``, ``gold_items``, ``judgments``, ``needed``, ``percent`` (judgments
    / needed x 100, one decimal), ``late`` and ``by_state``; and for the console left open:
    ``gold_required`` (gold checks a rater passes before their answers count), ``awaiting_gold``
    (answers stored but waiting for those checks, blocked raters' left out: they never count), ``raters`` (:func:`crowd.engine.rater_counts`:
    submitted, awaiting gold and why, counted, standing and its reason, per rater) and
    ``invitations`` (each link's worker id, ``state`` unused/used/revoked, ``tasks`` and rater id).
    A fixed number of queries whatever the campaign's size (grouped counts, no per-row query)."""
    campaign = owned_campaign(request, name)
    return JsonResponse(live_status(campaign))


def live_status(campaign: Campaign) -> dict:
    """The body of :func:`campaign_status` (see there)."""
    counts = engine.campaign_counts(campaign)
    percent = round(100 * counts["judgments"] / counts["needed"], 1) if counts["needed"] else 0.0
    raters = engine.rater_counts(campaign)
    links = audit.invitations(campaign) if campaign.provider == Campaign.LOCAL else []
    return {"campaign": campaign.name, "state": campaign.state, **counts, "percent": percent,
            "gold_required": engine.gold_checks_required(campaign),
            "awaiting_gold": engine.awaiting_total(raters), "raters": raters,
            "invitations": [{"worker": inv.worker.pk, "rater": inv.worker.rater_id, "state": inv.state,
                             "tasks": inv.tasks} for inv in links]}


@login_required
@require_GET
def campaign_preview(request, name):
    """A task of the campaign rendered exactly as a rater sees it (the kind's own template), for
    its owners: ``?item=<position>`` picks the item (default: the first real item). Nothing is
    recorded: no assignment, no judgment, no worker; the form's submit button is disabled and the
    form posts nowhere."""
    campaign = owned_campaign(request, name)
    items = Item.objects.filter(campaign=campaign).order_by("is_gold", "position")
    try:
        position = int(request.GET.get("item", ""))
    except ValueError:
        position = None
    item = items.filter(position=position).first() if position is not None else None
    item = item or items.first()
    if item is None:
        raise Http404("this campaign has no items")
    neighbours = list(Item.objects.filter(campaign=campaign, is_gold=item.is_gold).order_by("position")
                      .values_list("position", flat=True))
    i = neighbours.index(item.position)
    return render(request, "crowd/owner/preview.html", {
        "campaign": campaign, "item": item, **task_context(campaign, campaign.kind, item.payload),
        "previous": neighbours[i - 1] if i else None, "next": neighbours[i + 1] if i + 1 < len(neighbours) else None,
        "gold_first": Item.objects.filter(campaign=campaign, is_gold=True).order_by("position")
        .values_list("position", flat=True).first(),
    })


@login_required
@require_GET
def campaign_export(request, name, fmt):
    campaign = owned_campaign(request, name)
    if fmt == "csv":
        response = HttpResponse(export.to_csv(campaign), content_type="text/csv; charset=utf-8")
    elif fmt == "jsonl":
        response = HttpResponse(export.to_jsonl(campaign), content_type="application/x-ndjson; charset=utf-8")
    else:
        raise Http404("unknown format")
    response["Content-Disposition"] = f'attachment; filename="{campaign.name}-judgments.{fmt}"'
    return response


@login_required
@require_GET
def campaign_aggregate(request, name):
    """CSV of the aggregated answer per (unit, criterion): mean for scales, majority vote for votes
    (``?method=dawid_skene`` for Dawid & Skene 1979 instead), each row naming the image, system and
    caption rated (:func:`crowd.export.aggregate_csv`)."""
    campaign = owned_campaign(request, name)
    method = request.GET.get("method") or None
    if method not in (None, "majority", "dawid_skene"):
        return HttpResponse("method must be majority or dawid_skene", status=400, content_type="text/plain")
    label = method or ("mean" if KINDS[campaign.kind].aggregation == "mean" else "majority")
    text = export.aggregate_csv(campaign, quality.aggregate(campaign, method), label)
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{campaign.name}-aggregate.csv"'
    return response
