"""URLs of the human side: rater pages under /rate/, owner pages under /campaigns/.

The campaign report pages (``campaign``, ``campaign-report``, ``campaign-chart``) and the campaign
list (``campaigns``, which reads stored reports) belong to the same ``crowd`` namespace but live in
analysis (crowd does not import analysis): the project's URLconf includes
:mod:`analysis.campaign_urls`, which is these patterns plus those four."""
from django.urls import path

from .views import images, judgments_upload, mturk, mturk_owner, owner, rater
from .views import journey as journey_views
from .views import prolific as prolific_views

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
    # the participant journey (crowd.views.journey): Prolific arrival, consent, instructions, practice, bundle, end
    path("prolific/<slug:name>/", journey_views.prolific_start, name="prolific-start"),
    path("session/<slug:name>/", journey_views.session_page, name="session"),
    path("session/<slug:name>/consent/", journey_views.consent, name="session-consent"),
    path("session/<slug:name>/instructions/", journey_views.instructions, name="session-instructions"),
    path("session/<slug:name>/practice/", journey_views.practice, name="session-practice"),
    path("session/<slug:name>/task/<int:pk>/", journey_views.session_task, name="session-task"),
    path("session/<slug:name>/task/<int:pk>/submit/", journey_views.session_submit, name="session-submit"),
    path("session/<slug:name>/done/", journey_views.session_done, name="session-done"),
    path("campaigns/<slug:name>/participants/", journey_views.campaign_participants, name="campaign-participants"),
    # MTurk workers (ExternalQuestion pages, inside MTurk's frame)
    path("mturk/<slug:name>/item/<int:item_pk>/", mturk.task, name="mturk-task"),
    path("mturk/<slug:name>/item/<int:item_pk>/submit/", mturk.submit, name="mturk-submit"),
    # owners
    # (the campaign list "campaigns/" reads stored reports: analysis.campaign_urls)
    path("campaigns/new/", owner.campaign_new, name="campaign-new"),
    path("campaigns/<slug:name>/state/", owner.campaign_state, name="campaign-state"),
    path("campaigns/<slug:name>/invite/", owner.campaign_invite, name="campaign-invite"),
    path("campaigns/<slug:name>/publish-results/", owner.campaign_publish_results, name="campaign-publish-results"),
    path("campaigns/<slug:name>/unpublish-results/", owner.campaign_unpublish_results,
         name="campaign-unpublish-results"),
    path("campaigns/<slug:name>/invitations/", owner.campaign_invitations, name="campaign-invitations"),
    path("campaigns/<slug:name>/owners/", owner.campaign_owners, name="campaign-owners"),
    path("campaigns/co-owner-invitations/<int:pk>/", owner.owner_invitation_answer, name="owner-invitation-answer"),
    path("campaigns/<slug:name>/workers/", owner.campaign_workers, name="campaign-workers"),
    path("campaigns/<slug:name>/status.json", owner.campaign_status, name="campaign-status"),
    path("campaigns/<slug:name>/preview/", owner.campaign_preview, name="campaign-preview"),
    path("campaigns/<slug:name>/aggregate.csv", owner.campaign_aggregate, name="campaign-aggregate"),
    path("campaigns/<slug:name>/judgments.<str:fmt>", owner.campaign_export, name="campaign-export"),
    path("campaigns/<slug:name>/mturk/", mturk_owner.page, name="mturk"),
    path("campaigns/<slug:name>/mturk/<slug:action>/", mturk_owner.action, name="mturk-action"),
    path("campaigns/<slug:name>/mturk/batch/<int:pk>/<str:filename>", mturk_owner.batch_file, name="mturk-batch-file"),
    # Prolific (crowd.views.prolific): its signed webhooks, the owner's page and its actions
    path("prolific-hooks/", prolific_views.webhook, name="prolific-webhook"),
    path("campaigns/<slug:name>/prolific/", prolific_views.page, name="campaign-prolific"),
    path("campaigns/<slug:name>/prolific/<slug:action>/", prolific_views.action, name="campaign-prolific-action"),
    # pictures (crowd.images): local/uploaded files, staff uploads, the owner's image URL check
    path("datasets/<slug:name>/image-files/<path:key>", images.image_file, name="image-file"),
    path("datasets/<slug:name>/image-upload/", images.image_upload, name="image-upload"),
    path("campaigns/<slug:name>/images/", images.image_check, name="image-check"),
    # bring-your-own benchmarks: the staff upload of a judgment file, the re-importable export of a dataset
    path("judgments/upload/", judgments_upload.judgments_upload, name="judgments-upload"),
    path("datasets/<slug:name>/export.<str:fmt>", judgments_upload.dataset_export, name="dataset-export"),
]
