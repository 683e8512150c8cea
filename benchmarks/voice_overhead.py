"""What agentd adds to a voice note's transcription round trip, the backend's own work excluded.

The backend is the local fake `/v1/audio/transcriptions` (it answers at once), so every figure
is client-side cost. Measured in one run, interleaved, medians over N notes:

- baseline: one raw aiohttp multipart POST of the note to the fake (the unavoidable round trip);
- client: `OpenAITranscriber.transcribe` (form building, retry wrapper, JSON check);
- hear, miss: the whole step body for a new note — download (an in-memory stub), sha256, cache
  lookup, transcription, cache write through the daemon's single-writer `Database`;
- hear, hit: the same note again (download + sha256 + cache lookup, no backend call).

    .venv/bin/python benchmarks/voice_overhead.py [-n 200] [--kib 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.chat.inputs import MediaRef
from agentd.config import MediaConfig
from agentd.db import Database
from agentd.media.transcribe import OpenAITranscriber
from agentd.media.voice import VoiceDeps, hear
from tests.fakes import FakeTranscription

NOTE = Path(__file__).resolve().parents[1] / "tests" / "data" / "media" / "voice_note.ogg"


class MemoryFiles:
    """Telegram's getFile + download, from memory: the benchmark times agentd, not the network."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    async def download(self, file_id: str, max_bytes: int) -> bytes:
        return self.files[file_id]


async def raw_post(session: aiohttp.ClientSession, url: str, data: bytes) -> None:
    form = aiohttp.FormData()
    form.add_field("file", data, filename="voice.ogg", content_type="audio/ogg")
    form.add_field("model", "whisper-1")
    async with session.post(url, data=form) as resp:
        await resp.read()


async def run(n: int, kib: int) -> dict[str, list[float]]:
    base = NOTE.read_bytes()
    # Distinct notes (a chained Ogg stream of the real note plus padding) so each miss is a miss.
    size = max(kib * 1024, len(base))
    notes = [base + os.urandom(size - len(base)) + i.to_bytes(4, "big") for i in range(n)]
    times: dict[str, list[float]] = {"baseline": [], "client": [], "miss": [], "hit": []}
    async with FakeTranscription.serving() as stt:
        url = stt.base_url + "/v1/audio/transcriptions"
        stt.default_text = "Remind me to buy oat milk."
        transcriber = OpenAITranscriber(stt.base_url + "/v1", "whisper-1", "")
        with tempfile.TemporaryDirectory() as tmp:
            db = await Database.open(Path(tmp) / "bench.db")
            files = MemoryFiles()
            deps = VoiceDeps(config=MediaConfig(), db=db, files=files, transcriber=transcriber)
            async with aiohttp.ClientSession() as session:
                for i, note in enumerate(notes):
                    files.files[f"f{i}"] = note
                    media = MediaRef(
                        kind="voice",
                        file_id=f"f{i}",
                        mime_type="audio/ogg",
                        file_size=len(note),
                        duration=4,
                    )
                    t0 = time.perf_counter()
                    await raw_post(session, url, note)
                    t1 = time.perf_counter()
                    await transcriber.transcribe(note, "voice", "audio/ogg")
                    t2 = time.perf_counter()
                    missed = await hear(deps, media)
                    t3 = time.perf_counter()
                    again = await hear(deps, media)
                    t4 = time.perf_counter()
                    assert not missed.cached and again.cached
                    for key, value in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
                        times[key].append(value * 1000)
            await db.close()
            await transcriber.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200, help="notes (default 200)")
    parser.add_argument("--kib", type=int, default=8, help="note size in KiB (default 8)")
    args = parser.parse_args()
    print(
        f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at start, "
        f"{args.n} notes of {args.kib} KiB"
    )
    times = asyncio.run(run(args.n, args.kib))
    base = statistics.median(times["baseline"])
    labels = {
        "baseline": "raw aiohttp multipart POST (baseline)",
        "client": "OpenAITranscriber.transcribe",
        "miss": "hear(), new note (download stub + sha256 + cache + transcribe + write)",
        "hit": "hear(), same note again (cache hit, no backend call)",
    }
    for key, label in labels.items():
        values = sorted(times[key])
        p50, p95 = statistics.median(values), values[int(len(values) * 0.95) - 1]
        print(f"{label:75s} p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ({p50 / base:.2f}x baseline)")
    overhead = statistics.median(times["miss"]) - base
    print(f"agentd's overhead on a new note beyond the raw round trip: {overhead:.2f} ms (p50)")


if __name__ == "__main__":
    main()
