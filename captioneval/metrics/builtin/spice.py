"""SPICE (Anderson et al. 2016, ECCV) is known to the platform but unavailable: its jar downloads
Stanford CoreNLP 3.6.0 at start-up, which no package registry provides. Listing it here makes
``compute_metrics --metric spice`` explain why instead of calling it unknown."""

ORDER = 1000
METRICS: list = []
UNAVAILABLE = {
    "spice": (
        "SPICE is unavailable: its jar downloads Stanford CoreNLP 3.6.0 at start-up, which no package "
        "registry provides and this platform never fetches at run time"
    ),
}
