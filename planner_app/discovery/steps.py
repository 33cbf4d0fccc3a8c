"""Split a request into its steps, so that each step is routed on its own words.

A request for several tools ("find the forecast, then book a flight; also convert the
price") ranks the tools of its main topic first and its other steps' tools low. Splitting
it at sentence ends, step markers (then, also, additionally, finally; 然后, 接着, 另外,
最后 ...), enumerations (1. 2) a) - *) and, between two clauses long enough to be steps
of their own, "and", lets every step bring its own best tools.
"""

from __future__ import annotations

import re

# Where one step ends and the next begins; splitting keeps neither the marker nor the
# punctuation. English markers are words; Chinese ones need no spaces around them.
_SENTENCE_END = r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])|[。！？；;\n]+"
_ENUMERATION = r"(?:^|\s)(?:\(?\d{1,2}[.)]|\(?[a-h]\)|[-*•])\s+"
_ENGLISH_MARKERS = (
    r"\b(?:and then|then|after that|afterwards|next|finally|lastly|also|additionally|"
    r"in addition|furthermore|moreover|besides|as well as|plus)\b,?"
)
_CHINESE_MARKERS = (
    r"(?:然后|接着|之后|随后|再然后|最后|另外|此外|并且|同时|还要|还需要|以及|首先|其次)[，,]?"
)
_SPLIT = re.compile(
    f"{_SENTENCE_END}|{_ENUMERATION}|{_ENGLISH_MARKERS}|{_CHINESE_MARKERS}",
    re.IGNORECASE | re.MULTILINE,
)
_SENTENCE_SPLIT = re.compile(_SENTENCE_END)
_AND = re.compile(r",?\s+\band\b\s+|[，,]\s*(?=\S)", re.IGNORECASE)
_WORD = re.compile(r"\w+")
# A clause of fewer words is a phrase ("salt and pepper"), not a step of its own.
MIN_STEP_WORDS = 4
MAX_STEPS = 4


def split_steps(request: str) -> list[str]:
    """Return the request's steps in order; a request of one step gives [request]."""
    steps = []
    for part in _SPLIT.split(request):
        steps.extend(_split_clauses(part.strip(" \t,，:：")))
    steps = [step for step in steps if _WORD.search(step)]
    if len(steps) <= 1:
        return [request.strip()]
    return _at_most(steps, MAX_STEPS)  # a long text: the first steps, the rest as one


def split_sentences(request: str, limit: int = 8) -> list[str]:
    """Return the request's sentences (at most `limit`; the rest joined to the last one).

    The semantic signal compares each sentence with the tools as well as the whole
    request: a request's one sentence that names a tool is diluted in the average of
    its words, and its best sentence is not.
    """
    sentences = [part.strip() for part in _SENTENCE_SPLIT.split(request) if _WORD.search(part)]
    return _at_most(sentences, limit) or [request.strip()]


def _at_most(parts: list[str], limit: int) -> list[str]:
    """Return the parts, the ones beyond the first limit - 1 joined into the last."""
    if len(parts) <= limit:
        return parts
    return [*parts[: limit - 1], " ".join(parts[limit - 1 :])]


def _split_clauses(part: str) -> list[str]:
    """Return a sentence split at "and" and commas when every piece is long enough."""
    pieces = [piece.strip() for piece in _AND.split(part) if piece.strip()]
    if len(pieces) > 1 and all(_words(piece) >= MIN_STEP_WORDS for piece in pieces):
        return pieces
    return [part] if part else []


def _words(text: str) -> int:
    """Return the words of a text, a CJK character counting as one."""
    return sum(len(word) if not word.isascii() else 1 for word in _WORD.findall(text))
