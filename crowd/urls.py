"""URLs of the human side: rater pages under /rate/, owner pages under /campaigns/."""
from django.urls import path

from .views import mturk, mturk_owner, owner, rater

app_name = "crowd"
urlpatterns = [
    # raters
    path("rate/", rater.home, name="rater-home"),
    path("rate/join/<str:token>/", rater.join, name="join"),
    path("rate/<slug:name>/", rater.next_task, name="next"),
    path("rate/<slug:name>/accept/", rater.accept, name="accept"),
    path("rate/<slug:name>/task/<int:pk>/", rater.task, name="task"),
    path("rate/<slug:name>/task/<int:pk>/submit/", rater.submit, name="submit"),
    path("rate/<slug:name>/task/<int:pk>/return/", rater.return_task, name="return"),
    # MTurk workers (ExternalQuestion pages, inside MTurk's frame)
    path("mturk/<slug:name>/item/<int:item_pk>/", mturk.task, name="mturk-task"),
    path("mturk/<slug:name>/item/<int:item_pk>/submit/", mturk.submit, name="mturk-submit"),
    # owners
    path("campaigns/", owner.campaign_list, name="campaigns"),
    path("campaigns/new/", owner.campaign_new, name="campaign-new"),
    path("campaigns/<slug:name>/", owner.campaign_detail, name="campaign"),
    path("campaigns/<slug:name>/report.json", owner.campaign_report_json, name="campaign-report"),
    path("campaigns/<slug:name>/correlations/<slug:criterion>.png", owner.correlation_chart, name="campaign-chart"),
    path("campaigns/<slug:name>/state/", owner.campaign_state, name="campaign-state"),
    path("campaigns/<slug:name>/invite/", owner.campaign_invite, name="campaign-invite"),
    path("campaigns/<slug:name>/aggregate.csv", owner.campaign_aggregate, name="campaign-aggregate"),
    path("campaigns/<slug:name>/judgments.<str:fmt>", owner.campaign_export, name="campaign-export"),
    path("campaigns/<slug:name>/mturk/", mturk_owner.page, name="mturk"),
    path("campaigns/<slug:name>/mturk/<slug:action>/", mturk_owner.action, name="mturk-action"),
    path("campaigns/<slug:name>/mturk/batch/<int:pk>/<str:filename>", mturk_owner.batch_file, name="mturk-batch-file"),
]
