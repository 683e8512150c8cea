"""What a conversation is, whatever platform carries it: the inputs a turn starts from, the
outbox every reply and notice leaves through, files handed back to the user, and the names
(workflow names, instance keys) that intake, commands and schedules share.

Platform-neutral: nothing here imports aiogram; `telegram/` adapts these to the Bot API.
"""
