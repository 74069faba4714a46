"""An in-memory Mechanical Turk for tests: the requester API methods the platform calls (same names,
parameters and response shapes as boto3's ``mturk`` client; botocore's Stubber tests check those
against the real service model) plus the worker side: accepting a HIT and the externalSubmit POST.

Not a reference implementation of MTurk: it models what our code relies on (UniqueRequestToken
idempotency, MaxAssignments, pagination with NextToken, status transitions, auto-approval), and
what identity verification relies on: ListAssignmentsForHIT and GetAssignment know only the
assignments a worker really accepted here (:meth:`FakeMTurk.accept`), with the answer that worker
posted to externalSubmit; ids typed into a URL exist nowhere in it.
"""
from __future__ import annotations

import itertools
import secrets
import threading
from datetime import datetime, timedelta, timezone

from botocore.exceptions import ClientError

from crowd.mturk.questions import answers_xml

FAKES: dict[str, "FakeMTurk"] = {}
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return (prefix + secrets.token_hex(16).upper())[:30]


def _error(operation: str, message: str, code: str = "RequestError"):
    return ClientError({"Error": {"Code": code, "Message": message}}, operation)


class FakeMTurk:
    """One requester account in one environment."""

    def __init__(self, environment: str = "sandbox", page_size: int = 2):
        self.environment = environment
        self.page_size = page_size  # small, so that pagination is exercised
        self.hit_types, self.hits, self.assignments = {}, {}, {}
        self.tokens, self.bonuses, self.blocks, self.notified = {}, [], [], []
        self.lock = threading.Lock()

    # --- requester API --------------------------------------------------------------------------
    def create_hit_type(self, **p):
        key = repr(sorted((k, repr(v)) for k, v in p.items()))
        for tid, params in self.hit_types.items():
            if params["key"] == key:
                return {"HITTypeId": tid}
        tid = _id("T")
        self.hit_types[tid] = {"key": key, **p}
        return {"HITTypeId": tid}

    def create_hit_with_hit_type(self, **p):
        with self.lock:
            token = p.get("UniqueRequestToken")
            if token in self.tokens:
                raise _error("CreateHITWithHITType", f"The HIT with ID \"{self.tokens[token]}\" already exists. "
                             "(AWS.MechanicalTurk.HitAlreadyExists: UniqueRequestToken was used before)")
            hid = _id("H")
            now = datetime.now(timezone.utc)
            self.hits[hid] = {
                "HITId": hid, "HITTypeId": p["HITTypeId"], "Question": p["Question"], "MaxAssignments": p["MaxAssignments"],
                "RequesterAnnotation": p.get("RequesterAnnotation", ""), "HITStatus": "Assignable",
                "Expiration": now + timedelta(seconds=p["LifetimeInSeconds"]), "CreationTime": now,
            }
            if token:
                self.tokens[token] = hid
            return {"HIT": dict(self.hits[hid])}

    def list_hits(self, MaxResults=100, NextToken=None):
        return self._page(list(self.hits.values()), "HITs", NextToken)

    def _page(self, rows, key, token):
        start = int(token or 0)
        page = rows[start:start + self.page_size]
        out = {key: [dict(r) for r in page], "NumResults": len(page)}
        if start + self.page_size < len(rows):
            out["NextToken"] = str(start + self.page_size)
        return out

    def list_assignments_for_hit(self, HITId, MaxResults=100, NextToken=None, AssignmentStatuses=None):
        if HITId not in self.hits:
            raise _error("ListAssignmentsForHIT", f"Hit {HITId} does not exist. (AWS.MechanicalTurk.HITDoesNotExist)")
        rows = [a for a in self.assignments.values() if a["HITId"] == HITId
                and a["AssignmentStatus"] in (AssignmentStatuses or ["Submitted", "Approved", "Rejected"])]
        return self._page(rows, "Assignments", NextToken)

    def get_assignment(self, AssignmentId):
        """GetAssignment: only an assignment this fake really made (a worker accepted its HIT), with
        the answer XML of exactly what was posted to externalSubmit (our ``ce_token`` included). As
        MTurk documents it, only a Submitted, Approved or Rejected assignment is returned: an
        accepted (or returned) one is a RequestError naming those statuses, an unknown id one saying
        that it does not exist."""
        a = self._assignment(AssignmentId, "GetAssignment")
        if a["AssignmentStatus"] not in ("Submitted", "Approved", "Rejected"):
            raise _error("GetAssignment", "This operation can be called with a status of: Submitted, Approved, Rejected")
        hit = self.hits[a["HITId"]]
        return {"Assignment": dict(a), "HIT": {k: hit[k] for k in ("HITId", "HITTypeId", "HITStatus", "MaxAssignments")}}

    def _assignment(self, aid, op):
        a = self.assignments.get(aid)
        if a is None:
            raise _error(op, f"Assignment {aid} does not exist.")
        return a

    def approve_assignment(self, AssignmentId, RequesterFeedback="", OverrideRejection=False):
        a = self._assignment(AssignmentId, "ApproveAssignment")
        if a["AssignmentStatus"] != "Submitted":
            raise _error("ApproveAssignment", f"This operation can be called with a status of: Submitted "
                         f"(the assignment is {a['AssignmentStatus']})")
        a["AssignmentStatus"] = "Approved"
        return {}

    def reject_assignment(self, AssignmentId, RequesterFeedback):
        a = self._assignment(AssignmentId, "RejectAssignment")
        if a["AssignmentStatus"] != "Submitted":
            raise _error("RejectAssignment", f"This operation can be called with a status of: Submitted "
                         f"(the assignment is {a['AssignmentStatus']})")
        a["AssignmentStatus"] = "Rejected"
        return {}

    def send_bonus(self, WorkerId, BonusAmount, AssignmentId, Reason, UniqueRequestToken=None):
        self._assignment(AssignmentId, "SendBonus")
        if UniqueRequestToken and any(b["UniqueRequestToken"] == UniqueRequestToken for b in self.bonuses):
            raise _error("SendBonus", "The UniqueRequestToken was already used for a bonus.")
        self.bonuses.append({"WorkerId": WorkerId, "BonusAmount": BonusAmount, "AssignmentId": AssignmentId,
                             "Reason": Reason, "UniqueRequestToken": UniqueRequestToken})
        return {}

    def create_worker_block(self, WorkerId, Reason):
        self.blocks.append(WorkerId)
        return {}

    def notify_workers(self, Subject, MessageText, WorkerIds):
        if len(WorkerIds) > 100:
            raise _error("NotifyWorkers", "WorkerIds: at most 100")
        self.notified.append(list(WorkerIds))
        return {"NotifyWorkersFailureStatuses": []}

    def update_expiration_for_hit(self, HITId, ExpireAt):
        if HITId not in self.hits:
            raise _error("UpdateExpirationForHIT", f"Hit {HITId} does not exist.")
        self.hits[HITId]["Expiration"] = ExpireAt
        return {}

    # --- worker side ----------------------------------------------------------------------------
    def accept(self, hit_id: str, worker_id: str) -> str:
        """A worker accepts a HIT; returns the AssignmentId. Refuses beyond MaxAssignments or twice."""
        with self.lock:
            hit = self.hits[hit_id]
            mine = [a for a in self.assignments.values() if a["HITId"] == hit_id]
            if any(a["WorkerId"] == worker_id for a in mine):
                raise ValueError("this worker already has an assignment of the HIT")
            if len([a for a in mine if a["AssignmentStatus"] != "Returned"]) >= hit["MaxAssignments"]:
                raise ValueError("no assignment left")
            aid = _id("A3")
            self.assignments[aid] = {"AssignmentId": aid, "WorkerId": worker_id, "HITId": hit_id,
                                     "AssignmentStatus": "Accepted", "AcceptTime": datetime.now(timezone.utc),
                                     "Answer": ""}
            return aid

    def external_submit(self, fields: dict) -> str:
        """The POST to /mturk/externalSubmit: stores the other fields as QuestionFormAnswers."""
        aid = fields.get("assignmentId", "")
        a = self.assignments.get(aid)
        if a is None or a["AssignmentStatus"] != "Accepted":
            raise ValueError(f"assignment {aid!r} cannot be submitted")
        a["Answer"] = answers_xml({k: v for k, v in fields.items() if k != "assignmentId"})
        a["AssignmentStatus"], a["SubmitTime"] = "Submitted", datetime.now(timezone.utc)
        return aid

    def auto_approve(self):
        """What MTurk does when AutoApprovalDelayInSeconds has passed."""
        for a in self.assignments.values():
            if a["AssignmentStatus"] == "Submitted":
                a["AssignmentStatus"] = "Approved"


def fake_client(environment: str) -> FakeMTurk:
    """``settings.MTURK_CLIENT_FACTORY`` for tests: one FakeMTurk per environment."""
    return FAKES.setdefault(environment, FakeMTurk(environment))
