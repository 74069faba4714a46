"""Co-owners of a campaign: an owner invites a user name, that user accepts (or declines).

A campaign's owners see and run everything about it (:func:`crowd.privacy.visible_campaigns`), so
nobody becomes an owner by another's say alone: an owner invites a user name
(:func:`invite`, the campaign page's *Co-owners* form and ``POST
/api/campaigns/<name>/owner-invitations/``), and the user of that name, logged in, accepts it
(:func:`accept`: the campaign list's *Invitations to co-own* and ``POST
/api/owner-invitations/<id>/accept/``) or declines it (:func:`decline`). A superuser may still set
owners directly (the admin, ``create_campaign --owner``, ``owners`` in ``POST /api/campaigns/``).

User names cannot be probed: :func:`invite` never looks the name up. It stores the name as typed
(:class:`crowd.models.OwnerInvitation`) and answers the same for a name that has an account and one
that has none; only the user of that name ever sees the invitation. An invitation expires after
:data:`INVITATION_DAYS`; inviting a name again while one is open answers that one. A campaign holds
at most :data:`MAX_PENDING` open invitations. Every step is written to the campaign's audit trail
(``owner-invite``, ``owner-revoke``, ``owner-accept``, ``owner-decline``).
"""
from __future__ import annotations

from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from . import audit, engine
from .models import Campaign, OwnerInvitation

#: days an invitation stays open
INVITATION_DAYS = 14
#: open invitations a campaign may hold at once
MAX_PENDING = 20
#: the longest user name accepted (Django's ``User.username``)
MAX_USERNAME = 150


class InvitationError(engine.EngineError):
    """An invitation refused (400; nothing changed); ``code`` as :class:`crowd.engine.EngineError`."""


class NoSuchInvitation(InvitationError):
    """No such invitation for this campaign or this user (404): missing and someone else's alike."""

    status = 404


def check_username(username) -> str:
    """``username`` stripped; :class:`InvitationError` for an empty one, one over
    :data:`MAX_USERNAME` characters or one holding a control character. Says nothing of whether an
    account of that name exists."""
    name = str(username or "").strip()
    if not name:
        raise InvitationError("give the user name to invite", "invalid")
    if len(name) > MAX_USERNAME or any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise InvitationError(f"a user name has 1-{MAX_USERNAME} characters and no control character", "invalid")
    return name


def _expire(campaign: Campaign | None = None) -> None:
    """Close the pending invitations (of ``campaign``, or all) whose time is over: they become
    ``expired`` (answered when they expired), which frees their user name for a new invitation."""
    rows = OwnerInvitation.objects.filter(state=OwnerInvitation.PENDING, expires_at__lte=timezone.now())
    if campaign is not None:
        rows = rows.filter(campaign=campaign)
    for row in rows:
        OwnerInvitation.objects.filter(pk=row.pk, state=OwnerInvitation.PENDING).update(
            state=OwnerInvitation.EXPIRED, answered_at=row.expires_at)


def invite(campaign: Campaign, username, user) -> OwnerInvitation:
    """Invite ``username`` to co-own ``campaign`` on behalf of its owner ``user``; returns the open
    invitation (the one already open for that name, if any, unchanged). Raises
    :class:`InvitationError` (nothing changed) for an invalid name, the inviter's own name or a name
    already among the owners (both known to the inviter, so no leak), or more than
    :data:`MAX_PENDING` open invitations. Whether an account of that name exists is never checked."""
    name = check_username(username)
    if name == user.get_username():
        raise InvitationError("you own this campaign already", "owner")
    if campaign.owners.filter(username=name).exists():
        raise InvitationError(f"{name!r} is an owner of this campaign already", "owner")
    _expire(campaign)
    open_ = OwnerInvitation.objects.filter(campaign=campaign, username=name, state=OwnerInvitation.PENDING).first()
    if open_ is not None:
        return open_
    if OwnerInvitation.objects.filter(campaign=campaign, state=OwnerInvitation.PENDING).count() >= MAX_PENDING:
        raise InvitationError(f"this campaign has {MAX_PENDING} open invitations already: revoke some first",
                              "too-many")
    now = timezone.now()
    try:
        with transaction.atomic():
            row = OwnerInvitation.objects.create(campaign=campaign, username=name, invited_by=user, created_at=now,
                                                 expires_at=now + timedelta(days=INVITATION_DAYS))
            audit.record(campaign, user, "owner-invite", target=name, detail={"expires": f"{row.expires_at:%Y-%m-%d}"})
    except IntegrityError:  # the same name invited by a concurrent request
        return OwnerInvitation.objects.get(campaign=campaign, username=name, state=OwnerInvitation.PENDING)
    return row


