"""The one execution engine every path calls: look up, validate, limit, time out, retry, record.

Tools run on one event loop that the engine owns in a background thread. One loop means
one set of per-tool concurrency limits shared by every caller in the process (web
threads, Celery tasks, async code), and long-lived MCP sessions that stay on the loop
that opened them. Sync tool functions run in a thread pool so they never block it.
A caller's stop signal (CallContext.stop) keeps its calls from starting and abandons the
running read-only ones, as a timeout does; one that changes things is let finish.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tools_app.formatting import estimate_tokens, format_error, format_result
from tools_app.registry import ToolRegistry, UnknownToolError
from tools_app.specs import (
    RETRYABLE_ERRORS,
    ErrorKind,
    SideEffect,
    ToolCall,
    ToolError,
    ToolFailure,
    ToolResult,
    ToolSpec,
)
from tools_app.validation import ArgumentsError, parse_arguments, validate_arguments

logger = logging.getLogger(__name__)

Recorder = Callable[[list[dict[str, Any]]], None]
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
STOP_POLL_S = 0.05  # how often a running call looks at its caller's stop signal
NOT_RUN_STOPPED = "not run: the task was stopped"
STOPPED_WHILE_RUNNING = "stopped while running: the task was stopped"


@dataclass(frozen=True)
class CallContext:
    """Who is calling and for what: carried into every record of the call."""

    trace_id: str = field(default_factory=lambda: secrets.token_hex(16))
    parent_span_id: str | None = None
    agent: str = ""
    session_id: str = ""
    request_text: str = ""
    chosen_by: str = "llm"
    allowed_tools: Collection[str] | None = None  # None: any tool; empty: none at all
    timeout_s: float | None = None  # the caller's timeout for tools that set none (an agent's)
    stop: threading.Event | None = field(default=None, compare=False)  # the caller's stop signal

    @property
    def stopped(self) -> bool:
        """Return whether the caller has asked for its task to stop."""
        return self.stop is not None and self.stop.is_set()


class ToolEngine:
    """Run tool calls through validation, limits, timeouts and retries, and record each attempt."""

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        recorder: Recorder | None = None,
        default_timeout_s: float = 30.0,
        max_parallel: int = 5,
        max_concurrent_calls: int = 32,
        backoff_base_s: float = 1.0,
        max_result_tokens: int = 800,
    ) -> None:
        self.registry = registry
        self.recorder = recorder
        self.default_timeout_s = default_timeout_s
        self.max_parallel = max_parallel
        self.max_concurrent_calls = max_concurrent_calls
        self.backoff_base_s = backoff_base_s
        self.max_result_tokens = max_result_tokens
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_pid = 0
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._record_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.recording_threads = 2
        self._tool_slots: dict[str, asyncio.Semaphore] = {}
        self._all_slots: asyncio.Semaphore | None = None

    # Entry points -------------------------------------------------------------------

    def execute(self, call: ToolCall, context: CallContext | None = None) -> ToolResult:
        """Run one call and return its result; never raises for a failing tool."""
        return self._submit(self._execute(call, context or CallContext())).result()

    async def execute_async(self, call: ToolCall, context: CallContext | None = None) -> ToolResult:
        return await asyncio.wrap_future(
            self._submit(self._execute(call, context or CallContext()))
        )

    def execute_many(
        self,
        calls: Sequence[ToolCall],
        context: CallContext | None = None,
        *,
        max_parallel: int | None = None,
        stop_on_error: bool = False,
    ) -> list[ToolResult]:
        """Run one turn's calls concurrently (bounded); results in call order with their ids."""
        coroutine = self._execute_many(calls, context or CallContext(), max_parallel, stop_on_error)
        return self._submit(coroutine).result()

    async def execute_many_async(
        self,
        calls: Sequence[ToolCall],
        context: CallContext | None = None,
        *,
        max_parallel: int | None = None,
        stop_on_error: bool = False,
    ) -> list[ToolResult]:
        coroutine = self._execute_many(calls, context or CallContext(), max_parallel, stop_on_error)
        return await asyncio.wrap_future(self._submit(coroutine))

    def run_coroutine(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run a coroutine on the engine's loop and wait for it (MCP set-up uses this)."""
        return self._submit(coroutine).result()

    def run_in_recording_threads(self, function: Callable[[], None]) -> None:
        """Run function once in each recording thread (to close their database connections)."""
        if self._record_pool is None:
            return
        workers = self.recording_threads
        everyone = threading.Barrier(workers, timeout=10)  # one task per thread, not two in one

        def run() -> None:
            everyone.wait()
            function()

        for future in [self._record_pool.submit(run) for _ in range(workers)]:
            future.result()

    def close(self) -> None:
        """Stop the engine's loop and thread pool."""
        with self._lock:
            if self._loop is not None and self._loop_pid == os.getpid():
                self._loop.call_soon_threadsafe(self._loop.stop)
                if self._loop_thread is not None:
                    self._loop_thread.join(timeout=5)
                if not self._loop.is_running():
                    self._loop.close()
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
            if self._record_pool is not None:
                self._record_pool.shutdown(wait=True)  # pending records get written
            self._loop = self._loop_thread = self._pool = self._record_pool = None

    # The loop -------------------------------------------------------------------------

    def _submit(self, coroutine: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        loop = self._ensure_loop()
        if threading.current_thread() is self._loop_thread:
            coroutine.close()
            raise RuntimeError("a tool called the engine synchronously: use execute_async")
        return asyncio.run_coroutine_threadsafe(coroutine, loop)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            # A forked child (gunicorn, Celery prefork) inherits no threads: start anew.
            if self._loop is None or self._loop_pid != os.getpid():
                self._loop = asyncio.new_event_loop()
                self._loop_pid = os.getpid()
                self._tool_slots = {}
                self._all_slots = None
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.max_concurrent_calls, thread_name_prefix="ares-tool"
                )
                # Few recording threads: each holds a database connection of its own.
                self._record_pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.recording_threads, thread_name_prefix="ares-record"
                )
                self._loop_thread = threading.Thread(
                    target=self._loop.run_forever, name="ares-tool-engine", daemon=True
                )
                self._loop_thread.start()
            return self._loop

    # One call -------------------------------------------------------------------------

    async def _execute_many(
        self,
        calls: Sequence[ToolCall],
        context: CallContext,
        max_parallel: int | None,
        stop_on_error: bool,
    ) -> list[ToolResult]:
        bound = asyncio.Semaphore(max_parallel or self.max_parallel)
        failed = asyncio.Event()

        async def run(call: ToolCall) -> ToolResult:
            async with bound:
                if stop_on_error and failed.is_set():
                    return self._not_run(call, "not run: an earlier call in this turn failed")
                result = await self._execute(call, context)
                if not result.success:
                    failed.set()
                return result

        return list(await asyncio.gather(*(run(call) for call in calls)))

    async def _execute(self, call: ToolCall, context: CallContext) -> ToolResult:
        started_at, clock = datetime.now(UTC), time.perf_counter()
        spans: list[dict[str, Any]] = []
        if context.stopped:
            spec = self.registry.get(call.name) if call.name in self.registry else None
            return await self._fail_early(
                call, context, ErrorKind.CANCELLED, NOT_RUN_STOPPED, started_at, spec=spec
            )
        try:
            spec = self.registry.get(call.name)
        except UnknownToolError:
            message = self._unknown_tool_message(call.name, context)
            return await self._fail_early(call, context, ErrorKind.NOT_FOUND, message, started_at)
        refusal = self._refusal(spec, context)
        if refusal is not None:
            return await self._fail_early(call, context, *refusal, started_at, spec=spec)
        try:
            valid = validate_arguments(spec.parameters, call.arguments)
        except ArgumentsError as exc:
            error = ToolError(ErrorKind.INVALID_ARGUMENTS, "invalid arguments", tuple(exc.problems))
            result = self._result(call, spec, error=error)
            spans.append(self._span(call, spec, context, result, call.arguments, started_at, clock))
            await self._record(spans)
            return result
        # Record what the model sent; the coercions say what the tool got instead.
        sent = parse_arguments(call.arguments) if valid.coercions else valid.arguments
        attempts = 1 + (spec.max_retries if spec.retryable else 0)
        for attempt in range(1, attempts + 1):
            started_at, clock = datetime.now(UTC), time.perf_counter()
            result = await self._attempt(call, spec, valid.arguments, context)
            span = self._span(call, spec, context, result, sent, started_at, clock, attempt)
            spans.append({**span, "coercions": valid.coercions})
            if result.success or result.error.kind not in RETRYABLE_ERRORS or attempt == attempts:
                break
            # Back off outside the concurrency slot, so waiting never blocks other calls.
            await _sleep_unless_stopped(self.backoff_base_s * 2 ** (attempt - 1), context.stop)
            if context.stopped:
                break  # no retry for a task that was stopped
        result.metadata.update(
            attempts=len(spans),
            coercions=valid.coercions,
            trace_id=context.trace_id,
            span_ids=[span["span_id"] for span in spans],
        )
        await self._record(spans)
        return result

    def _unknown_tool_message(self, name: str, context: CallContext) -> str:
        """Say the name is unknown and list what this caller may call instead."""
        usable = [
            spec.llm_name
            for spec in self.registry.list()
            if context.allowed_tools is None or spec.name in context.allowed_tools
        ]
        shown = ", ".join(usable[:30]) + (
            f" and {len(usable) - 30} more" if len(usable) > 30 else ""
        )
        return f"no tool named {name!r}; available: {shown or 'none'}"

    def _refusal(self, spec: ToolSpec, context: CallContext) -> tuple[ErrorKind, str] | None:
        if not spec.enabled:
            return ErrorKind.DISABLED, f"tool {spec.name!r} is disabled by an operator"
        if context.allowed_tools is not None and spec.name not in context.allowed_tools:
            agent = context.agent or "this agent"
            return ErrorKind.PERMISSION_DENIED, f"{agent} is not allowed to call {spec.name!r}"
        return None

    async def _attempt(
        self, call: ToolCall, spec: ToolSpec, arguments: dict, context: CallContext
    ) -> ToolResult:
        timeout = spec.timeout_s or context.timeout_s or self.default_timeout_s
        async with self._slot(spec):
            clock = time.perf_counter()
            try:
                # A call that changes things is let finish: abandoned, it might still make
                # its change while its record said it was stopped.
                stop = context.stop if spec.side_effect is SideEffect.READ_ONLY else None
                running = _until_stopped(self._run(spec, arguments), stop)
                data = await asyncio.wait_for(running, timeout)
            except TimeoutError:
                error = ToolError(ErrorKind.TIMEOUT, f"{spec.name} timed out after {timeout:g} s")
            except _Stopped as exc:
                error = ToolError(ErrorKind.CANCELLED, str(exc))
            except ToolFailure as exc:
                error = ToolError(exc.kind, str(exc) or type(exc).__name__)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # tool code is outside our control: never let it escape
                logger.warning("tool %s raised %r", spec.name, exc, exc_info=True)
                error = ToolError(ErrorKind.TOOL_ERROR, f"{type(exc).__name__}: {exc}")
            else:
                result = self._result(call, spec, data=data)
                result.metadata["latency_ms"] = (time.perf_counter() - clock) * 1000
                return result
        result = self._result(call, spec, error=error)
        result.metadata["latency_ms"] = (time.perf_counter() - clock) * 1000
        return result

    async def _run(self, spec: ToolSpec, arguments: dict) -> Any:
        if inspect.iscoroutinefunction(spec.function):
            return await spec.function(**arguments)
        loop = asyncio.get_running_loop()
        # A sync tool that overruns its timeout keeps its thread until it returns; Python
        # cannot kill a thread. Built-in tools bound their own work so this stays rare.
        return await loop.run_in_executor(self._pool, lambda: spec.function(**arguments))

    def _slot(self, spec: ToolSpec) -> _Slots:
        if self._all_slots is None:
            self._all_slots = asyncio.Semaphore(self.max_concurrent_calls)
        tool_slot = None
        if spec.max_concurrency:
            tool_slot = self._tool_slots.setdefault(
                spec.name, asyncio.Semaphore(spec.max_concurrency)
            )
        return _Slots(self._all_slots, tool_slot)

    # Results and records ----------------------------------------------------------------

    def _result(
        self, call: ToolCall, spec: ToolSpec, *, data: Any = None, error: ToolError | None = None
    ) -> ToolResult:
        if error is None:
            text = format_result(
                spec.name, data, spec.returns, self.max_result_tokens, spec.llm_view
            )
        else:
            text = format_error(spec.name, error)
        return ToolResult(
            call_id=call.id,
            tool=spec.name,
            success=error is None,
            data=data,
            error=error,
            text=text,
            metadata={"ran_on": spec.ran_on},
        )

    def _not_run(self, call: ToolCall, message: str) -> ToolResult:
        error = ToolError(ErrorKind.CANCELLED, message)
        return ToolResult(
            call.id, call.name, False, error=error, text=format_error(call.name, error)
        )

    async def _fail_early(
        self,
        call: ToolCall,
        context: CallContext,
        kind: ErrorKind,
        message: str,
        started_at: datetime,
        spec: ToolSpec | None = None,
    ) -> ToolResult:
        name = spec.name if spec else call.name
        error = ToolError(kind, message)
        result = ToolResult(call.id, name, False, error=error, text=format_error(name, error))
        span = self._span(call, spec, context, result, call.arguments, started_at, None)
        await self._record([span])
        return result

    def _span(
        self,
        call: ToolCall,
        spec: ToolSpec | None,
        context: CallContext,
        result: ToolResult,
        arguments: Any,
        started_at: datetime,
        clock: float | None,
        attempt: int = 1,
    ) -> dict[str, Any]:
        latency_ms = (time.perf_counter() - clock) * 1000 if clock is not None else 0.0
        name = spec.name if spec else _CONTROL_CHARS.sub("?", str(call.name))[:200] or "?"
        span = {
            "trace_id": context.trace_id,
            "span_id": secrets.token_hex(8),
            "parent_span_id": context.parent_span_id,
            "kind": "tool",
            "tool_name": name,
            "tool_call_id": _CONTROL_CHARS.sub("?", call.id)[:200],
            "chosen_by": context.chosen_by,
            "ran_on": spec.ran_on if spec else "none",  # an unknown tool ran nowhere
            "agent": context.agent,
            "session_id": context.session_id,
            "request_text": context.request_text,
            "arguments": arguments,
            "result": result.data,
            "status": "ok" if result.success else "error",
            "started_at": started_at,
            "latency_ms": latency_ms,
            "result_tokens": estimate_tokens(result.text),
            "attempt": attempt,
        }
        if result.error is not None:
            span["error_kind"] = str(result.error.kind)
            span["error_message"] = format_error(name, result.error)
        if _stopped_by_caller(result, context):
            # The user's Stop is no failure of the tool: it counts in no error rate.
            span["status"] = "stopped"
        return span

    async def _record(self, spans: list[dict[str, Any]]) -> None:
        if self.recorder is None:
            return
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._record_pool, self.recorder, spans)
        except Exception:  # a lost record must not turn a good result into a failure
            logger.exception("could not record %d tool span(s)", len(spans))


