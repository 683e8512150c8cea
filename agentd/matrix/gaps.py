"""What one /sync asks of each room's timeline.

Synapse hands a sync 10 events a room unless the filter says otherwise, and marks a timeline
it cut `limited`: a burst, or what was written while agentd was down, would lose its older
events. The sync asks for TIMELINE_LIMIT instead, so an ordinary burst fits in one answer.
"""

from __future__ import annotations

import json

TIMELINE_LIMIT = 50  # events a room per sync: a burst of this many needs no paging at all
SYNC_FILTER = json.dumps({"room": {"timeline": {"limit": TIMELINE_LIMIT}}}, separators=(",", ":"))
