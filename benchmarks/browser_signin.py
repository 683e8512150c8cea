"""What a dashboard sign-in costs per picture and per input, on the real sandboxed browser (no
daemon): the sign-in desk (agentd/browser/remote.py) on a local site's sign-in page.

- a picture as the dashboard serves it (JPEG, quality 70, the 1280×800 viewport), against a
  PNG of the same page (the format the model's `browser_screenshot` sends): time and size,
  ratios within the same run;
- one input round as the owner makes it: a click into a field, a word typed, then the
  picture that shows it;
- the same pictures of a page of dense text (the test site's /huge) and of a photograph-like
  page (blurred shapes of every colour: a sign-in page over a photo).

Usage: .venv/bin/python benchmarks/browser_signin.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentd.browser.remote import Click, SignIns, Typed
from tests.browser_sites import USER_AT, sites
from tests.test_browser_service import _service

# A sign-in page over a photograph (many are): soft shapes of every colour, blurred, seeded.
PHOTO = """<body style=margin:0><canvas id=c width=1280 height=800
style="filter:blur(6px)"></canvas><script>
const c = document.getElementById('c').getContext('2d'); let s = 7;
const r = () => (s = (s * 16807) % 2147483647) / 2147483647;
for (let i = 0; i < 4000; i++) {
  c.fillStyle = `hsl(${r() * 360},${40 + r() * 40}%,${30 + r() * 50}%)`;
  c.beginPath(); c.arc(r() * 1280, r() * 800, 4 + r() * 40, 0, 7); c.fill();
}</script></body>"""


async def _timed(coro_fn, rounds: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    times, size = [], 0
    for _ in range(rounds):
        began = time.perf_counter()
        data = await coro_fn()
        times.append((time.perf_counter() - began) * 1000)
        size = len(data) if data else size
    return statistics.median(times), size


async def main(rounds: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="agentd-bench-signin-"))
    try:
        with sites() as (site, _):
            service = _service(site, folder, set())
            desk = SignIns(service, folder)
            began = time.perf_counter()
            await desk.start("bench", f"{site.base}/signin")
            opened = (time.perf_counter() - began) * 1000
            page = desk.current.session.page  # type: ignore[union-attr]
            jpeg = await _timed(desk.picture, rounds)
            png = await _timed(lambda: page.screenshot(type="png"), rounds)

            async def round_trip() -> bytes:
                await desk.click(Click(x=USER_AT[0], y=USER_AT[1]))
                await desk.type_text(Typed(text="owner"))
                return await desk.picture()

            both = await _timed(round_trip, rounds)
            await page.goto(f"{site.base}/huge")  # a page of dense text, edge to edge
            dense_jpeg = await _timed(desk.picture, rounds)
            dense_png = await _timed(lambda: page.screenshot(type="png"), rounds)
            await page.set_content(PHOTO)
            photo_jpeg = await _timed(desk.picture, rounds)
            photo_png = await _timed(lambda: page.screenshot(type="png"), rounds)
            await desk.cancel()
            await service.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"sign-in opened (browser start + page): {opened:.0f} ms")
    print(f"picture JPEG q70: p50 {jpeg[0]:.0f} ms, {jpeg[1] / 1024:.0f} KB")
    print(f"picture PNG (baseline): p50 {png[0]:.0f} ms, {png[1] / 1024:.0f} KB")
    print(f"JPEG/PNG: time {jpeg[0] / png[0]:.2f}x, size {jpeg[1] / png[1]:.2f}x")
    print(f"input round (click, type 5 keys, picture): p50 {both[0]:.0f} ms")
    print(f"dense page JPEG: p50 {dense_jpeg[0]:.0f} ms, {dense_jpeg[1] / 1024:.0f} KB")
    print(f"dense page PNG: p50 {dense_png[0]:.0f} ms, {dense_png[1] / 1024:.0f} KB")
    ratio = (dense_jpeg[0] / dense_png[0], dense_jpeg[1] / dense_png[1])
    print(f"dense JPEG/PNG: time {ratio[0]:.2f}x, size {ratio[1]:.2f}x")
    print(f"photo-like JPEG: p50 {photo_jpeg[0]:.0f} ms, {photo_jpeg[1] / 1024:.0f} KB")
    print(f"photo-like PNG: p50 {photo_png[0]:.0f} ms, {photo_png[1] / 1024:.0f} KB")
    ratio = (photo_jpeg[0] / photo_png[0], photo_jpeg[1] / photo_png[1])
    print(f"photo-like JPEG/PNG: time {ratio[0]:.2f}x, size {ratio[1]:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main(parser.parse_args().rounds))
