"""How texts become vectors for the router: TF-IDF by default, sentence embeddings optionally.

A backend is fitted once per catalogue (the vocabulary and weights of TF-IDF come from the
catalogue's own texts), and the fitted encoder turns documents and requests into rows of
one vector space, L2-normalised, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from scipy import sparse
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

from planner_app.discovery.text import analyze_with_pairs

# How much a pair of adjacent words ('movie detail') weighs against a single word; it
# applies to the document and to the request side, so a matching pair adds a quarter.
PAIR_WEIGHT = 0.5
# BM25's usual constants (Robertson and Zaragoza), not tuned here.
BM25_K1 = 1.2
BM25_B = 0.75


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
    if isinstance(rows, np.ndarray):
        # einsum, not BLAS: OpenBLAS runs this product on several threads, which spin
        # and wait on a busy machine (p95 of 5 ms instead of 0.07).
        return np.einsum("ij,j->i", rows, np.asarray(query).ravel()).astype(np.float64)
    product = rows @ query.T
    if hasattr(product, "toarray"):
        product = product.toarray()
    return np.asarray(product, dtype=np.float64).ravel()


def query_rows(
    texts: Sequence[str], vocabulary: dict[str, int], weights: np.ndarray, unit: bool
) -> sparse.csr_matrix:
    """Return one row per request: each of its terms in the vocabulary once, with its weight,
    L2-normalised when `unit`.

    What a fitted vectorizer's transform gives with binary counts, without scikit-learn's
    checks on every call (about a millisecond a routing).
    """
    indptr, indices = [0], []
    for text in texts:
        terms = analyze_with_pairs(text)
        found = sorted({vocabulary[term] for term in terms if term in vocabulary})
        indices.extend(found)
        indptr.append(len(indices))
    data = weights[np.array(indices, dtype=np.intp)].astype(np.float32)
    if unit and data.size:
        lengths = np.diff(indptr)
        rows = np.repeat(np.arange(len(texts)), lengths)
        norms = np.sqrt(np.bincount(rows, data.astype(np.float64) ** 2, minlength=len(texts)))
        data = (data / norms[rows]).astype(np.float32)
    shape = (len(texts), len(weights))
    return sparse.csr_matrix((data, np.array(indices, dtype=np.int32), indptr), shape=shape)


def by_columns(rows: Any) -> Any:
    """Return sparse rows stored by column, for column_similarities; dense rows as they are."""
    return rows.tocsc() if sparse.issparse(rows) else rows


def column_similarities(columns: Any, query: Any) -> np.ndarray:
    """Return every row's dot product with a one-row query, gathering only the query's
    columns (a request has a few terms; a sparse product costs the whole matrix)."""
    if not sparse.issparse(columns):
        return similarities(columns, query)
    query = sparse.csr_matrix(query)
    return gather_columns(columns, query.indices, query.data.astype(np.float64))


def gather_columns(
    columns: sparse.csc_matrix, index: np.ndarray, weights: np.ndarray
) -> np.ndarray:
    """Return every row's weighted sum over the columns `index` (a request's terms)."""
    pointers = columns.indptr
    spans = [slice(pointers[i], pointers[i + 1]) for i in index]
    if not spans:
        return np.zeros(columns.shape[0])
    rows = np.concatenate([columns.indices[span] for span in spans])
    pairs = zip(spans, weights, strict=True)
    values = np.concatenate([columns.data[span] * weight for span, weight in pairs])
    return np.bincount(rows, values, minlength=columns.shape[0])


class TfidfEncoder:
    def __init__(self, vectorizer: TfidfVectorizer) -> None:
        self._vectorizer = vectorizer
        self._vocabulary = vectorizer.vocabulary_
        self._idf = vectorizer.idf_

    def encode(self, texts: Sequence[str]) -> Any:
        return self._vectorizer.transform(texts)

    def encode_queries(self, texts: Sequence[str]) -> Any:
        """Return the requests' rows with every term counted once (binary TF), then IDF.

        A request repeats the words of its main topic ("movie", "movies", "film") and
        under-weights its second one; counting each term once gives every part of a
        several-tool request its say. Documents keep their sub-linear counts.
        """
        return query_rows(texts, self._vocabulary, self._idf, unit=True)


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


class Bm25Encoder:
    """Okapi BM25 rows: a document's term counts saturated (k1) and length-normalised (b)
    times the term's IDF; a request's row holds each of its terms once.

    Unlike the other encoders' rows these are not L2-normalised: a dot product is the
    BM25 score itself, on its own scale (the router standardises it before fusing).
    """

    def __init__(self, vectorizer: CountVectorizer, idf: np.ndarray, average_length: float) -> None:
        self._vectorizer = vectorizer
        self._idf = idf
        self._average_length = average_length
        self._ones = np.ones(len(idf), dtype=np.float32)

    def encode(self, texts: Sequence[str]) -> Any:
        counts = self._vectorizer.transform(texts).astype(np.float32).tocsr()
        lengths = np.asarray(counts.sum(axis=1)).ravel()
        relative = np.repeat(lengths / self._average_length, np.diff(counts.indptr))
        tf = counts.data
        k1, b = BM25_K1, BM25_B
        counts.data = (tf * (k1 + 1) / (tf + k1 * (1 - b + b * relative))).astype(np.float32)
        return counts.multiply(self._idf).tocsr()

    def encode_queries(self, texts: Sequence[str]) -> Any:
        return query_rows(texts, self._vectorizer.vocabulary_, self._ones, unit=False)


class Bm25Backend:
    """Okapi BM25 over the same terms as TF-IDF (the analyzer's words and word pairs).

    A second lexical signal beside TF-IDF's cosine: its saturation and length
    normalisation treat a short tool and a long one differently, and the two disagree
    on enough near ties that their standardised sum ranks better than either on the
    tune halves of both public sets (bench/README.md, "router.py").
    """

    name = "bm25"

    def fit(self, documents: Sequence[str]) -> Bm25Encoder | EmptyEncoder:
        vectorizer = CountVectorizer(analyzer=analyze_with_pairs, dtype=np.float32)
        try:
            counts = vectorizer.fit_transform(documents)
        except ValueError:  # "empty vocabulary"
            return EmptyEncoder()
        frequency = np.bincount(counts.indices, minlength=counts.shape[1])
        idf = np.log1p((len(documents) - frequency + 0.5) / (frequency + 0.5))
        is_pair = np.array([" " in term for term in vectorizer.get_feature_names_out()])
        idf = (np.where(is_pair, PAIR_WEIGHT, 1.0) * idf).astype(np.float32)
        average_length = max(float(counts.sum()) / max(len(documents), 1), 1.0)
        return Bm25Encoder(vectorizer, idf, average_length)


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


class StaticEmbeddingEncoder:
    """Mean-pooled static token embeddings: a text's vector is the mean of its tokens' rows.

    The mean is a sparse (texts x vocabulary) matrix of token shares times the embedding
    table, so a catalogue of long texts costs its token count, never texts x longest text.
    """

    def __init__(self, model: StaticEmbeddingModel) -> None:
        self._model = model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        table = self._model.table
        encodings = self._model.tokenizer.encode_batch(list(texts), add_special_tokens=False)
        # The attention mask leaves out padding, should the tokenizer be set to pad.
        ids = [
            np.asarray(encoding.ids, dtype=np.int64)[np.asarray(encoding.attention_mask, bool)]
            for encoding in encodings
        ]
        lengths = np.array([len(row) for row in ids], dtype=np.int64)
        shares = np.repeat(1.0 / np.maximum(lengths, 1), lengths).astype(np.float32)
        indices = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(lengths)])
        means = sparse.csr_matrix((shares, indices, indptr), shape=(len(ids), table.shape[0]))
        rows = np.asarray(means @ table, dtype=np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms > 0, norms, 1.0)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)


@dataclass(frozen=True)
class StaticEmbeddingModel:
    tokenizer: Any  # a `tokenizers.Tokenizer`
    table: np.ndarray  # one float32 row per token id


_WORDLLAMA_WEIGHTS = "weights/l2_supercat_256.safetensors"
_WORDLLAMA_TOKENIZER = "tokenizers/l2_supercat_tokenizer_config.json"
_wordllama_model: StaticEmbeddingModel | None = None
_wordllama_lock = threading.Lock()


class WordLlamaBackend:
    """Static token embeddings from the `wordllama` package, averaged per text; numpy only.

    The weights (256 dimensions for 32,000 tokens, 16 MB in float16, MIT) and the tokenizer
    come inside the package's wheel from PyPI; they are read from its folder, never
    downloaded, and loaded once per process, on the first build of a router that uses them.
    No fitting: the same vectors serve every catalogue, so nothing is tuned to the one it
    searches.
    """

    name = "wordllama"

    def fit(self, documents: Sequence[str]) -> StaticEmbeddingEncoder:
        return StaticEmbeddingEncoder(load_wordllama())


def load_wordllama() -> StaticEmbeddingModel:
    """Return this process's WordLlama model, read from the package's own files."""
    global _wordllama_model
    with _wordllama_lock:
        if _wordllama_model is None:
            _wordllama_model = _read_wordllama()
        return _wordllama_model


def _read_wordllama() -> StaticEmbeddingModel:
    try:
        import wordllama
        from safetensors import safe_open
        from tokenizers import Tokenizer
    except ImportError:
        raise BackendUnavailable(
            "the semantic signal needs the wordllama package: pip install wordllama"
        ) from None
    # Read the wheel's own files: WordLlama.load() looks for the tokenizer in a folder
    # the wheel does not have, then downloads it from a model hub.
    folder = Path(wordllama.__file__).parent
    tokenizer = Tokenizer.from_file(str(folder / _WORDLLAMA_TOKENIZER))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    with safe_open(str(folder / _WORDLLAMA_WEIGHTS), framework="np", device="cpu") as weights:
        table = weights.get_tensor("embedding.weight").astype(np.float32)
    return StaticEmbeddingModel(tokenizer, table)


def semantic_available() -> bool:
    """Return whether the default semantic backend (wordllama) can be imported here."""
    try:
        import wordllama  # noqa: F401
    except ImportError:
        return False
    return True


def make_backend(name: str, model_path: str | Path | None = None) -> Backend:
    """Return the backend called `name` ('tfidf' or 'embeddings', which needs model_path)."""
    if name == TfidfBackend.name:
        return TfidfBackend()
    if name == EmbeddingBackend.name:
        if not model_path:
            raise BackendUnavailable("the embedding backend needs a local model path")
        return EmbeddingBackend(model_path)
    raise ValueError(f"unknown discovery backend {name!r}; choose 'tfidf' or 'embeddings'")
