"""The router benchmark's compared methods: lexical, semantic and fused router settings.

Each method builds a router over a catalogue (bench/router.py measures them); the
sentence-embedding models of --semantic keep a catalogue's rows across builds.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from minilm import MiniLMBackend, minilm_torch  # noqa: E402  (bench/ is the script's own folder)

from planner_app.discovery.backends import (  # noqa: E402
    Backend,
    TfidfEncoder,
    WordLlamaBackend,
    semantic_available,
)
from planner_app.discovery.catalogue import Server  # noqa: E402
from planner_app.discovery.router import (  # noqa: E402
    Fusion,
    RouterSettings,
    SearchMode,
    ToolRouter,
)


class PlainTfidfEncoder(TfidfEncoder):
    def encode_queries(self, texts: Sequence[str]) -> Any:
        return self.encode(texts)  # plain: requests weighted like documents


class PlainTfidfBackend:
    """The baseline: scikit-learn's TF-IDF with its own tokenizer and English stop words."""

    name = "plain-tfidf"

    def fit(self, documents: Sequence[str]) -> TfidfEncoder:
        return PlainTfidfEncoder(TfidfVectorizer(stop_words="english").fit(documents))


MIN_TOOLS = 20  # two-stage "covering": servers until they hold this many tools


@dataclass(frozen=True)
class Method:
    name: str
    flat: bool
    backend: Callable[[], Any] | None = None  # the lexical slot: None for the router's TF-IDF
    semantic: bool = False
    model: Callable[[], Backend] = WordLlamaBackend  # the semantic slot's, when semantic
    min_tools: int = 0
    semantic_weight: float = 1.4
    per_step: bool = False
    fusion: Fusion = Fusion.ZSCORE
    bm25_weight: float = 0.5
    sentences: bool = True

    def build(self, servers: Sequence[Server], settings: RouterSettings) -> ToolRouter:
        backend = self.backend() if self.backend else None
        semantic = self.model() if self.semantic else None
        settings = dataclasses.replace(
            settings,
            min_tools=self.min_tools,
            semantic_weight=self.semantic_weight,
            search=SearchMode.FLAT if self.flat else SearchMode.TWO_STAGE,
            per_step=self.per_step,
            fusion=self.fusion,
            bm25_weight=self.bm25_weight,
            semantic_sentences=self.sentences,
        )
        return ToolRouter(servers, settings, backend, semantic)


DEFAULT = "default: flat, TF-IDF + BM25 + wordllama (z-scores 1 / 0.5 / 1.4, sentences)"
OLD_DEFAULT = "old default: flat + wordllama (RRF, weight 0.25)"


class CachedEncoder:
    """An encoder that remembers the documents' rows, so methods sharing a model encode a
    catalogue once; requests are encoded every time (their CPU time is measured)."""

    def __init__(self, encoder: Any, rows: dict[str, np.ndarray]) -> None:
        self._encoder, self._rows = encoder, rows

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._rows))
        if missing:
            self._rows.update(zip(missing, np.asarray(self._encoder.encode(missing)), strict=True))
        return np.stack([self._rows[t] for t in texts]) if texts else np.zeros((0, 1))

    def encode_queries(self, texts: Sequence[str]) -> Any:
        return self._encoder.encode_queries(texts)


@dataclass(frozen=True)
class CachedBackend:
    """A sentence-embedding model whose document rows are kept across builds in this process.

    The first build of a catalogue encodes it (its time is the build time reported for every
    method of this model, `first_build_s`); the others reuse the rows.
    """

    name: str
    factory: Callable[[], Backend]
    rows: dict[str, np.ndarray] = dataclasses.field(default_factory=dict, compare=False)
    first_build_s: dict[str, float] = dataclasses.field(default_factory=dict, compare=False)

    def __call__(self) -> CachedBackend:
        return self

    def fit(self, documents: Sequence[str]) -> CachedEncoder:
        return CachedEncoder(self.factory().fit(documents), self.rows)


