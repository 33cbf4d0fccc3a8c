"""Benchmark: plans per second and p50/p95 latency of the planner, shipped rules and 2,000.

    .venv/bin/python bench/planner.py [--rounds 5] [--extra-rules 2000]

Plans every request of tests/data/planner_requests.jsonl (English and Chinese) through
the whole pipeline (analysis, capability planning, resolution, scoring with recorded
evidence, argument extraction) against a fresh SQLite database. Aim: p95 under 1 ms
with the shipped rules.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import statistics
import string
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import migrated_site, percentile  # noqa: E402  (bench/ is the script's own folder)

DATA = ROOT / "tests" / "data" / "planner_requests.jsonl"


def measure(plan, requests: list[str], rounds: int) -> tuple[float, float, float]:
    """Return (plans per second, p50 ms, p95 ms) over `rounds` passes of the requests."""
    timings = []
    for _ in range(rounds):
        for request in requests:
            start = time.perf_counter()
            plan(request)
            timings.append((time.perf_counter() - start) * 1000)
    return 1000 / statistics.mean(timings), statistics.median(timings), percentile(timings, 0.95)


def add_rules(count: int) -> None:
    """Add `count` enabled rules of made-up keywords (they match nothing in the requests)."""
    from planner_app.models import Capability, IntentRule

    rng = random.Random(0)
    capability = Capability.objects.get(name="Regex")
    for index in range(count):
        words = ["".join(rng.choices(string.ascii_lowercase, k=9)) for _ in range(3)]
        rule = IntentRule.objects.create(name=f"bench-{index}", keywords=words,
                                         priority=1000 + index)  # fmt: skip
        rule.capabilities.add(capability)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extra-rules", type=int, default=2000)
    args = parser.parse_args()

    migrated_site("planner")
    from django.core.management import call_command

    call_command("ares_demo", invocations=5000, stdout=io.StringIO())  # recorded evidence
    from planner_app.ruleset_versions import current_ruleset, record_version
    from planner_app.services import plan_request

    requests = [json.loads(line)["request"] for line in DATA.read_text().splitlines() if line]
    for request in requests[:50]:
        plan_request(request)  # warm up: rule set, compiled matchers, evidence cache
    shipped = measure(plan_request, requests, args.rounds)
    rules_before = len(current_ruleset().rules)
    add_rules(args.extra_rules)
    record_version("benchmark rules")
    for request in requests[:50]:
        plan_request(request)
    many = measure(plan_request, requests, args.rounds)

    print(f"{len(requests)} requests x {args.rounds} rounds, SQLite, evidence from 5,000 spans")
    print(f"{'rules':>6} {'plans/s':>9} {'p50 ms':>8} {'p95 ms':>8}")
    for count, (rate, p50, p95) in ((rules_before, shipped),
                                    (len(current_ruleset().rules), many)):  # fmt: skip
        print(f"{count:>6} {rate:>9,.0f} {p50:>8.3f} {p95:>8.3f}")


if __name__ == "__main__":
    main()
