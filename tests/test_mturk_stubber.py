"""Every boto3 call of the MTurk layer, checked with botocore's Stubber against the real service model.

A real boto3 ``mturk`` client (dummy credentials, nothing leaves the process) is wrapped in a
Stubber: each expected request is queued with its exact parameters (``ANY`` only where a value is
not deterministic) and a response that must validate against the model's output shapes. botocore
itself checks parameter names, types and required members; on top of that every request and every
queued response is checked here against the model's enums, patterns and length/size limits
(e.g. WorkerId ``^A[A-Z0-9]+$``, Reward ``^[0-9]+(\\.)?[0-9]{0,2}$``, MaxResults 1-100), which
botocore does not enforce but MTurk does. The Stubber refuses any unexpected call or parameter; as
its errors are BotoCoreErrors, which MTurkAPI turns into logged MTurkErrors that a report could
swallow, every test ends with :func:`finish`: ``assert_no_pending_responses`` plus no refused call
in the ``MTurkCall`` log.

Covered: publishing (exact CreateHITType/CreateHITWithHITType, retries on throttling, recovery of a
HIT after a duplicate UniqueRequestToken through paginated ListHITs, per-HIT failures and resuming,
dry run, the live confirmation and Masters ids), collection (paginated ListAssignmentsForHIT,
QuestionFormAnswers, disposed HITs, invalid answers, MTurk statuses), review (approve/reject,
auto-approval), claim verification (GetAssignment), bonuses (tokens, no double payment), NotifyWorkers chunks, UpdateExpirationForHIT
and CreateWorkerBlock.
"""
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import boto3
import pytest
from botocore.stub import ANY, Stubber
from django.utils import timezone

from crowd import engine
from crowd.models import (
    Assignment, Campaign, Dataset, HumanJudgment, Item, MTurkBatch, MTurkCall, MTurkHIT, MTurkSync, Payment, Worker,
    WorkerStatus,
)
from crowd.mturk import publish as pub
from crowd.mturk import review
from crowd.mturk.client import ENDPOINTS, MTurkAPI, MTurkError
from crowd.mturk.collect import collect
from crowd.mturk.questions import answers_xml

from .conftest import run_command

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://captions.example.org"
EXTERNAL_NS = "http://mechanicalturk.amazonaws.com/AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd"
GUARD = {"ActionsGuarded": "DiscoverPreviewAndAccept"}
APPROVAL_RATE_95 = {"QualificationTypeId": "000000000000000000L0", "Comparator": "GreaterThanOrEqualTo",
                    "IntegerValues": [95], **GUARD}
APPROVED_HITS_500 = {"QualificationTypeId": "00000000000000000040", "Comparator": "GreaterThanOrEqualTo",
                     "IntegerValues": [500], **GUARD}
SANDBOX_MASTERS = {"QualificationTypeId": "2ARFPLSP75KLA8M8DH1HTEQVJT3SY6", "Comparator": "Exists", **GUARD}
LIVE_MASTERS = {"QualificationTypeId": "2F1QJWKUDD8XADTFD2Q0G6UTO95ALH", "Comparator": "Exists", **GUARD}
STATUSES = ["Submitted", "Approved", "Rejected"]
HIT_TYPE = "3HITTYPE0000000000000000000001"
NOW = datetime(2026, 5, 4, 12, 0, tzinfo=dt_timezone.utc)
EXPIRES = NOW + timedelta(days=7)
NOT_SUBMITTED = "This operation can be called with a status of: Submitted (1777896000000 s)"


def hit_id(n: int) -> str:
    return f"3HIT{n:026d}"  # 30 characters, like MTurk's


def assignment_id(n: int) -> str:
    return f"3ASG{n:026d}"


def question(item_pk: int) -> str:
    """The ExternalQuestion a HIT of the campaign "mt" must carry for an item."""
    return (f'<ExternalQuestion xmlns="{EXTERNAL_NS}"><ExternalURL>{PUBLIC_URL}/mturk/mt/item/{item_pk}/</ExternalURL>'
            "<FrameHeight>0</FrameHeight></ExternalQuestion>")


# --- the service model's constraints botocore does not check ---------------------------------------
def model_violations(shape, value, path="") -> list[str]:
    """Enum, pattern, length and range violations of ``value`` against a botocore ``shape`` (types
    and required members are botocore's own check, made after this one)."""
    if value is ANY:
        return []
    out, md, kind = [], shape.metadata, shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for key, v in value.items():
            if key in shape.members:
                out += model_violations(shape.members[key], v, f"{path}.{key}")
    elif kind == "list" and isinstance(value, (list, tuple)):
        if len(value) < md.get("min", 0) or len(value) > md.get("max", len(value)):
            out.append(f"{path}: {len(value)} elements")
        for i, v in enumerate(value):
            out += model_violations(shape.member, v, f"{path}[{i}]")
    elif kind == "string" and isinstance(value, str):
        if "enum" in md and value not in md["enum"]:
            out.append(f"{path}: {value!r} not in {md['enum']}")
        if "pattern" in md and not re.match(md["pattern"], value):
            out.append(f"{path}: {value!r} does not match {md['pattern']}")
        if not md.get("min", 0) <= len(value) <= md.get("max", len(value)):
            out.append(f"{path}: length {len(value)}")
    elif kind in ("integer", "long") and isinstance(value, int):
        if not md.get("min", value) <= value <= md.get("max", value):
            out.append(f"{path}: {value} out of range")
    return out


def _check_request(params, model, **kwargs):
    problems = model_violations(model.input_shape, params)
    assert not problems, f"{model.name} request outside the MTurk service model: {problems}"


