"""Dashboard pages for caption-set diversity (Wang & Chan 2019): the per-dataset diversity page
(summary table, diversity-accuracy scatter, F-score bars, vocabulary and word-frequency curves,
downloads) and the per-image page (caption sets, Self-CIDEr / LSA, radar charts, MDS map). The
per-image view tokenises captions and builds document frequencies, so it is computed once by a
Celery task and read by the page and its charts (:mod:`analysis.cached_reports`).

Query parameters: ``m`` (captions per set of the runs to show; default all) and ``beta2`` (F-score
weight; default 5 as in the paper).
"""
import hashlib
import json

from django.core.cache import cache
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from crowd.models import Dataset, Image
from crowd.privacy import private_system_ids
from captioneval.utils import csvsafe
from metrics.models import SetScore

from . import cached_reports, plots
from .diversity import DEFAULT_BETA2, diversity_summary, find_run, word_frequency_curves
from .explorer import image_captions
from .models import Report
from .reports import ReportError
from .tasks import REFRESH_SECONDS, computing_context, request_report

SUMMARY_COLUMNS = ["system", "kind", "is_reference", "n_sets", "self_cider", "lsa", "mbleu_4", "mbleu_mix",
                   "set_accuracy", "f_score", "vocabulary"]


def diversity_options(request) -> tuple[int | None, float]:
    """(m, beta2) of the query string of ``request``: ``m`` the number of captions per set of the
    runs to show (an int >= 2, or None for all: parameter absent, empty or ``all``), ``beta2`` the
    F-score weight (a float > 0, default :data:`analysis.diversity.DEFAULT_BETA2`, 5 as in Wang &
    Chan 2019). Used by the diversity pages and the API.

    Raises Http404 (the pages answer 404, the API 400 naming the parameter) for an ``m`` that is not
    an integer or below 2, or a ``beta2`` that is not a number or not above 0."""
    try:
        m = request.GET.get("m")
        m = int(m) if m not in (None, "", "all") else None
        beta2 = float(request.GET.get("beta2", DEFAULT_BETA2))
    except ValueError:
        raise Http404("m must be an integer and beta2 a number")
    if (m is not None and m < 2) or not beta2 > 0:
        raise Http404("m must be >= 2 and beta2 > 0")
    return m, beta2


def _summary_or_404(name, request):
    dataset = get_object_or_404(Dataset, name=name)
    m, beta2 = diversity_options(request)
    try:
        return dataset, diversity_summary(dataset.name, m=m, beta2=beta2)
    except ReportError as exc:
        raise Http404(str(exc))


