"""Gunicorn settings: `gunicorn ares_site.wsgi --config ares_site/gunicorn.conf.py`."""

import gc
import os

# One worker per core: ingest is CPU-bound Python, and the database shares the
# cores. More workers add ~95 MB each and no throughput (bench/ingest.py on 2 cores:
# 2 workers 9,000 spans/s at 204 MB, 3 workers 8,600 spans/s at 294 MB).
workers = int(os.environ.get("GUNICORN_WORKERS", len(os.sched_getaffinity(0))))
# Threads, so that a read finds a free one however many ingest requests are in: those run
# ARES_INGEST_CONCURRENCY at a time (ares_site/ingest_slots.py), one core left to readers
# while they read; the rest wait holding only a thread. Sync workers (one request each)
# left reads queued behind ingest batches (docs/operations.md, "Reads under ingest load").
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
threads = int(os.environ.get("GUNICORN_THREADS", 16))
# Read by the workers' settings (the master's environment is theirs): one slot per core.
os.environ.setdefault("ARES_INGEST_CONCURRENCY", str(workers))
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# Seconds a request may take before its worker is restarted: above the sandbox
# chat's stream (ARES_SANDBOX_TIMEOUT_S, 110 s by default), which holds a thread that long.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 120))
# One fixed socket path per user would clash between servers on one machine.
control_socket_disable = True


def post_worker_init(worker: object) -> None:
    """Ready the worker before it takes requests: URLconf imported, start-up objects frozen.

    Django imports the URLconf (the API, its schemas) on the first request, which then
    waits a second or more. Frozen, the ~100,000 objects of the imports are no longer
    walked by every full garbage collection: GC time per 1000-span batch ~14 ms -> ~6 ms.
    (A higher GC threshold saved more but let RSS creep up batch after batch.)
    """
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (the lookup is what imports it)
    gc.freeze()