def stub_client(environment: str = "sandbox"):
    """A real boto3 mturk client whose requests are also checked against the model's constraints."""
    client = boto3.client("mturk", region_name="us-east-1", endpoint_url=ENDPOINTS[environment],
                          aws_access_key_id="x", aws_secret_access_key="y")
    client.meta.events.register("before-parameter-build.mturk", _check_request)
    return client


def respond(stubber: Stubber, method: str, response: dict, params: dict):
    """Queue ``response`` (checked against the output shape's constraints) for a call with ``params``."""
    model = stubber.client.meta.service_model.operation_model(stubber.client.meta.method_to_api_mapping[method])
    problems = model_violations(model.output_shape, response)
    assert not problems, f"test response outside the model: {problems}"
    stubber.add_response(method, response, params)


def fail(stubber: Stubber, method: str, message: str, params: dict, code: str = "RequestError", status: int = 400):
    stubber.add_client_error(method, service_error_code=code, service_message=message, http_status_code=status,
                             expected_params=params)


STUB_ERRORS = ("StubAssertionError", "UnStubbedResponseError", "StubResponseError")


def finish(stubber: Stubber, pending: bool = True):
    """End of a test: every queued response was used, and no call the Stubber refused (unexpected,
    or with other parameters) was turned into an MTurkError and reported instead of failing."""
    if pending:
        stubber.assert_no_pending_responses()
    refused = list(MTurkCall.objects.filter(error_code__in=STUB_ERRORS).values_list("operation", "error"))
    assert not refused, f"calls the test did not expect (or with other parameters): {refused}"


@pytest.fixture
def mturk():
    """(client, stubber) for the sandbox; the stubber is active for the whole test."""
    client = stub_client("sandbox")
    with Stubber(client) as stubber:
        yield client, stubber


@pytest.fixture
def sleeps(monkeypatch):
    """The back-off sleeps of MTurkAPI.call, recorded instead of slept."""
    out = []
    monkeypatch.setattr("crowd.mturk.client.time.sleep", out.append)
    return out


@pytest.fixture
def campaign(subset_dir):
    """A "rating" MTurk campaign of 27 items (2 gold), reward $0.05, k = 3, ExternalQuestion."""
    run_command("import_dataset", "flickr8k-expert", str(subset_dir), "--name", "sub")
    c = engine.create_campaign(Dataset.objects.get(name="sub"), "rating", name="mt", options={"images": 4, "gold": 2},
                               reward="0.05", provider=Campaign.MTURK, gold_every=0)
    config = pub.config_for(c)
    config.public_url = PUBLIC_URL
    config.save()
    return c


def items_in_order(campaign, gold=None) -> list[Item]:
    qs = campaign.items.order_by("position")
    return list(qs if gold is None else qs.filter(is_gold=gold))


def hit_type_request(campaign, requirements) -> dict:
    return {"AutoApprovalDelayInSeconds": 3 * 24 * 3600, "AssignmentDurationInSeconds": 600, "Reward": "0.05",
            "Title": "Relevance and thoroughness: sub", "Keywords": "image, caption, rating",
            "Description": campaign.instructions, "QualificationRequirements": requirements}


def hit_request(batch_id: str, item: Item, max_assignments: int = 3) -> dict:
    return {"HITTypeId": HIT_TYPE, "MaxAssignments": max_assignments, "LifetimeInSeconds": 7 * 24 * 3600,
            "Question": question(item.pk), "RequesterAnnotation": batch_id,
            "UniqueRequestToken": pub.request_token(batch_id, item.pk)}


def hit_response(n: int, batch_id: str, item: Item, max_assignments: int = 3) -> dict:
    return {"HIT": {"HITId": hit_id(n), "HITTypeId": HIT_TYPE, "HITStatus": "Assignable", "MaxAssignments": max_assignments,
                    "RequesterAnnotation": batch_id, "Question": question(item.pk), "CreationTime": NOW,
                    "Expiration": EXPIRES}}


def published(campaign, n: int) -> list[MTurkHIT]:
    """A batch of the first ``n`` items whose HITs exist on MTurk (ids hit_id(1..n))."""
    batch = pub.create_batch(campaign, limit=n)
    hits = list(batch.hits.order_by("pk"))
    for i, h in enumerate(hits, 1):
        h.hit_id, h.status = hit_id(i), "Assignable"
        h.save()
    return hits


def mturk_worker(external_id: str) -> Worker:
    return Worker.objects.create(provider=Campaign.MTURK, external_id=external_id)


def submitted(campaign, item, worker, aid: str, relevance: str = "4", thoroughness: str = "3") -> Assignment:
    """An assignment of ``worker`` submitted through our ExternalQuestion page (campaign live)."""
    if campaign.state != Campaign.LIVE:
        engine.set_state(campaign, Campaign.LIVE)
    a = engine.accept_item(campaign, worker, item, provider_ref=aid)
    engine.submit(a.pk, worker, {"relevance": relevance, "thoroughness": thoroughness})
    a.refresh_from_db()
    return a


def fail_gold(campaign, worker, aids):
    """``worker`` answers every gold item wrongly (gold relevance is 1): quality control blocks them."""
    for item, aid in zip(items_in_order(campaign, gold=True), aids):
        submitted(campaign, item, worker, aid, relevance="5", thoroughness="5")


