"""What a watch is made of, as pydantic models: its source, what it saw, a change, a verdict."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

SourceKind = Literal["page", "mail", "calendar", "command", "file", "automation"]
# Sources whose news is new items (a mail, an event, a run): what is there when the watch
# starts is not news. The others are one text whose current state the condition is about.
ITEM_KINDS = frozenset({"mail", "calendar", "automation"})
MAX_FOCUS = 200


class Source(BaseModel):
    """Where a watch looks. Only the fields of its kind are used."""

    kind: SourceKind
    url: str = Field(default="", max_length=4096, description="page: the http(s) URL")
    account: str = Field(
        default="", max_length=100, description="mail or calendar: the account's name"
    )
    folder: str = Field(default="INBOX", max_length=200, description="mail: the folder")
    days: int = Field(default=7, ge=1, le=60, description="calendar: how many days ahead")
    command: str = Field(
        default="", max_length=2000, description="command: a shell command (the sandbox)"
    )
    path: str = Field(default="", max_length=1000, description="file: a path in the workspace")
    automation: str = Field(default="", max_length=100, description="automation: its name")
    focus: str = Field(
        default="",
        max_length=MAX_FOCUS,
        description="Only lines with one of these words count ('|' between them, any case), "
        "e.g. 'price|in stock'; empty: all.",
    )

    @model_validator(mode="after")
    def _needed(self) -> Source:
        needed = {"page": "url", "command": "command", "file": "path", "automation": "automation"}
        key = needed.get(self.kind)
        if key and not getattr(self, key).strip():
            raise ValueError(f"a {self.kind} watch needs {key}")
        if self.kind == "page" and not self.url.startswith(("http://", "https://")):
            raise ValueError("a page watch needs an http:// or https:// URL")
        return self

    def describe(self) -> str:
        what = {
            "page": self.url,
            "mail": f"mail {self.account or '(first account)'}/{self.folder}",
            "calendar": f"calendar {self.account or '(first)'}, next {self.days} days",
            "command": f"command `{self.command}`",
            "file": f"workspace file {self.path}",
            "automation": f"automation {self.automation}",
        }[self.kind]
        return f"{what} (only lines with {self.focus!r})" if self.focus else what


class Reading(BaseModel):
    """One read of a source: its text, or its items by id, or why it failed."""

    ok: bool
    text: str = ""
    items: dict[str, str] = Field(default_factory=dict)  # id -> one line about it
    error: str = ""


class Seen(BaseModel):
    """What a watch last saw, and the states it decided on lately (digest -> when): a page
    flipping between two versions is not asked about, nor told, at every flip."""

    digest: str = ""
    text: str = ""  # the focused text, cut, to show the model what changed
    items: list[str] = Field(default_factory=list)  # ids seen, newest last
    decided: dict[str, float] = Field(default_factory=dict)


class Change(BaseModel):
    """What a read brings against what was seen; `seen` is stored once the check is done."""

    kind: Literal["baseline", "none", "changed", "decided_before"]
    shown: str = ""  # what the model is shown: the difference, numbers, new items
    seen: Seen


class Verdict(BaseModel):
    """The small model's answer: speak or stay quiet, and what to say."""

    speak: bool = Field(description="true only if the change clearly meets the owner's condition")
    message: str = Field(
        default="",
        max_length=600,
        description="When speaking: one or two short sentences for the owner saying what "
        "changed, with the figures. Empty when quiet.",
    )
    reason: str = Field(default="", max_length=300, description="Why, in a few words.")
