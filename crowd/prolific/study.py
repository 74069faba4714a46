"""The Prolific study behind a campaign: its draft body, cost, publishing (only when confirmed),
pause, resume, stop and more places.

Facts (Prolific public API documentation, "Studies", "Completion codes", "Study cost
calculator"): a draft is created with ``POST /studies/`` and these fields: ``name``,
``internal_name``, ``description``, ``external_study_url`` (with the ``{{%PROLIFIC_PID%}}``,
``{{%STUDY_ID%}}`` and ``{{%SESSION_ID%}}`` placeholders), ``prolific_id_option``
(``url_parameters``), ``completion_codes`` (``{code, code_type, actor, actions: [{action, ...}]}``),
``total_available_places``, ``estimated_completion_time`` and ``maximum_allowed_time`` (minutes),
``reward`` (minor units: pence or cents), ``filters`` (``eligibility_requirements`` was removed)
and ``device_compatibility``. Code types used here: COMPLETED, FAILED_ATTENTION_CHECK, NO_CONSENT
and FIXED_SCREENOUT; actions: MANUALLY_REVIEW (or AUTOMATICALLY_APPROVE, never both on one code),
REQUEST_RETURN (with a ``return_reason``) and FIXED_SCREEN_OUT_PAYMENT (a
``fixed_screen_out_reward`` in minor units below the reward, and ``slots``, the screen-outs
allowed before the study pauses). ``POST /studies/{id}/transition/`` takes PUBLISH (from
UNPUBLISHED only), PAUSE, START (resume) and STOP; once published, places can only be increased
(``PATCH /studies/{id}/``). Publishing spends real money, so it needs the cost shown and an
explicit confirmation.
"""
from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from crowd import engine, images, journey
from crowd.models import Campaign, ProlificStudy, ParticipantSession as PS

from crowd.prolific_client import ProlificAPI

COMPLETED_TYPE, ATTENTION_TYPE, CONSENT_TYPE, SCREEN_TYPE = ("COMPLETED", "FAILED_ATTENTION_CHECK", "NO_CONSENT",
                                                             "FIXED_SCREENOUT")
#: session outcome -> (Prolific code type, action)
OUTCOME_CODES = {
    PS.COMPLETED: (COMPLETED_TYPE, "MANUALLY_REVIEW"),
    PS.FAILED_ATTENTION: (ATTENTION_TYPE, "MANUALLY_REVIEW"),
    PS.NO_CONSENT: (CONSENT_TYPE, "REQUEST_RETURN"),
    PS.SCREENED_OUT: (SCREEN_TYPE, "FIXED_SCREEN_OUT_PAYMENT"),
}
DEVICES = ("desktop", "tablet", "mobile")
PLACEHOLDER_QUERY = "PROLIFIC_PID={{%PROLIFIC_PID%}}&STUDY_ID={{%STUDY_ID%}}&SESSION_ID={{%SESSION_ID%}}"
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: codes may be typed
NO_CONSENT_REASON = ("You did not agree to the consent form, so you cannot take part. "
                     "Please return your submission; nothing is held against you.")


class StudyError(ValueError):
    """A study operation that cannot be done as asked (one line, e.g. publishing twice)."""


def new_code() -> str:
    """A completion code: 8 characters from :data:`CODE_ALPHABET` (about 40 bits)."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(8))


def new_codes() -> dict:
    """Four distinct codes, one per outcome of :data:`OUTCOME_CODES`."""
    codes: dict[str, str] = {}
    while len(set(codes.values())) < len(OUTCOME_CODES):
        codes = {outcome: new_code() for outcome in OUTCOME_CODES}
    return codes


def study_of(campaign: Campaign) -> ProlificStudy | None:
    """The campaign's ProlificStudy row, read fresh (None if none)."""
    return ProlificStudy.objects.filter(campaign_id=campaign.pk).first()


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise StudyError(f"{what} must be a positive whole number, not {value!r}")
    return value


