"""A name inside a message written in Markdown (every channel renders it): shown as written.

Owner notices are Markdown, and a renderer takes `a__b__c` for bold and `*x*` for italic; a
name (of an automation, a skill, a mail account) is not the notice's own words, so one with a
character Markdown would read is set as a code span, which every renderer shows as is.
"""

from __future__ import annotations

import re

_MARKDOWN = re.compile(r"[_*~`\[\]#|<>\\]")


def literal(name: str) -> str:
    """`name` as is when nothing in it is Markdown, else as a code span (a backtick in it,
    which would end the span, becomes an apostrophe)."""
    if not _MARKDOWN.search(name):
        return name
    return "`" + name.replace("`", "'") + "`"


def block(text: str) -> str:
    """Text that is not the message's own words and may run over lines (an error, a log
    line) as a fenced code block: shown as is by every renderer (a fence inside it is broken
    up so it cannot close the block early)."""
    return "```\n" + text.replace("```", "`\u200b``") + "\n```"
