"""Study endpoints of the fake Prolific API, with the request validation the real API documents
(Prolific API reference: "Create a draft study", "Update a study", "Publish a draft study /
transition", "Study cost calculator"; completion codes and actions as documented there).

    POST  studies/                      create a draft (status UNPUBLISHED) -> 201 study
    GET   studies/                      list (paginated)
    GET   studies/{id}/                 the study
    PATCH studies/{id}/                 edit a draft; once published only total_available_places, and only up
    POST  studies/{id}/transition/      {"action": PUBLISH | PAUSE | START | STOP} -> the study
    POST  study-cost-calculator/        {"reward", "total_available_places"[, "estimated_completion_time"]}
    GET   studies/{id}/cost/            the cost of the stored study
"""
from __future__ import annotations

import math

from .server import Invalid, NotFound, new_id, now_iso, route

STUDY = r"studies/(?P<id>[0-9a-f]{24})/"
PLACEHOLDERS = ("{{%PROLIFIC_PID%}}", "{{%STUDY_ID%}}", "{{%SESSION_ID%}}")
CODE_TYPES = {"COMPLETED", "FAILED_ATTENTION_CHECK", "FOLLOW_UP_STUDY", "GIVE_BONUS", "INCOMPATIBLE_DEVICE",
              "NO_CONSENT", "OTHER", "FIXED_SCREENOUT"}
# action -> its extra fields (required)
ACTIONS = {"AUTOMATICALLY_APPROVE": {}, "MANUALLY_REVIEW": {}, "REQUEST_RETURN": {"return_reason": str},
           "ADD_TO_PARTICIPANT_GROUP": {"participant_group": str},
           "REMOVE_FROM_PARTICIPANT_GROUP": {"participant_group": str}, "DYNAMIC_PAYMENT": {},
           "FIXED_SCREEN_OUT_PAYMENT": {"fixed_screen_out_reward": int, "slots": int}}
DEVICES = {"desktop", "tablet", "mobile"}
PERIPHERALS = {"audio", "camera", "download", "microphone"}
ID_OPTIONS = {"url_parameters", "question", "not_required"}
REQUIRED = ("name", "description", "external_study_url", "prolific_id_option", "completion_codes",
            "total_available_places", "estimated_completion_time", "reward")
OPTIONAL = ("internal_name", "maximum_allowed_time", "filters", "filter_set_id", "device_compatibility",
            "peripheral_requirements", "project", "submissions_config", "study_labels", "naivety_distribution_rate",
            "is_external_study_url_secure")
FEE_RATE = 1 / 3  # the fake's service fee; the real one depends on the workspace


def _posint(body, key):
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{key} must be an integer (rewards in minor units, e.g. pence), not {value!r}")
    if value <= 0:
        raise Invalid(f"{key} must be positive")
    return value


def _text(body, key, limit=4000):
    value = body[key]
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{key} must be a non-empty string")
    if len(value) > limit:
        raise Invalid(f"{key} is longer than {limit} characters")
    return value


def _check_codes(codes, reward):
    if not isinstance(codes, list) or not codes:
        raise Invalid("completion_codes must be a non-empty list")
    seen = set()
    for entry in codes:
        if not isinstance(entry, dict):
            raise Invalid("each completion code must be an object")
        unknown = set(entry) - {"code", "code_type", "actor", "actions"}
        if unknown:
            raise Invalid(f"unknown completion code fields: {', '.join(sorted(unknown))}")
        code = entry.get("code")
        if not isinstance(code, str) or not code or len(code) > 40:
            raise Invalid("completion code 'code' must be a string of 1 to 40 characters")
        if code in seen:
            raise Invalid(f"completion code {code} is given twice")
        seen.add(code)
        if entry.get("code_type") not in CODE_TYPES:
            raise Invalid(f"unknown code_type {entry.get('code_type')!r}")
        if entry.get("actor", "participant") not in ("participant", "researcher"):
            raise Invalid(f"unknown actor {entry.get('actor')!r}")
        actions = entry.get("actions")
        if not isinstance(actions, list) or not actions:
            raise Invalid(f"completion code {code}: actions must be a non-empty list")
        names = []
        for action in actions:
            if not isinstance(action, dict) or action.get("action") not in ACTIONS:
                raise Invalid(f"completion code {code}: unknown action {action!r}")
            fields = ACTIONS[action["action"]]
            extra = set(action) - {"action"} - set(fields)
            if extra:
                raise Invalid(f"completion code {code}: unknown action fields {', '.join(sorted(extra))}")
            for key, kind in fields.items():
                if key not in action:
                    raise Invalid(f"completion code {code}: {action['action']} needs {key}")
                if kind is int:
                    _posint(action, key)
                elif not isinstance(action[key], str) or not action[key]:
                    raise Invalid(f"completion code {code}: {key} must be a non-empty string")
            if action["action"] == "FIXED_SCREEN_OUT_PAYMENT":
                if entry["code_type"] != "FIXED_SCREENOUT":
                    raise Invalid(f"completion code {code}: FIXED_SCREEN_OUT_PAYMENT needs code_type FIXED_SCREENOUT")
                if reward is not None and action["fixed_screen_out_reward"] >= reward:
                    raise Invalid("fixed_screen_out_reward must be less than the study reward")
            names.append(action["action"])
        if "AUTOMATICALLY_APPROVE" in names and "MANUALLY_REVIEW" in names:
            raise Invalid(f"completion code {code}: AUTOMATICALLY_APPROVE and MANUALLY_REVIEW cannot be combined")
        if len(set(names)) != len(names):
            raise Invalid(f"completion code {code}: an action is given twice")


