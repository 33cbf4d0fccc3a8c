"""Turn tool descriptions and requests into index terms: words, plurals folded, CJK n-grams."""

from __future__ import annotations

import re

_CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Runs of CJK characters (Han, kana, Hangul: no spaces between words), or of other letters
# and digits.
_TOKEN = re.compile(f"[{_CJK_RANGES}]+|[^\\W_{_CJK_RANGES}]+")
_CJK = re.compile(f"[{_CJK_RANGES}]")
# getUserByName -> get User By Name; HTTPRequest -> HTTP Request; v2Beta -> v2 Beta; but
# an acronym's plural stays whole: getUserIDs -> get User IDs, not get User I Ds.
_VERSION = re.compile(r"v\d+\Z")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])(?![A-Z]s(?![a-z]))")
# IDs, URLs, APIs: folded here, as the plural rule leaves words ending in "is" alone.
_ACRONYM_PLURAL = re.compile(r"[A-Z]{2,}s\Z")

# Function words and request fluff. Not scikit-learn's list: it drops words that name what a
# tool does ("find", "show", "name", "system", "top", "bill", "fire", "call").
_STOP_WORD_TEXT = """
a about after again all also am an and any are as at be been before being both but by
can could did do does doing for from had has have having he her here hers him his how i
if in into is it its itself just let me more most my myself no nor not of off on once
only or other our ours out over own please same she should so some such than that the
their theirs them then there these they this those through to too under until up very
was we were what when where which while who whom why will with would you your yours
help want wants need needs like kindly provide tell give us additionally
"""
STOP_WORDS = frozenset(_STOP_WORD_TEXT.split())

# Plurals that no suffix rule folds; the rules below handle the regular ones.
_IRREGULAR = {
    "children": "child",
    "people": "person",
    "men": "man",
    "women": "woman",
    "mice": "mouse",
    "geese": "goose",
    "teeth": "tooth",
    "feet": "foot",
    "indices": "index",
    "matrices": "matrix",
    "vertices": "vertex",
    "analyses": "analysis",
    "criteria": "criterion",
    "phenomena": "phenomenon",
}
# Words ending in "s" that are not plurals, or whose plural rule would mangle them.
_NOT_PLURAL_ENDINGS = ("ss", "us", "is", "ous", "ics")
_NOT_PLURAL = frozenset({"news", "series", "species", "means", "lens", "gas", "bias", "atlas"})


def stem(word: str) -> str:
    """Return a word with its plural ending folded: 'cities' -> 'city', 'boxes' -> 'box'.

    Deliberately light (the S-stemmer family): it folds the plurals a tool request and a
    tool description disagree on, and leaves everything else alone, so a stem is still a
    word and never merges unrelated terms the way an aggressive stemmer can.
    """
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 3 or not word.endswith("s") or word.endswith(_NOT_PLURAL_ENDINGS):
        return word
    if word in _NOT_PLURAL:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "shes", "ches", "xes", "zes")):
        return word[:-2]
    if word.endswith("oes") and len(word) > 4:
        return word[:-2]
    return word[:-1]


def _cjk_terms(run: str) -> list[str]:
    """Return the characters and character pairs of a CJK run (it has no word boundaries)."""
    if len(run) == 1:
        return [run]
    return list(run) + [run[i : i + 2] for i in range(len(run) - 1)]


def analyze(text: str) -> list[str]:
    """Return the index terms of a text: lower-case stems without stop words, CJK n-grams."""
    terms: list[str] = []
    for token in _TOKEN.findall(_CAMEL.sub(" ", text)):
        if _CJK.match(token):
            terms.extend(_cjk_terms(token))
            continue
        if _ACRONYM_PLURAL.match(token):
            token = token[:-1]
        word = token.lower()
        # Numbers in a request are argument values (an id, a year), in a tool's name a
        # version ("v2"): neither says what the tool does.
        if word in STOP_WORDS or len(word) == 1 or word.isdigit() or _VERSION.match(word):
            continue
        terms.append(stem(word))
    return terms


def analyze_with_pairs(text: str) -> list[str]:
    """Return the index terms of a text, then each pair of adjacent word terms ('movie detail').

    A pair keeps a little of the word order a bag of words loses: "movies details" names
    the service "Movies details" more than it names every movie tool and every details
    tool. A pair holds a space, so it never collides with a single term; CJK terms get no
    pairs (their character pairs are already terms).
    """
    terms = analyze(text)
    words = [None if _CJK.match(term) else term for term in terms]
    pairs = [f"{a} {b}" for a, b in zip(words, words[1:], strict=False) if a and b]
    return terms + pairs
