"""The signed token that binds an answer MTurk stores to the assignment our page opened.

Our ExternalQuestion page forwards every answer to MTurk's ``externalSubmit`` with a field
``ce_token``: a Django-signed value (HMAC with the site's ``SECRET_KEY``, :mod:`django.core.signing`)
naming our assignment row, the MTurk AssignmentId and the WorkerId it was opened for. Only this
server can make one. When the collector finds that field in the answer MTurk stored for an
assignment MTurk lists for that worker and HIT, the work is known to have gone through our page
for that very assignment, and the claim is confirmed (:mod:`crowd.mturk.collect`).
"""
from __future__ import annotations

from django.core import signing

SALT = "crowd.mturk.answer"
FIELD = "ce_token"


def issue(assignment) -> str:
    """The token forwarded to MTurk with ``assignment``'s answer."""
    return signing.dumps({"a": assignment.pk, "ref": assignment.provider_ref, "w": assignment.worker.external_id},
                         salt=SALT)


def matches(token: str, assignment, *, assignment_id: str, worker_id: str) -> bool:
    """Whether ``token`` was issued by us for ``assignment`` and names the AssignmentId and WorkerId
    MTurk lists for it. A missing, tampered or foreign token is False (never an exception)."""
    try:
        claims = signing.loads(token or "", salt=SALT)
    except signing.BadSignature:
        return False
    return (isinstance(claims, dict) and claims.get("a") == assignment.pk
            and claims.get("ref") == assignment.provider_ref == assignment_id
            and claims.get("w") == worker_id == assignment.worker.external_id)
