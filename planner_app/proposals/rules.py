"""Rule proposals: words for an intent rule, mined from requests the rules left to an LLM.

A request the current rules can't plan (no rule matched, or the plan needs the LLM) that
a tool call then served (an LLM or an outside agent chose it, and it worked) says the
rules lack a word. For each serving tool, every word of those requests (English words
without scikit-learn's stop words, Chinese substrings of 2 to 4 characters) that at
least MIN_SUPPORT of them share is tried in each rule of each capability the tool is
mapped to, and the backtester plans the recorded requests with it. A word is kept where
it plans the most of those requests with the serving tool, if it changes no tool or
argument of a plan the rules make now, plans no request another tool served and breaks
none. Between capabilities that plan the same (the calculator has seven), the recorded
call's arguments decide, then the capability's own description naming the word, then
the TF-IDF likeness of the requests to those the rules plan for each capability. Words
are then picked greedily, each for the requests no word picked before it plans, while it
still plans at least MIN_SUPPORT of them; among words that plan as many, a Chinese word
not beginning or ending at a particle, the word fewer requests of other tools hold, the
likelier Chinese word (accessor variety), the shorter and the earlier wins.

No Django here: traffic, a Backtester and a RuleSet in, Candidates out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, TfidfVectorizer
from sklearn.metrics.pairwise import cosine_similarity

from planner_app.backtest import BacktestReport, Choice
from planner_app.pipeline.analysis import singulars
from planner_app.pipeline.ruleset import IntentRule, RuleSet
from planner_app.proposals.candidates import EVIDENCE_SHOWN, Backtester, Candidate, summary
from planner_app.proposals.traffic import Call, Served

MIN_SUPPORT = 2  # requests a word must newly plan: one-off text never becomes a rule
MAX_WORDS = 60  # words tried per serving tool, most shared first: each costs a backtest
_ENGLISH = re.compile(r"[A-Za-z0-9_]+")  # as the rules' word index reads words: md5, sha256
_CHINESE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]+")
_CHINESE_LENGTHS = (2, 3, 4)
# Particles, measure words and pronouns: a substring that begins or ends with one is
# rarely a word (的最, 个字). scikit-learn has no Chinese stop words; this is the short list.
_CHINESE_PARTICLES = frozenset("的了个是有在和与及把将请我你他它这那吗呢么吧啊")


@dataclass
class _Trial:
    """What one word does in one capability's rule."""

    word: str
    capability: str
    ops: list[dict[str, Any]]
    planned: set[str]  # evidence requests it newly plans with the serving tool
    same_arguments: set[str]  # of those, planned with the recorded call's arguments
    harm: list[str] = field(default_factory=list)  # why it may not be proposed
    report: BacktestReport | None = None


def propose_rules(
    traffic: Sequence[Served],
    backtester: Backtester,
    ruleset: RuleSet,
    min_support: int = MIN_SUPPORT,
) -> list[Candidate]:
    """Return a rule proposal per word that plans requests the rules now leave to the LLM."""
    served_by = {served.request: call for served in traffic if (call := served.served_by())}
    unplanned = _unplanned_by_tool(traffic, backtester, ruleset)
    candidates = []
    for tool, evidence in sorted(unplanned.items()):
        proposer = _ToolProposer(tool, evidence, backtester, ruleset, served_by, min_support)
        candidates.extend(proposer.candidates())
    return candidates


def words_of(request: str) -> list[str]:
    """Return the words a rule could take from a request, in order, each once.

    English words (lowercased, stop words and one-letter words left out) and every run of
    2 to 4 Chinese characters: Chinese has no spaces, so the word is one of its substrings.
    """
    words = [
        word
        for word in (match.lower() for match in _ENGLISH.findall(request))
        if len(word) > 1 and not word.isdigit() and word not in ENGLISH_STOP_WORDS
    ]
    for run in _CHINESE.findall(request):
        for length in _CHINESE_LENGTHS:
            words.extend(run[i : i + length] for i in range(len(run) - length + 1))
    return list(dict.fromkeys(words))