# --- the checks themselves ------------------------------------------------------------------------
def test_calls_are_checked_against_the_service_model(mturk, campaign):
    client, stubber = mturk
    unstubbed = stub_client("sandbox")

    def never_send(request, **kwargs):
        raise AssertionError(f"a request was about to leave the process: {request.url}")

    unstubbed.meta.events.register("before-send.mturk", never_send)
    api = MTurkAPI.for_campaign(campaign, client=unstubbed)
    # botocore's own validation (a required member missing) reaches us as an MTurkError, logged
    with pytest.raises(MTurkError) as exc:
        api.call("reject_assignment", AssignmentId=assignment_id(1))
    assert exc.value.code == "ParamValidationError" and "RequesterFeedback" in exc.value.message
    assert MTurkCall.objects.get(operation="reject_assignment").error_code == "ParamValidationError"
    # the model's patterns and ranges, which botocore leaves to the service, are enforced here
    with pytest.raises(AssertionError, match=r"WorkerId: 'worker-1' does not match"):
        api.call("create_worker_block", WorkerId="worker-1", Reason="x")
    with pytest.raises(AssertionError, match="MaxResults: 500 out of range"):
        api.call("list_hits", MaxResults=500)
    with pytest.raises(AssertionError, match=r"BonusAmount: '0\.105' does not match"):
        api.call("send_bonus", WorkerId="AW0000000001", BonusAmount="0.105", AssignmentId=assignment_id(1), Reason="x")
    # ... and so are the responses queued by these tests
    with pytest.raises(AssertionError, match="not in"):
        respond(stubber, "list_assignments_for_hit", {"Assignments": [{"AssignmentStatus": "Accepted"}]},
                {"HITId": hit_id(1)})
    # an unexpected call, or one with other parameters, cannot hide in a report
    respond(stubber, "create_worker_block", {}, {"WorkerId": "AW0000000001", "Reason": "expected"})
    with pytest.raises(MTurkError):
        MTurkAPI.for_campaign(campaign, client=client).call("create_worker_block", WorkerId="AW0000000001", Reason="other")
    with pytest.raises(AssertionError, match="did not expect"):
        finish(stubber, pending=False)
    MTurkAPI.for_campaign(campaign, client=client).call("create_worker_block", WorkerId="AW0000000001", Reason="expected")
    stubber.assert_no_pending_responses()


def test_throttling_retried_with_backoff_then_given_up(mturk, campaign, sleeps):
    client, stubber = mturk
    api = MTurkAPI(client, campaign, "sandbox", retries=2, backoff=0.1)
    params = {"HITId": hit_id(1), "MaxResults": 100, "AssignmentStatuses": STATUSES}
    for _ in range(3):
        fail(stubber, "list_assignments_for_hit", "Rate exceeded", params, code="ThrottlingException")
    with pytest.raises(MTurkError) as exc:
        api.call("list_assignments_for_hit", **params)
    assert exc.value.code == "ThrottlingException" and exc.value.operation == "list_assignments_for_hit"
    assert sleeps == [0.1, 0.2]
    assert list(MTurkCall.objects.values_list("ok", "error_code")) == [(False, "ThrottlingException")]
    finish(stubber)


# --- publishing -----------------------------------------------------------------------------------
def test_publish_batch_exact_requests(mturk, campaign):
    client, stubber = mturk
    config = pub.config_for(campaign)
    config.masters, config.gold_assignments, config.locales = True, 1, ["US", "CA-QC"]
    config.save()
    locale = {"QualificationTypeId": "00000000000000000071", "Comparator": "In",
              "LocaleValues": [{"Country": "US"}, {"Country": "CA", "Subdivision": "QC"}], **GUARD}
    respond(stubber, "create_hit_type", {"HITTypeId": HIT_TYPE},
            hit_type_request(campaign, [APPROVAL_RATE_95, APPROVED_HITS_500, locale, SANDBOX_MASTERS]))
    items = items_in_order(campaign)
    assert len(items) == 27 and sum(it.is_gold for it in items) == 2
    for n, it in enumerate(items, 1):
        k = 1 if it.is_gold else 3
        respond(stubber, "create_hit_with_hit_type", hit_response(n, "mt-api-1", it, k), hit_request("mt-api-1", it, k))

    report = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=client))

    finish(stubber)
    assert report.created == 27 and report.existing == 0 and not report.failed
    batch = MTurkBatch.objects.get(campaign=campaign)
    assert batch.batch_id == "mt-api-1" and batch.hit_type_id == HIT_TYPE and batch.environment == "sandbox"
    rows = list(batch.hits.select_related("item").order_by("pk"))
    assert [(h.item_id, h.hit_id, h.status, h.expires_at) for h in rows] == [
        (it.pk, hit_id(n), "Assignable", EXPIRES) for n, it in enumerate(items, 1)]
    # the tokens sent are the ones committed with the HIT rows (what makes a retry safe)
    assert [h.request_token for h in rows] == [hit_request("mt-api-1", it)["UniqueRequestToken"] for it in items]
    assert len({h.request_token for h in rows}) == 27
    campaign.refresh_from_db()
    assert campaign.state == Campaign.LIVE
    assert MTurkCall.objects.filter(campaign=campaign, ok=True, dry_run=False).count() == 28


