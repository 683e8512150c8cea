"""Speech to text behind one protocol; the OpenAI-compatible transcription endpoint behind it.

`POST {base}/audio/transcriptions` takes multipart/form-data (`file`, `model`,
`response_format`, optional `language`) and is spoken by OpenAI, Groq and local servers
(whisper.cpp's server with `--inference-path /v1/audio/transcriptions`, speaches). Errors come
back as `{"error": {"message", "type", "param", "code"}}`; 429 and 5xx are retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel

from agentd.config import MediaConfig, read_secret
from agentd.net.retry import RetryableHttpError, http_retrying, retry_after
from agentd.runtime.redact import clip

log = logging.getLogger(__name__)
Sleep = Callable[[float], Awaitable[None]]
MAX_RETRY_WAIT = 20.0  # a user is waiting for the answer to their voice note
_RETRYABLE = (RetryableHttpError, aiohttp.ClientConnectionError, TimeoutError)

# Telegram voice notes are OGG/Opus; the endpoint recognises formats by file name extension.
_EXTENSIONS = {
    "audio/ogg": "ogg",
    "audio/opus": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/flac": "flac",
    "audio/webm": "webm",
    "video/mp4": "mp4",
}
SUPPORTED_EXTENSIONS = frozenset(
    {"flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "oga", "wav", "webm"}
)


OPENAI_HOST = "api.openai.com"


class Transcript(BaseModel):
    text: str
    model: str
    # Its row in llm_usage: `stt:<model>` on OpenAI's endpoint (priced by the built-in table),
    # `stt:<host>/<model>` on any other, `stt:local/<model>` in process (0 unless priced).
    label: str = ""
    seconds: float | None = None  # of audio, as the service billed it (None: it did not say)


def stt_label(url: str, model: str) -> str:
    """How transcription by `model` at `url` is named in llm_usage and priced."""
    host = urlsplit(url).hostname or url
    return f"stt:{model}" if host == OPENAI_HOST else f"stt:{host}/{model}"


def billed_seconds(data: dict[str, Any]) -> float | None:
    """OpenAI's `usage` for a per-minute model: {"type": "duration", "seconds": 9}."""
    usage = data.get("usage")
    if isinstance(usage, dict) and usage.get("type") == "duration":
        seconds = usage.get("seconds")
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
            return float(seconds)
    return None


class TranscriptionError(Exception):
    """Transcription failed; the message is safe to show (it never holds the key)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class Transcriber(Protocol):
    """What voice notes need from a speech-to-text backend."""

    #: Stable name of the model, recorded with each cached transcript.
    model: str

    async def transcribe(self, audio: bytes, file_name: str, mime_type: str) -> Transcript: ...

    async def aclose(self) -> None: ...


def upload_name(file_name: str, mime_type: str) -> str:
    """A file name whose extension the endpoint recognises (voice notes arrive without one)."""
    stem, _, ext = file_name.rpartition(".")
    if stem and ext.lower() in SUPPORTED_EXTENSIONS:
        return file_name
    return f"{file_name.rsplit('.', 1)[0] or 'audio'}.{_EXTENSIONS.get(mime_type, 'ogg')}"


def _error_message(body: str) -> str:
    """OpenAI's `{"error": {"message": …}}` (also Groq's and speaches'), clipped; else empty."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error or data.get("detail")
    return clip(str(message), 300) if message else ""


