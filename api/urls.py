"""URLs of the REST API under ``/api/``: one DRF router, to which every resource module adds its
viewsets with ``register(router)`` (datasets, systems and captions: :mod:`api.datasets`; metric runs:
:mod:`api.runs`; reports: :mod:`api.reports`; campaigns: :mod:`api.campaigns`; co-owner invitations:
:mod:`api.owners`), the OpenAPI 3 schema
at ``/api/schema/`` and Swagger UI at ``/api/docs/`` (drf-spectacular; its files come from
drf-spectacular-sidecar under ``/static/``, never from a CDN). Any other path under ``/api/``
answers 404 as a problem document (:func:`api.base.not_found`)."""
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from . import base, campaigns, datasets, imports, owners, reports, runs

#: the resource modules, in the order their routes are tried
RESOURCES = (datasets, imports, runs, reports, campaigns, owners)

app_name = "api"  # reverse("api:dataset-detail", ...), reverse("api:schema")
router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
for module in RESOURCES:
    module.register(router)

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api:schema"), name="docs"),
    path("", include(router.urls)),
    re_path(r"^[\s\S]*$", base.not_found, name="not-found"),
]
