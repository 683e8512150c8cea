"""What a turn's recall searches for: the whole message, not only its text.

A bare reply ("and this?") or a photo without a caption has little or no text of its own; what
it is about is in the message replied to and in what the image shows. The user's words come
first (with the names of the recent turns it leans on, memory/in_context.py), so for a plain
text message that stands on its own the query is that text, unchanged. A voice note's
transcript has already replaced the text by the time recall runs.

The replied-to text joins only a short message. A reply that says what it wants in its own
words is its own best query: on LoCoMo questions replying to an unrelated message, adding the
replied-to text always cost hybrid R@5 0.714 -> 0.588 (benchmarks/recall_query.py); only
under SHORT_REPLY_WORDS, 0.668. A bare reply goes from 0.009 to 0.717 with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentd.chat.inputs import TurnInput
from agentd.media.vision import SeenImage
from agentd.memory.in_context import words_in_context

# Enough of a replied-to message or an image summary to say what it is about; the rest would
# only dilute the user's own words in the keyword and vector arms.
REPLY_CHARS = 500
IMAGE_CHARS = 500
RECENT_TURNS = 4  # the history entries (two exchanges) a message's "she", "it" may point into
# Fewer words than this and a reply is taken to point at the message it replies to ("and
# this?", "what time was that again?"), not to say what it is about itself.
SHORT_REPLY_WORDS = 8


def recall_query(
    inp: TurnInput, images: Sequence[SeenImage] = (), recent: Sequence[str] = ()
) -> str:
    """The text recall embeds and matches: the message (with what of the `recent` turns, oldest
    first, it leans on), the replied-to text, the images seen."""
    text = inp.text.strip()
    parts = [words_in_context(text, recent[-RECENT_TURNS:]) if text else ""]
    if inp.reply_to is not None and len(inp.text.split()) < SHORT_REPLY_WORDS:
        parts.append(inp.reply_to.text.strip()[:REPLY_CHARS])
    for image in images:
        seen = " ".join([image.summary.summary, *image.summary.entities])
        parts.append(seen.strip()[:IMAGE_CHARS])
    return "\n".join(p for p in parts if p)
