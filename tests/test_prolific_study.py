"""The Prolific study of a campaign against the fake Prolific API (tests/fake_prolific, a real HTTP
server on loopback): the draft body the fake validates, dry runs, retries of 429/5xx/timeouts,
the call log without the token, publishing only when confirmed, pause/resume/stop/add places,
the command, and the provider's claim parsing and session confirmation."""
import io
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import RequestFactory

from crowd import engine, journey
from crowd.models import Campaign, Dataset, ParticipantSession, ProlificCall, ProlificStudy, Worker
from crowd.prolific import study as st
from crowd.prolific_client import ProlificAPI, ProlificError, ProlificUnavailable
from crowd.providers import ClaimRefused, get_provider
from crowd.providers.prolific import worker_for
from tests.fake_prolific import fake_prolific  # noqa: F401
from tests.fake_prolific.server import new_id

from .conftest import run_command, write_subset

pytestmark = pytest.mark.django_db
SITE = "https://eval.example.org"
PROVIDER = get_provider(Campaign.PROLIFIC)


@pytest.fixture
def campaign(tmp_path):
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / "sub", 6)), "--name", "h3sub")
    return engine.create_campaign(Dataset.objects.get(name="h3sub"), "rating", name="pstudy", k=2,
                                  provider=Campaign.PROLIFIC, bundle_size=3, session_minutes=20, gold_every=0,
                                  options={"images": 4, "gold": 0})


def draft(campaign, fake, **kw):
    kw = {"reward": 150, "estimated_minutes": 12, "site_url": SITE} | kw
    return st.create_draft(campaign, ProlificAPI(campaign=campaign), **kw)


def out(*args) -> str:
    buf = io.StringIO()
    call_command("prolific", *args, stdout=buf, stderr=io.StringIO())
    return buf.getvalue()


# -- the draft -----------------------------------------------------------------------------------
def test_draft_body_has_placeholders_codes_places_and_passes_the_fakes_validation(campaign, fake_prolific):
    study = draft(campaign, fake_prolific, filters=[{"filter_id": "approval_rate",
                                                     "selected_range": {"lower": 95, "upper": 100}}])
    body = fake_prolific.calls[-1][2]
    assert fake_prolific.calls[-1][:2] == ("POST", "studies/")
    assert body["external_study_url"] == (
        f"{SITE}/prolific/pstudy/?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}&STUDY_ID={{{{%STUDY_ID%}}}}"
        "&SESSION_ID={{%SESSION_ID%}}")
    assert body["prolific_id_option"] == "url_parameters"
    assert body["reward"] == 150 and isinstance(body["reward"], int)
    assert body["total_available_places"] == journey.places_needed(campaign) == study.places
    assert body["maximum_allowed_time"] == 30 and body["device_compatibility"] == ["desktop"]
    types = {c["code_type"]: c for c in body["completion_codes"]}
    assert set(types) == {"COMPLETED", "FAILED_ATTENTION_CHECK", "NO_CONSENT", "FIXED_SCREENOUT"}
    assert types["COMPLETED"]["actions"] == [{"action": "MANUALLY_REVIEW"}]
    assert types["FIXED_SCREENOUT"]["actions"][0]["fixed_screen_out_reward"] == 15
    assert types["NO_CONSENT"]["actions"][0]["action"] == "REQUEST_RETURN"
    stored = ProlificStudy.objects.get(campaign=campaign)
    assert stored.study_id in fake_prolific.studies and stored.status == "UNPUBLISHED"
    assert stored.completion_codes == {o: types[t]["code"] for o, (t, _) in st.OUTCOME_CODES.items()}
    assert len(set(stored.completion_codes.values())) == 4 and stored.request == body


def test_fake_refuses_bodies_prolific_would_refuse(campaign, fake_prolific):
    body = st.study_body(campaign, reward=150, estimated_minutes=12, site_url=SITE)
    api = ProlificAPI(campaign=campaign)
    for bad, detail in [
        (body | {"reward": 1.5}, "reward must be an integer"),
        (body | {"eligibility_requirements": []}, "use filters"),
        (body | {"external_study_url": SITE + "/prolific/pstudy/?PROLIFIC_PID={{%PROLIFIC_PID%}}"}, "lacks"),
        (body | {"completion_codes": [dict(body["completion_codes"][0],
                                           actions=[{"action": "AUTOMATICALLY_APPROVE"}, {"action": "MANUALLY_REVIEW"}])]},
         "cannot be combined"),
        (body | {"colour": "blue"}, "unknown fields: colour"),
    ]:
        with pytest.raises(ProlificError) as err:
            api.create_study(bad)
        assert err.value.status == 400 and detail in str(err.value) and "\n" not in str(err.value)
    assert not fake_prolific.studies