class OpenAITranscriber:
    """OpenAI-compatible `/audio/transcriptions`, with retries on 429, 5xx and network errors."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        *,
        language: str = "",
        timeout: float = 120.0,
        retries: int = 2,
        retry_base_delay: float = 1.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.url = base_url.rstrip("/") + "/audio/transcriptions"
        self.model = model
        self._api_key = api_key
        self.language = language
        self.timeout = timeout
        self.retries = retries
        self._base_delay = retry_base_delay
        self._sleep = sleep
        # One keep-alive session: a new one per note cost ~13 ms of connection set-up
        # (benchmarks/voice_overhead.py), six times the request itself.
        self._session: aiohttp.ClientSession | None = None

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def __repr__(self) -> str:
        return f"OpenAITranscriber(url={self.url!r}, model={self.model!r}, api_key=<redacted>)"

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "[redacted]") if self._api_key else text

    async def transcribe(self, audio: bytes, file_name: str, mime_type: str) -> Transcript:
        """The words in `audio`; TranscriptionError with a clear message otherwise."""

        retrying = http_retrying(
            attempts=self.retries + 1,
            initial=self._base_delay,
            ceiling=MAX_RETRY_WAIT,
            sleep=self._sleep,
            retry_on=_RETRYABLE,
            log=log,
            redact=self._redact,
            message="transcription attempt failed; retrying",
        )
        name = upload_name(file_name, mime_type)
        attempts = self.retries + 1
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._post(audio, name, mime_type)
        except RetryableHttpError as exc:
            what = "rate-limited" if exc.status == 429 else "unavailable"
            raise TranscriptionError(
                f"the transcription service is {what} (HTTP {exc.status}) after {attempts} "
                "attempts",
                retryable=True,
            ) from None
        except TimeoutError:
            raise TranscriptionError(
                f"the transcription service did not answer within {self.timeout:g}s "
                f"({attempts} attempts)",
                retryable=True,
            ) from None
        except aiohttp.ClientError as exc:
            raise TranscriptionError(
                f"the transcription service is unreachable ({type(exc).__name__})", retryable=True
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post(self, audio: bytes, name: str, mime_type: str) -> Transcript:
        form = aiohttp.FormData()
        form.add_field("file", audio, filename=name, content_type=mime_type or "audio/ogg")
        form.add_field("model", self.model)
        form.add_field("response_format", "json")
        if self.language:
            form.add_field("language", self.language)
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        async with self._session.post(
            self.url, data=form, headers=headers, timeout=timeout
        ) as resp:
            if resp.status == 429 or resp.status >= 500:
                raise RetryableHttpError(
                    f"HTTP {resp.status}", resp.status, retry_after(resp.headers)
                )
            body = await resp.text()
            if resp.status != 200:
                raise self._client_error(resp.status, body)
        try:
            data = json.loads(body)
            text = data["text"]
        except (ValueError, KeyError, TypeError):
            raise TranscriptionError(
                "the transcription service sent something that is not a transcript",
                retryable=True,
            ) from None
        if not isinstance(text, str):
            raise TranscriptionError("the transcript is not text", retryable=True)
        return Transcript(
            text=text.strip(),
            model=self.model,
            label=stt_label(self.url, self.model),
            seconds=billed_seconds(data),
        )

    def _client_error(self, status: int, body: str) -> TranscriptionError:
        detail = _error_message(body)
        hint = {
            401: " Check the key in the variable named by media.transcription_key_env.",
            403: " The key may not have access to this model.",
            404: " Check media.transcription_url and media.transcription_model.",
        }.get(status, "")
        text = f"the transcription service refused the audio (HTTP {status})"
        text += (f": {detail}" if detail else "") + "." + hint
        return TranscriptionError(self._redact(text), retryable=False)


def build_transcriber(
    config: MediaConfig, env: Mapping[str, str]
) -> tuple[Transcriber | None, str | None]:
    """The configured backend, or None and a problem to log (a missing key names its variable)."""
    if config.transcription == "local":
        from agentd.media import local_whisper  # the optional extra; imported only when asked

        problem = local_whisper.model_problem(config.local_model_dir)
        if problem:
            return None, problem
        return local_whisper.LocalWhisperTranscriber(
            config.local_model_dir,
            language=config.transcription_language,
            threads=config.local_threads,
        ), None
    if config.transcription != "openai":
        return None, None
    key = read_secret(config.transcription_key_env, env)
    if config.transcription_key_env and not key:
        return None, (
            f"media.transcription is 'openai' but ${config.transcription_key_env} is not set "
            "(nor a credential of that name); voice notes will not be transcribed. For a local "
            'server without a key, set media.transcription_key_env = ""'
        )
    return OpenAITranscriber(
        config.transcription_url,
        config.transcription_model,
        key,
        language=config.transcription_language,
        timeout=config.transcription_timeout,
        retries=config.transcription_retries,
    ), None
