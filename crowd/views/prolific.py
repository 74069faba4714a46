"""Prolific pages: the webhook endpoint and the owner's Prolific page of a campaign.

``prolific-hooks/`` (POST only, no CSRF: Prolific signs its requests instead) checks the signature
and the timestamp (:mod:`crowd.prolific.webhooks`): 401 for a bad signature or a stale timestamp,
400 for a malformed body, 200 for a processed or duplicate delivery (a duplicate does nothing),
503 when Prolific cannot be reached to read the resource (Prolific redelivers).

``campaigns/<name>/prolific/`` shows the study (status, places, reward, completion codes, the
external study URL), its submissions as Prolific last reported them with our session next to each,
the bonus ledger, the last calls and the webhook events about this study and its submissions only;
every action is a POST (with CSRF) to ``campaigns/<name>/prolific/<action>/``. The study's life:
create (the draft; "dry run" shows the body and creates nothing), cost, publish (only once the
cost was shown on the page, in this browser session, for the current reward and places, and with
the campaign name typed as confirmation: it spends real money), pause, resume, stop, add-places.
Submissions: sync, approve (selected), review (by rules: first the plan, what each submission would
be paid and why and the total, kept in the browser session; then "Send this plan", refused unless
the plan worked out again is exactly the one shown),
reject (category + message), bonus (create from CSV), pay, reconcile. Errors come back as one-line
messages. The irreversible actions (publish, stop, add-places, approve, review when applied,
reject, pay: :data:`crowd.audit.PROVIDER_ACTIONS`) are written to the campaign's audit trail once
done. Only the campaign's owners reach any of it (404 otherwise).
"""
from __future__ import annotations

import json
import time
from urllib.parse import urlsplit

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from crowd import audit, engine, journey
from crowd.models import Campaign, ProlificBonus, ProlificEvent, ProlificStudy
from crowd.prolific import bonuses, reconcile, review, webhooks
from crowd.prolific import study as st
from crowd.prolific_client import ProlificAPI, ProlificError
from crowd.prolific.sync import SyncError, sync_study

from .owner import owned_campaign

RESULT_KEY = "prolific_result"
#: request.session key prefix (+ campaign pk) of the cost shown on the page: {"study", "reward", "places", "total", "at"}
COST_KEY = "prolific_cost_shown_"
COST_VALID_SECONDS = 3600  # a cost shown more than an hour ago must be shown again before publishing
STUDY_ACTIONS = ("create", "cost", "publish", "pause", "resume", "stop", "add-places")
ACTIONS = (*STUDY_ACTIONS, "sync", "approve", "review", "reject", "bonus", "pay", "reconcile")
#: Prolific statuses of a submission that no longer hold a place (its documentation: returned, timed out, rejected)
FREED_STATUSES = ("RETURNED", "TIMED-OUT", "REJECTED")
MAX_FILTERS_CHARS = 20_000
#: request.session key prefix (+ campaign pk) of the review plan shown on the page
PLAN_KEY = "prolific_review_plan_"
PLAN_VALID_SECONDS = 3600
REVIEW_FIELDS = ("min_gold", "max_attention", "min_seconds")


@csrf_exempt
@require_POST
def webhook(request):
    """Prolific's webhook deliveries (see the module docstring)."""
    try:
        result = webhooks.handle(request.headers, request.body)
    except webhooks.WebhookRefused as exc:
        return JsonResponse({"error": str(exc)}, status=exc.status)
    except ProlificError as exc:  # e.g. no token configured on this server
        return JsonResponse({"error": str(exc)}, status=503)
    return JsonResponse({"result": result})


def _prolific_campaign(request, name) -> Campaign:
    campaign = owned_campaign(request, name)
    if campaign.provider != Campaign.PROLIFIC:
        raise Http404("this campaign does not use Prolific")
    return campaign


def _study(campaign) -> ProlificStudy:
    study = ProlificStudy.objects.filter(campaign=campaign).first()
    if study is None or not study.study_id:
        raise review.ReviewError("the campaign has no study on Prolific yet: create it first (form 'Create the study')")
    return study


def site_origin(request) -> str:
    """This site's http(s) root as the browser reached it (``https://host[:port]``): the default
    of the create form's site URL."""
    parts = urlsplit(request.build_absolute_uri("/"))
    return f"{parts.scheme}://{parts.netloc}"


def study_events(study):
    """The webhook events about ``study`` or one of its submissions (newest first); none without
    a study on Prolific. Events are stored for every campaign: never list them unfiltered."""
    if study is None or not study.study_id:
        return ProlificEvent.objects.none()
    return ProlificEvent.objects.filter(
        Q(resource_id=study.study_id) | Q(resource_id__in=study.submissions.values("submission_id"))
    ).exclude(resource_id="").order_by("-pk")


