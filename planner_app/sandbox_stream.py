"""The sandbox chat's stream: run a task in a thread and send its events as they happen.

The runner (planner_app/agents/sandbox_runner.py) sends the loop's events; this adds what the page
shows beside them (the trace's URL, where a tool ran) and streams them.

Streaming: the POST that starts a task answers with server-sent events (text/event-stream).
The task runs in a thread of the same process that feeds a queue, and the response reads
the queue until the task ends or ARES_SANDBOX_TIMEOUT_S passes. One request, no state
between requests: it works under runserver and gunicorn's sync workers alike, with any
number of processes. A failure in the task becomes an `error` event, never a 500.

Stopping: the first event (`accepted`) gives the task's trace id; a POST to /sandbox/stop
with it stores a SandboxStop row, which may land in any process. The streaming process
looks for the row every STOP_POLL_S and sets the task's stop event (a `stopping` event
says so); the task then ends "cancelled". A page that goes away (the stream closed) stops
its task the same way.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connections
from django.urls import reverse
from django.utils import timezone

from planner_app.agents.loop_events import LoopEvent
from planner_app.agents.sandbox_runner import SandboxTask, finished_sentence, run_sandbox_task
from planner_app.models import SandboxStop
from tools_app.registry import ToolRegistry
from tools_app.site_engine import get_engine

logger = logging.getLogger(__name__)

HEARTBEAT_S = 2.0  # also how soon a closed page is noticed: a write to it fails
STOP_POLL_S = 0.5

Emit = Callable[[dict[str, Any]], None]


def stream_events(task: SandboxTask, timeout_s: float) -> Iterator[str]:
    """Run the task in a thread and yield its events as server-sent events until it ends."""
    events: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    worker = threading.Thread(
        target=_run_into, args=(task, events.put), name=f"sandbox-{task.trace_id[:8]}", daemon=True
    )
    accepted = {"type": "accepted", "trace_id": task.trace_id, "session_id": task.session_id}
    yield sse_frame(with_links(accepted))
    worker.start()
    now = time.monotonic()
    deadline, beat, poll = now + timeout_s, now + HEARTBEAT_S, now + STOP_POLL_S
    try:
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = events.get(timeout=min(left, STOP_POLL_S))
            except queue.Empty:
                event = {}
            if event is None:
                return
            if event:
                yield sse_frame(event)
            now = time.monotonic()
            if now >= poll:
                poll = now + STOP_POLL_S
                if not task.stop.is_set() and stop_requested(task.trace_id):
                    task.stop.set()
                    yield sse_frame({"type": "stopping", "message": STOPPING})
            if now >= beat:
                beat = now + HEARTBEAT_S
                yield ": still working\n\n"  # a comment line: keeps proxies from closing it
        message = (
            f"no answer within {timeout_s:g} s (ARES_SANDBOX_TIMEOUT_S): the task goes on in "
            "the background, and its trace fills in as it runs"
        )
        yield sse_frame(
            with_links({"type": "error", "message": message, "trace_id": task.trace_id})
        )
    except GeneratorExit:  # the page went away: no one is left to see the task out
        task.stop.set()
        raise
    finally:
        _forget_stop(task.trace_id)


STALE_STOP = timedelta(days=1)
STOPPING = (
    "stopping: nothing new starts, and the step running now is abandoned (a call that "
    "changes things is let finish)"
)


def request_stop(trace_id: str, who: str) -> None:
    """Ask the process streaming the task to stop it (it may be another process)."""
    # A stop that came after its task ended is never read: such rows go after a day.
    SandboxStop.objects.filter(requested_at__lt=timezone.now() - STALE_STOP).delete()
    SandboxStop.objects.get_or_create(trace_id=trace_id, defaults={"requested_by": who[:150]})


def stop_requested(trace_id: str) -> bool:
    try:
        return SandboxStop.objects.filter(trace_id=trace_id).exists()
    except DatabaseError:  # the database is away: the task goes on, the stream with it
        logger.warning("could not look for a stop of sandbox task %s", trace_id, exc_info=True)
        return False


def _forget_stop(trace_id: str) -> None:
    try:
        SandboxStop.objects.filter(trace_id=trace_id).delete()
    except DatabaseError:
        logger.warning("could not delete the stop of sandbox task %s", trace_id, exc_info=True)


def sse_frame(event: dict[str, Any]) -> str:
    """Return one server-sent event; JSON keeps every newline escaped, so one data line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, default=str)}\n\n"


def with_links(event: dict[str, Any], registry: ToolRegistry | None = None) -> dict[str, Any]:
    """Add what the page shows beside an event: the trace's URL, where a tool ran."""
    if event.get("trace_id"):
        event["trace_url"] = reverse("trace-detail", args=[event["trace_id"]])
    if registry is not None and event["type"] in ("tool_started", "tool_finished"):
        tool = event.get("tool") or ""
        event["ran_on"] = registry.get(tool).ran_on if tool in registry else ""
    return event


def run_task(task: SandboxTask, emit: Emit) -> None:
    """Run the task to its end, every step to emit as a JSON-ready dict."""
    # Taken here: get_engine() may read the database, which events sent from inside a
    # workflow's event loop must not.
    registry = get_engine().registry

    def send(event: LoopEvent) -> None:
        payload = with_links(event.as_dict(), registry)
        if payload["type"] == "started":
            payload["session_id"] = task.session_id
        elif payload["type"] == "final":
            payload["finished"] = finished_sentence(payload["finish_reason"])
        emit(payload)

    run_sandbox_task(task, send)


def _run_into(task: SandboxTask, put: Callable[[dict[str, Any] | None], None]) -> None:
    try:
        run_task(task, put)
    except Exception as exc:  # the page must hear of it; the log keeps the traceback
        logger.exception("sandbox task %s (%s) failed", task.trace_id, task.mode)
        error = {"type": "error", "message": f"{type(exc).__name__}: {exc}"}
        put(with_links({**error, "trace_id": task.trace_id}))
    finally:
        put(None)
        connections.close_all()
