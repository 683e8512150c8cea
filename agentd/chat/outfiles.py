"""Files a tool hands back to be sent to the user as a Telegram document (`send_file`).

A tool returns an `OutgoingFile`; the bytes are written to the outgoing folder at once and only
the path travels through the journal, so a big report never bloats a step result.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path

from pydantic import BaseModel, Field, field_validator

MAX_UPLOAD_BYTES = 50 * 1024 * 1024  # the Bot API's limit for files a bot uploads
_UNSAFE = re.compile(r"[\x00-\x1f/\\]")


class OutgoingFile(BaseModel):
    """Return this from a tool to send `data` to the user as a file named `filename`."""

    filename: str = Field(min_length=1, max_length=200)
    data: bytes = Field(max_length=MAX_UPLOAD_BYTES)
    caption: str = Field(default="", max_length=1024)  # Telegram's caption limit

    @field_validator("filename")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        cleaned = _UNSAFE.sub("_", value).strip(". ")
        if not cleaned:
            raise ValueError("filename must name a file, not a path")
        return cleaned


class SpooledFile(BaseModel):
    """A file waiting in the outgoing folder to be sent (what the journal records)."""

    path: str
    filename: str
    caption: str = ""
    sha256: str
    size: int


def spool(file: OutgoingFile, directory: Path) -> SpooledFile:
    """Write the file under its content hash (owner-only), atomically; return where it is."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    digest = hashlib.sha256(file.data).hexdigest()
    target = directory / digest
    if not target.exists():
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(file.data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return SpooledFile(
        path=str(target),
        filename=file.filename,
        caption=file.caption,
        sha256=digest,
        size=len(file.data),
    )


def describe_for_model(spooled: SpooledFile) -> str:
    return (
        f"The file {spooled.filename} ({spooled.size} bytes) will be sent to the user "
        "together with your reply; do not paste its content."
    )