def test_bad_values_are_refused_before_anything_is_sent(campaign, fake_prolific):
    for kw, msg in [({"reward": 0}, "reward"), ({"reward": 1.5}, "reward"), ({"site_url": "ftp://x"}, "site-url"),
                    ({"devices": ("watch",)}, "devices"), ({"filters": [{"selected_values": ["x"]}]}, "filter_id"),
                    ({"reward": 10, "screen_out_reward": 10}, "screen-out")]:
        with pytest.raises(st.StudyError, match=msg):
            draft(campaign, fake_prolific, **kw)
    assert fake_prolific.calls == []


def test_dry_run_prints_the_body_and_sends_and_stores_nothing(campaign, fake_prolific):
    text = out("create", "pstudy", "--reward-pence", "150", "--minutes", "12", "--site-url", SITE, "--dry-run")
    assert "DRY RUN POST" in text and "{{%SESSION_ID%}}" in text and "nothing was sent" in text
    assert fake_prolific.calls == [] and not ProlificStudy.objects.exists()
    call = ProlificCall.objects.get()
    assert call.dry_run and call.method == "POST" and call.path == "studies/"


def test_a_second_draft_for_the_same_campaign_is_refused(campaign, fake_prolific):
    draft(campaign, fake_prolific)
    with pytest.raises(st.StudyError, match="already has Prolific study"):
        draft(campaign, fake_prolific)
    assert len(fake_prolific.studies) == 1


# -- the client -----------------------------------------------------------------------------------
def test_429_5xx_and_timeouts_are_retried_then_succeed_and_logged_once(campaign, fake_prolific):
    fake_prolific.fail_next("POST", r"^studies/$", status=429, retry_after=0)
    fake_prolific.fail_next("POST", r"^studies/$", status=503)
    fake_prolific.timeout_next("POST", r"^studies/$", apply=False)
    study = draft(campaign, fake_prolific)
    assert [c[:2] for c in fake_prolific.calls] == [("POST", "studies/")] * 4
    assert list(fake_prolific.studies) == [study.study_id]  # the lost request created nothing
    call = ProlificCall.objects.get()
    assert call.ok and call.status == 201 and call.attempts == 4


def test_retry_after_is_honoured(campaign, fake_prolific):
    fake_prolific.fail_next("GET", r"^studies/$", status=429, retry_after=1)
    started = time.monotonic()
    ProlificAPI().request("GET", "studies/")
    assert time.monotonic() - started >= 1.0 and len(fake_prolific.calls) == 2


def test_giving_up_raises_unavailable_with_one_line(campaign, fake_prolific):
    fake_prolific.fail_next("GET", r"^studies/", status=500, count=10)
    with pytest.raises(ProlificUnavailable) as err:
        ProlificAPI(campaign=campaign, max_retries=2).request("GET", "studies/")
    assert "after 3 attempts" in str(err.value) and "\n" not in str(err.value) and err.value.status == 500
    assert len(fake_prolific.calls) == 3
    call = ProlificCall.objects.get()
    assert not call.ok and call.attempts == 3 and call.status == 500


def test_calls_that_must_not_repeat_are_not_retried(campaign, fake_prolific):
    fake_prolific.fail_next("POST", r"pay/$", status=503)
    with pytest.raises(ProlificUnavailable, match="not retried"):
        ProlificAPI().pay_bonus("0123456789abcdef01234567")
    assert len(fake_prolific.calls) == 1


def test_the_token_is_never_stored_or_shown(campaign, fake_prolific, monkeypatch):
    monkeypatch.setenv("PROLIFIC_TOKEN", "secret-token-123")
    fake_prolific.token = "secret-token-123"
    study = draft(campaign, fake_prolific)
    fake_prolific.token = "another"
    with pytest.raises(ProlificError) as err:
        st.cost(study, ProlificAPI(campaign=campaign))
    assert err.value.status == 401
    api = ProlificAPI(campaign=campaign)
    assert "secret-token-123" not in repr(api) and "secret-token-123" not in repr(vars(api))
    for call in ProlificCall.objects.all():
        assert "secret-token-123" not in f"{call.path} {call.body} {call.error}"
    assert "secret-token-123" not in str(err.value)
    assert ProlificCall.objects.count() == 2


