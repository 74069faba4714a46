"""The ``crowd`` URL namespace: the crowd app's pages (:mod:`crowd.urls`) plus the campaign report
pages, which live in analysis (:mod:`analysis.campaign_views`) because crowd does not import
analysis. Included by :mod:`evalsite.urls` in place of ``crowd.urls``, so every URL and name
(``crowd:campaign``, ``crowd:campaign-report``, ``crowd:campaign-chart``...) is unchanged."""
from django.urls import path

from crowd.urls import urlpatterns as crowd_urlpatterns

from . import campaign_list, campaign_views
from .limits import report_request

app_name = "crowd"
urlpatterns = [
    *crowd_urlpatterns,  # first: its "campaigns/new/" must win over "campaigns/<slug:name>/"
    path("campaigns/", campaign_list.campaign_list, name="campaigns"),
    # the owners' report pages count against the report rate limit and the cap on concurrent computations
    # (analysis.limits): refused at the cap, the console still shows, with the previous report, as a 503
    path("campaigns/<slug:name>/", report_request(campaign_views.campaign_detail), name="campaign"),
    path("campaigns/<slug:name>/report.json", report_request(campaign_views.campaign_report_json), name="campaign-report"),
    path("campaigns/<slug:name>/correlations/<slug:criterion>.png", report_request(campaign_views.correlation_chart),
         name="campaign-chart"),
]