def code_rows(study) -> list[dict]:
    """The study's completion codes: ``{"outcome", "code", "code_type", "action"}`` per outcome,
    the type and action as sent in the create body (else :data:`crowd.prolific.study.OUTCOME_CODES`)."""
    rows = []
    for outcome in (study.completion_codes or {}):
        entry = st.outcome_code(study, outcome)
        if entry is None:
            continue
        action = ", ".join(a.get("action", "?") for a in entry["actions"]) or st.OUTCOME_CODES.get(outcome, ("?", "?"))[1]
        rows.append({"outcome": outcome, "code": entry["code"], "code_type": entry["code_type"], "action": action})
    return rows


def cost_shown(request, campaign, study) -> dict | None:
    """The cost this browser session was shown for the study as it is now (same study id, reward
    and places, less than :data:`COST_VALID_SECONDS` ago), else None."""
    shown = request.session.get(f"{COST_KEY}{campaign.pk}")
    if (not isinstance(shown, dict) or study is None or not study.study_id or shown.get("study") != study.study_id
            or shown.get("reward") != study.reward or shown.get("places") != study.places
            or not isinstance(shown.get("at"), (int, float)) or time.time() - shown["at"] > COST_VALID_SECONDS):
        return None
    return shown


@login_required
@require_GET
def page(request, name):
    """The owner's Prolific page of a campaign."""
    campaign = _prolific_campaign(request, name)
    study = ProlificStudy.objects.filter(campaign=campaign).first()
    subs, counts, ledger, taken = [], [], [], None
    if study is not None:
        subs = list(study.submissions.select_related("session").order_by("-pk")[:500])
        counts = list(study.submissions.values("status").annotate(n=Count("pk")).order_by("status"))
        ledger = list(study.bonuses.order_by("-pk")[:50])
        if study.study_id and counts:
            taken = sum(c["n"] for c in counts if c["status"] not in FREED_STATUSES)
    created = study is not None and bool(study.study_id)
    status = study.status if created else ""
    return render(request, "crowd/owner/prolific.html", {
        "campaign": campaign, "study": study, "created": created, "submissions": subs, "counts": counts,
        "ledger": ledger, "categories": review.REJECTION_CATEGORIES, "min_message": review.MIN_MESSAGE,
        "events": study_events(study)[:10], "calls": campaign.prolific_calls.all()[:20],
        "result": request.session.pop(RESULT_KEY, None),
        "taken": taken, "left": None if taken is None else max(0, study.places - taken),
        "codes": code_rows(study) if study is not None else [],
        "study_url": (study.request or {}).get("external_study_url", "") if study is not None else "",
        "reward_money": st.money(study.reward) if study is not None else "",
        "cost_shown": cost_shown(request, campaign, study), "review_plan": review_plan(request, campaign),
        "can_publish": created and status in ("", "UNPUBLISHED") and not study.published_at,
        "can_pause": created and status == "ACTIVE", "can_resume": created and status == "PAUSED",
        "can_stop": created and status in ("ACTIVE", "PAUSED"),
        "devices": st.DEVICES, "site_origin": site_origin(request),
        "suggested_places": _suggested_places(campaign) if not created else None,
    })


def _suggested_places(campaign) -> int | None:
    try:
        return journey.places_needed(campaign)
    except ValueError:
        return None


def _float(post, key):
    raw = post.get(key, "").strip()
    return float(raw) if raw else None


def _whole(raw, what: str, lo: int, hi: int) -> int:
    raw = str(raw or "").strip()
    if not (raw.isascii() and raw.isdigit()) or not lo <= int(raw) <= hi:
        raise st.StudyError(f"{what} must be a whole number from {lo} to {hi}, not {raw[:20]!r}")
    return int(raw)


def _filters(raw: str) -> list:
    raw = (raw or "").strip()
    if not raw:
        return []
    if len(raw) > MAX_FILTERS_CHARS:
        raise st.StudyError(f"the filters are longer than {MAX_FILTERS_CHARS:,} characters")
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise st.StudyError(f"the filters are not valid JSON ({exc})") from None
    return st.check_filters(value)


