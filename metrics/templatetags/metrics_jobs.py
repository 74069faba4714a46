"""``{% load metrics_jobs %}{% compute_panel dataset %}``: the dataset page's "Compute metrics" form
(templates/metrics/_compute_panel.html), shown only to users who may start runs
(:func:`metrics.jobs.can_compute`); others see nothing."""
from django import template

from metrics import jobs
from captioneval.metrics.registry import DEFAULT_METRICS, UNAVAILABLE

register = template.Library()


@register.inclusion_tag("metrics/_compute_panel.html", takes_context=True)
def compute_panel(context, dataset):
    """Context of the panel: the offered metrics (checkboxes; the COCO metrics not yet done are
    ticked), the refused ones with their one-line reasons, the CSRF token and whether jobs run in
    this server's background (no broker) or on Celery workers."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not jobs.can_compute(user, dataset):
        return {"show": False}
    offered, refused = jobs.metric_choices(dataset)
    refused = [m for m in refused if m["key"] not in UNAVAILABLE]  # the dataset page lists those already
    for m in offered:
        m["checked"] = m["key"] in DEFAULT_METRICS and m["status"] != "done"
    levels = []
    for level, title in (("caption", "per caption"), ("set", "per caption set (diversity)"), ("system", "per system (lexical)")):
        items = [m for m in offered if m["level"] == level]
        if items:
            levels.append({"level": level, "title": title, "metrics": items})
    return {"show": True, "dataset": dataset, "levels": levels, "refused": refused,
            "csrf_token": context.get("csrf_token"), "in_process": jobs.in_process(),
            "open": not any(m["status"] == "done" for m in offered)}