def accessor_variety(word: str, texts: Sequence[str]) -> int:
    """Return how many different characters stand before and after a Chinese word (the fewer side).

    A substring that is a word meets many neighbours; a piece of a longer word (公约 of
    公约数, 个字 of 个字符) always meets the same one. Each start or end of a text, or a
    non-Chinese neighbour, counts as a neighbour of its own (Feng et al., 2004).
    """
    left: set[str] = set()
    right: set[str] = set()
    for number, text in enumerate(texts):
        start = text.find(word)
        while start >= 0:
            end = start + len(word)
            before = text[start - 1] if start > 0 else ""
            after = text[end] if end < len(text) else ""
            left.add(before if is_chinese(before) else f"{number}:{start}")
            right.add(after if is_chinese(after) else f"{number}:{end}")
            start = text.find(word, start + 1)
    return min(len(left), len(right))


def is_chinese(word: str) -> bool:
    """Return whether a word is Chinese (matched as a substring, put in a Chinese rule)."""
    return bool(_CHINESE.search(word))


def rules_for(ruleset: RuleSet, capability: str, word: str) -> list[IntentRule]:
    """Return the rules a word for `capability` may go in, likeliest first: rules of that
    capability alone, in the word's language (zh or en, or "any" with keywords in the
    word's script), most keywords in that script first."""
    chinese = is_chinese(word)

    def in_script(rule: IntentRule) -> int:
        return sum(1 for keyword in rule.keywords if is_chinese(keyword) == chinese)

    fitting = [
        rule
        for rule in ruleset.ordered_rules
        if rule.capabilities == (capability,)
        and rule.language in ("any", "zh" if chinese else "en")
        and (rule.language != "any" or in_script(rule))
    ]
    return sorted(fitting, key=lambda rule: (-in_script(rule), rule.priority))


def _unplanned_by_tool(
    traffic: Sequence[Served], backtester: Backtester, ruleset: RuleSet
) -> dict[str, list[Served]]:
    """Return the served requests the rules can't plan, by the mapped tool that served them."""
    mapped = {mapping.tool for mapping in ruleset.mappings}
    by_tool: dict[str, dict[str, Served]] = {}
    for served in traffic:
        call = served.served_by()
        if call is None or call.tool not in mapped or not served.request.strip():
            continue
        if backtester.choice(served.request).needs_llm:
            by_tool.setdefault(call.tool, {}).setdefault(served.request, served)
    return {tool: list(requests.values()) for tool, requests in by_tool.items()}


def _same_arguments(planned: str, call: Call) -> bool:
    """Return whether a planned step's arguments (canonical JSON) are the recorded call's."""
    recorded = call.arguments
    if isinstance(recorded, str):
        try:
            recorded = json.loads(recorded)
        except ValueError:
            return False
    return _squeezed(json.loads(planned)) == _squeezed(recorded)


def _numbers_out(text: str) -> str:
    """Return text with every number as 0: requests compare by their words and operations."""
    return re.sub(r"[0-9]+(?:[.,][0-9]+)*", "0", text)


def _squeezed(value: Any) -> str:
    """Return a value as JSON without spaces: "3 + 4" and "3+4" are one expression."""
    return re.sub(r"\s+", "", json.dumps(value, sort_keys=True, ensure_ascii=False))