def test_publish_retries_a_throttled_create_once(mturk, campaign, sleeps):
    client, stubber = mturk
    first, second = items_in_order(campaign)[:2]
    respond(stubber, "create_hit_type", {"HITTypeId": HIT_TYPE}, hit_type_request(campaign, [APPROVAL_RATE_95, APPROVED_HITS_500]))
    fail(stubber, "create_hit_with_hit_type", "Rate exceeded", hit_request("mt-api-1", first), code="ThrottlingException")
    fail(stubber, "create_hit_with_hit_type", "Service unavailable", hit_request("mt-api-1", first),
         code="ServiceUnavailable", status=503)
    respond(stubber, "create_hit_with_hit_type", hit_response(1, "mt-api-1", first), hit_request("mt-api-1", first))
    respond(stubber, "create_hit_with_hit_type", hit_response(2, "mt-api-1", second), hit_request("mt-api-1", second))

    report = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=client), limit=2)

    finish(stubber)
    assert sleeps == [0.5, 1.0]  # exponential back-off, default 0.5 s
    assert report.created == 2 and not report.failed
    assert list(MTurkHIT.objects.order_by("pk").values_list("item_id", "hit_id")) == [
        (first.pk, hit_id(1)), (second.pk, hit_id(2))]
    # the retried attempts are not separate calls in the log: one successful create per HIT
    assert MTurkCall.objects.filter(operation="create_hit_with_hit_type").count() == 2


def test_publish_recovers_a_hit_after_duplicate_token_through_list_hits(mturk, campaign):
    client, stubber = mturk
    first, second = items_in_order(campaign)[:2]
    respond(stubber, "create_hit_type", {"HITTypeId": HIT_TYPE}, hit_type_request(campaign, [APPROVAL_RATE_95, APPROVED_HITS_500]))
    # the first attempt reached MTurk but its answer was lost; MTurk names no HIT id in its error
    fail(stubber, "create_hit_with_hit_type",
         "There is already a HIT with this UniqueRequestToken. (1777896000000)", hit_request("mt-api-1", first))

    def listed(n, annotation, marker_pk):
        return {"HITId": hit_id(n), "HITTypeId": HIT_TYPE, "Question": question(marker_pk), "HITStatus": "Assignable",
                "RequesterAnnotation": annotation, "MaxAssignments": 3, "CreationTime": NOW, "Expiration": EXPIRES}

    respond(stubber, "list_hits", {
        "HITs": [listed(90, "another-api-1", first.pk),              # same item, another batch
                 listed(91, "mt-api-1", first.pk * 10 + 7)],         # same batch, another item
        "NumResults": 2, "NextToken": "page-2"}, {"MaxResults": 100})
    respond(stubber, "list_hits", {"HITs": [listed(92, "mt-api-1", first.pk)], "NumResults": 1},
            {"MaxResults": 100, "NextToken": "page-2"})
    respond(stubber, "create_hit_with_hit_type", hit_response(1, "mt-api-1", second), hit_request("mt-api-1", second))

    report = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=client), limit=2)

    finish(stubber)
    assert report.existing == 1 and report.created == 1 and not report.failed
    assert MTurkHIT.objects.get(item=first).hit_id == hit_id(92)
    assert MTurkHIT.objects.get(item=second).hit_id == hit_id(1)
    assert MTurkHIT.objects.get(item=first).status == "Assignable"


def test_publish_reports_a_failed_hit_and_resumes_only_that_one(mturk, campaign):
    client, stubber = mturk
    items = items_in_order(campaign)[:3]
    respond(stubber, "create_hit_type", {"HITTypeId": HIT_TYPE}, hit_type_request(campaign, [APPROVAL_RATE_95, APPROVED_HITS_500]))
    respond(stubber, "create_hit_with_hit_type", hit_response(1, "mt-api-1", items[0]), hit_request("mt-api-1", items[0]))
    message = "Your account balance is too low to publish this HIT. (1777896000000)"
    fail(stubber, "create_hit_with_hit_type", message, hit_request("mt-api-1", items[1]))
    respond(stubber, "create_hit_with_hit_type", hit_response(3, "mt-api-1", items[2]), hit_request("mt-api-1", items[2]))

    report = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=client), limit=3)

    finish(stubber)
    assert report.created == 2
    assert report.failed == {items[1].key: f"create_hit_with_hit_type: RequestError: {message}"}
    broken = MTurkHIT.objects.get(item=items[1])
    assert broken.hit_id == "" and broken.status == "error" and message in broken.error
    assert MTurkCall.objects.get(ok=False).error_code == "RequestError"

    # the rerun sends neither CreateHITType nor the two HITs made: one create, with the same token
    respond(stubber, "create_hit_with_hit_type", hit_response(2, "mt-api-1", items[1]), hit_request("mt-api-1", items[1]))
    again = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=client), batch=broken.batch)

    finish(stubber)
    assert again.created == 1 and again.existing == 2 and not again.failed
    broken.refresh_from_db()
    assert (broken.hit_id, broken.status, broken.error) == (hit_id(2), "Assignable", "")
    assert MTurkBatch.objects.count() == 1 and MTurkHIT.objects.exclude(hit_id="").count() == 3


def test_dry_run_sends_nothing_and_lists_the_calls(mturk, campaign):
    client, stubber = mturk  # nothing queued: any request would raise
    api = MTurkAPI.for_campaign(campaign, dry_run=True, client=client)

    report = pub.publish_batch(campaign, api, limit=2)

    assert report.dry_run and report.batch is None and report.created == 0
    lines = report.calls.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["create_hit_type", "create_hit_with_hit_type", "create_hit_with_hit_type"]
    assert '"Reward": "0.05"' in lines[0]
    first = items_in_order(campaign)[0]
    assert f"/mturk/mt/item/{first.pk}/" in lines[1] and '"MaxAssignments": 3' in lines[1]
    assert MTurkBatch.objects.count() == 0 and MTurkHIT.objects.count() == 0
    assert MTurkCall.objects.count() == 3 and not MTurkCall.objects.filter(dry_run=False).exists()
    notified = review.notify_workers(campaign, api, "Hello", "Thanks", worker_ids=["AW0000000001"])
    assert notified.done == {"would notify": 1} and "notify_workers" in notified.calls
    campaign.refresh_from_db()
    assert campaign.state == Campaign.DRAFT
    finish(stubber)