def test_a_missing_token_is_one_clear_line(campaign, monkeypatch):
    monkeypatch.delenv("PROLIFIC_TOKEN", raising=False)
    with pytest.raises(ProlificError, match="PROLIFIC_TOKEN is not set"):
        ProlificAPI()
    with pytest.raises(CommandError, match="PROLIFIC_TOKEN is not set"):
        out("create", "pstudy", "--reward-pence", "150", "--minutes", "12", "--site-url", SITE)


def test_lists_follow_every_page(campaign, fake_prolific):
    for _ in range(5):
        ProlificAPI().create_study(st.study_body(campaign, reward=150, estimated_minutes=12, site_url=SITE))
    ids = [s["id"] for s in ProlificAPI().pages("studies/")]
    assert sorted(ids) == sorted(fake_prolific.studies) and len(ids) == 5
    assert sum(1 for m, p, _ in fake_prolific.calls if (m, p) == ("GET", "studies/")) == 3  # page size 2


def test_ids_are_checked_before_they_go_into_a_path(fake_prolific):
    with pytest.raises(ProlificError, match="malformed study id"):
        ProlificAPI().get_study("../bonuses")
    assert fake_prolific.calls == []


# -- publishing and the life cycle -------------------------------------------------------------------
def test_publish_is_refused_without_confirmation_and_twice(campaign, fake_prolific):
    study = draft(campaign, fake_prolific)
    api = ProlificAPI(campaign=campaign)
    with pytest.raises(st.StudyError, match="confirm"):
        st.publish(study, api, confirmed=False)
    assert fake_prolific.studies[study.study_id]["status"] == "UNPUBLISHED"
    with pytest.raises(CommandError, match="--yes"):  # not a terminal: cannot ask
        out("publish", "pstudy")
    assert fake_prolific.studies[study.study_id]["status"] == "UNPUBLISHED"
    campaign.refresh_from_db()
    assert campaign.state == Campaign.DRAFT

    st.publish(study, api, confirmed=True, user="olive")
    study.refresh_from_db()
    campaign.refresh_from_db()
    assert study.status == "ACTIVE" and study.published_by == "olive" and study.published_at
    assert campaign.state == Campaign.LIVE and fake_prolific.studies[study.study_id]["status"] == "ACTIVE"
    with pytest.raises(st.StudyError, match="already published"):
        st.publish(study, api, confirmed=True)
    ProlificStudy.objects.filter(pk=study.pk).update(status="UNPUBLISHED", published_at=None)  # a stale row
    with pytest.raises(st.StudyError, match=r"already published \(ACTIVE\)"):
        st.publish(ProlificStudy.objects.get(pk=study.pk), api, confirmed=True)
    publishes = [c for c in fake_prolific.calls if c[0] == "POST" and c[1].endswith("transition/")]
    assert len(publishes) == 1


def test_publish_command_shows_the_cost_then_publishes_with_yes(campaign, fake_prolific):
    out("create", "pstudy", "--reward-pence", "150", "--minutes", "12", "--site-url", SITE)
    text = out("cost", "pstudy")
    places = ProlificStudy.objects.get().places
    assert f"{places} places x 1.50 GBP" in text and f"total {places * 2:.2f} GBP" in text
    text = out("publish", "pstudy", "--yes")
    assert "real money" in text and "total" in text and "is live" in text
    with pytest.raises(CommandError, match="already published"):
        out("publish", "pstudy", "--yes")


def test_publish_asks_on_a_terminal_and_publishes_only_after_the_name(campaign, fake_prolific, monkeypatch):
    out("create", "pstudy", "--reward-pence", "150", "--minutes", "12", "--site-url", SITE)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty("no\n"))
    with pytest.raises(CommandError, match="not confirmed"):
        out("publish", "pstudy")
    assert ProlificStudy.objects.get().status == "UNPUBLISHED"
    monkeypatch.setattr("sys.stdin", Tty("pstudy\n"))
    assert "is live" in out("publish", "pstudy")
    assert ProlificStudy.objects.get().status == "ACTIVE"


