"""URL configuration: the dashboard at /, campaigns at /campaigns/, rater pages at /rate/,
login at /accounts/, Django's admin at /admin/."""
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("crowd.accounts")),  # django.contrib.auth.urls' routes; reset only with e-mail
    path("", include("analysis.campaign_urls")),  # the crowd namespace: crowd.urls + the campaign report pages
    path("", include("analysis.urls")),
    path("", include("metrics.urls")),
]

handler500 = "evalsite.middleware.server_error"
