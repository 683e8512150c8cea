"""The local transcription extra (`agentd[local-stt]`): memory it adds and how fast it hears.

Runs in a fresh child process so the figures are the engine's own: VmRSS of bare Python (the
baseline), after importing agentd's transcription module, after loading the bundled tiny.en
model, and after transcribing the committed 4.2 s voice note; then the median wall time of N
transcriptions of that note and its real-time factor (audio seconds per second of CPU work).

    .venv/bin/python benchmarks/local_stt.py [--runs 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTE = ROOT / "tests" / "data" / "media" / "voice_note.ogg"
NOTE_SECONDS = 4.226  # opusinfo: playback length 0m:04.226s

CHILD = r"""
import asyncio, json, statistics, sys, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
out = {"bare": rss()}
from agentd.config import MediaConfig
from agentd.media.transcribe import build_transcriber
out["imported"] = rss()
runs, threads, note = int(sys.argv[1]), int(sys.argv[2]), open(sys.argv[3], "rb").read()
t, problem = build_transcriber(MediaConfig(transcription="local", local_threads=threads), {})
if problem:
    print(json.dumps({"problem": problem})); sys.exit(0)
started = time.perf_counter()
t._load()
out["load_s"] = time.perf_counter() - started
out["loaded"] = rss()
times = []
for _ in range(runs):
    started = time.perf_counter()
    text = asyncio.run(t.transcribe(note, "voice", "audio/ogg")).text
    times.append(time.perf_counter() - started)
out["after"] = rss()
out["median_s"] = statistics.median(times)
out["text"] = text
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(
        f"nproc {os.cpu_count()}, load average {os.getloadavg()[0]:.2f} at start, "
        f"{args.runs} runs, {args.threads} threads"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(args.runs), str(args.threads), str(NOTE)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if "problem" in out:
        print(out["problem"])
        return
    bare = out["bare"]
    labels = {
        "bare": "bare Python (baseline)",
        "imported": "agentd.media imported",
        "loaded": "tiny.en model loaded",
        "after": "after transcribing",
    }
    for key, label in labels.items():
        print(f"VmRSS {label:25s} {out[key]:7.1f} MB  (+{out[key] - bare:6.1f} MB)")
    print(
        f"model load {out['load_s']:.2f} s; one 4.2 s note: median {out['median_s']:.2f} s "
        f"(real-time factor {NOTE_SECONDS / out['median_s']:.1f}x)"
    )
    print(f"heard: {out['text']!r}")


if __name__ == "__main__":
    main()
