"""Helpers for the document tests: an embedder that counts, a tiny PDF writer, a store."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentd.db.connect import open_sync
from agentd.db.migrations import apply_migrations
from agentd.retrieval.embedders import EmbedderError, HashingEmbedder, Vector


class CountingEmbedder(HashingEmbedder):
    """The default embedder, remembering every text it was asked to embed."""

    def __init__(self, dim: int = 384) -> None:
        super().__init__(dim=dim)
        self.calls: list[list[str]] = []

    @property
    def embedded(self) -> int:
        return sum(len(call) for call in self.calls)

    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        self.calls.append(list(texts))
        return await super().embed_documents(texts)


class OtherModel(CountingEmbedder):
    """Another vector space (a model change)."""

    def __init__(self) -> None:
        super().__init__(dim=128)
        self.model_id = "other-model"


class BrokenEmbedder(HashingEmbedder):
    async def embed_documents(self, texts: Sequence[str]) -> list[Vector]:
        raise EmbedderError("embedding endpoint answered HTTP 503")


def open_store(path: Path) -> Any:
    conn = open_sync(path)
    apply_migrations(conn)
    return conn


def _pdf_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: Sequence[str], *, title: str | None = None) -> bytes:
    """A minimal valid PDF with one Helvetica text page per item (lines split on \\n)."""
    count = len(pages)
    kids = " ".join(f"{5 + 2 * i} 0 R" for i in range(count))
    info = f"<< /Title ({_pdf_string(title)}) >>" if title else "<< >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        info.encode("latin-1"),
    ]
    for i, text in enumerate(pages):
        ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
        ops += [f"({_pdf_string(line)}) Tj T*" for line in text.split("\n")]
        ops.append("ET")
        stream = "\n".join(ops).encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources"
            f" << /Font << /F1 3 0 R >> >> /Contents {6 + 2 * i} 0 R >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info 4 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
