"""``/reports/<id>/status.json``: the state of one stored report (:class:`analysis.models.Report`),
polled by the progress bar of templates/analysis/computing.html while the report is computed.

Answers ``{"id", "kind", "status", "percent", "elapsed", "last_seconds", "error", "refresh"}``:
``status`` pending | running | done | failed; ``percent`` an estimate in [0, 95] from the duration of
the last computation of the same subject and parameters (None when there is none, or not running);
``elapsed`` and ``last_seconds`` in seconds; ``refresh`` the seconds to wait before asking again
(None once done or failed). Reading it never queues or computes anything. A campaign's report
is seen by whoever sees the campaign (:func:`crowd.privacy.visible_campaigns`: its owners and
superusers; plain staff users are no exception): others get 404, as on the campaign's owner pages,
the same answer as for an id that names no report (so ids cannot be probed: the API's problem
document says "no such report" for both).
"""
from django.http import Http404, JsonResponse
from django.views.decorators.http import require_GET

from crowd.privacy import visible_campaigns

from .models import Report
from .tasks import computing_context, latest_done


@require_GET
def report_status(request, pk):
    """The status JSON of report ``pk`` (see the module docstring); Http404 ("no such report", the
    same for both) for an unknown report or a campaign report of a campaign the user may not see."""
    row = Report.objects.filter(pk=pk).first()
    if row is None or (row.campaign_id is not None
                       and not visible_campaigns(request.user).filter(pk=row.campaign_id).exists()):
        raise Http404("no such report")
    subject = {f: getattr(row, f) for f in ("campaign", "dataset", "image") if getattr(row, f + "_id") is not None}
    previous = latest_done(row.kind, row.params, **subject) if row.status != Report.DONE else None
    context = computing_context(row, previous)
    if row.status == Report.DONE:
        context.update(percent=100.0, refresh=None, elapsed=row.seconds or 0.0)
    return JsonResponse({"kind": row.kind, **context})
