"""Images from outside, decoded and shrunk for the model, with a decompression-bomb guard.

A few kilobytes of PNG or GIF can declare a 50 000 x 50 000 canvas: decoding it takes
gigabytes. The size in the header is checked before any pixel is decoded, and the decode runs
in the bounded child (`downscale_bounded`), so a bomb the check misses still hits RLIMIT_AS.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

from agentd.parsing.budget import Budget, ParseFailed

# The largest source image decoded at all: 40 MP covers any phone camera (a 200 MP sensor
# bins to 12-50 MP), and is about 160 MB of RGBA.
MAX_SOURCE_PIXELS = 40_000_000
IMAGE_BUDGET = Budget(seconds=30.0, cpu_seconds=20, memory_bytes=1024 * 1024 * 1024)


class NotAnImage(Exception):
    """The bytes are not an image this process will decode; the message says why."""


@dataclass(frozen=True)
class Downscaled:
    data: bytes
    media_type: str
    width: int
    height: int


def downscale(data: bytes, max_edge: int, max_pixels: int) -> Downscaled:
    """Re-encode as JPEG no larger than the model needs (about 1.15 MP, 1568 px long edge)."""
    from PIL import Image, UnidentifiedImageError

    # Pillow's own guard warns at 89 MP and raises at twice that; ours is stricter and raises.
    Image.MAX_IMAGE_PIXELS = MAX_SOURCE_PIXELS
    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width * height > MAX_SOURCE_PIXELS:
            raise NotAnImage(
                f"the image is {width} x {height} pixels; at most "
                f"{MAX_SOURCE_PIXELS // 1_000_000} megapixels are read"
            )
        # JPEG can decode at 1/2, 1/4 or 1/8 scale directly: far less memory for big photos.
        image.draft("RGB", (max_edge, max_edge))
        image.load()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise NotAnImage(f"not a readable image: {exc}") from None
    scale = min(1.0, max_edge / max(image.size), (max_pixels / (image.width * image.height)) ** 0.5)
    if scale < 1.0:
        image = image.resize((max(1, int(image.width * scale)), max(1, int(image.height * scale))))
    if image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return Downscaled(out.getvalue(), "image/jpeg", width, height)


def downscale_job(data: bytes, *, max_edge: int, max_pixels: int) -> dict[str, object]:
    """The child-process side of downscale_bounded."""
    small = downscale(data, max_edge, max_pixels)
    return {
        "data": base64.b64encode(small.data).decode("ascii"),
        "media_type": small.media_type,
        "width": small.width,
        "height": small.height,
    }


async def downscale_bounded(
    data: bytes, max_edge: int, max_pixels: int, budget: Budget | None = None
) -> Downscaled:
    """downscale in a bounded child process; NotAnImage for anything it will not decode."""
    from agentd.parsing.bounded import run_bounded

    try:
        answer = await run_bounded(
            "agentd.parsing.image:downscale_job",
            data,
            budget or IMAGE_BUDGET,
            max_edge=max_edge,
            max_pixels=max_pixels,
        )
    except ParseFailed as exc:
        if exc.error_type == "NotAnImage":
            raise NotAnImage(str(exc)) from None
        raise NotAnImage(f"the image could not be read: {exc}") from None
    return Downscaled(
        base64.b64decode(answer["data"]),
        answer["media_type"],
        int(answer["width"]),
        int(answer["height"]),
    )
