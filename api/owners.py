"""REST resources of co-owner invitations (:mod:`crowd.owners`): an owner invites a user name to
co-own a campaign, the user of that name accepts or declines.

===================================================  ======  ====================================================
resource                                             method  what
===================================================  ======  ====================================================
``/api/campaigns/<name>/owner-invitations/``         GET     the campaign's invitations (its owners; newest first; paginated)
``/api/campaigns/<name>/owner-invitations/``         POST    ``{"username"}``: invite that name (201; an open one: 200)
``/api/campaigns/<name>/owner-invitations/<id>/``    DELETE  revoke an open invitation (200 with it)
``/api/owner-invitations/``                          GET     the open invitations addressed to you (paginated)
``/api/owner-invitations/<id>/accept/``              POST    accept: you become an owner of its campaign
``/api/owner-invitations/<id>/decline/``             POST    decline it
===================================================  ======  ====================================================

The campaign's resources follow the campaign's rule (:func:`api.base.owned_campaign`: owners and
superusers; 404 for anyone else, 401 anonymous). Inviting answers the same for a name that has an
account and one that has none (nothing tells them apart: :func:`crowd.owners.invite`); refused are
an empty or over-long name, your own name or an owner's (400), and more than
:data:`crowd.owners.MAX_PENDING` open invitations (400). An invitation addressed to someone else
answers 404 exactly as a missing one; accepting or declining one that is no longer open
(accepted, declined, revoked, expired) is 409. Writes honour ``Idempotency-Key``.
"""
from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from crowd import engine, owners
from crowd.models import OwnerInvitation

from .base import ProblemSerializer, idempotent, idempotent_write, owned_campaign
from .campaigns import NAME


class Invitation(serializers.Serializer):
    """One co-owner invitation of a campaign, as its owners see it."""

    id = serializers.IntegerField()
    campaign = serializers.CharField(help_text="the campaign's name")
    username = serializers.CharField(help_text="the invited user name, as typed")
    invited_by = serializers.CharField(allow_blank=True, help_text="the owner who invited (empty: a deleted account)")
    state = serializers.ChoiceField(choices=[s for s, _ in OwnerInvitation.STATES])
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    answered_at = serializers.DateTimeField(allow_null=True, help_text="when it was accepted, declined, revoked "
                                                                        "or expired")


class ReceivedInvitation(serializers.Serializer):
    """An open invitation addressed to you."""

    id = serializers.IntegerField()
    campaign = serializers.CharField(help_text="the campaign's name")
    title = serializers.CharField(allow_blank=True)
    invited_by = serializers.CharField(allow_blank=True)
    expires_at = serializers.DateTimeField()
    accept_url = serializers.URLField()
    decline_url = serializers.URLField()


class Answered(serializers.Serializer):
    """The answer to accepting or declining an invitation."""

    id = serializers.IntegerField()
    campaign = serializers.CharField()
    state = serializers.ChoiceField(choices=[OwnerInvitation.ACCEPTED, OwnerInvitation.DECLINED])
    campaign_url = serializers.URLField(allow_null=True, help_text="the campaign's resource (null when declined)")


class InviteOwner(serializers.Serializer):
    """Whom to invite: a user name (whether it has an account is not checked)."""

    username = serializers.CharField(max_length=owners.MAX_USERNAME, trim_whitespace=True)


class InvitationClosed(exceptions.APIException):
    status_code = 409
    default_detail = "this invitation is no longer open"
    default_code = "invitation_closed"


def _invited_by(row: OwnerInvitation) -> str:
    return row.invited_by.get_username() if row.invited_by_id else ""


def invitation_of(row: OwnerInvitation) -> dict:
    """The :class:`Invitation` of ``row`` (JSON types, so that an idempotent write can store it)."""
    return Invitation({
        "id": row.pk, "campaign": row.campaign.name, "username": row.username, "invited_by": _invited_by(row),
        "state": row.state, "created_at": row.created_at, "expires_at": row.expires_at,
        "answered_at": row.answered_at}).data


def refused(exc: engine.EngineError, field: str = "username") -> exceptions.APIException:
    """The API error of an :class:`crowd.engine.EngineError` from :mod:`crowd.owners`: 404 for no
    such invitation, 409 for one no longer open, else 400 naming ``field``."""
    if exc.status == 404:
        return exceptions.NotFound(str(exc))
    if exc.status == 409:
        return InvitationClosed(str(exc))
    return exceptions.ValidationError({field: [str(exc)]})


