"""Rule proposals against removed keywords: the share restored, the share an operator would reject.

    .venv/bin/python bench/proposals.py                    # the held-out split and the demo
    .venv/bin/python bench/proposals.py --split tune       # what the parameters were set on
    .venv/bin/python bench/proposals.py --split held-out --verbose

For each keyword of the shipped rules (one at a time) the keyword is removed; the requests
of the split that the shipped rules plan and the rules without the keyword no longer plan
are "lost". If at least --min-support requests are lost, traffic is made for the split:
each lost request served by an LLM calling the tool the shipped rules planned (with the
labelled arguments where the corpus has them, else the shipped plan's), each request the
reduced rules still plan served by the planner, and each request the shipped rules can't
plan either served by an LLM calling its labelled tool (noise: words the proposals may
find there are proposals too, counted once, not once per removal). Then
`propose_rules` runs against the reduced rules.

- restored: a proposal adds exactly the removed keyword (not a word that merely plans the
  same requests) to a rule of the removed keyword's capabilities. Denominator: the
  removals that lost at least --min-support requests (fewer can't be proposed by design).
- wrong: a proposed word an operator would reject: under the shipped rules it matches a
  request (of the whole corpus and the demo) that those rules plan with capabilities that
  do not include the proposal's (directly or by subsumption). Denominator: distinct
  (capability, word) proposals made across the removals of the split, each counted once.

Both with 95% Wilson intervals. The splits: tests/data/planner_requests.jsonl cut in two
halves stratified by labelled tool (seed 25), "tune" and "held-out"; and "demo", the
requests of traces_app/demo_spans.py (serving tool: its list's, or the shipped plan's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from figures import migrated_site  # noqa: E402  (bench/ is the script's own folder)

DATA = ROOT / "tests" / "data" / "planner_requests.jsonl"
SPLITS = ("tune", "held-out", "demo")


@dataclass(frozen=True)
class Item:
    """A request of a split, and the call that serves it when no rule plans it."""

    request: str
    tool: str | None  # None: nothing serves it (a labelled "no tool" request)
    arguments: dict[str, Any] | None  # None: unknown, take the shipped plan's


@dataclass
class Outcome:
    """What one split's removals gave."""

    removed: int = 0
    evaluable: list[tuple[str, str, int]] = field(default_factory=list)  # (rule, word, lost)
    restored: list[tuple[str, str]] = field(default_factory=list)
    missed: list[tuple[str, str, str]] = field(default_factory=list)  # (rule, word, proposed)
    proposals: dict[tuple[str, str], str] = field(default_factory=dict)  # -> "" or why wrong
    baseline: dict[tuple[str, str], str] = field(default_factory=dict)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=[*SPLITS, "report"], default="report",
                        help="one split, or 'report': held-out and demo")  # fmt: skip
    parser.add_argument("--min-support", type=int, default=2)
    parser.add_argument("--verbose", action="store_true", help="list misses and wrong words")
    return parser.parse_args()


def corpus_splits() -> dict[str, list[Item]]:
    """Return the labelled corpus cut in two halves stratified by tool, and the demo's requests."""
    from sklearn.model_selection import train_test_split

    from traces_app.demo_spans import OUTSIDE_REQUESTS, REQUESTS_BY_TOOL

    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]
    items = [Item(r["request"], r["tool"], r["arguments"]) for r in rows]
    tune, held_out = train_test_split(
        items, test_size=0.5, random_state=25, stratify=[str(i.tool) for i in items]
    )
    demo = [Item(text, tool, None) for tool, texts in REQUESTS_BY_TOOL.items() for text in texts]
    demo += [Item(text, None, None) for text in OUTSIDE_REQUESTS]
    return {"tune": tune, "held-out": held_out, "demo": demo}