@require_GET
def diversity_page(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    m, beta2 = diversity_options(request)
    try:
        summary, problem = diversity_summary(dataset.name, m=m, beta2=beta2), None
    except ReportError as exc:
        summary, problem = None, str(exc)
    images = []
    if summary:
        run = find_run(dataset, "self_cider", m) or find_run(dataset, "lsa", m)
        if run is not None:
            images = list(
                Image.objects.filter(dataset=dataset, id__in=SetScore.objects.filter(run=run).values("image_id"))
                .order_by("key").values_list("key", flat=True)[:60]
            )
    has_vocabulary = find_run(dataset, "vocabulary") is not None
    query = request.GET.urlencode()
    return render(request, "analysis/diversity.html", {
        "dataset": dataset, "summary": summary, "problem": problem, "images": images, "m": m, "beta2": beta2,
        "query": f"?{query}" if query else "", "has_vocabulary": has_vocabulary,
        # the diversity-accuracy chart and the F-score need the accuracy run: without it they would be empty
        "has_accuracy": bool(summary) and any(r.get("set_accuracy") is not None for r in summary["systems"]),
        "lexical": [k for k in ("ttr", "root_ttr", "log_ttr", "hdd", "mtld") if summary and k in summary["runs"]],
    })


@require_GET
def diversity_json(request, name):
    dataset, summary = _summary_or_404(name, request)
    response = JsonResponse(summary, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{dataset.name}-diversity.json"'
    return response


@require_GET
def diversity_csv(request, name):
    dataset, summary = _summary_or_404(name, request)
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{dataset.name}-diversity.csv"'
    extra = sorted({k for row in summary["systems"] for k in row} - set(SUMMARY_COLUMNS))
    writer = csvsafe.writer(response)
    writer.writerow(SUMMARY_COLUMNS + extra)
    for row in summary["systems"]:
        writer.writerow(["" if row.get(k) is None else row.get(k) for k in SUMMARY_COLUMNS + extra])
    return response


def _chart(kind: str, data, draw, fmt: str = "png") -> HttpResponse:
    """A figure (``fmt``: png, svg or pdf) drawn by ``draw()`` from ``data`` (JSON-serialisable:
    exactly what the chart shows), kept in the cache under the SHA-256 of that data, so an
    unchanged chart is drawn once. SVG and PDF are downloads (figures for papers)."""
    key = f"diversity-chart:{kind}:{fmt}:" + hashlib.sha256(json.dumps(data, default=str).encode()).hexdigest()
    png = cache.get(key)
    if png is None:
        png = draw()
        cache.set(key, png, 3600)
    response = HttpResponse(png, content_type=plots.FORMATS[fmt])
    if fmt != "png":
        response["Content-Disposition"] = f'attachment; filename="diversity-{kind}.{fmt}"'
    return response


@require_GET
def scatter_png(request, name, fmt="png"):
    _, summary = _summary_or_404(name, request)
    points = [(r["system"], r["self_cider"], r["set_accuracy"]) for r in summary["systems"]]
    return _chart("scatter", points, lambda: plots.diversity_accuracy_png(points, fmt=fmt), fmt)


@require_GET
def f_score_png(request, name, fmt="png"):
    _, summary = _summary_or_404(name, request)
    rows = [r for r in summary["systems"] if r["f_score"] is not None]
    names, values = [r["system"] for r in rows], [r["f_score"] for r in rows]
    return _chart("f-score", [names, values, summary["beta2"]],
                  lambda: plots.f_score_bars_png(names, values, summary["beta2"], fmt=fmt), fmt)


@require_GET
def vocabulary_png(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    run = find_run(dataset, "vocabulary")
    if run is None:
        try:
            word_frequency_curves(dataset)  # raises ReportError with the command to run
        except ReportError as exc:
            raise Http404(str(exc))
    # the curves are the run's stored details: the run's identity names the chart
    ident = [dataset.pk, run.pk, run.completed, str(run.finished_at), private_system_ids(dataset)]
    return _chart("vocabulary-stacked", ident, lambda: plots.vocabulary_png(word_frequency_curves(dataset)))


def _image(name, key):
    dataset = get_object_or_404(Dataset, name=name)
    return dataset, get_object_or_404(Image, dataset=dataset, key=key)


def _image_report(dataset, image, m) -> Report:
    """The cached per-image view (:func:`analysis.diversity.image_detail`, computed by a Celery task:
    the request only reads it)."""
    key, params = cached_reports.image_key(dataset, image, m)
    return request_report(Report.IMAGE, key, params, dataset=dataset, image=image)


def _not_ready(row: Report) -> HttpResponse:
    response = HttpResponse(f"the view of this image is {row.status}", status=503, content_type="text/plain")
    response["Retry-After"] = str(REFRESH_SECONDS)
    return response


@require_GET
def image_page(request, name, key):
    dataset, image = _image(name, key)
    m, _ = diversity_options(request)
    row = _image_report(dataset, image, m)
    query = request.GET.urlencode()
    # a link only to a web address: the stored URL is data and could say javascript:
    href = image.url if image.url.lower().startswith(("http://", "https://")) else ""
    return render(request, "analysis/image.html", {
        "dataset": dataset, "image": image, "detail": row.data, "m": m, "query": f"?{query}" if query else "",
        "image_href": href, "computing": None if row.status == Report.DONE else computing_context(row),
        "picture": _picture_url(image), "scored": image_captions(dataset, image),
    })


def _picture_url(image) -> str | None:
    """Where the browser loads ``image``'s picture from (:func:`crowd.images.image_url`: the
    dataset's image source, or the image's own http(s) URL), or None when there is none."""
    try:
        from crowd.images import image_url
    except ImportError:  # an installation without image sources
        return None
    url = image_url(image)
    # only a web address or a path on this site: the value is data and could say javascript:
    return url if url and url.lower().startswith(("http://", "https://", "/")) and not url.startswith("//") else None


def _cached_png(row: Report, name: str, draw) -> HttpResponse:
    """The chart ``name`` of a done report, drawn once by ``draw(detail)`` and kept in the cache."""
    cache_key = f"image-chart:{row.key}:{name}"
    png = cache.get(cache_key)
    if png is None:
        png = draw(row.data)
        cache.set(cache_key, png, 3600)
    return HttpResponse(png, content_type="image/png")


@require_GET
def radar_png(request, name, key, system):
    dataset, image = _image(name, key)
    m, _ = diversity_options(request)
    row = _image_report(dataset, image, m)
    if row.status != Report.DONE:
        return _not_ready(row)
    entry = next((s for s in row.data["systems"] if s["system"] == system), None)
    if entry is None or entry["radar_lsa"] is None:
        raise Http404("no radar chart for this caption set (fewer than 2 captions, or no content words)")
    return _cached_png(row, "radar:" + hashlib.sha256(system.encode()).hexdigest(), lambda detail: plots.radar_png(
        entry["radar_lsa"], entry["captions"], title=f"{system}: captions on the top latent semantics (LSA)"))


@require_GET
def mds_png(request, name, key):
    dataset, image = _image(name, key)
    m, _ = diversity_options(request)
    row = _image_report(dataset, image, m)
    if row.status != Report.DONE:
        return _not_ready(row)
    if row.data["mds"] is None:
        raise Http404("fewer than 3 captions on this image")
    return _cached_png(row, "mds", lambda detail: plots.mds_png(
        detail["mds"]["xy"], detail["mds"]["groups"], title="captions of this image (MDS of CIDEr-D similarity)"))