class CampaignOwnerInvitationViewSet(viewsets.GenericViewSet):
    """The co-owner invitations of one campaign, for its owners (see the module docstring)."""

    permission_classes = [permissions.AllowAny]  # owned_campaign: 401 anonymous, 404 not an owner
    lookup_value_regex = "[0-9]+"
    serializer_class = Invitation

    @extend_schema(summary="A campaign's co-owner invitations", responses={200: Invitation(many=True)},
                   description="Every invitation of the campaign, newest first (owners and superusers only).")
    def list(self, request, name=None):
        campaign = owned_campaign(request, name)
        page = self.paginate_queryset(owners.invitations(campaign))
        return self.get_paginated_response([invitation_of(row) for row in page])

    @extend_schema(summary="Invite a co-owner", request=InviteOwner,
                   description="Invite a user name to co-own the campaign; they become an owner when they accept "
                               "(POST /api/owner-invitations/<id>/accept/). The answer is the same whether or not "
                               "an account of that name exists. An open invitation of that name: 200 with it.",
                   responses={201: Invitation, 200: Invitation})
    def create(self, request, name=None):
        campaign = owned_campaign(request, name)

        def write(data):
            before = set(campaign.owner_invitations.filter(state=OwnerInvitation.PENDING).values_list("pk", flat=True))
            try:
                row = owners.invite(campaign, data["username"], request.user)
            except engine.EngineError as exc:
                raise refused(exc) from None
            return Response(invitation_of(row), status=200 if row.pk in before else 201)

        return idempotent_write(request, InviteOwner, write)

    @extend_schema(summary="Revoke a co-owner invitation", request=None, responses={
        200: Invitation, 409: OpenApiResponse(ProblemSerializer, description="no longer open")})
    def destroy(self, request, name=None, pk=None):
        campaign = owned_campaign(request, name)

        def write():
            try:
                return Response(invitation_of(owners.revoke(campaign, pk, request.user)))
            except engine.EngineError as exc:
                raise refused(exc, "non_field_errors") from None

        return idempotent(request, write)


class OwnerInvitationViewSet(viewsets.GenericViewSet):
    """The open co-owner invitations addressed to the requesting user (see the module docstring)."""

    permission_classes = [permissions.IsAuthenticated]
    lookup_value_regex = "[0-9]+"
    serializer_class = ReceivedInvitation

    @extend_schema(summary="Invitations to co-own", responses={200: ReceivedInvitation(many=True)},
                   description="The open invitations addressed to your user name, newest first.")
    def list(self, request):
        rows = []
        for row in self.paginate_queryset(owners.pending_for(request.user)):
            rows.append({"id": row.pk, "campaign": row.campaign.name, "title": row.campaign.title,
                         "invited_by": _invited_by(row), "expires_at": row.expires_at,
                         "accept_url": request.build_absolute_uri(reverse("api:owner-invitation-accept", args=[row.pk])),
                         "decline_url": request.build_absolute_uri(reverse("api:owner-invitation-decline",
                                                                           args=[row.pk]))})
        return self.get_paginated_response(ReceivedInvitation(rows, many=True).data)

    def _answer(self, request, pk, answer):
        def write():
            try:
                row = answer(pk, request.user)
            except engine.EngineError as exc:
                raise refused(exc, "non_field_errors") from None
            url = (request.build_absolute_uri(reverse("api:campaign-detail", args=[row.campaign.name]))
                   if row.state == OwnerInvitation.ACCEPTED else None)
            return Response(Answered({"id": row.pk, "campaign": row.campaign.name, "state": row.state,
                                      "campaign_url": url}).data)

        return idempotent(request, write)

    @extend_schema(summary="Accept an invitation to co-own", request=None, responses={
        200: Answered, 409: OpenApiResponse(ProblemSerializer, description="no longer open")},
        description="You become an owner of the campaign. Someone else's invitation: 404, as a missing one.")
    @action(detail=True, methods=["post"], url_path="accept", url_name="accept")
    def accept(self, request, pk=None):
        return self._answer(request, pk, owners.accept)

    @extend_schema(summary="Decline an invitation to co-own", request=None, responses={
        200: Answered, 409: OpenApiResponse(ProblemSerializer, description="no longer open")})
    @action(detail=True, methods=["post"], url_path="decline", url_name="decline")
    def decline(self, request, pk=None):
        return self._answer(request, pk, owners.decline)


def register(router) -> None:
    """Add the invitations of a campaign (under ``campaigns/<name>/owner-invitations/``) and those
    addressed to the user (under ``owner-invitations/``) to the API router (:mod:`api.urls`)."""
    router.register(f"campaigns/(?P<name>{NAME})/owner-invitations", CampaignOwnerInvitationViewSet,
                    basename="campaign-owner-invitation")
    router.register("owner-invitations", OwnerInvitationViewSet, basename="owner-invitation")
