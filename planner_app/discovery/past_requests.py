"""The past requests' text features, each distinct text's computed once and kept across rebuilds.

A learned index is rebuilt whenever the outcome history changes (every refresh), and
analysing 50,000 requests anew each time would take tens of seconds. PastRequests keeps,
per distinct request text, its term counts (terms hashed into a fixed space, so no
vocabulary has to be refitted) and its embedding, and a new one takes the rows of the
texts the last one had and computes only the new texts'. From the counts it builds the
TF-IDF rows of the current texts (sub-linear term frequency, smooth IDF, L2-normalised,
as scikit-learn's TfidfVectorizer does), stored by term so a request gathers only the
rows of its own terms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from scipy import sparse

from planner_app.discovery.backends import Encoder, gather_columns, similarities
from planner_app.discovery.text import analyze

HASH_SPACE = 1 << 24  # term hashes: collisions between two of 16 million, rare enough
MAX_TERMS = 48  # of a long request, its first terms name what it asks
# wordllama is trained so that its first dimensions carry most of the meaning (Matryoshka):
# its first 32 of 256 take an eighth of the memory and CPU per past request, and ranked
# as well as 64 on the tune halves (hit@5 0.447 / 0.930 / 0.951 on APIBench,
# StableToolBench and BFCL, against 0.459 / 0.930 / 0.949).
SEMANTIC_DIMENSIONS = 32
QUERY_TERMS = 16  # a new request's rarest terms gathered; common ones add little but rows


class PastRequests:
    """Distinct past request texts with their term counts, TF-IDF columns and embeddings."""

    def __init__(
        self,
        texts: Sequence[str],
        semantic: Encoder | None = None,
        previous: PastRequests | None = None,
    ) -> None:
        self.texts = list(dict.fromkeys(texts))
        self.row_of = {text: row for row, text in enumerate(self.texts)}
        self.semantic = semantic
        if previous is not None and not _same_space(previous.semantic, semantic):
            previous = None  # another encoder: its embeddings are of another space
        old = np.array(
            [previous.row_of.get(text, -1) if previous else -1 for text in self.texts],
            dtype=np.intp,
        )
        kept, fresh = np.flatnonzero(old >= 0), np.flatnonzero(old < 0)
        new_texts = [self.texts[row] for row in fresh]
        order = np.empty(len(self.texts), dtype=np.intp)
        order[kept] = np.arange(len(kept))
        order[fresh] = len(kept) + np.arange(len(fresh))
        parts = [_term_counts(new_texts)]
        if previous is not None and len(kept):
            parts.insert(0, previous.counts[old[kept]])
        self.counts = sparse.vstack(parts, format="csr")[order]
        self.embeddings: np.ndarray | None = None
        if semantic is not None:
            encoded = np.asarray(semantic.encode(new_texts)) if new_texts else np.zeros((0, 0))
            embedded = [_first_dimensions(encoded)]
            if previous is not None and previous.embeddings is not None and len(kept):
                embedded.insert(0, previous.embeddings[old[kept]])
            self.embeddings = np.concatenate(embedded)[order]
        self._build_columns()

    def __len__(self) -> int:
        return len(self.texts)

    def _build_columns(self) -> None:
        """Build the TF-IDF rows of the texts from their counts, stored by term."""
        counts = self.counts
        terms, inverse, frequency = np.unique(
            counts.indices, return_inverse=True, return_counts=True
        )
        idf = (np.log((1 + len(self)) / (1 + frequency)) + 1).astype(np.float32)
        weights = (1 + np.log(counts.data.astype(np.float32))) * idf[inverse]
        lengths = np.diff(counts.indptr)
        row_of_entry = np.repeat(np.arange(len(self)), lengths)
        norms = np.sqrt(np.bincount(row_of_entry, weights**2, minlength=len(self)))
        weights = (weights / np.where(norms > 0, norms, 1.0)[row_of_entry]).astype(np.float32)
        shape = (len(self), len(terms))
        rows = sparse.csr_matrix((weights, inverse, counts.indptr), shape=shape)
        self._columns = rows.tocsc()
        self._terms, self._idf = terms, idf

    def lexical(self, text: str) -> np.ndarray:
        """Return each text's TF-IDF cosine with a request (the request's terms once each)."""
        hashes = np.unique(np.array([_hash(term) for term in analyze(text)], dtype=np.int64))
        where = np.minimum(np.searchsorted(self._terms, hashes), max(len(self._terms) - 1, 0))
        index = where[self._terms[where] == hashes] if self._terms.size else where[:0]
        if not index.size:
            return np.zeros(len(self))
        index = index[np.argsort(-self._idf[index])[:QUERY_TERMS]]
        weights = self._idf[index] / np.linalg.norm(self._idf[index])
        return gather_columns(self._columns, index, weights)

    def semantic_similarity(self, embedding: np.ndarray) -> np.ndarray:
        """Return each text's embedding similarity to a request's (its full vector)."""
        assert self.embeddings is not None
        query = np.asarray(embedding, dtype=np.float32).ravel()[:SEMANTIC_DIMENSIONS]
        norm = float(np.linalg.norm(query))
        query = query / norm if norm else query
        return similarities(self.embeddings, query)


def _same_space(one: Encoder | None, other: Encoder | None) -> bool:
    """Return whether two encoders embed alike: the same one, or the same model's."""
    if one is other:
        return True
    model = getattr(one, "_model", None)
    same_model = model is not None and model is getattr(other, "_model", None)
    return type(one) is type(other) and same_model


def _hash(term: str) -> int:
    """Return a term's column: its hash in this process (the index never leaves it)."""
    return hash(term) % HASH_SPACE


def _term_counts(texts: Sequence[str]) -> sparse.csr_matrix:
    """Return each text's term counts (its first MAX_TERMS terms), one row per text."""
    indptr, indices, data = [0], [], []
    for text in texts:
        counted = Counter(_hash(term) for term in analyze(text)[:MAX_TERMS])  # each <= 48
        indices.extend(counted)
        data.extend(counted.values())
        indptr.append(len(indices))
    return sparse.csr_matrix(
        (np.array(data, dtype=np.uint8), np.array(indices, dtype=np.int32), indptr),
        shape=(len(texts), HASH_SPACE),
    )


def _first_dimensions(rows: np.ndarray) -> np.ndarray:
    """Return embedding rows cut to their first SEMANTIC_DIMENSIONS, L2-normalised again."""
    if rows.ndim != 2 or not rows.shape[0]:
        return np.zeros((0, SEMANTIC_DIMENSIONS), dtype=np.float32)
    rows = np.ascontiguousarray(rows[:, :SEMANTIC_DIMENSIONS], dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)