class Bench:
    """Plan the splits under the shipped rules once; run a removal against one split."""

    def __init__(self, min_support: int) -> None:
        from planner_app.pipeline.planner import Planner
        from planner_app.ruleset_versions import ruleset_from_snapshot, take_snapshot
        from tools_app.site_engine import get_engine

        self.min_support = min_support
        self.snapshot = take_snapshot()
        self.shipped = ruleset_from_snapshot(self.snapshot, 1)
        self.registry = get_engine().registry
        self.planner = Planner()
        self.splits = corpus_splits()
        self.world = list(dict.fromkeys(i.request for items in self.splits.values() for i in items))
        self.shipped_plans = {r: self._choice(r, self.shipped) for r in self.world}
        self.cpu: list[float] = []  # CPU seconds per propose_rules call

    def _choice(self, request: str, ruleset: Any) -> Any:
        from planner_app.backtest import Choice

        return Choice.of(self.planner.plan(request, self.registry, ruleset))

    def keywords(self) -> list[tuple[str, str]]:
        """Return every (rule, keyword) of the shipped, enabled rules."""
        return [
            (r["name"], k) for r in self.snapshot["rules"] if r["enabled"] for k in r["keywords"]
        ]

    def run(self, split: str) -> Outcome:
        outcome = Outcome()
        items = self.splits[split]
        outcome.baseline = self._judged(self._proposals(items, self.snapshot, set()))
        for rule, word in self.keywords():
            outcome.removed += 1
            self._remove(outcome, items, rule, word)
        return outcome

    def _remove(self, outcome: Outcome, items: list[Item], rule: str, word: str) -> None:
        from planner_app.ruleset_versions import ruleset_from_snapshot

        snapshot = json.loads(json.dumps(self.snapshot))
        target = next(r for r in snapshot["rules"] if r["name"] == rule)
        target["keywords"] = [k for k in target["keywords"] if k != word]
        reduced = ruleset_from_snapshot(snapshot, 2)
        lost = {
            i.request
            for i in items
            if not self.shipped_plans[i.request].needs_llm
            and self._choice(i.request, reduced).needs_llm
        }
        if len(lost) < self.min_support:
            return
        outcome.evaluable.append((rule, word, len(lost)))
        candidates = self._proposals(items, snapshot, lost)
        capabilities = tuple(sorted(target["capabilities"]))
        if any(_adds(c, word, capabilities, snapshot) for c in candidates):
            outcome.restored.append((rule, word))
        else:
            words = ", ".join(f"{c.target}:{_words(c)}" for c in candidates) or "nothing"
            outcome.missed.append((rule, word, words))
        for key, why in self._judged(candidates).items():
            if key not in outcome.baseline:
                outcome.proposals.setdefault(key, why)

    def _proposals(self, items: list[Item], snapshot: dict, lost: set[str]) -> list[Any]:
        from planner_app.proposals.candidates import Backtester
        from planner_app.proposals.rules import propose_rules
        from planner_app.ruleset_versions import ruleset_from_snapshot

        ruleset = ruleset_from_snapshot(snapshot, 2)
        traffic = [self._served(n, item, ruleset, lost) for n, item in enumerate(items)]
        backtester = Backtester([i.request for i in items], ruleset, snapshot, self.registry)
        started = time.process_time()
        candidates = propose_rules([s for s in traffic if s], backtester, ruleset, self.min_support)
        self.cpu.append(time.process_time() - started)
        return candidates

    def _served(self, n: int, item: Item, ruleset: Any, lost: set[str]) -> Any:
        """Return the recorded request: the LLM serves what the rules don't plan."""
        from planner_app.proposals.traffic import Call, Served

        at = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=n)
        shipped = self.shipped_plans[item.request]
        if item.request in lost:
            tool, arguments = shipped.steps[0][0], json.loads(shipped.steps[0][1])
            if item.tool == tool and item.arguments is not None:
                arguments = item.arguments
            chosen_by = "llm"
        elif not (now := self._choice(item.request, ruleset)).needs_llm:
            tool, arguments, chosen_by = now.steps[0][0], json.loads(now.steps[0][1]), "planner"
        elif item.tool is not None:
            tool, arguments, chosen_by = item.tool, item.arguments or {}, "llm"
        else:
            return None
        call = Call(tool, chosen_by, True, arguments, None, at)
        return Served(f"t{n}", item.request, at, (call,))

    def _judged(self, candidates: list[Any]) -> dict[tuple[str, str], str]:
        """Return each proposal's (capability, word) with why an operator would reject it."""
        return {(c.target, _words(c)): self._wrong(c.target, _words(c)) for c in candidates}

    def _wrong(self, capability: str, word: str) -> str:
        from planner_app.pipeline.analysis import SemanticAnalyzer
        from planner_app.pipeline.planning import CapabilityPlanner
        from planner_app.pipeline.ruleset import IntentRule, RuleSet

        alone = RuleSet(0, rules=(IntentRule("probe", (capability,), (word,)),))
        analyzer, covered = SemanticAnalyzer(), CapabilityPlanner()._covered_by
        for request in self.world:
            choice = self.shipped_plans[request]
            if choice.needs_llm or not analyzer.analyze(request, alone).matches:
                continue
            related = {capability, *covered(capability, self.shipped)}
            if not any(c in related or capability in covered(c, self.shipped)
                       for c in choice.capabilities):  # fmt: skip
                return f"{request!r} ({', '.join(choice.capabilities)})"
        return ""


