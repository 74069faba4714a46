"""Dashboard pages for caption-set diversity (Wang & Chan 2019): the per-dataset diversity page
(summary table, diversity-accuracy scatter, F-score bars, vocabulary and word-frequency curves,
downloads) and the per-image page (caption sets, Self-CIDEr / LSA, radar charts, MDS map).

Query parameters: ``m`` (captions per set of the runs to show; default all) and ``beta2`` (F-score
weight; default 5 as in the paper).
"""
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from crowd.models import Dataset, Image
from evalsite import csvsafe
from metrics.models import SetScore

from . import plots
from .diversity import DEFAULT_BETA2, diversity_summary, find_run, image_detail, word_frequency_curves
from .reports import ReportError

SUMMARY_COLUMNS = ["system", "kind", "is_reference", "n_sets", "self_cider", "lsa", "mbleu_4", "mbleu_mix",
                   "set_accuracy", "f_score", "vocabulary"]


def _options(request):
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
    m, beta2 = _options(request)
    try:
        return dataset, diversity_summary(dataset.name, m=m, beta2=beta2)
    except ReportError as exc:
        raise Http404(str(exc))


@require_GET
def diversity_page(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    m, beta2 = _options(request)
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


@require_GET
def scatter_png(request, name):
    _, summary = _summary_or_404(name, request)
    points = [(r["system"], r["self_cider"], r["set_accuracy"]) for r in summary["systems"]]
    return HttpResponse(plots.diversity_accuracy_png(points), content_type="image/png")


@require_GET
def f_score_png(request, name):
    _, summary = _summary_or_404(name, request)
    rows = [r for r in summary["systems"] if r["f_score"] is not None]
    return HttpResponse(
        plots.f_score_bars_png([r["system"] for r in rows], [r["f_score"] for r in rows], summary["beta2"]),
        content_type="image/png",
    )


@require_GET
def vocabulary_png(request, name):
    dataset = get_object_or_404(Dataset, name=name)
    try:
        curves = word_frequency_curves(dataset)
    except ReportError as exc:
        raise Http404(str(exc))
    return HttpResponse(plots.vocabulary_png(curves), content_type="image/png")


def _image(name, key):
    dataset = get_object_or_404(Dataset, name=name)
    return dataset, get_object_or_404(Image, dataset=dataset, key=key)


@require_GET
def image_page(request, name, key):
    dataset, image = _image(name, key)
    m, _ = _options(request)
    detail = image_detail(dataset, image, m=m)
    query = request.GET.urlencode()
    # a link only to a web address: the stored URL is data and could say javascript:
    href = image.url if image.url.lower().startswith(("http://", "https://")) else ""
    return render(request, "analysis/image.html", {
        "dataset": dataset, "image": image, "detail": detail, "m": m, "query": f"?{query}" if query else "",
        "image_href": href,
    })


@require_GET
def radar_png(request, name, key, system):
    dataset, image = _image(name, key)
    m, _ = _options(request)
    detail = image_detail(dataset, image, m=m)
    entry = next((s for s in detail["systems"] if s["system"] == system), None)
    if entry is None or entry["radar_lsa"] is None:
        raise Http404("no radar chart for this caption set (fewer than 2 captions, or no content words)")
    png = plots.radar_png(entry["radar_lsa"], entry["captions"], title=f"{system}: captions on the top latent semantics (LSA)")
    return HttpResponse(png, content_type="image/png")


@require_GET
def mds_png(request, name, key):
    dataset, image = _image(name, key)
    m, _ = _options(request)
    detail = image_detail(dataset, image, m=m)
    if detail["mds"] is None:
        raise Http404("fewer than 3 captions on this image")
    png = plots.mds_png(detail["mds"]["xy"], detail["mds"]["groups"], title="captions of this image (MDS of CIDEr-D similarity)")
    return HttpResponse(png, content_type="image/png")
