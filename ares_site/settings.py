"""Settings for ARES Console, every value from the environment with a working local default."""

import ipaddress
import os
import sqlite3
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from ares_site.env import env_bool, env_choice, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("ARES_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: set SECRET_KEY, or DEBUG=1 for the development default"
        )
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",
    "traces_app",
    "tools_app",
    "planner_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # First of ours: a NUL byte in the path or query would make PostgreSQL fail the query.
    "ares_site.nul_bytes.RefuseNulBytesMiddleware",
    # Before anything reads the body or the database: an ingest request waits its turn here.
    "ares_site.ingest_slots.IngestSlotsMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before sessions and auth, which read the database: a page answers 503 when it is down.
    "ares_site.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "ares_site.urls"
WSGI_APPLICATION = "ares_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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


def _database_config(url: str) -> dict:
    """Return Django's DATABASES entry for a DATABASE_URL, tuned per backend."""
    try:
        config = dj_database_url.parse(url, conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60))
    except Exception as exc:  # dj_database_url raises bare ValueError/KeyError subclasses
        raise ImproperlyConfigured(f"DATABASE_URL={url!r} cannot be used: {exc}") from None
    engine = config["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        if sqlite3.sqlite_version_info < (3, 38):
            # Batch ingest reads rows with json_each and ->> and uses RETURNING (3.35+).
            raise ImproperlyConfigured(
                f"DATABASE_URL is SQLite, but this Python's SQLite is {sqlite3.sqlite_version}; "
                "3.38 or newer is needed (or use PostgreSQL)"
            )
        # WAL lets readers run beside the writer; IMMEDIATE takes the write lock at BEGIN
        # so concurrent writers queue on `timeout` instead of failing mid-transaction.
        config["OPTIONS"] = {
            "transaction_mode": "IMMEDIATE",
            "timeout": env_int("SQLITE_TIMEOUT", 20, minimum=0),
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
        config["CONN_MAX_AGE"] = 0 if config["NAME"] == ":memory:" else config["CONN_MAX_AGE"]
        # A file, not memory, so servers and workers the tests start can share it; one per
        # process, so test runs side by side do not clobber each other.
        config["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3")}
    elif engine == "django.db.backends.postgresql":
        config.setdefault("OPTIONS", {})["connect_timeout"] = env_int("DATABASE_CONNECT_TIMEOUT", 5)
        config["CONN_HEALTH_CHECKS"] = True
    else:
        raise ImproperlyConfigured(
            f"DATABASE_URL uses {engine}: only sqlite:// and postgres:// are supported"
        )
    return config


VAR_DIR.mkdir(parents=True, exist_ok=True)
(VAR_DIR / "staticfiles").mkdir(exist_ok=True)  # WhiteNoise warns on every start when absent
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'ares.sqlite3'}")
DATABASES = {"default": _database_config(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "ares_site.static_finders.PlotlyJsFinder",
]
STATIC_ROOT = VAR_DIR / "staticfiles"
# WhiteNoise serves static files in production (gunicorn); runserver serves them in DEBUG.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedStaticFilesStorage"
    },
}

LOGIN_URL = "admin:login"