def check_filters(filters) -> list:
    """Prolific's ``filters``: a list of ``{"filter_id", "selected_values": [str, ...]}`` (select
    filters) or ``{"filter_id", "selected_range": {"lower", "upper"}}`` (range filters), with
    optional ``weightings``. Raises StudyError (one line) for anything else."""
    if not isinstance(filters, (list, tuple)):
        raise StudyError("filters must be a JSON list of Prolific filters")
    out = []
    for f in filters:
        if not isinstance(f, dict) or not isinstance(f.get("filter_id"), str) or not f["filter_id"]:
            raise StudyError("each filter needs a filter_id (see GET /filters/ on Prolific)")
        extra = set(f) - {"filter_id", "selected_values", "selected_range", "weightings"}
        if extra:
            raise StudyError(f"filter {f['filter_id']}: unknown keys {', '.join(sorted(extra))}")
        if ("selected_values" in f) == ("selected_range" in f):
            raise StudyError(f"filter {f['filter_id']}: give selected_values or selected_range")
        if "selected_values" in f and not (isinstance(f["selected_values"], list) and f["selected_values"]
                                           and all(isinstance(v, str) for v in f["selected_values"])):
            raise StudyError(f"filter {f['filter_id']}: selected_values must be a list of strings")
        if "selected_range" in f and not (isinstance(f["selected_range"], dict) and f["selected_range"]
                                          and set(f["selected_range"]) <= {"lower", "upper"}):
            raise StudyError(f"filter {f['filter_id']}: selected_range must be {{\"lower\", \"upper\"}}")
        out.append(dict(f))
    return out