def _create(request, campaign) -> list[str]:
    """The "create" action: the draft study from the form (reward in minor units, estimated
    minutes, site URL, devices, places, filters JSON). With ``dry_run`` the body is shown and
    nothing is sent or stored (only the call log notes the dry run)."""
    post = request.POST
    existing = st.study_of(campaign)
    if existing is not None and existing.study_id:
        raise st.StudyError(f"this campaign already has Prolific study {existing.study_id}")
    places = post.get("places", "").strip()
    kwargs = dict(
        reward=_whole(post.get("reward"), "the reward (pence/cents)", 1, 100_000),
        estimated_minutes=_whole(post.get("minutes"), "the estimated minutes", 1, 24 * 60),
        site_url=post.get("site_url", "").strip()[:500],
        places=_whole(places, "the places", 1, 100_000) if places else None,
        devices=tuple(post.getlist("devices")) or ("desktop",),
        filters=_filters(post.get("filters", "")),
    )
    dry = bool(post.get("dry_run"))
    echoed: list[str] = []
    api = ProlificAPI(campaign=campaign, user=request.user, dry_run=dry, echo=echoed.append)
    if dry:
        st.create_draft(campaign, api, **kwargs)  # checks and logs the dry run; sends and stores nothing
        body = api.sent[-1][2]  # the body exactly as it would have been sent
        return ["DRY RUN: nothing was sent and no study stored (the request log notes the dry run). The body:",
                f"POST {api.base_url}studies/", *json.dumps(body, indent=2, sort_keys=True).splitlines()]
    study = st.create_draft(campaign, api, **kwargs)
    return [f"created draft study {study.study_id} ({study.status or 'UNPUBLISHED'}): {study.places} places, "
            f"reward {st.money(study.reward)} {study.currency}, {study.estimated_minutes} min",
            "next: show the cost, then publish"]


def _lifecycle(request, campaign, study, api, action: str) -> list[str]:
    """cost, publish, pause, resume, stop, add-places of the created study (see the module docstring)."""
    key = f"{COST_KEY}{campaign.pk}"
    if action == "cost":
        answer = st.cost(study, api)
        request.session[key] = {"study": study.study_id, "reward": study.reward, "places": study.places,
                                "total": st.money(answer.get("total_cost")), "currency": study.currency,
                                "at": time.time()}
        return [*st.cost_lines(study, answer), "to publish, type the campaign name below"]
    if action == "publish":
        shown = cost_shown(request, campaign, study)
        if shown is None:
            raise st.StudyError("show the cost first (button 'Show the cost'): publishing spends real money")
        if request.POST.get("confirm", "").strip() != campaign.name:
            raise st.StudyError(f"type the campaign name ({campaign.name}) to confirm; nothing was published")
        st.publish(study, api, confirmed=True, user=request.user.get_username())
        request.session.pop(key, None)
        return [f"published study {study.study_id} ({study.status}); total cost {shown['total']} {study.currency}; "
                f"campaign {campaign.name} is live"]
    if action == "pause":
        st.pause(study, api)
        return [f"paused: study {study.study_id} is {study.status}; sessions under way can finish"]
    if action == "resume":
        st.resume(study, api)
        return [f"resumed: study {study.study_id} is {study.status}"]
    if action == "stop":
        st.stop(study, api)
        return [f"stopped: study {study.study_id} is {study.status} (for good)"]
    if action == "add-places":
        n = _whole(request.POST.get("n"), "the places to add", 1, 100_000)
        st.add_places(study, api, n)
        request.session.pop(key, None)  # the cost changed
        return [f"added {n} places: study {study.study_id} now has {study.places}"]
    raise Http404("unknown action")


def _review_thresholds(post) -> dict:
    """The review form's thresholds as typed (strings, "" for off), at most 20 characters each."""
    return {name: str(post.get(name, "")).strip()[:20] for name in REVIEW_FIELDS}


def review_plan(request, campaign) -> dict | None:
    """The review plan this browser session was shown for ``campaign`` (``{"plan", "thresholds",
    "lines", "total", "at"}``) if less than :data:`PLAN_VALID_SECONDS` old, else None."""
    shown = request.session.get(f"{PLAN_KEY}{campaign.pk}")
    if (not isinstance(shown, dict) or not isinstance(shown.get("at"), (int, float))
            or time.time() - shown["at"] > PLAN_VALID_SECONDS):
        return None
    return shown


