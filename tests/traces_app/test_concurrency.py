"""Concurrent reporters on PostgreSQL: each span stored and counted exactly once, no deadlock."""

from __future__ import annotations

import random
import secrets
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from traces_app.models import Invocation, Trace

pytestmark = pytest.mark.postgres

THREADS = 8


def post_all_at_once(url: str, raw_key: str, batches: list[list[dict]]) -> list[httpx.Response]:
    """Post each batch from its own thread and client, released together by a barrier."""
    start = threading.Barrier(len(batches))

    def post(batch: list[dict]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {raw_key}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            start.wait()
            return client.post("/invocations", json={"invocations": batch})

    with ThreadPoolExecutor(max_workers=len(batches)) as pool:
        return list(pool.map(post, batches))


@pytest.fixture
def post_concurrently(live_server, make_key):
    raw_key = make_key("report")
    return lambda batches: post_all_at_once(f"{live_server.url}/api/v1", raw_key, batches)


def test_it_stores_a_batch_sent_by_many_clients_at_once_exactly_once(post_concurrently, span):
    trace_ids = [secrets.token_hex(16) for _ in range(5)]
    batch = [span(trace_id=trace_ids[n % 5], input_tokens=n) for n in range(100)]

    responses = post_concurrently([batch] * THREADS)

    assert [response.status_code for response in responses] == [200] * THREADS
    accepted = Counter(
        item["span_id"]
        for response in responses
        for item in response.json()["items"]
        if item["status"] == "accepted"
    )
    assert accepted == Counter(s["span_id"] for s in batch)
    assert sum(response.json()["duplicates"] for response in responses) == 100 * (THREADS - 1)
    assert Invocation.objects.count() == 100


def test_it_counts_each_span_once_in_its_trace_under_concurrent_repeats(post_concurrently, span):
    trace_ids = [secrets.token_hex(16) for _ in range(5)]
    batch = [span(trace_id=trace_ids[n % 5], input_tokens=n) for n in range(100)]

    post_concurrently([batch] * THREADS)

    totals = {t.trace_id: (t.span_count, t.input_tokens) for t in Trace.objects.all()}
    assert totals == {
        trace_id: (20, sum(n for n in range(100) if n % 5 == index))
        for index, trace_id in enumerate(trace_ids)
    }


def test_it_keeps_trace_totals_right_with_overlapping_batches(post_concurrently, span):
    """Every client sends its own spans, some repeated by others, to the same traces."""
    shuffle = random.Random(7).shuffle
    trace_ids = [secrets.token_hex(16) for _ in range(6)]
    spans = [
        span(trace_id=trace_ids[n % 6], input_tokens=1, status="error" if n % 10 == 0 else "ok")
        for n in range(240)
    ]
    batches = []
    for client in range(THREADS):
        own = spans[client * 30 : (client + 1) * 30]
        borrowed = spans[((client + 1) % THREADS) * 30 :][:10]  # also sent by the next client
        batch = own + borrowed
        shuffle(batch)
        batches.append(batch)

    responses = post_concurrently(batches)

    assert [response.status_code for response in responses] == [200] * THREADS
    assert sum(response.json()["accepted"] for response in responses) == 240
    assert Invocation.objects.count() == 240
    for trace in Trace.objects.all():
        stored = Invocation.objects.filter(trace=trace)
        assert trace.span_count == stored.count() == 40
        assert trace.input_tokens == 40
        assert trace.failed_calls == stored.filter(status="error").count()


def test_it_serves_reads_while_batches_are_written(post_concurrently, live_server, make_key, span):
    read_key = make_key("read")
    batches = [[span() for _ in range(50)] for _ in range(THREADS - 2)]
    statuses: list[int] = []

    def read_while_writing() -> None:
        headers = {"Authorization": f"Bearer {read_key}"}
        with httpx.Client(base_url=f"{live_server.url}/api/v1", headers=headers) as client:
            for _ in range(10):
                statuses.append(client.get("/invocations", params={"limit": 20}).status_code)

    reader = threading.Thread(target=read_while_writing)
    reader.start()
    responses = post_concurrently(batches)
    reader.join()

    assert [response.status_code for response in responses] == [200] * (THREADS - 2)
    assert statuses == [200] * 10
    assert Invocation.objects.count() == 50 * (THREADS - 2)
