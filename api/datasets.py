"""REST API: datasets (list, detail, upload through the importers), their systems and captions.

``GET /api/datasets/``, ``GET /api/datasets/{name}/``
    every dataset (dataset pages are public), paginated; the detail adds its public systems.
``POST /api/datasets/`` (multipart, staff: :func:`api.base.is_staff`, the upload page's rule)
    import files with the importers the commands use, in the request, all or nothing (the importers
    validate everything first and write in one transaction):

    * ``format=coco``: ``annotations`` (COCO caption annotation JSON: the references), ``results`` +
      ``system`` (a model's COCO results JSON, several entries per image allowed, as system
      ``system``), ``objects`` (object labels), ``references_name``: as ``manage.py import_coco``;
      adds to the dataset ``name`` (created if new).
    * ``format=judgments``: ``file`` (JSON, JSON Lines, CSV or TSV) with ``mapping`` (a JSON object
      of :class:`crowd.importers.judgments.JudgmentMapping`'s fields, e.g. ``{"scores": ["score"]}``)
      and an optional ``references_file``: as ``manage.py import_dataset judgments`` and the upload page.
    * any other format of :data:`crowd.importers.IMPORTERS` (``flickr8k-expert``, ``thumb``...):
      ``archive``, a ``.zip``, ``.tar``, ``.tar.gz`` or ``.tgz`` of the folder ``import_dataset``
      reads (its files at the top or in one folder), and ``options`` (a JSON object, e.g.
      ``{"references": 5}`` for PASCAL-50S).

    Answers 201 (created or changed) or 200 (identical data already imported: imports are idempotent
    by nature) with ``{"dataset", "created", "summary", "counts", "notes", "image_source"}`` and
    ``Location``; 400 with the importer's one-line message (uploaded file names, never the server's
    temporary paths) for a file it refuses; 409 when ``name`` holds other data. Files larger than
    ``IMPORT_MAX_FILE_BYTES`` are refused from their declared size before they are read. An upload
    whose files together exceed ``settings.API_INLINE_IMPORT_BYTES`` is imported by a background
    job instead: 202 with the job (:mod:`api.imports`) and its ``Location``; the job's ``result``
    is the answer above once it is done. The form, the import and the jobs are in :mod:`api.importing`.
``GET /api/datasets/{name}/systems/``
    the dataset's systems public pages show (:func:`api.base.public_systems`), with caption counts.
``GET /api/datasets/{name}/captions/?system=NAME&image=KEY``
    its captions of those systems, paginated, optionally of one system and/or one image.
"""
from __future__ import annotations

from django.conf import settings
from django.db.models import Count
from django.shortcuts import get_object_or_404
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from crowd.models import Caption, Dataset, System

from . import base, imports, importing
from .importing import DatasetSerializer, DatasetUploadSerializer, UploadResultSerializer


class SystemSerializer(serializers.ModelSerializer):
    """A system (a model or the people who wrote captions) of a dataset."""

    captions = serializers.IntegerField(source="n_captions", read_only=True, help_text="number of captions")

    class Meta:
        model = System
        fields = ["id", "name", "kind", "description", "captions"]


class DatasetDetailSerializer(DatasetSerializer):
    """A dataset with its public systems (:func:`api.base.public_systems`)."""

    systems = SystemSerializer(many=True, read_only=True, source="public_systems")

    class Meta(DatasetSerializer.Meta):
        fields = DatasetSerializer.Meta.fields + ["systems"]


class CaptionSerializer(serializers.ModelSerializer):
    """A caption: its image's key, its system's name, its key within (image, system), its text."""

    image = serializers.CharField(source="image.key", read_only=True)
    system = serializers.CharField(source="system.name", read_only=True)

    class Meta:
        model = Caption
        fields = ["id", "image", "system", "key", "text"]


class DatasetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Datasets: read by everybody, imported by staff (module docstring)."""

    lookup_field = "name"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    permission_classes = [base.StaffWritesOrReadOnly]
    serializer_class = DatasetSerializer

    def get_queryset(self):
        return importing.datasets_queryset()

    def get_serializer_class(self):
        return DatasetDetailSerializer if self.action == "retrieve" else DatasetSerializer

    def get_object(self):
        dataset = get_object_or_404(self.get_queryset(), name=self.kwargs["name"])
        if self.action == "retrieve":
            dataset.public_systems = list(
                base.public_systems(dataset).annotate(n_captions=Count("captions")).order_by("name"))
        return dataset

    @extend_schema(request={"multipart/form-data": DatasetUploadSerializer},
                   responses={200: UploadResultSerializer, 201: UploadResultSerializer,
                              202: imports.ImportJobSerializer},
                   summary="Import a dataset (staff)")
    def create(self, request, *args, **kwargs):
        return base.idempotent_write(request, DatasetUploadSerializer, lambda data: self._import(request, data))

    def _import(self, request, data):
        if importing.upload_size(data) > settings.API_INLINE_IMPORT_BYTES:
            job = imports.queue_job(importing.create_job(request.user, data))
            location = reverse("api:import-detail", args=[job.pk])
            return Response(imports.ImportJobSerializer(job).data, status=status.HTTP_202_ACCEPTED,
                            headers={"Location": location, "Retry-After": "2"})
        code, body = importing.import_result(data)
        return Response(body, status=code, headers={"Location": reverse("api:dataset-detail", args=[data["name"]])})

    @extend_schema(responses=SystemSerializer(many=True), summary="The dataset's public systems")
    @action(detail=True, methods=["get"], pagination_class=base.Pagination)
    def systems(self, request, name=None):
        dataset = get_object_or_404(Dataset, name=name)
        qs = base.public_systems(dataset).annotate(n_captions=Count("captions")).order_by("name")
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(SystemSerializer(page, many=True).data)

    @extend_schema(
        responses=CaptionSerializer(many=True), summary="The dataset's captions (public systems)",
        parameters=[OpenApiParameter("system", str, description="only this system's captions (its name)"),
                    OpenApiParameter("image", str, description="only this image's captions (its key)")])
    @action(detail=True, methods=["get"])
    def captions(self, request, name=None):
        dataset = get_object_or_404(Dataset, name=name)
        qs = Caption.objects.filter(system__in=base.public_systems(dataset)).select_related("image", "system")
        system, image = base.text_param(request, "system"), base.text_param(request, "image")
        if system is not None:
            qs = qs.filter(system__name=system)
        if image is not None:
            qs = qs.filter(image__key=image)
        page = self.paginate_queryset(qs.order_by("pk"))
        return self.get_paginated_response(CaptionSerializer(page, many=True).data)


def register(router) -> None:
    """Add ``datasets`` (and its ``systems``/``captions`` routes) to the API router."""
    router.register("datasets", DatasetViewSet, basename="dataset")
