"""How text from outside (documents, transcripts, tool results, memories) is framed for the
model: inside <data>…</data>, which the text itself can never close.
"""

from __future__ import annotations

import re

_DATA_CLOSE = re.compile(r"</\s*data", re.IGNORECASE)


def as_data(text: str) -> str:
    """Text for inside <data>…</data>: it must not be able to close the block and speak."""
    return _DATA_CLOSE.sub("&lt;/data", text)
