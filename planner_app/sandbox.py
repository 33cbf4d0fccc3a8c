"""The sandbox chat's stream: run a task in a thread and send its events as they happen.

The runner (planner_app/agents/sandbox.py) sends the loop's events; this adds what the page
shows beside them (the trace's URL, where a tool ran) and streams them.

Streaming: the POST that starts a task answers with server-sent events (text/event-stream).
The task runs in a thread of the same process that feeds a queue, and the response reads
the queue until the task ends or ARES_SANDBOX_TIMEOUT_S passes. One request, no state
between requests: it works under runserver and gunicorn's sync workers alike, with any
number of processes. A failure in the task becomes an `error` event, never a 500.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.db import connections
from django.urls import reverse

from planner_app.agents.loop import LoopEvent
from planner_app.agents.sandbox import SandboxTask, run_sandbox_task
from tools_app.registry import ToolRegistry
from tools_app.runtime import get_engine

logger = logging.getLogger(__name__)

HEARTBEAT_S = 10.0

Emit = Callable[[dict[str, Any]], None]


def stream_events(task: SandboxTask, timeout_s: float) -> Iterator[str]:
    """Run the task in a thread and yield its events as server-sent events until it ends."""
    events: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
    worker = threading.Thread(
        target=_run_into, args=(task, events.put), name=f"sandbox-{task.trace_id[:8]}", daemon=True
    )
    worker.start()
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            event = events.get(timeout=min(left, HEARTBEAT_S))
        except queue.Empty:
            yield ": still working\n\n"  # a comment line: keeps proxies from closing the stream
            continue
        if event is None:
            return
        yield sse_frame(event)
    message = (
        f"no answer within {timeout_s:g} s (ARES_SANDBOX_TIMEOUT_S): the task goes on in "
        "the background, and its trace fills in as it runs"
    )
    yield sse_frame(with_links({"type": "error", "message": message, "trace_id": task.trace_id}))


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
        emit(with_links(event.as_dict(), registry))

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
