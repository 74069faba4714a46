"""Owner pages: the campaigns a user owns, creating one in a few clicks, state changes, invitation
links and exports. The campaign's dashboard (progress, quality, agreement, correlations with
metrics), its report as JSON and its charts read the cached campaign report, so they live in
analysis (:mod:`analysis.campaign_views`) under the same ``crowd:`` URL names.

A campaign and everything about it is visible only to its owners: anyone else gets 404, so
campaign names do not leak. Its data reaches the public pages only once an owner publishes its
results (:mod:`crowd.privacy`).
"""
from __future__ import annotations

import csv
import io

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from crowd import engine, export, privacy, quality
from crowd.kinds import KINDS, CampaignSpecError
from crowd.kinds.base import check_url_template
from crowd.kinds.visual_atom import atoms_text
from crowd.models import Campaign, Dataset
from evalcore import csvsafe


def owned_campaign(request, name) -> Campaign:
    """The campaign ``name`` if the logged-in user owns it (or is a superuser); 404 otherwise."""
    qs = Campaign.objects.filter(name=name).select_related("dataset")
    if not request.user.is_superuser:
        qs = qs.filter(owners=request.user)
    campaign = qs.first()
    if campaign is None:
        raise Http404("no such campaign")
    return campaign


class CampaignForm(forms.Form):
    name = forms.SlugField(max_length=100, help_text="letters, digits, - and _; used in URLs")
    title = forms.CharField(max_length=200, required=False)
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.all(), to_field_name="name")
    kind = forms.ChoiceField(choices=[(k, v.title) for k, v in KINDS.items()])
    k = forms.IntegerField(min_value=1, max_value=50, initial=3, label="judgments per item (k)")
    images = forms.IntegerField(min_value=1, required=False, help_text="a random sample of this many images (empty: all)")
    per_worker_cap = forms.IntegerField(min_value=1, max_value=2**31 - 1, required=False)
    assignment_minutes = forms.IntegerField(min_value=1, max_value=24 * 60, initial=10)
    reward = forms.DecimalField(min_value=0, max_digits=6, decimal_places=2, initial=0, help_text="US dollars per assignment")
    provider = forms.ChoiceField(choices=Campaign.PROVIDERS, initial=Campaign.LOCAL, required=False,
                                 help_text="Mechanical Turk campaigns are published from their MTurk page")
    systems = forms.CharField(required=False, help_text="diversity: comma-separated system names (empty: all)")
    captions_per_set = forms.IntegerField(min_value=2, required=False, help_text="diversity: first m captions of each set")
    image_url = forms.CharField(max_length=2000, required=False,
                                help_text="image URL template with {key}, e.g. https://host/images/{key}")
    atoms = forms.FileField(required=False, help_text="visual atoms: CSV rows word,category[,count]")
    seed = forms.IntegerField(initial=0)

    def clean_image_url(self):
        """Only http(s) templates with a plain {key} (:func:`crowd.kinds.base.check_url_template`)."""
        value = self.cleaned_data.get("image_url", "")
        if value:
            try:
                check_url_template(value)
            except CampaignSpecError as exc:
                raise forms.ValidationError(str(exc)) from None
        return value


def read_atoms(text: str) -> list[list[str]]:
    """Rows of an atoms CSV (word,category[,count]); a header row starting with 'word' is skipped.
    The format is the one ``visual_atoms --out`` writes, so its formula-neutralising quote is undone
    (:func:`evalcore.csvsafe.restore`)."""
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
    if atoms_text:
        options["atoms"] = read_atoms(atoms_text)
    return options


@login_required
@require_GET
def campaign_list(request):
    campaigns = Campaign.objects.filter(owners=request.user).select_related("dataset")
    return render(request, "crowd/owner/list.html", {"campaigns": campaigns})


@login_required
@require_http_methods(["GET", "POST"])
def campaign_new(request):
    form = CampaignForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            atoms = atoms_text(d["atoms"].read(), d["atoms"].name) if d.get("atoms") else None
            campaign = engine.create_campaign(
                d["dataset"], d["kind"], name=d["name"], title=d["title"], owners=[request.user], k=d["k"],
                per_worker_cap=d["per_worker_cap"], assignment_seconds=60 * d["assignment_minutes"],
                reward=d["reward"], options=options_from(d, atoms), seed=d["seed"], provider=d["provider"] or Campaign.LOCAL,
            )
        except CampaignSpecError as exc:
            form.add_error(None, str(exc))
        except csv.Error as exc:  # e.g. a field beyond the csv module's size limit
            form.add_error("atoms", f"{d['atoms'].name}: not a valid CSV file ({exc})")
        else:
            messages.success(request, f"Campaign {campaign.name} created as a draft with {campaign.items.count()} items.")
            return redirect("crowd:campaign", name=campaign.name)
    return render(request, "crowd/owner/new.html", {"form": form}, status=400 if form.errors else 200)


@login_required
@require_POST
def campaign_state(request, name):
    campaign = owned_campaign(request, name)
    try:
        engine.set_state(campaign, request.POST.get("state", ""))
    except engine.EngineError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Campaign {campaign.name} is now {campaign.state}.")
    return redirect("crowd:campaign", name=campaign.name)


@login_required
@require_POST
def campaign_publish_results(request, name):
    """POST (owner only, CSRF): publish the campaign's results, so its data (a description
    campaign's system and texts) appears on the public pages (:mod:`crowd.privacy`)."""
    campaign = owned_campaign(request, name)
    privacy.publish_results(campaign)
    messages.success(request, f"The results of {campaign.name} are public.")
    return redirect("crowd:campaign", name=campaign.name)


@login_required
@require_POST
def campaign_invite(request, name):
    campaign = owned_campaign(request, name)
    try:
        n = int(request.POST.get("n", "1"))
    except ValueError:
        n = 0
    if not 1 <= n <= 500:
        messages.error(request, "the number of invitation links must be between 1 and 500")
        return redirect("crowd:campaign", name=campaign.name)
    try:  # links bound to this campaign: their raters see and do this campaign only
        workers = engine.invite_workers(n, label=request.POST.get("label", "").strip()[:50], campaign=campaign)
    except engine.EngineError as exc:  # e.g. an MTurk campaign: its workers come from MTurk
        messages.error(request, str(exc))
        return redirect("crowd:campaign", name=campaign.name)
    next_url = reverse("crowd:next", kwargs={"name": campaign.name})
    request.session["new_invites"] = [
        request.build_absolute_uri(reverse("crowd:join", kwargs={"token": w.token})) + f"?next={next_url}"
        for w in workers
    ]
    return redirect("crowd:campaign", name=campaign.name)


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
    (``?method=dawid_skene`` for Dawid & Skene 1979 instead)."""
    campaign = owned_campaign(request, name)
    method = request.GET.get("method") or None
    if method not in (None, "majority", "dawid_skene"):
        return HttpResponse("method must be majority or dawid_skene", status=400, content_type="text/plain")
    buf = io.StringIO()
    writer = csvsafe.writer(buf)
    writer.writerow(["unit", "criterion", "value", "method"])
    label = method or ("mean" if KINDS[campaign.kind].aggregation == "mean" else "majority")
    for criterion, values in sorted(quality.aggregate(campaign, method).items()):
        for unit, value in sorted(values.items(), key=lambda kv: str(kv[0])):
            writer.writerow([unit, criterion, value, label])
    response = HttpResponse(buf.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{campaign.name}-aggregate.csv"'
    return response
