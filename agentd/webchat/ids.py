"""The web chat's ids: its block of agentd ids (chat/channel.py) and its one chat."""

from __future__ import annotations

from agentd.chat.channel import block_start

NAME = "webchat"  # the channel's name, as rows that name it say
BLOCK = 2  # Telegram has block 0, Matrix 1
BASE = block_start(BLOCK)
CHAT_ID = BASE + 1  # the owner's one chat on the page, whichever browser they sign in from
ACCOUNT_ID = BASE + 1  # the owner's account here, linked to the owner's agentd user
