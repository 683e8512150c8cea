"""A fake OpenAI-compatible speech-to-text server: `POST /v1/audio/transcriptions`.

Speaks the documented wire format: multipart/form-data with `file` (the extension names the
format: flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav, webm), `model`, optional
`response_format` (json, text, verbose_json, srt, vtt) and `language`; Bearer auth; errors as
`{"error": {"message", "type", "param", "code"}}`, 413 over 25 MB, 429 rate limits (with
Retry-After when scripted) and 5xx. It "hears" the words registered for an audio file's sha256.

In-process: ``with FakeTranscription.running(api_key="sk-test") as stt: stt.base_url``;
as a process: ``python -m tests.fakes.transcription --port N`` (prints the base URL).
"""

from __future__ import annotations

import copy
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes._server import FakeServer

FORMATS = ("flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm")
RESPONSE_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")
MAX_BYTES = 25 * 1024 * 1024
# The container signature each extension must carry (a renamed or corrupt file is refused).
_MAGIC = {"ogg": b"OggS", "oga": b"OggS", "flac": b"fLaC", "wav": b"RIFF", "webm": b"\x1a\x45"}
_DEFAULT_MESSAGES = {
    429: (
        "Rate limit reached for requests. Please try again later.",
        "requests",
        "rate_limit_exceeded",
    ),
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
}


@dataclass
class SttFault:
    """Answer the next `times` requests with this HTTP error (or drop the connection)."""

    status: int = 500
    times: int = 1
    retry_after: float | None = None
    drop: bool = False


def _error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


class FakeTranscription(FakeServer):
    """Fake `/v1/audio/transcriptions` (OpenAI, Groq, whisper.cpp server and speaches speak it)."""

    def __init__(
        self, *, api_key: str | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        """api_key: the Bearer token required (None: no auth, like a local server)."""
        super().__init__(host=host, port=port)
        self.api_key = api_key
        self.default_text = ""  # what unknown audio "says"
        self._heard: dict[str, str] = {}
        self._faults: list[SttFault] = []
        self._requests: list[dict[str, Any]] = []

    # -- scripting -------------------------------------------------------------------------

    def says(self, audio: bytes, text: str) -> None:
        """Transcribe this exact audio as `text`."""
        with self._lock:
            self._heard[hashlib.sha256(audio).hexdigest()] = text

    def fail_next(
        self,
        status: int = 500,
        times: int = 1,
        retry_after: float | None = None,
        drop: bool = False,
    ) -> None:
        with self._lock:
            self._faults.append(SttFault(status, times, retry_after, drop))

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request: status, model, response_format, language, filename, content_type,
        size, sha256, auth (the Authorization header was right), time."""
        with self._lock:
            return copy.deepcopy(self._requests)

    def transcribed(self) -> list[dict[str, Any]]:
        """Requests that were answered with a transcript."""
        return [r for r in self.requests if r["status"] == 200]

    # -- the API ---------------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)

    def _take_fault(self) -> SttFault | None:
        with self._lock:
            if not self._faults:
                return None
            fault = self._faults[0]
            fault.times -= 1
            if fault.times <= 0:
                self._faults.pop(0)
            return fault

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._requests.append({"time": time.time(), **entry})
            self._changed()

    async def _transcriptions(self, request: web.Request) -> web.StreamResponse:
        entry: dict[str, Any] = {"status": None}
        response = await self._answer(request, entry)
        entry["status"] = response.status
        self._record(entry)
        return response

    async def _answer(self, request: web.Request, entry: dict[str, Any]) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        entry["auth"] = self.api_key is None or auth == f"Bearer {self.api_key}"
        if self.api_key is not None and not auth:
            return _error(
                401,
                "You didn't provide an API key. You need to provide your API key "
                "in an Authorization header using Bearer auth.",
            )
        if not entry["auth"]:
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        fault = self._take_fault()
        if fault is not None:
            if fault.drop:
                return self.drop_connection(request)
            message, kind, code = _DEFAULT_MESSAGES.get(
                fault.status, ("Error", "server_error", None)
            )
            headers = {"Retry-After": f"{fault.retry_after:g}"} if fault.retry_after else None
            return _error(fault.status, message, kind, code=code, headers=headers)
        if request.content_type != "multipart/form-data":
            return _error(
                400,
                f"Invalid Content-Type header ({request.content_type}), expected "
                "multipart/form-data.",
            )
        if request.content_length and request.content_length > MAX_BYTES:
            return _error(413, f"Maximum content size limit ({MAX_BYTES}) exceeded.")
        form = await request.post()
        upload = form.get("file")
        model = str(form.get("model") or "")
        response_format = str(form.get("response_format") or "json")
        entry.update(
            model=model, response_format=response_format, language=str(form.get("language") or "")
        )
        if not isinstance(upload, web.FileField):
            return _error(
                400, "1 validation error for Request\nbody -> file\n  field required", param="file"
            )
        data = upload.file.read()
        ext = (upload.filename or "").rsplit(".", 1)[-1].lower()
        entry.update(
            filename=upload.filename,
            content_type=upload.content_type,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        if not model:
            return _error(400, "you must provide a model parameter", param="model")
        if response_format not in RESPONSE_FORMATS:
            return _error(
                400, f"Invalid response_format {response_format!r}.", param="response_format"
            )
        if ext not in FORMATS:
            return _error(
                400, f"Invalid file format. Supported formats: {list(FORMATS)}", param="file"
            )
        magic = _MAGIC.get(ext)
        if not data or (magic and not data.startswith(magic)):
            return _error(400, "Audio file might be corrupted or unsupported", param="file")
        with self._lock:
            text = self._heard.get(entry["sha256"], self.default_text)
        return self._format(response_format, text, len(data))

    @staticmethod
    def _format(response_format: str, text: str, size: int) -> web.Response:
        if response_format == "text":
            return web.Response(text=text + "\n", content_type="text/plain")
        if response_format in ("srt", "vtt"):
            head = "WEBVTT\n\n" if response_format == "vtt" else "1\n"
            return web.Response(
                text=f"{head}00:00:00,000 --> 00:00:05,000\n{text}\n", content_type="text/plain"
            )
        if response_format == "verbose_json":
            return web.json_response(
                {
                    "task": "transcribe",
                    "language": "english",
                    "duration": 5.0,
                    "text": text,
                    "segments": [
                        {"id": 0, "start": 0.0, "end": 5.0, "text": text, "no_speech_prob": 0.01}
                    ],
                }
            )
        return web.json_response({"text": text, "usage": {"type": "duration", "seconds": 5}})


if __name__ == "__main__":
    FakeTranscription.main()