# Celery: no broker means tasks run inline in the calling process.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL")
if CELERY_BROKER_URL and not CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured(f"CELERY_BROKER_URL={CELERY_BROKER_URL!r} must be a redis:// URL")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
# The beat connects to a broker even when its tasks run inline (eager), though it never
# sends them: kombu's in-memory transport, which needs no server, stands in.
CELERY_BROKER_URL = CELERY_BROKER_URL or "memory://"
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Periodic jobs: name -> (task, every how many seconds). `celery -A ares_site beat` (which
# `make run` and `make serve` start) runs them: inline in the beat process without a
# broker, on the workers with one. Each runs once per period whatever the number of beats
# (traces_app.models.JobLease). A new periodic job (the alert checks) is one more line.
ARES_ROLLUP_BEAT_S = env_float("ARES_ROLLUP_BEAT_S", 2.0, minimum=0.5)
ARES_PERIODIC_JOBS: dict[str, tuple[str, float]] = {
    "recount-marked-rollups": ("traces_app.tasks.recount_rollups_task", ARES_ROLLUP_BEAT_S),
    "rescan-recent-spirals": (
        "traces_app.tasks.rescan_spirals_task",
        env_float("ARES_RESCAN_SPIRALS_EVERY_S", 60.0, minimum=0.5),
    ),
    "settle-pending-scores": (
        "traces_app.tasks.settle_scores_task",
        env_float("ARES_SETTLE_SCORES_EVERY_S", 60.0, minimum=0.5),
    ),
    "purge-past-retention": (
        "traces_app.tasks.purge_past_retention_task",
        env_float("ARES_PURGE_EVERY_S", 24 * 60 * 60.0, minimum=0.5),
    ),
    # PostgreSQL's daily span partitions: the next days made ahead (ingest makes any
    # other day it meets), and a table from before them copied in (traces_app/partitions).
    "maintain-span-partitions": (
        "traces_app.tasks.maintain_span_partitions_task",
        env_float("ARES_PARTITIONS_EVERY_S", 60.0, minimum=0.5),
    ),
    "refresh-proposals": (
        "planner_app.tasks.refresh_proposals_task",
        env_float("ARES_PROPOSALS_EVERY_S", 600.0, minimum=0.5),
    ),
    # Monitors (planner_app/monitors): evaluate each one, then send what is due; the
    # delivery job retries failed sends with backoff between evaluations.
    "evaluate-monitors": (
        "planner_app.tasks.evaluate_monitors_task",
        env_float("ARES_MONITORS_EVERY_S", 60.0, minimum=0.5),
    ),
    "deliver-notifications": (
        "planner_app.tasks.deliver_notifications_task",
        env_float("ARES_NOTIFY_EVERY_S", 10.0, minimum=0.5),
    ),
    # Does nothing while ARES_PLANNER_GUARD is off (planner_app/rules_guard.py).
    "guard-rule-versions": (
        "planner_app.tasks.guard_rule_versions_task",
        env_float("ARES_PLANNER_GUARD_EVERY_S", 60.0, minimum=0.5),
    ),
}
# The beat asks twice a period (at least once a minute), and the job's lease decides: a
# period starts on a multiple of its length, so restarts and several beats change nothing.
# A tick left unsent for longer (workers down) expires instead of piling up.
CELERY_BEAT_SCHEDULE = {
    job: {
        "task": "traces_app.tasks.periodic_job_task",
        "args": [job],
        "schedule": min(every / 2, 60.0),
        "options": {"expires": min(every / 2, 60.0)},
    }
    for job, (_, every) in ARES_PERIODIC_JOBS.items()
}
# The schedule is kept in memory: the leases in the database say when each job last ran.
CELERY_BEAT_SCHEDULER = "celery.beat:Scheduler"

# Notifications of monitors (planner_app/monitors/notify). Webhooks to loopback and private
# networks are refused unless ARES_NOTIFY_ALLOW_PRIVATE (tests, a receiver on the LAN).
ARES_NOTIFY_ALLOW_PRIVATE = env_bool("ARES_NOTIFY_ALLOW_PRIVATE", False)
ARES_NOTIFY_MAX_ATTEMPTS = env_int("ARES_NOTIFY_MAX_ATTEMPTS", 6, minimum=1)
ARES_NOTIFY_TIMEOUT_S = env_float("ARES_NOTIFY_TIMEOUT_S", 10.0, minimum=0.5)
# The console's address as operators reach it: the links in notifications start with it.
ARES_SITE_URL = env_str("ARES_SITE_URL", "http://localhost:8000")
# Email notifications go through Django's email settings.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_float("EMAIL_TIMEOUT", 10.0, minimum=0.5)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "ares-console@localhost")

# Ingest limits. The body limit applies after gzip decompression too.
ARES_INGEST_MAX_BODY_BYTES = env_int("ARES_INGEST_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1024)
ARES_INGEST_MAX_ITEMS = env_int("ARES_INGEST_MAX_ITEMS", 1000, minimum=1)
# Ingest requests that run at once on this machine, the rest waiting their turn
# (ares_site/ingest_slots.py). 0: no cap; ares_site/gunicorn.conf.py sets the production default.
ARES_INGEST_CONCURRENCY = env_int("ARES_INGEST_CONCURRENCY", 0, minimum=0)
# OTLP: spans per export request (SDKs send 512 at most by default), and attributes per
# span, resource or event (the SDKs' default limit is 128): a request at both limits
# stays well under a second of a worker's time.
ARES_OTLP_MAX_SPANS = env_int("ARES_OTLP_MAX_SPANS", 1000, minimum=1)
ARES_OTLP_MAX_ATTRIBUTES = env_int("ARES_OTLP_MAX_ATTRIBUTES", 128, minimum=1)
ARES_MAX_CLOCK_SKEW_SECONDS = env_int("ARES_MAX_CLOCK_SKEW_SECONDS", 3600, minimum=0)
# Scores whose span has not arrived yet: how many may wait, and for how long.
ARES_SCORE_PENDING_MAX = env_int("ARES_SCORE_PENDING_MAX", 10_000, minimum=0)
ARES_SCORE_PENDING_TTL_H = env_int("ARES_SCORE_PENDING_TTL_H", 24, minimum=1)
ARES_PAYLOAD_MAX_BYTES = env_int("ARES_PAYLOAD_MAX_BYTES", 16 * 1024, minimum=256)
DATA_UPLOAD_MAX_MEMORY_SIZE = ARES_INGEST_MAX_BODY_BYTES

# The tool engine.
ARES_TOOL_TIMEOUT_S = env_int("ARES_TOOL_TIMEOUT_S", 30, minimum=1)
ARES_TOOL_MAX_PARALLEL = env_int("ARES_TOOL_MAX_PARALLEL", 5, minimum=1)
ARES_TOOL_BACKOFF_S = float(env_int("ARES_TOOL_BACKOFF_MS", 1000, minimum=0)) / 1000
# The planner reloads rules when the stamp file beside the database moves (same machine),
# and at least this often otherwise (other machines).
ARES_PLANNER_RELOAD_CHECK_S = float(env_int("ARES_PLANNER_RELOAD_CHECK_MS", 5000, minimum=0)) / 1000
ARES_PLANNER_EVIDENCE_TTL_S = float(env_int("ARES_PLANNER_EVIDENCE_TTL_MS", 5000, minimum=0)) / 1000
# The guard (planner_app/rules_guard.py), off by default: roll the newest rule-set version
# back when the planner's success over its first N planned requests is more than MARGIN
# (a share: 0.10 is 10 points) below its success over the N planned requests before it.
ARES_PLANNER_GUARD = env_bool("ARES_PLANNER_GUARD", False)
ARES_PLANNER_GUARD_REQUESTS = env_int("ARES_PLANNER_GUARD_REQUESTS", 50, minimum=10)
ARES_PLANNER_GUARD_MARGIN = env_float("ARES_PLANNER_GUARD_MARGIN", 0.10, minimum=0.01, maximum=1.0)
# Proposals (planner_app/proposals): the newest recorded requests they read, at most, and
# how far back.
ARES_PROPOSALS_TRAFFIC = env_int("ARES_PROPOSALS_TRAFFIC", 5000, minimum=1)
ARES_PROPOSALS_WINDOW_DAYS = env_int("ARES_PROPOSALS_WINDOW_DAYS", 30, minimum=1)

# Built-in tools. http_request refuses loopback, private and link-local addresses except
# these host names and networks (CIDR); web_search needs a SearXNG instance.
ARES_HTTP_ALLOWED_HOSTS = env_list("ARES_HTTP_ALLOWED_HOSTS", [])
ARES_HTTP_ALLOWED_NETWORKS = env_list("ARES_HTTP_ALLOWED_NETWORKS", [])
for _network in ARES_HTTP_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network, strict=False)
    except ValueError:
        raise ImproperlyConfigured(
            f"ARES_HTTP_ALLOWED_NETWORKS has {_network!r}, which is not a network like 10.0.0.0/8"
        ) from None
ARES_SEARXNG_URL = env_str("ARES_SEARXNG_URL")
if ARES_SEARXNG_URL and not ARES_SEARXNG_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"ARES_SEARXNG_URL={ARES_SEARXNG_URL!r} must be an http(s) URL")
ARES_TOOL_SETTINGS_CHECK_S = float(env_int("ARES_TOOL_SETTINGS_CHECK_MS", 2000, minimum=0)) / 1000

