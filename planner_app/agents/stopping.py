"""A task's stop signal, as the agent loop and plan-execute-replan honour it.

The caller (the sandbox's Stop button, a closed stream) sets a threading.Event; a task
checks it before each model call and while waiting for one. A model call blocks in the
LLM client, so with a stop signal it runs in a daemon thread that is abandoned once the
signal is set: its reply, if it ever comes, is dropped.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tools_app.engine import STOP_POLL_S
from tools_app.specs import ErrorKind

T = TypeVar("T")

STOPPED_REASON = "the task was stopped"
STOPPED_ANSWER = "Stopped before the model answered."
STOPPED_BY = "stopped by its caller"  # the span's error message
CANCELLED = "cancelled"  # the finish_reason of a task that was stopped
STOPPED_STATUS = "stopped"  # the status of its spans (traces_app.models.SpanStatus.STOPPED)


def mark_stopped(span: dict[str, Any]) -> None:
    """Mark a span (the task's, or the model call it cut short) as ended by a stop.

    Status "stopped", not an error: the user's Stop is no failure of the model or agent,
    so it counts in no error rate, evidence or "Has failures" (traces_app.models).
    """
    span.update(
        status=STOPPED_STATUS, error_kind=str(ErrorKind.CANCELLED), error_message=STOPPED_BY
    )


class Stopped(Exception):
    """The task's stop signal was set: end the task now, asking the model nothing more."""

    def __init__(self) -> None:
        super().__init__(STOPPED_REASON)


def is_stopped(stop: threading.Event | None) -> bool:
    return stop is not None and stop.is_set()


def check_stop(stop: threading.Event | None) -> None:
    """Raise Stopped when the stop signal is set."""
    if is_stopped(stop):
        raise Stopped


def call_unless_stopped(function: Callable[[], T], stop: threading.Event | None) -> T:
    """Return function(); with a stop signal, raise Stopped as soon as it is set instead.

    Without one (None) this is a plain call in this thread, as before stop signals existed.
    """
    if stop is None:
        return function()
    check_stop(stop)
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(function())
        except BaseException as exc:  # handed to the waiting thread, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name="ares-stoppable-call", daemon=True).start()
    while not future.done():
        concurrent.futures.wait([future], timeout=STOP_POLL_S)
        if not future.done():
            check_stop(stop)
    return future.result()