class _ToolProposer:
    """Mine the words for one serving tool's unplanned requests."""

    def __init__(
        self,
        tool: str,
        evidence: list[Served],
        backtester: Backtester,
        ruleset: RuleSet,
        served_by: dict[str, Call],
        min_support: int,
    ) -> None:
        self.tool, self.backtester, self.ruleset = tool, backtester, ruleset
        self.evidence = {served.request: served for served in evidence}
        self.served_by, self.min_support = served_by, min_support
        mapped = dict.fromkeys(m.capability for m in ruleset.mappings if m.tool == tool)
        self.capabilities = [c for c in mapped if c in ruleset.capabilities]
        self._similarity: dict[str, dict[str, float]] = {}
        self.pool = list(dict.fromkeys([*backtester.requests, *self.evidence]))
        self._elsewhere = [  # planned requests that need none of the tool's capabilities
            set(words_of(request))
            for request in self.pool
            if not (choice := backtester.choice(request)).needs_llm
            and not set(choice.capabilities) & set(self.capabilities)
        ]

    def candidates(self) -> list[Candidate]:
        """Return the words picked for this tool as candidates, most requests first."""
        trials = [trial for word in self._supported_words() if (trial := self._best(word))]
        trials.sort(key=self._rank)
        covered: set[str] = set()
        picked = []
        for trial in trials:
            if len(trial.planned - covered) >= self.min_support:
                picked.append(trial)
                covered |= trial.planned
        return [self._candidate(trial) for trial in picked]

    def _supported_words(self) -> list[str]:
        """Return the words at least min_support evidence requests share, most shared first.

        A word that a planned request needing none of the tool's capabilities holds is left
        out here: in any of the tool's rules it would change that request's plan.
        """
        counts: dict[str, int] = {}
        for request in self.evidence:
            for word in words_of(request):
                counts[word] = counts.get(word, 0) + 1
        words = [
            word
            for word, count in counts.items()
            if count >= self.min_support and not any(word in w for w in self._elsewhere)
        ]
        return sorted(words, key=lambda word: (-counts[word], word))[:MAX_WORDS]

    def _best(self, word: str) -> _Trial | None:
        """Return the word in the rule where it plans most, if it harms nothing.

        Each rule it may go in is tried (a rule's other keywords decide how the tool's
        extractor reads a word it does not know); see _preference for the order.
        """
        trials = [
            self._trial(word, capability, op)
            for capability in self.capabilities
            for op in self._ops(word, capability)
        ]
        fit = [t for t in trials if not t.harm and len(t.planned) >= self.min_support]
        if not fit:
            return None
        return max(fit, key=lambda t: self._preference(t, trials))

    def _preference(self, trial: _Trial, trials: list[_Trial]) -> tuple[Any, ...]:
        """Return how good a trial is: requests planned with the recorded call's arguments,
        requests planned, the capability's description naming the word, the likeness of
        the requests to the capability's planned ones, then the likelier rule."""
        return (
            len(trial.same_arguments),
            len(trial.planned),
            self._described(trial),
            self._near(trial),
            -trials.index(trial),
        )

    def _ops(self, word: str, capability: str) -> list[dict[str, Any]]:
        """Return the ways to add the word: to each rule it may go in, else a new rule."""
        rules = rules_for(self.ruleset, capability, word)
        if not rules:
            return [_new_rule(capability, word, self.ruleset)]
        return [
            {"op": "add_words", "rule": rule.name, "keywords": [word], "patterns": []}
            for rule in rules
        ]

    def _trial(self, word: str, capability: str, op: dict[str, Any]) -> _Trial:
        report = self.backtester.run([op], self.pool)
        trial = _Trial(word, capability, [op], set(), set(), report=report)
        for change in report.changes:
            self._judge(trial, change.request, change.before, change.after)
        return trial

    def _judge(self, trial: _Trial, request: str, before: Choice, after: Choice) -> None:
        """Count a replanned request for the trial, or say why it harms.

        A planned request whose tools and arguments stay is not harmed: only its
        capabilities or goal change (the word was its capability's, as "factorial" in
        "compute the factorial of 12", which "compute" alone plans as Arithmetic).
        """
        if not before.needs_llm:
            if after.needs_llm or after.steps != before.steps:
                trial.harm.append(f"changes the plan of {request!r}")
            return
        if after.needs_llm:
            return
        call = self.served_by.get(request)
        if call is not None and call.tool not in after.tools:
            trial.harm.append(f"plans {request!r}, which {call.tool} served, with {after.tools}")
        elif request in self.evidence and self.tool in after.tools:
            trial.planned.add(request)
            steps = [arguments for tool, arguments in after.steps if tool == self.tool]
            if call is not None and any(_same_arguments(a, call) for a in steps):
                trial.same_arguments.add(request)

    def _described(self, trial: _Trial) -> bool:
        """Return whether the capability's name or description holds the word (plurals too):
        "gcd" for NumberTheory ("gcd, lcm, primes, modulo"), "add" for Summation."""
        info = self.ruleset.capabilities[trial.capability]
        name = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", info.name)
        words = set(_ENGLISH.findall(f"{name} {info.description}".lower()))
        return bool({trial.word, *(w for w in words if trial.word in singulars(w))} & words)

    def _near(self, trial: _Trial) -> float:
        """Return how like the trial's requests are to those the rules plan for its capability."""
        if not self._similarity:
            self._similarity = self._similarities()
        scores = [self._similarity.get(r, {}).get(trial.capability, 0.0) for r in trial.planned]
        return float(np.mean(scores)) if scores else 0.0

    def _similarities(self) -> dict[str, dict[str, float]]:
        """Return, for each evidence request, its TF-IDF cosine similarity to the centroid of
        the requests the rules plan with the tool for each capability.

        A centroid, not the nearest few: a broad capability (Arithmetic) has many requests,
        some close to anything, and would take every tie.

        A request is compared by the tool's arguments as much as by its words: the
        calculator's seven capabilities share one tool, and the recorded expression
        (factorial(5), mean(...)) says which operation was asked for.
        """
        planned = [
            (_numbers_out(f"{request} {arguments}"), choice.capabilities)
            for request in self.pool
            if not (choice := self.backtester.choice(request)).needs_llm
            for tool, arguments in choice.steps[:1]
            if tool == self.tool
        ]
        evidence = list(self.evidence)
        if not planned:
            return {request: {} for request in evidence}
        texts = [_numbers_out(f"{r} {_squeezed(self.served_by[r].arguments)}") for r in evidence]
        vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), sublinear_tf=True)
        matrix = vectorizer.fit_transform([text for text, _ in planned] + texts)
        result: dict[str, dict[str, float]] = {}
        for capability in self.capabilities:
            rows = [i for i, (_, capabilities) in enumerate(planned) if capability in capabilities]
            centroid = np.asarray(matrix[rows].mean(axis=0)) if rows else None
            for row, request in enumerate(evidence):
                score = 0.0
                if centroid is not None:
                    score = float(cosine_similarity(matrix[len(planned) + row], centroid)[0, 0])
                result.setdefault(request, {})[capability] = score
        return result

    def _rank(self, trial: _Trial) -> tuple[Any, ...]:
        """Most requests planned first; then a Chinese word not at a particle, the word
        fewest requests another tool served hold, the likelier word (accessor variety), the
        shorter, the earlier."""
        elsewhere = sum(
            1
            for request, call in self.served_by.items()
            if call.tool != self.tool and trial.word in words_of(request)
        )
        position = np.mean([r.lower().find(trial.word) for r in trial.planned])
        chinese = is_chinese(trial.word)
        particle = chinese and bool({trial.word[0], trial.word[-1]} & _CHINESE_PARTICLES)
        variety = accessor_variety(trial.word, self.pool) if chinese else 0
        return (
            -len(trial.planned), particle, elsewhere, -variety, len(trial.word), position,
            trial.word,
        )  # fmt: skip

    def _candidate(self, trial: _Trial) -> Candidate:
        op = trial.ops[0]
        evidence = sorted(
            (self.evidence[r] for r in trial.planned), key=lambda s: s.at, reverse=True
        )
        where = f"rule {op['rule']}" if op["op"] == "add_words" else f"a new rule {op['name']}"
        title = (
            f'Add "{trial.word}" to {op["rule"]} ({trial.capability})'
            if op["op"] == "add_words"
            else f'New rule {op["name"]} for {trial.capability}: "{trial.word}"'
        )
        assert trial.report is not None
        why = (
            f"{len(self.evidence)} recorded request(s) the rules could not plan were served by "
            f"{self.tool}; with {trial.word!r} in {where} the planner plans {len(trial.planned)} "
            f"of them with {self.tool} ({len(trial.same_arguments)} with the recorded call's "
            f"arguments), and no plan of the {trial.report.total} recorded requests changes "
            "otherwise."
        )
        return Candidate(
            kind="rule",
            key=f"rule:{trial.capability}:{trial.word}",
            title=title,
            target=trial.capability,
            why=why,
            evidence=evidence[:EVIDENCE_SHOWN],
            ops=trial.ops,
            backtest=summary(trial.report),
        )


def _new_rule(capability: str, word: str, ruleset: RuleSet) -> dict[str, Any]:
    """Return a new rule for a capability that has no rule of the word's language."""
    language = "zh" if is_chinese(word) else "any"
    suffix = "zh" if language == "zh" else "en"
    return {
        "op": "new_rule",
        "name": f"proposed-{capability.lower()}-{suffix}",
        "capabilities": [capability],
        "keywords": [word],
        "patterns": [],
        "language": language,
        "goal": ruleset.capabilities[capability].description.lower(),
        "priority": 100,
    }