def test_pause_resume_add_places_and_stop(campaign, fake_prolific):
    study = draft(campaign, fake_prolific)
    api = ProlificAPI(campaign=campaign)
    with pytest.raises(ProlificError, match="cannot PAUSE a study that is UNPUBLISHED"):
        st.pause(study, api)
    st.publish(study, api, confirmed=True)
    assert st.pause(study, api).status == "PAUSED"
    assert fake_prolific.studies[study.study_id]["status"] == "PAUSED"
    assert st.resume(study, api).status == "ACTIVE"
    before = study.places
    st.add_places(study, api, 3)
    study.refresh_from_db()
    assert study.places == before + 3 == fake_prolific.studies[study.study_id]["total_available_places"]
    with pytest.raises(st.StudyError, match="positive"):
        st.add_places(study, api, 0)
    with pytest.raises(ProlificError, match="only be increased"):  # Prolific's rule, enforced by the fake
        api.update_study(study.study_id, {"total_available_places": 1})
    text = out("stop", "pstudy")
    assert "stopped" in text and fake_prolific.studies[study.study_id]["status"] == "COMPLETED"
    assert ProlificStudy.objects.get().status == "COMPLETED"
    assert "COMPLETED" in out("show", "pstudy")


def test_pause_dry_run_sends_nothing(campaign, fake_prolific):
    study = draft(campaign, fake_prolific)
    st.publish(study, ProlificAPI(campaign=campaign), confirmed=True)
    n = len(fake_prolific.calls)
    text = out("pause", "pstudy", "--dry-run")
    assert "DRY RUN POST" in text and "PAUSE" in text and len(fake_prolific.calls) == n
    assert ProlificStudy.objects.get().status == "ACTIVE"


# -- the provider -----------------------------------------------------------------------------------
def _request(**params):
    return RequestFactory().get("/prolific/pstudy/", params)


def test_claims_are_parsed_and_checked(campaign, fake_prolific):
    study = draft(campaign, fake_prolific)
    pid, sess = new_id(), new_id()
    assert PROVIDER.claim_from_request(_request()) is None
    claim = PROVIDER.claim_from_request(_request(PROLIFIC_PID=pid, STUDY_ID=study.study_id, SESSION_ID=sess), campaign)
    # a participant never seen gets no worker row from a mere claim: only a confirmed one is written
    assert claim.worker.pk is None and claim.worker.external_id == pid
    assert not Worker.objects.filter(provider="prolific", external_id=pid).exists()
    known = worker_for(pid)
    again = PROVIDER.claim_from_request(_request(PROLIFIC_PID=pid, STUDY_ID=study.study_id, SESSION_ID=sess), campaign)
    assert again.worker == known == Worker.objects.get(provider="prolific", external_id=pid)
    assert claim.provider_ref == sess and not claim.verified
    assert claim.get("STUDY_ID") == study.study_id and claim.get("PROLIFIC_PID") == pid
    for bad in ({"PROLIFIC_PID": pid}, {"PROLIFIC_PID": "x" * 24, "STUDY_ID": study.study_id, "SESSION_ID": sess},
                {"PROLIFIC_PID": pid, "STUDY_ID": study.study_id, "SESSION_ID": "a/b"}):
        with pytest.raises(ClaimRefused) as err:
            PROVIDER.claim_from_request(_request(**bad), campaign)
        assert err.value.code == "bad-params" and err.value.status == 400
    with pytest.raises(ClaimRefused) as err:
        PROVIDER.claim_from_request(_request(PROLIFIC_PID=pid, STUDY_ID=new_id(), SESSION_ID=sess), campaign)
    assert err.value.code == "foreign-study" and err.value.status == 403
    assert PROVIDER.worker_for_request(_request(PROLIFIC_PID=pid, STUDY_ID=study.study_id, SESSION_ID=sess)) is None


