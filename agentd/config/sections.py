"""Top-level sections a plugin brings: a chat channel's `[telegram]` or `[matrix]`.

The core's own sections are fields of `Config`. A channel declares its section in its
contract (`chat.channel.Channel.section`): a name and a pydantic model, validated as strictly
as the core's, with the keys that moved out of it to a channel-neutral place. The channel list
(`agentd/channels/`) hands the sections to `config_model`, which gives the `Config` class
that has them as fields, so one `model_validate` checks the whole file: an unknown key, a
wrong type, an `AGENTD_MATRIX__…` override and a "did you mean" all read as for the core.

This is datasette's and llm's "a plugin brings its own settings" (datasette reads a plugin's
table from the file and hands it to the plugin; llm's plugins bring pydantic `Options`), with
the validation moved to load time: a section is refused before anything starts.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field, create_model

from agentd.config.schema import Config

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Section(Generic[M]):
    """`[name]`, validated by `model`. Optional: absent means None (a channel that is off),
    else the model's defaults. `moved`: keys of this section now spelled elsewhere (a dotted
    key, or None: no effect), loaded with one warning each."""

    name: str
    model: type[M]
    optional: bool = False
    moved: Mapping[str, str | None] = field(default_factory=dict)

    def of(self, config: Config) -> M | None:
        """This section of `config`; a `Config` built without the channel list (a test's)
        has its defaults, or None when optional."""
        value = getattr(config, self.name, None)
        if value is None and not self.optional:
            return self.model()
        return value  # type: ignore[no-any-return]

    def old_spellings(self) -> dict[str, str | None]:
        return {f"{self.name}.{key}": new for key, new in self.moved.items()}

    def __hash__(self) -> int:
        return hash((self.name, self.model))


@functools.cache
def config_model(sections: tuple[Section[Any], ...]) -> type[Config]:
    """`Config` with each section as a field of its own (one class per list of sections)."""
    if not sections:
        return Config
    fields: dict[str, Any] = {}
    for section in sections:
        if section.name in Config.model_fields or section.name in fields:
            raise ValueError(f"configuration section [{section.name}] is declared twice")
        if section.optional:
            fields[section.name] = (section.model | None, None)
        else:
            fields[section.name] = (section.model, Field(default_factory=section.model))
    model = create_model("Config", __base__=Config, __module__=Config.__module__, **fields)
    model.sections = sections
    return model