def invitations(campaign: Campaign) -> list[OwnerInvitation]:
    """Every invitation of ``campaign``, newest first (expired ones closed first), for its owners."""
    _expire(campaign)
    return list(OwnerInvitation.objects.filter(campaign=campaign).select_related("invited_by"))


def revoke(campaign: Campaign, pk, user) -> OwnerInvitation:
    """Revoke the open invitation ``pk`` of ``campaign`` (its owner ``user``). Raises
    :class:`NoSuchInvitation` for an invitation of another campaign or a missing one,
    :class:`crowd.engine.Conflict` for one no longer open (nothing changed)."""
    with transaction.atomic():
        row = OwnerInvitation.objects.select_for_update().filter(campaign=campaign, pk=_pk(pk)).first()
        if row is None:
            raise NoSuchInvitation("no such invitation in this campaign", "unknown")
        if not row.is_open:
            raise engine.Conflict(f"this invitation is {_state(row)} already", "closed")
        row.state, row.answered_at = OwnerInvitation.REVOKED, timezone.now()
        row.save(update_fields=["state", "answered_at"])
        audit.record(campaign, user, "owner-revoke", target=row.username)
    return row


def pending_for(user) -> list[OwnerInvitation]:
    """The open invitations addressed to ``user``'s name, newest first (none for an anonymous user)."""
    if not (user and user.is_authenticated):
        return []
    _expire()
    return list(OwnerInvitation.objects.filter(username=user.get_username(), state=OwnerInvitation.PENDING)
                .select_related("campaign", "invited_by"))


def _pk(pk) -> int:
    try:
        return int(pk)
    except (TypeError, ValueError):
        return 0


def _state(row: OwnerInvitation) -> str:
    return OwnerInvitation.EXPIRED if row.state == OwnerInvitation.PENDING else row.state


def _answer(pk, user, state: str) -> OwnerInvitation:
    """Set the open invitation ``pk`` addressed to ``user`` to ``state`` (accepted: ``user`` becomes
    an owner) and record it. An invitation addressed to someone else raises the same
    :class:`NoSuchInvitation` as a missing one; one no longer open raises :class:`crowd.engine.Conflict`."""
    with transaction.atomic():
        row = (OwnerInvitation.objects.select_for_update().select_related("campaign")
               .filter(pk=_pk(pk), username=user.get_username()).first() if user.is_authenticated else None)
        if row is None:
            raise NoSuchInvitation("no such invitation", "unknown")
        if not row.is_open:
            raise engine.Conflict(f"this invitation is {_state(row)}", "closed")
        row.state, row.answered_at = state, timezone.now()
        row.save(update_fields=["state", "answered_at"])
        if state == OwnerInvitation.ACCEPTED:
            row.campaign.owners.add(user)
        audit.record(row.campaign, user, "owner-accept" if state == OwnerInvitation.ACCEPTED else "owner-decline",
                     target=user.get_username())
    return row


def accept(pk, user) -> OwnerInvitation:
    """``user`` accepts the open invitation ``pk`` addressed to their user name and becomes an owner
    of its campaign. Raises :class:`NoSuchInvitation` (missing, or addressed to another name: the same
    answer) or :class:`crowd.engine.Conflict` (accepted, declined, revoked or expired)."""
    return _answer(pk, user, OwnerInvitation.ACCEPTED)


def decline(pk, user) -> OwnerInvitation:
    """``user`` declines the open invitation ``pk`` addressed to them; errors as :func:`accept`."""
    return _answer(pk, user, OwnerInvitation.DECLINED)
