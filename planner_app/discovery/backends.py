"""How texts become vectors for the router: TF-IDF by default, sentence embeddings optionally.

A backend is fitted once per catalogue (the vocabulary and weights of TF-IDF come from the
catalogue's own texts), and the fitted encoder turns documents and requests into rows of
one vector space, L2-normalised, so a dot product is the cosine similarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize

from planner_app.discovery.text import analyze_with_pairs

# How much a pair of adjacent words ('movie detail') weighs against a single word; it
# applies to the document and to the request side, so a matching pair adds a quarter.
PAIR_WEIGHT = 0.5


class BackendUnavailable(RuntimeError):
    """The backend cannot run here: an optional package or its local model is missing."""


class Encoder(Protocol):
    def encode(self, texts: Sequence[str]) -> Any:
        """Return one L2-normalised row per document (a SciPy sparse or a NumPy matrix)."""

    def encode_queries(self, texts: Sequence[str]) -> Any:
        """Return one L2-normalised row per request, in the documents' vector space."""


class Backend(Protocol):
    name: str

    def fit(self, documents: Sequence[str]) -> Encoder:
        """Return an encoder fitted on the catalogue's documents."""


def similarities(rows: Any, query: Any) -> np.ndarray:
    """Return the cosine similarity of every row with the (one-row) query."""
    product = rows @ query.T
    if hasattr(product, "toarray"):
        product = product.toarray()
    return np.asarray(product, dtype=np.float64).ravel()


class TfidfEncoder:
    def __init__(self, vectorizer: TfidfVectorizer) -> None:
        self._vectorizer = vectorizer

    def encode(self, texts: Sequence[str]) -> Any:
        return self._vectorizer.transform(texts)

    def encode_queries(self, texts: Sequence[str]) -> Any:
        """Return the requests' rows with every term counted once (binary TF), then IDF.

        A request repeats the words of its main topic ("movie", "movies", "film") and
        under-weights its second one; counting each term once gives every part of a
        several-tool request its say. Documents keep their sub-linear counts.
        """
        rows = self._vectorizer.transform(texts)
        rows.data = self._vectorizer.idf_[rows.indices].astype(rows.dtype)
        return normalize(rows, copy=False)


class TfidfBackend:
    """Word TF-IDF over the analyzer's terms and word pairs (plurals folded, CJK n-grams).

    Sub-linear term frequency keeps a word repeated in a long description from drowning
    the others; the catalogue is small, so fitting takes milliseconds per thousand tools.
    """

    name = "tfidf"

    def fit(self, documents: Sequence[str]) -> TfidfEncoder | EmptyEncoder:
        vectorizer = TfidfVectorizer(
            analyzer=analyze_with_pairs, sublinear_tf=True, dtype=np.float32
        )
        try:
            vectorizer.fit(documents)
        except ValueError:  # "empty vocabulary": not one term in the whole catalogue
            return EmptyEncoder()
        is_pair = np.array([" " in term for term in vectorizer.get_feature_names_out()])
        vectorizer.idf_ = np.where(is_pair, PAIR_WEIGHT, 1.0) * vectorizer.idf_
        return TfidfEncoder(vectorizer)


class EmptyEncoder:
    """The encoder of a catalogue without a single term: every text is the zero vector."""

    def encode(self, texts: Sequence[str]) -> Any:
        return sparse.csr_matrix((len(texts), 1), dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> Any:
        return self.encode(texts)


class EmbeddingEncoder:
    def __init__(self, model: Any) -> None:
        self._model = model

    def encode(self, texts: Sequence[str]) -> Any:
        return self._model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)

    def encode_queries(self, texts: Sequence[str]) -> Any:
        return self.encode(texts)


class EmbeddingBackend:
    """Sentence embeddings from a model directory on this machine; never downloads one.

    Needs the `embeddings` extra (`pip install 'ares-console[embeddings]'`) and a
    sentence-transformers model saved to a local directory (`model.save(path)`).
    """

    name = "embeddings"

    def __init__(self, model_path: str | Path) -> None:
        self.model_path = Path(model_path)
        self._model: Any = None

    def fit(self, documents: Sequence[str]) -> EmbeddingEncoder:
        if self._model is None:
            self._model = self._load()
        return EmbeddingEncoder(self._model)

    def _load(self) -> Any:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise BackendUnavailable(
                "the embedding backend needs sentence-transformers: "
                "pip install 'ares-console[embeddings]'"
            ) from None
        if not self.model_path.is_dir():
            raise BackendUnavailable(
                f"no sentence-transformers model at {self.model_path}; the embedding backend "
                "runs offline from a model saved to a local directory"
            )
        return SentenceTransformer(str(self.model_path), device="cpu", local_files_only=True)


def make_backend(name: str, model_path: str | Path | None = None) -> Backend:
    """Return the backend called `name` ('tfidf' or 'embeddings', which needs model_path)."""
    if name == TfidfBackend.name:
        return TfidfBackend()
    if name == EmbeddingBackend.name:
        if not model_path:
            raise BackendUnavailable("the embedding backend needs a local model path")
        return EmbeddingBackend(model_path)
    raise ValueError(f"unknown discovery backend {name!r}; choose 'tfidf' or 'embeddings'")