# Failure spirals (traces_app.spirals.detection): repeats that make one; tools allowed to repeat.
ARES_SPIRAL_MIN_REPEATS = env_int("ARES_SPIRAL_MIN_REPEATS", 3, minimum=2)
ARES_SPIRAL_ALLOW_TOOLS = env_list("ARES_SPIRAL_ALLOW_TOOLS", [])

# The LLM endpoint of agents (Path 1): any OpenAI-compatible chat-completions API
# (OpenAI, vLLM, Ollama, llama.cpp server, LM Studio). Agents may name their own.
# Without a base URL or a model, everything but the agent loop still works.
ARES_LLM_BASE_URL = env_str("ARES_LLM_BASE_URL")
if ARES_LLM_BASE_URL and not ARES_LLM_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"ARES_LLM_BASE_URL={ARES_LLM_BASE_URL!r} must be an http(s) URL")
ARES_LLM_API_KEY = env_str("ARES_LLM_API_KEY")
ARES_LLM_MODEL = env_str("ARES_LLM_MODEL")
ARES_LLM_TIMEOUT_S = env_int("ARES_LLM_TIMEOUT_S", 120, minimum=1)
ARES_LLM_STREAM = env_bool("ARES_LLM_STREAM", False)
# Tokens per agent task, and the share of them (percent) that tool output may fill.
ARES_LLM_TOKEN_BUDGET = env_int("ARES_LLM_TOKEN_BUDGET", 8000, minimum=500)
ARES_LLM_TOOL_OUTPUT_PERCENT = env_int("ARES_LLM_TOOL_OUTPUT_PERCENT", 30, minimum=1)
if ARES_LLM_TOOL_OUTPUT_PERCENT > 90:
    raise ImproperlyConfigured("ARES_LLM_TOOL_OUTPUT_PERCENT must be at most 90")