def _check_filters(filters):
    if not isinstance(filters, list):
        raise Invalid("filters must be a list")
    for f in filters:
        if not isinstance(f, dict) or not isinstance(f.get("filter_id"), str) or not f["filter_id"]:
            raise Invalid("each filter needs a filter_id")
        unknown = set(f) - {"filter_id", "selected_values", "selected_range", "weightings"}
        if unknown:
            raise Invalid(f"unknown filter fields: {', '.join(sorted(unknown))}")
        if ("selected_values" in f) == ("selected_range" in f):
            raise Invalid(f"filter {f['filter_id']}: give selected_values (select) or selected_range (range)")
        if "selected_values" in f and (not isinstance(f["selected_values"], list) or not f["selected_values"]
                                       or not all(isinstance(v, str) for v in f["selected_values"])):
            raise Invalid(f"filter {f['filter_id']}: selected_values must be a non-empty list of strings")
        if "selected_range" in f:
            r = f["selected_range"]
            if not isinstance(r, dict) or set(r) - {"lower", "upper"} or not r:
                raise Invalid(f"filter {f['filter_id']}: selected_range must be {{lower, upper}}")


def _check_list(body, key, allowed):
    value = body[key]
    if not isinstance(value, list) or not all(v in allowed for v in value) or len(set(value)) != len(value):
        raise Invalid(f"{key} must be a list of distinct values from {sorted(allowed)}")


def validate_study(body: dict, *, partial: bool = False, current: dict | None = None) -> None:
    """Raise Invalid unless ``body`` is a valid create (or, ``partial``, update) body."""
    if "eligibility_requirements" in body:
        raise Invalid("eligibility_requirements was removed from the API; use filters")
    unknown = set(body) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise Invalid(f"unknown fields: {', '.join(sorted(unknown))}")
    if not partial:
        missing = [k for k in REQUIRED if k not in body]
        if missing:
            raise Invalid(f"missing fields: {', '.join(missing)}")
    merged = dict(current or {}) | body
    for key in ("name", "description", "internal_name", "project", "filter_set_id"):
        if key in body:
            _text(body, key, 255 if key in ("name", "internal_name") else 10000)
    for key in ("total_available_places", "estimated_completion_time", "reward", "maximum_allowed_time"):
        if key in body:
            _posint(body, key)
    if "maximum_allowed_time" in merged and merged.get("maximum_allowed_time") is not None \
            and merged["maximum_allowed_time"] < merged.get("estimated_completion_time", 0):
        raise Invalid("maximum_allowed_time must not be less than estimated_completion_time")
    if "external_study_url" in body:
        url = _text(body, "external_study_url", 2000)
        if not url.startswith(("https://", "http://")):
            raise Invalid("external_study_url must be an http(s) URL")
        missing = [p for p in PLACEHOLDERS if p not in url]
        if missing:
            raise Invalid(f"external_study_url lacks {', '.join(missing)}")
    if "prolific_id_option" in body and body["prolific_id_option"] not in ID_OPTIONS:
        raise Invalid(f"prolific_id_option must be one of {sorted(ID_OPTIONS)}")
    if "completion_codes" in body:
        _check_codes(body["completion_codes"], merged.get("reward"))
    if "filters" in body:
        _check_filters(body["filters"])
    if merged.get("filters") and merged.get("filter_set_id"):
        raise Invalid("filters and filter_set_id cannot both be given")
    if "device_compatibility" in body:
        _check_list(body, "device_compatibility", DEVICES)
    if "peripheral_requirements" in body:
        _check_list(body, "peripheral_requirements", PERIPHERALS)
    if "submissions_config" in body:
        sc = body["submissions_config"]
        if not isinstance(sc, dict) or set(sc) - {"max_submissions_per_participant", "max_concurrent_submissions"}:
            raise Invalid("submissions_config takes max_submissions_per_participant, max_concurrent_submissions")
        for v in sc.values():
            if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and v != -1):
                raise Invalid("submissions_config values must be positive integers or -1")


