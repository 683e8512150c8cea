"""Matrix as a chat channel: /sync intake committed with its token, every send under a
transaction id derived from its step, approval cards as reactions, media in and out, answers
streamed as one message edited as it grows; the only
importer of mautrix, and imported only when `[matrix]` is configured."""