def study_url(campaign: Campaign, site_url: str) -> str:
    """The ``external_study_url``: this site's Prolific arrival page of the campaign with the
    three identity placeholders. ``site_url`` is the public http(s) root, e.g.
    ``https://eval.example.org`` (Prolific requires participants to reach it; use https)."""
    parts = urlsplit(site_url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise StudyError(f"--site-url must be the site's http(s) root like https://eval.example.org, not {site_url!r}")
    return f"{site_url.rstrip('/')}{reverse('crowd:prolific-start', args=[campaign.name])}?{PLACEHOLDER_QUERY}"


def default_screen_out_reward(reward: int) -> int:
    """The fixed screen-out payment when none is given: a tenth of ``reward``, at least 1 (minor units)."""
    return max(1, reward // 10)


def completion_codes_body(codes: dict, *, reward: int, places: int, screen_out_reward: int | None = None,
                          auto_approve: bool = False) -> list[dict]:
    """The ``completion_codes`` list for ``codes`` ({outcome: code}) per :data:`OUTCOME_CODES`
    (COMPLETED with AUTOMATICALLY_APPROVE instead when ``auto_approve``). The screen-out code pays
    ``screen_out_reward`` minor units (default a tenth of the reward, at least 1; must be below
    ``reward``) to at most ``places`` screened-out participants."""
    if screen_out_reward is None:
        screen_out_reward = default_screen_out_reward(reward)
    _positive_int(screen_out_reward, "the screen-out reward")
    if screen_out_reward >= reward:
        raise StudyError(f"the screen-out reward ({screen_out_reward}) must be below the reward ({reward})")
    out = []
    for outcome, (code_type, action) in OUTCOME_CODES.items():
        if outcome == PS.COMPLETED and auto_approve:
            action = "AUTOMATICALLY_APPROVE"
        entry = {"action": action}
        if action == "REQUEST_RETURN":
            entry["return_reason"] = NO_CONSENT_REASON
        if action == "FIXED_SCREEN_OUT_PAYMENT":
            entry.update(fixed_screen_out_reward=screen_out_reward, slots=places)
        out.append({"code": codes[outcome], "code_type": code_type, "actor": "participant", "actions": [entry]})
    return out


def outcome_code(study: ProlificStudy, outcome: str) -> dict | None:
    """The completion code ``study`` gives for a session ``outcome``: ``{"code", "code_type",
    "actions": [{"action", ...}, ...]}`` as sent in the create body (``study.request``), else built
    from :data:`OUTCOME_CODES`; None when the study has no code for that outcome (returned, timed
    out, no task)."""
    code = (study.completion_codes or {}).get(outcome)
    if not code:
        return None
    for entry in (study.request or {}).get("completion_codes", []):
        if isinstance(entry, dict) and entry.get("code") == code:
            actions = [a for a in entry.get("actions", []) if isinstance(a, dict)]
            return {"code": code, "code_type": entry.get("code_type", "?"), "actions": actions}
    code_type, action = OUTCOME_CODES.get(outcome, ("?", "?"))
    return {"code": code, "code_type": code_type, "actions": [{"action": action}]}


def screen_out_reward(study: ProlificStudy) -> int:
    """The fixed payment of a screened-out participant of ``study``, minor units: the
    ``fixed_screen_out_reward`` of its FIXED_SCREEN_OUT_PAYMENT code as sent, else the default
    (:func:`default_screen_out_reward` of the reward)."""
    entry = outcome_code(study, PS.SCREENED_OUT) or {"actions": []}
    for action in entry["actions"]:
        amount = action.get("fixed_screen_out_reward")
        if action.get("action") == "FIXED_SCREEN_OUT_PAYMENT" and isinstance(amount, int) and amount > 0:
            return amount
    return default_screen_out_reward(study.reward)


def study_body(campaign: Campaign, *, reward: int, estimated_minutes: int, site_url: str, places=None,
               filters=(), devices=("desktop",), name=None, description=None, codes=None,
               screen_out_reward=None, auto_approve: bool = False) -> dict:
    """The ``POST /studies/`` body of a draft study for ``campaign``.

    ``reward``: per participant, minor units (pence/cents); ``estimated_minutes``: shown to
    participants; ``places``: default :func:`crowd.journey.places_needed` (items x k over the
    counted tasks of a bundle); ``filters``: Prolific filters (:func:`check_filters`);
    ``devices``: from desktop, tablet, mobile; ``codes``: {outcome: code} (default new ones);
    ``maximum_allowed_time`` is the session budget plus 10 minutes when the campaign has one.
    Raises StudyError (one line) for a bad value."""
    if campaign.provider != Campaign.PROLIFIC:
        raise StudyError(f"campaign {campaign.name!r} uses the {campaign.provider} provider; create it with --provider prolific")
    reward = _positive_int(reward, "the reward (in pence/cents)")
    estimated_minutes = _positive_int(estimated_minutes, "the estimated minutes")
    if places is None:
        try:
            places = journey.places_needed(campaign)
        except ValueError as exc:
            raise StudyError(str(exc)) from None
        if places <= 0:
            raise StudyError(f"campaign {campaign.name!r} has no items to rate")
    places = _positive_int(places, "the number of places")
    devices = list(devices or ())
    if not devices or any(d not in DEVICES for d in devices) or len(set(devices)) != len(devices):
        raise StudyError(f"devices must be distinct values from {', '.join(DEVICES)}, not {devices!r}")
    codes = dict(codes or new_codes())
    tasks = campaign.bundle_size or "a few"
    body = {
        "name": (name or campaign.title)[:255],
        "internal_name": f"{campaign.name}"[:255],
        "description": description or (
            f"{campaign.title}. You will rate {tasks} short items in your browser "
            f"(about {estimated_minutes} minutes), after a consent page and instructions. Some items are "
            "attention checks with known answers; at the end you return to Prolific with a completion code."),
        "external_study_url": study_url(campaign, site_url),
        "prolific_id_option": "url_parameters",
        "completion_codes": completion_codes_body(codes, reward=reward, places=places,
                                                  screen_out_reward=screen_out_reward, auto_approve=auto_approve),
        "total_available_places": places,
        "estimated_completion_time": estimated_minutes,
        "reward": reward,
        "filters": check_filters(list(filters or ())),
        "device_compatibility": devices,
    }
    if campaign.session_minutes:
        body["maximum_allowed_time"] = max(campaign.session_minutes + 10, estimated_minutes)
    return body


def _codes_of(body: dict) -> dict:
    by_code = {c["code"]: c for c in body["completion_codes"]}
    types = {t: outcome for outcome, (t, _) in OUTCOME_CODES.items()}
    return {types[c["code_type"]]: code for code, c in by_code.items() if c["code_type"] in types}


def create_draft(campaign: Campaign, api: ProlificAPI, **study_body_kwargs) -> ProlificStudy:
    """Create the campaign's draft study on Prolific and store it (a ProlificStudy with its
    ``study_id``, ``completion_codes`` {outcome: code} and the ``request`` sent). With a dry-run
    ``api`` the body is echoed, nothing is sent and nothing stored (an unsaved ProlificStudy is
    returned). Raises StudyError when the campaign already has a study on Prolific, and
    ProlificError when Prolific refuses the body."""
    existing = study_of(campaign)
    if existing is not None and existing.study_id:
        raise StudyError(f"campaign {campaign.name!r} already has Prolific study {existing.study_id} "
                         f"({existing.status or 'unknown status'}); see `prolific show {campaign.name}`")
    if existing is not None and existing.completion_codes and "codes" not in study_body_kwargs:
        study_body_kwargs["codes"] = existing.completion_codes  # a failed earlier attempt: keep its codes
    body = study_body(campaign, **study_body_kwargs)
    answer = api.create_study(body)
    fields = dict(
        status=answer.get("status", ""), name=body["name"], internal_name=body["internal_name"],
        description=body["description"], places=body["total_available_places"], reward=body["reward"],
        estimated_minutes=body["estimated_completion_time"], max_minutes=body.get("maximum_allowed_time"),
        filters=body["filters"], device_compatibility=body["device_compatibility"], completion_codes=_codes_of(body),
        request=body)
    if api.dry_run:
        return ProlificStudy(campaign=campaign, study_id="", **fields)
    study_id = str(answer.get("id", ""))
    if not study_id:
        raise StudyError("Prolific created the study but returned no id")
    with transaction.atomic():
        study, _ = ProlificStudy.objects.update_or_create(campaign=campaign, defaults=dict(fields, study_id=study_id))
    return study


def _require_created(study: ProlificStudy) -> str:
    if not study.study_id:
        raise StudyError(f"campaign {study.campaign.name!r} has no study on Prolific yet; run `prolific create` first")
    return study.study_id


def cost(study: ProlificStudy, api: ProlificAPI) -> dict:
    """Prolific's cost of the study (``GET /studies/{id}/cost/``; before creation the cost
    calculator with its reward and places): ``total_cost``, ``rewards``, ``fees``, ``vat`` in minor
    units. Stored in ``study.cost`` (not in a dry run)."""
    if study.study_id:
        answer = api.study_cost(study.study_id)
    else:
        answer = api.cost_calculator(study.reward, study.places)
    if not api.dry_run and study.pk:
        study.cost = answer
        study.save(update_fields=["cost"])
    return answer


def money(minor) -> str:
    """Minor units as major units with two decimals (e.g. 1234 -> "12.34")."""
    try:
        return f"{int(minor) / 100:.2f}"
    except (TypeError, ValueError):
        return "?"


def cost_lines(study: ProlificStudy, answer: dict) -> list[str]:
    """The cost as lines for a person: places x reward, fees, VAT, total, and the hourly rate."""
    hourly = study.reward * 60 / study.estimated_minutes if study.estimated_minutes else 0
    return [
        f"{study.places} places x {money(study.reward)} {study.currency} reward "
        f"({money(hourly)} {study.currency}/hour for {study.estimated_minutes} min)",
        f"rewards {money(answer.get('rewards'))}, fees {money(answer.get('fees'))}, VAT {money(answer.get('vat'))}",
        f"total {money(answer.get('total_cost'))} {study.currency}",
    ]


def publish(study: ProlificStudy, api: ProlificAPI, *, confirmed: bool, user: str = "") -> ProlificStudy:
    """Publish the study (PUBLISH transition) and make the campaign live
    (:func:`crowd.engine.set_state`). Publishing spends real money: refused unless ``confirmed``
    (the caller showed :func:`cost` and the researcher agreed), refused for a study Prolific
    shows as already published, and refused (before anything is sent) when the campaign cannot
    go live. A dry run echoes the transition and changes nothing. Raises StudyError/ProlificError."""
    study_id = _require_created(study)
    if not confirmed:
        raise StudyError("publishing pays participants real money: show the cost and confirm (--yes) first")
    if study.published_at or study.status not in ("", "UNPUBLISHED"):
        raise StudyError(f"study {study_id} is already published ({study.status or 'published'})")
    campaign = Campaign.objects.get(pk=study.campaign_id)
    if campaign.state == Campaign.FINISHED:
        raise StudyError(f"campaign {campaign.name!r} is finished; it cannot take participants")
    if api.dry_run:
        api.transition_study(study_id, "PUBLISH")
        return study
    remote = api.get_study(study_id)
    if remote.get("status") and remote["status"] != "UNPUBLISHED":
        ProlificStudy.objects.filter(pk=study.pk).update(status=remote["status"])
        study.status = remote["status"]
        raise StudyError(f"study {study_id} is already published ({remote['status']})")
    with transaction.atomic():
        if campaign.state != Campaign.LIVE and (problem := images.campaign_image_problem(campaign)):
            raise StudyError(problem)
    answer = api.transition_study(study_id, "PUBLISH")
    study.status = answer.get("status") or "ACTIVE"
    study.published_at, study.published_by = timezone.now(), str(user or "")[:150]
    study.save(update_fields=["status", "published_at", "published_by"])
    if campaign.state != Campaign.LIVE:
        engine.set_state(campaign, Campaign.LIVE)
    return study


def _transition(study: ProlificStudy, api: ProlificAPI, action: str, default_status: str) -> ProlificStudy:
    study_id = _require_created(study)
    answer = api.transition_study(study_id, action)
    if not api.dry_run:
        study.status = answer.get("status") or default_status
        study.save(update_fields=["status"])
    return study


def pause(study: ProlificStudy, api: ProlificAPI) -> ProlificStudy:
    """PAUSE the study: Prolific lets no new participant in; sessions under way finish normally
    (the campaign stays live for them)."""
    return _transition(study, api, "PAUSE", "PAUSED")


def resume(study: ProlificStudy, api: ProlificAPI) -> ProlificStudy:
    """START a paused study again."""
    return _transition(study, api, "START", "ACTIVE")


def stop(study: ProlificStudy, api: ProlificAPI) -> ProlificStudy:
    """STOP the study for good (Prolific: AWAITING REVIEW or COMPLETED). Sessions under way still
    finish; finish the campaign itself once they have."""
    return _transition(study, api, "STOP", "COMPLETED")


def add_places(study: ProlificStudy, api: ProlificAPI, n: int) -> ProlificStudy:
    """Raise the study's places by ``n`` (> 0) with ``PATCH /studies/{id}/``."""
    study_id = _require_created(study)
    n = _positive_int(n, "the number of places to add")
    total = study.places + n
    answer = api.update_study(study_id, {"total_available_places": total})
    if not api.dry_run:
        study.places = int(answer.get("total_available_places", total))
        study.save(update_fields=["places"])
    return study


def refresh(study: ProlificStudy, api: ProlificAPI) -> dict:
    """Read the study from Prolific and store its status and places; returns Prolific's record."""
    remote = api.get_study(_require_created(study))
    if remote and not api.dry_run:
        study.status = remote.get("status", study.status)
        study.places = int(remote.get("total_available_places", study.places))
        study.last_synced_at = timezone.now()
        study.save(update_fields=["status", "places", "last_synced_at"])
    return remote


def places_left(study: ProlificStudy, remote: dict) -> int | None:
    """Places not yet taken according to Prolific's record (None if it does not say)."""
    taken = remote.get("places_taken")
    return None if taken is None else max(0, study.places - int(taken))


__all__ = ["OUTCOME_CODES", "StudyError", "study_body", "create_draft", "cost", "cost_lines", "publish", "pause",
           "resume", "stop", "add_places", "refresh", "study_of", "check_filters", "outcome_code", "screen_out_reward"]