def test_live_needs_confirmation_and_uses_the_live_masters_id(campaign):
    live = stub_client("live")
    config = pub.config_for(campaign)
    config.masters = True
    config.save()
    with Stubber(live) as stubber:
        pub.set_environment(campaign, "live")
        api = MTurkAPI.for_campaign(campaign, client=live)
        assert api.environment == "live"
        with pytest.raises(pub.PublishError, match="confirm first"):
            pub.publish_batch(campaign, api, limit=1)
        assert MTurkCall.objects.count() == 0 and MTurkBatch.objects.count() == 0

        with pytest.raises(pub.PublishError, match="exactly"):
            pub.confirm_live(campaign, "MT", user="owner")
        assert pub.config_for(campaign).live_confirmed_at is None

        confirmed = pub.confirm_live(campaign, "mt", user="owner")
        assert confirmed.environment == "live" and confirmed.live_confirmed_by == "owner"
        first = items_in_order(campaign)[0]
        respond(stubber, "create_hit_type", {"HITTypeId": HIT_TYPE},
                hit_type_request(campaign, [APPROVAL_RATE_95, APPROVED_HITS_500, LIVE_MASTERS]))
        respond(stubber, "create_hit_with_hit_type", hit_response(1, "mt-api-1", first), hit_request("mt-api-1", first))

        report = pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=live), limit=1)

        finish(stubber)
        assert report.created == 1
        assert MTurkBatch.objects.get().environment == "live"
        assert set(MTurkCall.objects.values_list("environment", flat=True)) == {"live"}
        # switching away and back asks for the confirmation again
        pub.set_environment(campaign, "sandbox")
        pub.set_environment(campaign, "live")
        with pytest.raises(pub.PublishError, match="confirm first"):
            pub.publish_batch(campaign, MTurkAPI.for_campaign(campaign, client=live), limit=1)
        finish(stubber)


# --- collecting -----------------------------------------------------------------------------------
def test_collect_pages_answers_errors_and_statuses(mturk, campaign):
    client, stubber = mturk
    hits = published(campaign, 3)
    assert not any(h.item.is_gold for h in hits)
    accepted, done = NOW - timedelta(minutes=5), NOW - timedelta(minutes=3)

    def mturk_assignment(n, worker, status, hit, relevance, thoroughness):
        return {"AssignmentId": assignment_id(n), "WorkerId": worker, "HITId": hit.hit_id, "AssignmentStatus": status,
                "AcceptTime": accepted, "SubmitTime": done,
                "Answer": answers_xml({"relevance": relevance, "thoroughness": thoroughness})}

    listing = {"MaxResults": 100, "AssignmentStatuses": STATUSES}
    respond(stubber, "list_assignments_for_hit", {
        "Assignments": [mturk_assignment(1, "AW0000000001", "Submitted", hits[0], "4", "3")],
        "NumResults": 1, "NextToken": "next-page"}, {"HITId": hits[0].hit_id, **listing})
    respond(stubber, "list_assignments_for_hit", {
        "Assignments": [mturk_assignment(2, "AW0000000002", "Approved", hits[0], "2", "5"),
                        mturk_assignment(3, "AW0000000003", "Submitted", hits[0], "9", "3")],
        "NumResults": 2}, {"HITId": hits[0].hit_id, "NextToken": "next-page", **listing})
    disposed = f"Hit {hits[1].hit_id} does not exist. (1777896000000)"
    fail(stubber, "list_assignments_for_hit", disposed, {"HITId": hits[1].hit_id, **listing})
    respond(stubber, "list_assignments_for_hit", {
        "Assignments": [mturk_assignment(4, "AW0000000001", "Submitted", hits[2], "5", "5")], "NumResults": 1},
        {"HITId": hits[2].hit_id, **listing})

    report = collect(campaign, MTurkAPI.for_campaign(campaign, client=client))

    finish(stubber)
    assert report.hits == 3 and report.mturk_assignments == 4
    assert report.recorded == [assignment_id(1), assignment_id(2), assignment_id(4)]
    assert report.errors == [[hits[1].hit_id, f"RequestError: {disposed}"]]
    assert len(report.invalid) == 1 and report.invalid[0][0] == assignment_id(3)
    assert "answer invalid" in report.invalid[0][1] and "relevance" in report.invalid[0][1]
    assert report.status_changes == [[assignment_id(2), "submitted", "approved"]]
    assert not report.ok and not report.extra and not report.mismatched

    # nothing at all is stored for the invalid assignment, not even its worker
    assert not Assignment.objects.filter(provider_ref=assignment_id(3)).exists()
    assert not Worker.objects.filter(external_id="AW0000000003").exists()
    states = dict(Assignment.objects.filter(campaign=campaign).values_list("provider_ref", "state"))
    assert states == {assignment_id(1): "submitted", assignment_id(2): "approved", assignment_id(4): "submitted"}
    a2 = Assignment.objects.get(provider_ref=assignment_id(2))
    assert a2.provider_status == "Approved" and a2.item_id == hits[0].item_id and a2.worker.external_id == "AW0000000002"
    a1 = Assignment.objects.get(provider_ref=assignment_id(1))
    assert (a1.accepted_at, a1.submitted_at, a1.work_seconds, a1.answer) == (accepted, done, 120.0,
                                                                             {"relevance": 4, "thoroughness": 3})
    judged = set(HumanJudgment.objects.filter(campaign=campaign).values_list("rater", "criterion", "score"))
    assert judged == {("mturk:AW0000000001", "relevance", 4.0), ("mturk:AW0000000001", "thoroughness", 3.0),
                      ("mturk:AW0000000002", "relevance", 2.0), ("mturk:AW0000000002", "thoroughness", 5.0),
                      ("mturk:AW0000000001", "relevance", 5.0), ("mturk:AW0000000001", "thoroughness", 5.0)}
    assert HumanJudgment.objects.filter(campaign=campaign).count() == 6
    sync = MTurkSync.objects.get(campaign=campaign)
    assert sync.ok is False and sync.report["recorded"] == report.recorded