def _words(candidate: Any) -> str:
    return ",".join(w for op in candidate.ops for w in op.get("keywords", []))


def _adds(candidate: Any, word: str, capabilities: tuple[str, ...], snapshot: dict) -> bool:
    """Return whether the candidate puts `word` in a rule of exactly these capabilities."""
    for op in candidate.ops:
        if word not in op.get("keywords", []):
            continue
        if op["op"] == "new_rule" and tuple(sorted(op["capabilities"])) == capabilities:
            return True
        rule = next((r for r in snapshot["rules"] if r["name"] == op.get("rule")), None)
        if rule is not None and tuple(sorted(rule["capabilities"])) == capabilities:
            return True
    return False


def within_reach(word: str) -> bool:
    """Return whether the proposals can make the word at all: one English word, or 2-4
    Chinese characters (not a phrase, not a single character)."""
    from planner_app.proposals.rules import is_chinese

    if is_chinese(word):
        return 2 <= len(word) <= 4
    return word.replace("_", "").isalnum()


def wilson(successes: int, total: int) -> str:
    """Return 'k/n = p% [low-high%]', the 95% Wilson interval."""
    from scipy.stats import binomtest

    if total == 0:
        return "0/0 (no data)"
    low, high = binomtest(successes, total).proportion_ci(0.95, method="wilson")
    return (
        f"{successes}/{total} = {100 * successes / total:.1f}% [{100 * low:.1f}-{100 * high:.1f}%]"
    )


def report(split: str, outcome: Outcome, verbose: bool) -> None:
    wrong = [key for key, why in outcome.proposals.items() if why]
    reach = [(rule, word) for rule, word, _ in outcome.evaluable if within_reach(word)]
    restored_in_reach = sum(1 for key in outcome.restored if key in reach)
    base_wrong = sum(1 for why in outcome.baseline.values() if why)
    print(f"\n## {split}")
    print(f"keywords removed: {outcome.removed}; losing >= min support requests: "
          f"{len(outcome.evaluable)}")  # fmt: skip
    print(f"restored: {wilson(len(outcome.restored), len(outcome.evaluable))}")
    print(f"  of those the proposals can make (one English word, 2-4 Chinese characters): "
          f"{wilson(restored_in_reach, len(reach))}")  # fmt: skip
    print(f"wrong (an operator would reject): {wilson(len(wrong), len(outcome.proposals))}")
    print(f"proposals on the shipped rules themselves (counted apart): {len(outcome.baseline)}, "
          f"{base_wrong} wrong")  # fmt: skip
    if verbose:
        for rule, word, proposed in outcome.missed:
            print(f"  missed {rule}:{word!r}; proposed: {proposed}")
        for key in wrong:
            print(f"  wrong {key}: matches {outcome.proposals[key]}")
        for key, why in outcome.baseline.items():
            print(f"  baseline {key}{': wrong, ' + why if why else ''}")
        print("  lost per evaluable removal:", Counter(n for _, _, n in outcome.evaluable))


def main() -> None:
    args = parse_args()
    migrated_site("proposals")
    bench = Bench(args.min_support)
    splits = ["held-out", "demo"] if args.split == "report" else [args.split]
    for split in splits:
        bench.cpu.clear()
        report(split, bench.run(split), args.verbose)
        cpu = sorted(bench.cpu)
        print(f"propose_rules CPU per call: median {cpu[len(cpu) // 2]:.2f} s, max {cpu[-1]:.2f} s "
              f"({len(cpu)} calls, the backtester's first plans included)")  # fmt: skip


if __name__ == "__main__":
    main()