def _stopped_by_caller(result: ToolResult, context: CallContext) -> bool:
    """Return whether a call failed only because its caller stopped the task."""
    error = result.error
    return error is not None and error.kind == ErrorKind.CANCELLED and context.stopped


class _Stopped(Exception):
    """The caller's stop signal was set: the call was abandoned, or never started."""


async def _until_stopped(work: Coroutine[Any, Any, Any], stop: threading.Event | None) -> Any:
    """Await work, abandoning it (_Stopped) soon after stop is set.

    The stop signal is a threading.Event set from another thread, so it is polled. An
    abandoned sync tool keeps its thread until it returns, as one that overran its timeout.
    """
    if stop is None:
        return await work
    if stop.is_set():  # waited for a slot meanwhile
        work.close()
        raise _Stopped(NOT_RUN_STOPPED)
    task = asyncio.ensure_future(work)
    try:
        while not stop.is_set():
            done, _ = await asyncio.wait({task}, timeout=STOP_POLL_S)
            if done:
                return task.result()
        raise _Stopped(STOPPED_WHILE_RUNNING)
    finally:
        task.cancel()  # a no-op once it is done


async def _sleep_unless_stopped(seconds: float, stop: threading.Event | None) -> None:
    """Sleep, waking early when stop is set."""
    if stop is None:
        await asyncio.sleep(seconds)
        return
    deadline = time.monotonic() + seconds
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(left, STOP_POLL_S))


class _Slots:
    """Hold the engine-wide slot and the tool's own slot (if it has a limit) together."""

    def __init__(self, everyone: asyncio.Semaphore, tool: asyncio.Semaphore | None) -> None:
        self.everyone, self.tool = everyone, tool

    async def __aenter__(self) -> None:
        if self.tool is not None:
            await self.tool.acquire()
        try:
            await self.everyone.acquire()
        except BaseException:
            if self.tool is not None:
                self.tool.release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.everyone.release()
        if self.tool is not None:
            self.tool.release()