# --- reviewing ------------------------------------------------------------------------------------
def test_review_approve_reject_and_auto_approved(mturk, campaign):
    client, stubber = mturk
    campaign.gold_min_answers = 2
    campaign.save()
    plain = items_in_order(campaign, gold=False)
    good, bad, late = mturk_worker("AW0000000001"), mturk_worker("AW0000000002"), mturk_worker("AW0000000003")
    a1 = submitted(campaign, plain[0], good, assignment_id(1))
    submitted(campaign, plain[1], good, assignment_id(2))
    a5 = submitted(campaign, plain[2], bad, assignment_id(3))  # counted, until the gold answers below
    fail_gold(campaign, bad, [assignment_id(4), assignment_id(5)])
    a6 = submitted(campaign, plain[3], late, assignment_id(6))
    reviewed = submitted(campaign, plain[4], late, assignment_id(7))
    Assignment.objects.filter(pk=reviewed.pk).update(provider_status="Approved")  # MTurk's status, from the collector
    local = engine.accept_item(campaign, Worker.objects.create(external_id="local-rater"), plain[5], provider_ref="")
    engine.submit(local.pk, local.worker, {"relevance": "3", "thoroughness": "3"})
    status = WorkerStatus.objects.get(campaign=campaign, worker=bad)
    assert status.state == WorkerStatus.BLOCKED and status.reason == "gold accuracy 0/2 = 0% < 50%"

    decisions = review.plan_review(campaign)
    qc = "Rejected by quality control: gold accuracy 0/2 = 0% < 50%."
    assert [(d.assignment.provider_ref, d.action, d.feedback) for d in decisions] == [
        (assignment_id(1), "approve", "Thank you!"), (assignment_id(2), "approve", "Thank you!"),
        (assignment_id(3), "reject", qc), (assignment_id(4), "reject", qc), (assignment_id(5), "reject", qc),
        (assignment_id(6), "approve", "Thank you!")]
    respond(stubber, "approve_assignment", {}, {"AssignmentId": assignment_id(1), "RequesterFeedback": "Thank you!"})
    fail(stubber, "approve_assignment", NOT_SUBMITTED, {"AssignmentId": assignment_id(2), "RequesterFeedback": "Thank you!"})
    for n in (3, 4, 5):
        respond(stubber, "reject_assignment", {}, {"AssignmentId": assignment_id(n), "RequesterFeedback": qc})
    not_yet = "This operation can be called with a status of: null (1777896000000 s)"
    fail(stubber, "approve_assignment", not_yet, {"AssignmentId": assignment_id(6), "RequesterFeedback": "Thank you!"})

    report = review.apply_review(campaign, MTurkAPI.for_campaign(campaign, client=client), decisions)

    finish(stubber)
    assert report.done == {"approved": 1, "already approved by MTurk": 1, "rejected": 3}
    assert report.failed == [(assignment_id(6), f"RequestError: {not_yet}")]
    rows = {a.provider_ref: (a.state, a.provider_status) for a in Assignment.objects.exclude(provider_ref="")}
    assert rows[assignment_id(1)] == rows[assignment_id(2)] == ("approved", "Approved")
    assert rows[assignment_id(3)] == rows[assignment_id(5)] == ("rejected", "Rejected")
    assert rows[assignment_id(6)] == ("submitted", "")
    assert Assignment.objects.get(pk=a5.pk).feedback == qc and Assignment.objects.get(pk=a1.pk).feedback == "Thank you!"
    assert Assignment.objects.get(pk=a6.pk).feedback == ""
    # an assignment we do not hold as an MTurk submission is never sent (nothing queued: a call would raise)
    local.refresh_from_db()
    refused = review.apply_review(campaign, MTurkAPI.for_campaign(campaign, client=client),
                                  [review.Decision(local, review.APPROVE, "Thank you!")])
    assert refused.failed == [(local.pk, "not an MTurk assignment of this campaign")] and not refused.done
    assert [(d.assignment.provider_ref, d.action) for d in review.plan_review(campaign)] == [(assignment_id(6), "approve")]
    finish(stubber)


