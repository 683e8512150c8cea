"""Matrix as a chat channel: /sync intake committed with its token, every send under a
transaction id derived from its step, approval cards as reactions, media in and out, answers
formatted (the spec's HTML subset) as replies, streamed as one message edited as it grows, and
the owner's own edits taken as corrections; the only importer of mautrix, and imported only
when `[matrix]` is configured."""