def test_confirm_session_ok_mismatch_unknown_and_unreachable(campaign, fake_prolific):
    study = draft(campaign, fake_prolific)
    st.publish(study, ProlificAPI(campaign=campaign), confirmed=True)
    sub = fake_prolific.start_submission(study.study_id)
    other = fake_prolific.start_submission(study.study_id)

    def claim(pid, sess):
        return PROVIDER.claim_from_request(_request(PROLIFIC_PID=pid, STUDY_ID=study.study_id, SESSION_ID=sess),
                                           campaign)

    assert PROVIDER.confirm_session(campaign, claim(sub["participant_id"], sub["id"])) is True
    assert PROVIDER.confirm_session(campaign, claim(other["participant_id"], sub["id"])) is False  # someone else's
    assert PROVIDER.confirm_session(campaign, claim(sub["participant_id"], new_id())) is False  # unknown: 404
    fake_prolific.complete(sub["id"], study.completion_codes["completed"])
    assert PROVIDER.confirm_session(campaign, claim(sub["participant_id"], sub["id"])) is False  # ended, never opened
    fake_prolific.fail_next("GET", r"^submissions/", status=503, count=20)
    with pytest.raises(ProlificUnavailable):
        PROVIDER.confirm_session(campaign, claim(other["participant_id"], other["id"]))


def test_confirm_session_accepts_the_reload_of_a_session_already_opened(campaign, fake_prolific):
    study = draft(campaign, fake_prolific)
    st.publish(study, ProlificAPI(campaign=campaign), confirmed=True)
    sub = fake_prolific.start_submission(study.study_id)
    claim = PROVIDER.claim_from_request(
        _request(PROLIFIC_PID=sub["participant_id"], STUDY_ID=study.study_id, SESSION_ID=sub["id"]), campaign)
    ParticipantSession.objects.create(campaign=campaign, worker=worker_for(sub["participant_id"]),
                                      provider=Campaign.PROLIFIC,
                                      provider_ref=sub["id"], study_ref=study.study_id)
    fake_prolific.set_status(sub["id"], "AWAITING REVIEW")
    assert PROVIDER.confirm_session(campaign, claim) is True


def test_confirm_session_without_a_token_is_unavailable_not_a_crash(campaign, fake_prolific, monkeypatch):
    study = draft(campaign, fake_prolific)
    monkeypatch.delenv("PROLIFIC_TOKEN")
    claim = PROVIDER.claim_from_request(
        _request(PROLIFIC_PID=new_id(), STUDY_ID=study.study_id, SESSION_ID=new_id()), campaign)
    with pytest.raises(ProlificUnavailable, match="PROLIFIC_TOKEN"):
        PROVIDER.confirm_session(campaign, claim)


def test_completion_code_and_url_follow_the_outcome(campaign, fake_prolific, settings):
    study = draft(campaign, fake_prolific)
    session = ParticipantSession(campaign=campaign, worker=worker_for(new_id()), provider=Campaign.PROLIFIC,
                                 outcome=ParticipantSession.FAILED_ATTENTION)
    code = study.completion_codes["failed_attention"]
    assert PROVIDER.completion_code(session) == code
    assert PROVIDER.completion_url(session) == f"{settings.PROLIFIC_COMPLETE_URL}?cc={code}"
    session.outcome = ParticipantSession.RETURNED
    assert PROVIDER.completion_code(session) == "" and PROVIDER.completion_url(session) is None
    assert get_provider(Campaign.LOCAL).completion_url(session) is None
    assert get_provider(Campaign.LOCAL).completion_code(session) == ""
    assert PROVIDER.verify(campaign, campaign.assignments.all()) == set()


def test_publish_dry_run_sends_nothing_and_keeps_the_campaign_a_draft(campaign, fake_prolific):
    draft(campaign, fake_prolific)
    n = len(fake_prolific.calls)
    text = out("publish", "pstudy", "--dry-run")
    assert "DRY RUN POST" in text and "PUBLISH" in text and len(fake_prolific.calls) == n
    campaign.refresh_from_db()
    assert campaign.state == Campaign.DRAFT and ProlificStudy.objects.get().status == "UNPUBLISHED"
    assert "UNPUBLISHED" in out("show", "pstudy")


def test_show_and_commands_on_a_campaign_without_a_study(campaign, fake_prolific):
    assert "no Prolific study yet" in out("show", "pstudy")
    with pytest.raises(CommandError, match="no study on Prolific yet"):
        out("publish", "pstudy", "--yes")
    with pytest.raises(CommandError, match="no campaign named"):
        out("cost", "nosuch")
    assert fake_prolific.calls == []