def _review(request, campaign, study, api) -> list[str]:
    """The "review" action. Without ``confirm``: work out the plan (per submission what it pays and
    why, and the total), show it and keep it in the browser session; nothing is sent. With
    ``confirm`` (the fingerprint of the plan shown): send it, only if the plan worked out now from
    the same thresholds is still exactly the one shown (else refused: look at the new plan)."""
    post, user = request.POST, request.user.get_username()
    typed = _review_thresholds(post)
    mi = typed["max_attention"]
    if mi and not (mi.isascii() and mi.isdigit()):
        raise review.ReviewError(f"the maximum number of attention failures must be a whole number, not {mi!r}")
    verdicts = review.rule_verdicts(study, min_gold_accuracy=_float(typed, "min_gold"),
                                    max_attention_failures=int(mi) if mi else None,
                                    min_seconds=_float(typed, "min_seconds"))
    key, fingerprint = f"{PLAN_KEY}{campaign.pk}", review.plan_key(verdicts)
    lines = review.plan_lines(study, verdicts)
    confirm = str(post.get("confirm", "")).strip()
    if not confirm:
        request.session[key] = {"plan": fingerprint, "thresholds": typed, "lines": lines, "at": time.time(),
                                "total": f"{st.money(review.plan_summary(study, verdicts)['total'])} {study.currency}"}
        return ["PLAN, nothing sent yet (check it, then press 'Send this plan' below):", *lines]
    shown = review_plan(request, campaign)
    if shown is None or shown["plan"] != confirm or confirm != fingerprint:
        request.session.pop(key, None)
        raise review.ReviewError("the plan is not the one shown (submissions or thresholds changed, or it is over an "
                                 "hour old): show the plan again; nothing was sent")
    request.session.pop(key, None)
    r = review.bulk_review(study, api, verdicts, user=user)
    return [*lines, review.result_line(r), *(f"  failed {sid}: {why}" for sid, why in r["failed"])]


def _run(request, campaign, action: str) -> list[str]:
    """Perform ``action``; returns the lines to show. Raises the module errors for the caller."""
    post, user = request.POST, request.user.get_username()
    if action == "create":
        return _create(request, campaign)
    study = _study(campaign)
    api = ProlificAPI(campaign=campaign, user=request.user)
    if action in STUDY_ACTIONS:
        return _lifecycle(request, campaign, study, api, action)
    if action == "sync":
        r = sync_study(study, api)
        return [f"listed {r['listed']}, new {r['created']}, changed {r['changed']}, released {r['released']}",
                *(f"  error {sid}: {why}" for sid, why in r["errors"])]
    if action == "approve":
        ids = post.getlist("submission")
        if not ids:
            raise review.ReviewError("select the submissions to approve")
        r = review.bulk_approve(study, api, ids, user=user)
        return [f"approved {len(r['approved'])}, skipped {len(r['skipped'])}",
                *(f"  skipped {sid}: {why}" for sid, why in r["skipped"])]
    if action == "review":
        return _review(request, campaign, study, api)
    if action == "reject":
        category, message = review.check_rejection(post.get("category", ""), post.get("message", ""))
        sid = post.get("submission", "").strip()
        sub = study.submissions.filter(submission_id=sid).first()
        if sub is None:
            raise review.ReviewError(f"no submission {sid[:64]!r} reported by Prolific for this study")
        review.reject(sub, api, category, message, user=user)
        return [f"rejected {sid} ({category}); its counted work went back to the pool"]
    if action == "bonus":
        b = bonuses.create_bonus(study, api, post.get("csv", ""), request_key=post.get("request_key", ""),
                                 reason=post.get("reason", ""), user=user)
        return [f"bonus {b.bonus_id} created ({len(b.entries)} participants, total {b.total} {study.currency}); "
                "pay it below (once)"]
    if action == "pay":
        try:
            b = study.bonuses.get(pk=int(post.get("bonus", "0") or 0))
        except (ProlificBonus.DoesNotExist, ValueError):
            raise bonuses.BonusError("no such bonus in this study's ledger") from None
        b = bonuses.pay(b, api, user=user)
        return [f"bonus {b.bonus_id}: {b.state}"]
    if action == "reconcile":
        return reconcile.lines(reconcile.reconcile(study, api))
    raise Http404("unknown action")


def _audit_target(request, action: str) -> str:
    """What an action of the page acts on, for the audit trail: the submissions approved or
    rejected, the bonus paid (empty for the others)."""
    if action == "approve":
        return ", ".join(request.POST.getlist("submission"))[:200]
    return {"reject": request.POST.get("submission", ""), "pay": request.POST.get("bonus", "")}.get(action, "")[:200]


@login_required
@require_POST
def action(request, name, action):
    """One action of the owner's Prolific page (POST); the result is shown on the page."""
    campaign = _prolific_campaign(request, name)
    if action not in ACTIONS:
        raise Http404("unknown action")
    try:
        lines = _run(request, campaign, action)
    except (review.ReviewError, bonuses.BonusError, SyncError, ProlificError, ValueError, engine.EngineError) as exc:
        messages.error(request, f"{action}: {' '.join(str(exc).split())[:300]}")
    else:
        request.session[RESULT_KEY] = {"action": action, "lines": [str(x) for x in lines]}
        if action != "review" or request.POST.get("apply"):  # a review's preview sends nothing
            audit.record_provider_action(campaign, request.user, Campaign.PROLIFIC, action, lines,
                                         target=_audit_target(request, action))
    return redirect("crowd:campaign-prolific", name=campaign.name)
