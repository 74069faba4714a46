from urllib.parse import quote, unquote

from django.urls import URLPattern, path, register_converter

from . import benchmark_views, chart_views, diversity_views, explorer_views, leaderboard_views, views
from .limits import report_request
from .query import refuse_control_characters
from .status_views import report_status  # progress of a stored report (computing.html)


class KeyConverter:
    """Any text as one path segment: an image key or system name may contain ``/`` (``</b>``), so
    it is percent-encoded once more than usual when a URL is built and decoded once when matched."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value: str) -> str:
        return quote(str(value), safe="")


register_converter(KeyConverter, "key")

app_name = "analysis"
urlpatterns = [
    path("", views.index, name="index"),
    path("datasets/<slug:name>/", views.dataset_detail, name="dataset"),
    path("datasets/<slug:name>/runs.json", views.runs_json, name="runs-json"),
    path("datasets/<slug:name>/correlations.json", views.report_json, name="report-json"),
    path("datasets/<slug:name>/correlations.csv", views.report_csv, name="report-csv"),
    path("datasets/<slug:name>/scatter/<slug:metric>.png", chart_views.scatter_figure, name="scatter"),
    path("datasets/<slug:name>/scatter/<slug:metric>.svg", chart_views.scatter_figure, {"fmt": "svg"}, name="scatter-svg"),
    path("datasets/<slug:name>/scatter/<slug:metric>.pdf", chart_views.scatter_figure, {"fmt": "pdf"}, name="scatter-pdf"),
    path("datasets/<slug:name>/scatter/<slug:metric>.json", chart_views.scatter_spec, name="scatter-spec"),
    path("datasets/<slug:name>/benchmark/", benchmark_views.benchmark_page, name="benchmark"),
    path("datasets/<slug:name>/benchmark.json", benchmark_views.benchmark_json, name="benchmark-json"),
    path("datasets/<slug:name>/benchmark/chart/<slug:level>/<str:statistic>.png", benchmark_views.benchmark_chart, name="benchmark-chart"),
    path("datasets/<slug:name>/benchmark/chart/<slug:level>/<str:statistic>.svg", benchmark_views.benchmark_chart, {"fmt": "svg"}, name="benchmark-chart-svg"),
    path("datasets/<slug:name>/benchmark/chart/<slug:level>/<str:statistic>.pdf", benchmark_views.benchmark_chart, {"fmt": "pdf"}, name="benchmark-chart-pdf"),
    path("datasets/<slug:name>/benchmark/chart/<slug:level>/<str:statistic>.json", chart_views.benchmark_chart_spec, name="benchmark-chart-spec"),
    path("datasets/<slug:name>/benchmark/significance.png", benchmark_views.significance_png, name="benchmark-significance"),
    path("datasets/<slug:name>/benchmark/significance.svg", benchmark_views.significance_png, {"fmt": "svg"}, name="benchmark-significance-svg"),
    path("datasets/<slug:name>/benchmark/significance.pdf", benchmark_views.significance_png, {"fmt": "pdf"}, name="benchmark-significance-pdf"),
    path("datasets/<slug:name>/leaderboard/", leaderboard_views.leaderboard_page, name="leaderboard"),
    path("datasets/<slug:name>/leaderboard.json", leaderboard_views.leaderboard_json, name="leaderboard-json"),
    path("datasets/<slug:name>/leaderboard.csv", leaderboard_views.leaderboard_csv, name="leaderboard-csv"),
    path("datasets/<slug:name>/leaderboard.tex", leaderboard_views.leaderboard_latex, name="leaderboard-latex"),
    path("datasets/<slug:name>/leaderboard/intervals/metric/<key:metric>.json", leaderboard_views.interval_spec, name="leaderboard-intervals"),
    path("datasets/<slug:name>/leaderboard/intervals/human/<key:criterion>.json", leaderboard_views.interval_spec, name="leaderboard-human-intervals"),
    path("datasets/<slug:name>/leaderboard/p-values/<key:metric>.json", leaderboard_views.pvalue_spec, name="leaderboard-pvalues"),
    path("reports/<int:pk>/status.json", report_status, name="report-status"),
    path("compare/", benchmark_views.compare_page, name="compare"),
    path("compare.json", benchmark_views.compare_json, name="compare-json"),
    path("compare.csv", benchmark_views.compare_csv, name="compare-csv"),
    path("compare.tex", benchmark_views.compare_latex, name="compare-latex"),
    path("datasets/<slug:name>/diversity/", diversity_views.diversity_page, name="diversity"),
    path("datasets/<slug:name>/diversity.json", diversity_views.diversity_json, name="diversity-json"),
    path("datasets/<slug:name>/diversity.csv", diversity_views.diversity_csv, name="diversity-csv"),
    path("datasets/<slug:name>/diversity/scatter.png", diversity_views.scatter_png, name="diversity-scatter"),
    path("datasets/<slug:name>/diversity/scatter.svg", diversity_views.scatter_png, {"fmt": "svg"}, name="diversity-scatter-svg"),
    path("datasets/<slug:name>/diversity/scatter.pdf", diversity_views.scatter_png, {"fmt": "pdf"}, name="diversity-scatter-pdf"),
    path("datasets/<slug:name>/diversity/f-score.png", diversity_views.f_score_png, name="diversity-fscore"),
    path("datasets/<slug:name>/diversity/f-score.svg", diversity_views.f_score_png, {"fmt": "svg"}, name="diversity-fscore-svg"),
    path("datasets/<slug:name>/diversity/f-score.pdf", diversity_views.f_score_png, {"fmt": "pdf"}, name="diversity-fscore-pdf"),
    path("datasets/<slug:name>/diversity/vocabulary.png", diversity_views.vocabulary_png, name="diversity-vocabulary"),
    path("datasets/<slug:name>/explorer/", explorer_views.explorer_page, name="explorer"),
    path("datasets/<slug:name>/explorer.csv", explorer_views.explorer_csv, name="explorer-csv"),
    path("datasets/<slug:name>/images/<key:key>/", diversity_views.image_page, name="image"),
    path("datasets/<slug:name>/images/<key:key>/mds.png", diversity_views.mds_png, name="image-mds"),
    path("datasets/<slug:name>/images/<key:key>/radar/<key:system>.png", diversity_views.radar_png, name="image-radar"),
]
#: the pages that read no report (the dataset list, live run progress, a report's progress bar): every
#: other page, download and chart here is a report request (analysis.limits.report_request)
NOT_REPORTS = frozenset({"index", "runs-json", "report-status"})


def _wrapped(p: URLPattern) -> URLPattern:
    """Every page refuses a control character in its query string (400 naming the parameter) before
    its view reads anything: one check for all of them (analysis.query), not one per parameter.
    Every report request counts first against the report rate limit and has a refused computation
    answered 503 (analysis.limits)."""
    view = refuse_control_characters(p.callback)
    if p.name not in NOT_REPORTS:
        view = report_request(view)
    return URLPattern(p.pattern, view, p.default_args, p.name)


urlpatterns = [_wrapped(p) for p in urlpatterns]
