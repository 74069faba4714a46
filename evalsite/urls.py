"""URL configuration: the dashboard at /, campaigns at /campaigns/, rater pages at /rate/,
login at /accounts/, Django's admin at /admin/, the REST API at /api/ (docs/api.md)."""
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("api.urls")),
    path("accounts/", include("api.account")),  # the API token page (/accounts/api-token/)
    path("accounts/", include("crowd.accounts")),  # django.contrib.auth.urls' routes; reset only with e-mail
    path("", include("analysis.campaign_urls")),  # the crowd namespace: crowd.urls + the campaign report pages
    path("", include("analysis.urls")),
    path("", include("metrics.urls")),
]

handler500 = "evalsite.middleware.server_error"