def test_bonus_ledger_token_and_no_double_payment(mturk, campaign):
    client, stubber = mturk
    plain = items_in_order(campaign, gold=False)
    a = submitted(campaign, plain[0], mturk_worker("AW0000000001"), assignment_id(1))
    local = engine.accept_item(campaign, Worker.objects.create(external_id="local-rater"), plain[1], provider_ref="")
    engine.submit(local.pk, local.worker, {"relevance": "3", "thoroughness": "3"})
    local.refresh_from_db()

    payment = review.grant_bonus(a, "0.10", "Careful, consistent ratings", "careful")
    assert payment.request_token == f"bonus-{assignment_id(1)}-careful" and payment.state == Payment.PENDING
    with pytest.raises(review.ReviewError, match="already granted"):
        review.grant_bonus(a, "0.10", "Careful, consistent ratings", "careful")
    with pytest.raises(review.ReviewError, match="not an MTurk assignment we hold"):
        review.grant_bonus(local, "0.10", "Careful, consistent ratings", "careful")
    assert Payment.objects.count() == 1

    sent = {"WorkerId": "AW0000000001", "BonusAmount": "0.10", "AssignmentId": assignment_id(1),
            "Reason": "Careful, consistent ratings", "UniqueRequestToken": payment.request_token}
    broke = "Your account does not have enough funds to pay this bonus. (1777896000000)"
    fail(stubber, "send_bonus", broke, sent)
    first = review.send_bonuses(campaign, MTurkAPI.for_campaign(campaign, client=client))
    assert first.failed == [(assignment_id(1), f"RequestError: {broke}")] and not first.done
    payment.refresh_from_db()
    assert payment.state == Payment.FAILED and broke in payment.error

    respond(stubber, "send_bonus", {}, sent)
    second = review.send_bonuses(campaign, MTurkAPI.for_campaign(campaign, client=client))
    assert second.done == {"sent": 1} and not second.failed
    payment.refresh_from_db()
    assert payment.state == Payment.SENT and payment.sent_at is not None and payment.error == ""

    # a crash between SendBonus and our write: the ledger still says pending; the retry carries the
    # same token, MTurk refuses it as used, and the bonus is recorded sent (paid once)
    Payment.objects.update(state=Payment.PENDING, sent_at=None)
    fail(stubber, "send_bonus", "The UniqueRequestToken you provided has already been used. (1777896000000)", sent)
    third = review.send_bonuses(campaign, MTurkAPI.for_campaign(campaign, client=client))
    assert third.done == {"sent earlier": 1} and not third.failed
    payment.refresh_from_db()
    assert payment.state == Payment.SENT
    assert review.send_bonuses(campaign, MTurkAPI.for_campaign(campaign, client=client)).done == {}
    assert MTurkCall.objects.filter(operation="send_bonus").count() == 3
    finish(stubber)


# --- workers and HITs -----------------------------------------------------------------------------
def test_notify_workers_in_chunks_of_100(mturk, campaign):
    client, stubber = mturk
    ids = [f"AW{n:010d}" for n in range(250)]
    message = {"Subject": "New image-captioning HITs", "MessageText": "A new batch is up. Thank you!"}
    respond(stubber, "notify_workers", {"NotifyWorkersFailureStatuses": []}, {**message, "WorkerIds": ids[:100]})
    gone = "Cannot send a notification to a worker who has not done work for you"
    respond(stubber, "notify_workers", {"NotifyWorkersFailureStatuses": [
        {"NotifyWorkersFailureCode": "HardFailure", "NotifyWorkersFailureMessage": gone, "WorkerId": ids[150]}]},
        {**message, "WorkerIds": ids[100:200]})
    respond(stubber, "notify_workers", {"NotifyWorkersFailureStatuses": []}, {**message, "WorkerIds": ids[200:]})
    api = MTurkAPI.for_campaign(campaign, client=client)

    report = review.notify_workers(campaign, api, message["Subject"], message["MessageText"], worker_ids=ids)

    finish(stubber)
    assert report.done == {"notified": 249} and report.failed == [(ids[150], gone)]
    assert [len(p["WorkerIds"]) for op, p in api.sent] == [100, 100, 50]
    with pytest.raises(review.ReviewError):
        review.notify_workers(campaign, api, " ", "text", worker_ids=ids)
    finish(stubber)


def test_update_expiration_expire_and_extend(mturk, campaign):
    client, stubber = mturk
    hits = published(campaign, 3)
    gone = f"Hit {hits[1].hit_id} does not exist. (1777896000000)"
    past = datetime(2015, 1, 1, tzinfo=dt_timezone.utc)
    for h in hits:
        if h == hits[1]:
            fail(stubber, "update_expiration_for_hit", gone, {"HITId": h.hit_id, "ExpireAt": past})
        else:
            respond(stubber, "update_expiration_for_hit", {}, {"HITId": h.hit_id, "ExpireAt": past})
    before = timezone.now()

    expired = review.update_expiration(campaign, MTurkAPI.for_campaign(campaign, client=client))

    finish(stubber)
    assert past < before
    assert expired.done == {"expired": 2} and expired.failed == [(hits[1].hit_id, f"RequestError: {gone}")]
    rows = {h.hit_id: h.expires_at for h in MTurkHIT.objects.all()}
    assert before <= rows[hits[0].hit_id] <= timezone.now() and rows[hits[1].hit_id] is None

    with pytest.raises(review.ReviewError):
        review.update_expiration(campaign, MTurkAPI.for_campaign(campaign, client=client), extend_seconds=30)
    for h in hits:
        if h == hits[1]:
            fail(stubber, "update_expiration_for_hit", gone, {"HITId": h.hit_id, "ExpireAt": ANY})
        else:
            respond(stubber, "update_expiration_for_hit", {}, {"HITId": h.hit_id, "ExpireAt": ANY})
    api = MTurkAPI.for_campaign(campaign, client=client)
    start = timezone.now()
    extended = review.update_expiration(campaign, api, extend_seconds=3600)
    end = timezone.now()

    finish(stubber)
    assert extended.done == {"extended": 2} and len(extended.failed) == 1
    sent = {datetime.fromisoformat(p["ExpireAt"]) for _, p in api.sent}
    assert len(sent) == 1  # one moment for every HIT
    (when,) = sent
    assert start + timedelta(hours=1) <= when <= end + timedelta(hours=1)
    assert MTurkHIT.objects.get(hit_id=hits[2].hit_id).expires_at == when