# Plan-execute-replan: new plans the model may draft after the first, per task.
ARES_REPLAN_MAX = env_int("ARES_REPLAN_MAX", 2, minimum=0)
# Active tool discovery (planner_app/discovery/): how the two-stage router ranks and keeps
# tools. Stage 2's score: weighted (server and tool weights) or product ((s*t)*max(s,t));
# stage 1 matches a server's text joined with its tools', or the max of the two (MCP-Zero).
ARES_ROUTER_SERVER_WEIGHT = env_float("ARES_ROUTER_SERVER_WEIGHT", 0.3, minimum=0)
ARES_ROUTER_TOOL_WEIGHT = env_float("ARES_ROUTER_TOOL_WEIGHT", 0.7, minimum=0)
if not ARES_ROUTER_SERVER_WEIGHT + ARES_ROUTER_TOOL_WEIGHT > 0:
    raise ImproperlyConfigured("ARES_ROUTER_SERVER_WEIGHT + ARES_ROUTER_TOOL_WEIGHT must be > 0")
ARES_ROUTER_TOP_SERVERS = env_int("ARES_ROUTER_TOP_SERVERS", 3, minimum=1)
ARES_ROUTER_TOP_TOOLS = env_int("ARES_ROUTER_TOP_TOOLS", 5, minimum=1)
ARES_ROUTER_SERVER_THRESHOLD = env_float("ARES_ROUTER_SERVER_THRESHOLD", 0.05, minimum=0, maximum=1)
# Unset: the combination's own default (0.1 weighted, 0.001 product).
ARES_ROUTER_MIN_SCORE = env_float("ARES_ROUTER_MIN_SCORE", None, minimum=0, maximum=1)
ARES_ROUTER_COMBINATION = env_choice("ARES_ROUTER_COMBINATION", "weighted", ("weighted", "product"))
ARES_ROUTER_SERVER_SCORING = env_choice("ARES_ROUTER_SERVER_SCORING", "joint", ("joint", "max"))
ARES_ROUTER_CACHE_SIZE = env_int("ARES_ROUTER_CACHE_SIZE", 256, minimum=0)
# Flat search over every tool, or two-stage (servers, then their tools); routing each step
# of a multi-step request on its own; the semantic signal fused with TF-IDF (auto: wordllama
# when installed). planner_app.discovery.site_router checks them again when they change.
ARES_ROUTER_SEARCH = env_choice("ARES_ROUTER_SEARCH", "flat", ("flat", "two_stage"))
ARES_ROUTER_PER_STEP = env_choice("ARES_ROUTER_PER_STEP", "false", ("true", "false"))
ARES_ROUTER_SEMANTIC = env_choice("ARES_ROUTER_SEMANTIC", "auto", ("auto", "wordllama", "off"))
# How the signals (TF-IDF, BM25, wordllama) are fused: z-scores summed, or reciprocal ranks.
ARES_ROUTER_FUSION = env_choice("ARES_ROUTER_FUSION", "zscore", ("zscore", "rrf"))
ARES_ROUTER_BACKEND = env_choice("ARES_ROUTER_BACKEND", "tfidf", ("tfidf", "embeddings"))
ARES_ROUTER_EMBEDDING_MODEL = env_str("ARES_ROUTER_EMBEDDING_MODEL")
if ARES_ROUTER_BACKEND == "embeddings" and not ARES_ROUTER_EMBEDDING_MODEL:
    raise ImproperlyConfigured(
        "ARES_ROUTER_BACKEND=embeddings needs ARES_ROUTER_EMBEDDING_MODEL: the directory of a "
        "sentence-transformers model saved on this machine"
    )