def cost_of(reward: int, places: int) -> dict:
    """The fake's cost answer (Prolific's shape, minor units): rewards, fees, vat, total_cost."""
    rewards = reward * places
    fees = math.ceil(rewards * FEE_RATE)
    return {"total_cost": rewards + fees, "base_cost": rewards + fees, "rewards": rewards, "fees": fees, "vat": 0}


@route("POST", r"studies/")
def create_study(fake, match, body, query):
    validate_study(body)
    study = dict(body) | {"id": new_id(), "status": "UNPUBLISHED", "places_taken": 0, "number_of_submissions": 0,
                          "date_created": now_iso(), "published_at": None}
    fake.studies[study["id"]] = study
    return 201, dict(study)


@route("GET", r"studies/")
def list_studies(fake, match, body, query):
    return 200, fake.paginate([dict(s) for s in fake.studies.values()], query, "studies/")


@route("GET", STUDY)
def get_study(fake, match, body, query):
    return 200, dict(fake.study(match["id"]))


@route("PATCH", STUDY)
def update_study(fake, match, body, query):
    study = fake.study(match["id"])
    if not body:
        raise Invalid("nothing to update")
    if study["status"] != "UNPUBLISHED":
        if set(body) != {"total_available_places"}:
            raise Invalid("once published only total_available_places can change")
        _posint(body, "total_available_places")
        if body["total_available_places"] < study["total_available_places"]:
            raise Invalid("total_available_places can only be increased once the study is published")
    validate_study(body, partial=True, current=study)
    study.update(body)
    return 200, dict(study)


TRANSITIONS = {"PUBLISH": ({"UNPUBLISHED"}, "ACTIVE"), "PAUSE": ({"ACTIVE"}, "PAUSED"),
               "START": ({"PAUSED"}, "ACTIVE"), "STOP": ({"ACTIVE", "PAUSED", "SCHEDULED"}, None)}


@route("POST", STUDY + r"transition/")
def transition_study(fake, match, body, query):
    study = fake.study(match["id"])
    if set(body) != {"action"} or body["action"] not in TRANSITIONS:
        raise Invalid(f"body must be {{\"action\": one of {sorted(TRANSITIONS)}}}")
    sources, target = TRANSITIONS[body["action"]]
    if study["status"] not in sources:
        raise Invalid(f"cannot {body['action']} a study that is {study['status']}")
    if target is None:
        waiting = any(s["study_id"] == study["id"] and s["status"] == "AWAITING REVIEW"
                      for s in fake.submissions.values())
        target = "AWAITING REVIEW" if waiting else "COMPLETED"
    if body["action"] == "PUBLISH":
        validate_study({k: v for k, v in study.items() if k in REQUIRED or k in OPTIONAL})
        study["published_at"] = now_iso()
    study["status"] = target
    return 200, dict(study)


@route("POST", r"study-cost-calculator/")
def cost_calculator(fake, match, body, query):
    unknown = set(body) - {"reward", "total_available_places", "estimated_completion_time"}
    if unknown:
        raise Invalid(f"unknown fields: {', '.join(sorted(unknown))}")
    for key in ("reward", "total_available_places"):
        if key not in body:
            raise Invalid(f"missing field {key}")
        _posint(body, key)
    if "estimated_completion_time" in body:
        _posint(body, "estimated_completion_time")
    return 200, cost_of(body["reward"], body["total_available_places"])


@route("GET", STUDY + r"cost/")
def study_cost(fake, match, body, query):
    study = fake.study(match["id"])
    return 200, cost_of(study["reward"], study["total_available_places"])


@route("GET", r"submissions/(?P<id>[0-9a-f]{24})/", fallback=True)
def get_submission(fake, match, body, query):
    """Minimal stand-in for "Get a submission" (tests/fake_prolific/submissions.py replaces it)."""
    sub = fake.submissions.get(match["id"])
    if sub is None:
        raise NotFound(f"submission {match['id']} not found")
    return 200, dict(sub)