# Sentence-embedding models measured with --semantic (bench/minilm.py), not the site's.
SEMANTIC_MODELS: dict[str, Callable[[], Backend]] = {
    "minilm": MiniLMBackend,  # NumPy forward pass
    "minilm-torch": minilm_torch,  # the reference: sentence-transformers
}
DEFAULT_FUSION_WEIGHTS = (0.25, 0.5, 1.0, 2.0)
QUICK_METHODS = (
    "flat, TF-IDF + BM25 (z-scores 1 / 0.5): the default without wordllama",
    OLD_DEFAULT,
    DEFAULT,
)


def model_methods(name: str, weights: Sequence[float]) -> list[Method]:
    """Return a sentence-embedding model's methods: alone, fused with TF-IDF by reciprocal
    rank at each weight (as the old default), and in wordllama's place in the default."""
    cached = CachedBackend(name, SEMANTIC_MODELS[name])
    rrf = {"fusion": Fusion.RRF, "bm25_weight": 0.0, "sentences": False}
    return [
        Method(f"{name} alone, flat", True, cached, bm25_weight=0.0),
        *(
            Method(
                f"flat + {name} (RRF, weight {w:g})",
                True,
                semantic=True,
                model=cached,
                semantic_weight=w,
                **rrf,
            )
            for w in weights
        ),
        Method(
            f"flat, TF-IDF + BM25 + {name} (z-scores 1 / 0.5 / 1.4, sentences)",
            True,
            semantic=True,
            model=cached,
        ),
    ]


def methods(
    models: Sequence[str] = (),
    weights: Sequence[float] = DEFAULT_FUSION_WEIGHTS,
    quick: bool = False,
) -> list[Method]:
    """Return the compared methods: the standard ones (with `quick`, the lexical default, the
    old default and the default only), then each sentence-embedding model's."""
    standard = standard_methods()
    if quick:
        standard = [m for m in standard if m.name in QUICK_METHODS]
    return [*standard, *(m for name in models for m in model_methods(name, weights))]


def standard_methods() -> list[Method]:
    """Return the standard methods; those needing wordllama only when it is installed.

    Fusion weights are TF-IDF's 1, then BM25's, then wordllama's; "sentences": the
    semantic signal is the mean of the whole request's similarity and its best sentence's.
    """
    rrf = {"fusion": Fusion.RRF, "bm25_weight": 0.0, "sentences": False}
    listed = [
        Method("baseline: plain TF-IDF, flat", True, PlainTfidfBackend, bm25_weight=0.0),
        Method("flat, TF-IDF alone", True, bm25_weight=0.0),
        Method("flat, TF-IDF + BM25 (z-scores 1 / 0.5): the default without wordllama", True),
        Method("two-stage", False),
        Method(f"two-stage, servers until {MIN_TOOLS} tools", False, min_tools=MIN_TOOLS),
        Method("flat, TF-IDF + BM25, per step", True, per_step=True),
    ]
    if not semantic_available():
        print("wordllama is not installed: the semantic methods are left out")
        return listed
    return [
        *listed,
        Method("wordllama alone, flat", True, WordLlamaBackend, bm25_weight=0.0),
        Method(OLD_DEFAULT, True, semantic=True, semantic_weight=0.25, **rrf),
        Method(
            "flat + wordllama (RRF, weight 0.25, sentences)",
            True,
            semantic=True,
            semantic_weight=0.25,
            **{**rrf, "sentences": True},
        ),
        Method(
            "flat + wordllama (z-scores 1 / 1.4)",
            True,
            semantic=True,
            bm25_weight=0.0,
            sentences=False,
        ),
        Method(
            "flat + wordllama (z-scores 1 / 1.4, sentences)", True, semantic=True, bm25_weight=0.0
        ),
        Method(DEFAULT, True, semantic=True),
        Method(
            "flat, TF-IDF + BM25 + wordllama (z-scores 1 / 1 / 2.5, sentences)",
            True,
            semantic=True,
            bm25_weight=1.0,
            semantic_weight=2.5,
        ),
        Method(f"{DEFAULT}, per step", True, semantic=True, per_step=True),
        Method("two-stage + wordllama (z-scores)", False, semantic=True),
        Method(
            f"two-stage + wordllama (z-scores), servers until {MIN_TOOLS} tools",
            False,
            semantic=True,
            min_tools=MIN_TOOLS,
        ),
    ]