# The router learns from outcomes (planner_app/discovery/site_history.py): the requests each
# tool served on this site, at most PER_TOOL each, an outcome's weight halving every
# HALF_LIFE_DAYS. Each process reads new tool spans and scores at most every REFRESH_S
# seconds, reloads all (at most MAX_OUTCOMES, the newest) every RELOAD_S and after a purge.
ARES_ROUTER_HISTORY = env_choice("ARES_ROUTER_HISTORY", "on", ("on", "off"))
ARES_ROUTER_HISTORY_PER_TOOL = env_int("ARES_ROUTER_HISTORY_PER_TOOL", 50, minimum=1)
ARES_ROUTER_HISTORY_HALF_LIFE_DAYS = env_float("ARES_ROUTER_HISTORY_HALF_LIFE_DAYS", 30.0)
if not ARES_ROUTER_HISTORY_HALF_LIFE_DAYS > 0:
    raise ImproperlyConfigured("ARES_ROUTER_HISTORY_HALF_LIFE_DAYS must be above 0")
ARES_ROUTER_HISTORY_REFRESH_S = env_float("ARES_ROUTER_HISTORY_REFRESH_S", 15.0, minimum=0)
ARES_ROUTER_HISTORY_RELOAD_S = env_float("ARES_ROUTER_HISTORY_RELOAD_S", 600.0, minimum=0)
ARES_ROUTER_HISTORY_MAX_OUTCOMES = env_int("ARES_ROUTER_HISTORY_MAX_OUTCOMES", 50_000, minimum=1)
# The sandbox chat streams a task for at most this many seconds, then links its trace.
# Keep it under gunicorn's worker timeout (ares_site/gunicorn.conf.py), as a sync worker
# streaming longer is killed.
ARES_SANDBOX_TIMEOUT_S = env_int("ARES_SANDBOX_TIMEOUT_S", 110, minimum=5)

# Raw spans and traces older than this many days are purged daily; hourly rollups are kept.
ARES_RETENTION_DAYS = env_int("ARES_RETENTION_DAYS", 30, minimum=1)
# Seconds each run of maintain-span-partitions spends copying a table from before the
# daily partitions (PostgreSQL; `manage.py partition_spans` does it all at once).
ARES_PARTITION_COPY_S = env_float("ARES_PARTITION_COPY_S", 20.0, minimum=0.1)
# Migration 0018 converts a span table of up to this many spans itself; a larger one is
# left to those batches, so `migrate` stays short.
ARES_PARTITION_IN_MIGRATION_UP_TO = env_int("ARES_PARTITION_IN_MIGRATION_UP_TO", 200_000, minimum=0)
# Pages recount the marked rollups of their range made more than this many seconds ago
# before rendering: all of them without a broker; with one, the beat (every
# ARES_ROLLUP_BEAT_S, above) normally has, and a page steps in only if workers fall behind.
ARES_ROLLUP_PAGE_GRACE_S = env_float(
    "ARES_ROLLUP_PAGE_GRACE_S",
    0.0 if CELERY_TASK_ALWAYS_EAGER else 2 * ARES_ROLLUP_BEAT_S,
    minimum=0.0,
)
# At most this many marks a page recounts before rendering (the rest: it says so).
ARES_ROLLUP_PAGE_RECOUNT_MAX = env_int("ARES_ROLLUP_PAGE_RECOUNT_MAX", 5000, minimum=1)

LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper()
if LOG_LEVEL not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
    raise ImproperlyConfigured(f"LOG_LEVEL={LOG_LEVEL!r} must be DEBUG, INFO, WARNING or ERROR")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