def test_block_workers_blocked_by_quality_control_once(mturk, campaign):
    client, stubber = mturk
    campaign.gold_min_answers = 2
    campaign.save()
    bad, ok = mturk_worker("AW0000000001"), mturk_worker("AW0000000002")
    fail_gold(campaign, bad, [assignment_id(1), assignment_id(2)])
    gold = items_in_order(campaign, gold=True)
    submitted(campaign, gold[0], ok, assignment_id(3), relevance="1")
    submitted(campaign, gold[1], ok, assignment_id(4), relevance="5")  # 1 of 2: warned, not blocked
    local = Worker.objects.create(external_id="local-rater")
    WorkerStatus.objects.create(campaign=campaign, worker=local, state=WorkerStatus.BLOCKED, reason="by the owner")
    assert dict(WorkerStatus.objects.filter(campaign=campaign).values_list("worker__external_id", "state")) == {
        "AW0000000001": "blocked", "AW0000000002": "warned", "local-rater": "blocked"}
    block = {"WorkerId": "AW0000000001", "Reason": "gold accuracy 0/2 = 0% < 50%"}

    fail(stubber, "create_worker_block", "Internal validation failed. (1777896000000)", block)
    failed = review.block_workers(campaign, MTurkAPI.for_campaign(campaign, client=client))
    assert failed.failed == [("AW0000000001", "RequestError: Internal validation failed. (1777896000000)")]

    respond(stubber, "create_worker_block", {}, block)  # a failed block is tried again
    first = review.block_workers(campaign, MTurkAPI.for_campaign(campaign, client=client))
    assert first.done == {"blocked": 1} and not first.failed

    second = review.block_workers(campaign, MTurkAPI.for_campaign(campaign, client=client))  # nothing queued
    assert second.done == {"blocked earlier": 1} and not second.failed
    assert MTurkCall.objects.filter(operation="create_worker_block", ok=True).count() == 1
    finish(stubber)


# --- verifying claims -----------------------------------------------------------------------------
def test_verify_claims_get_assignment(mturk, campaign):
    """The periodic verification asks GetAssignment about each due claim (request and response
    checked against the model): a claim MTurk records for that worker and HIT, whose answer carries
    our token, is confirmed and counts; an AssignmentId MTurk does not know is refused and released
    at once; one MTurk holds but has not received yet is asked about again later, and meanwhile not
    at all."""
    from crowd.mturk import tokens
    from crowd.mturk.collect import verify_claims

    client, stubber = mturk
    hits = published(campaign, 1)
    engine.set_state(campaign, Campaign.LIVE)
    item, worker = hits[0].item, mturk_worker("AW0000000001")
    real = engine.accept_item(campaign, worker, item, provider_ref=assignment_id(1), verified=False)
    engine.submit(real.pk, worker, {"relevance": "4", "thoroughness": "3"})
    forged = engine.accept_item(campaign, mturk_worker("AW0000000002"), item, provider_ref="FORGED1", verified=False)
    working = engine.accept_item(campaign, mturk_worker("AW0000000003"), item, provider_ref=assignment_id(3),
                                 verified=False)
    real.refresh_from_db()
    assert (real.verified, real.counted, real.slot) == (False, False, None)
    answer = answers_xml({"relevance": "4", "thoroughness": "3", "item": str(item.pk), "order": "{}",
                          tokens.FIELD: tokens.issue(real)})
    respond(stubber, "get_assignment", {
        "Assignment": {"AssignmentId": assignment_id(1), "WorkerId": "AW0000000001", "HITId": hit_id(1),
                       "AssignmentStatus": "Submitted", "AcceptTime": NOW, "SubmitTime": NOW, "Answer": answer},
        "HIT": {"HITId": hit_id(1), "HITTypeId": HIT_TYPE, "HITStatus": "Assignable", "MaxAssignments": 3}},
        {"AssignmentId": assignment_id(1)})
    fail(stubber, "get_assignment", "Assignment FORGED1 does not exist. (1777896000000)", {"AssignmentId": "FORGED1"})
    fail(stubber, "get_assignment", "This operation can be called with a status of: Submitted, Approved, Rejected "
         "(1777896000000)", {"AssignmentId": assignment_id(3)})

    report = verify_claims(campaign, MTurkAPI.for_campaign(campaign, client=client))

    finish(stubber)
    assert report.confirmed == [assignment_id(1)] and report.unchanged == 1
    assert report.refused == [["FORGED1", "Assignment FORGED1 does not exist. (1777896000000)"]]
    assert report.unconfirmed == [[assignment_id(3), "not confirmed yet: asked again later"]]
    for a in (real, forged, working):
        a.refresh_from_db()
    assert (real.verified, real.counted, real.slot) == (True, True, 0)
    assert (forged.verified, forged.slot, forged.state) == (False, None, Assignment.EXPIRED)
    assert forged.claim_released_at is not None and "does not exist" in forged.return_reason
    assert (working.state, working.claim_released_at, working.claim_checks) == (Assignment.ACCEPTED, None, 1)
    assert working.claim_known_at is not None and working.claim_next_check > timezone.now()
    assert HumanJudgment.objects.filter(campaign=campaign, rater="mturk:AW0000000001").count() == 2
    # nothing is due now: a second run sends nothing (the Stubber would refuse any call)
    again = verify_claims(campaign, MTurkAPI.for_campaign(campaign, client=client))
    assert (again.confirmed, again.refused, again.unconfirmed) == ([], [], [])
    finish(stubber)
