"""Ingest takes turns, and reads go first: at most N ingest requests at once per machine.

Ingest (span and score batches) is CPU-bound; run as many at once as clients send, it
fills every core and every worker, and page and API reads wait behind it. Each running
ingest request holds one of N = ARES_INGEST_CONCURRENCY slots: an exclusive `flock` on a
file in ARES_VAR_DIR/ingest-slots/, shared by every worker process and thread of the
machine (the kernel frees a slot when its holder dies, even by kill -9). An ingest request
that finds no slot free waits for one before it reads its body; with threaded workers
(ares_site/gunicorn.conf.py) only its thread waits.

The last slot (when N > 1) is the readers' core: ingest takes it only while no read is in
flight and none has ended for READ_QUIET_S seconds. Reads hold a shared flock on the
`reads` file while they run and touch it when they end; that is all they cost. So with
nobody reading, ingest uses every core; while someone reads, it leaves them one.
Nothing about the answers changes: a waiting batch is stored and answered as before.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.http import HttpRequest, HttpResponse

# POST to these paths is ingest: REST spans, OTLP spans, scores.
INGEST_PATHS = frozenset({"/api/v1/invocations", "/v1/traces", "/api/v1/scores"})
# Not reads a person waits for: a load balancer's probe must not close the readers' core.
NOT_READS = frozenset({"/healthz"})
# After a read, the readers' core stays theirs this long: a page's next request (its
# scripts, its API calls, the next click) comes within it.
READ_QUIET_S = 1.0


class IngestSlots:
    """N exclusive file locks in one folder, the last kept for readers while they read."""

    def __init__(self, folder: Path, count: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.paths = [folder / f"slot-{number}.lock" for number in range(count)]
        self.reads_path = folder / "reads"
        self.reads_path.touch()
        self._next_wait = itertools.count()
        self._counter_lock = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold a free slot until the block ends; wait for one if all are taken."""
        free = self.paths if self.reads_are_quiet() else self.paths[:-1] or self.paths
        descriptor = self._take_free(free) or self._wait_for_one(free)
        try:
            yield
        finally:
            os.close(descriptor)  # closing the file releases its flock

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Mark a read in flight until the block ends, then note when it ended."""
        descriptor = os.open(self.reads_path, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH)
            yield
        finally:
            os.utime(descriptor)
            os.close(descriptor)

    def reads_are_quiet(self) -> bool:
        """Return whether no read is in flight and none ended in the last READ_QUIET_S."""
        descriptor = os.open(self.reads_path, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        else:
            return time.time() - os.fstat(descriptor).st_mtime >= READ_QUIET_S
        finally:
            os.close(descriptor)

    def _take_free(self, paths: list[Path]) -> int | None:
        for path in paths:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                continue
            return descriptor
        return None

    def _wait_for_one(self, paths: list[Path]) -> int:
        """Block on one of the paths, the waiters of a process spread over them in turn."""
        with self._counter_lock:
            path = paths[next(self._next_wait) % len(paths)]
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor


class IngestSlotsMiddleware:
    """Run each ingest request inside an ingest slot, each read marked as one."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        count = settings.ARES_INGEST_CONCURRENCY
        self.slots = IngestSlots(settings.VAR_DIR / "ingest-slots", count) if count else None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.slots is None or request.path_info in NOT_READS:
            return self.get_response(request)
        if request.method == "POST" and request.path_info in INGEST_PATHS:
            with self.slots.held():
                return self.get_response(request)
        with self.slots.reading():
            return self.get_response(request)
