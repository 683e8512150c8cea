"""Media in and out of chat: voice transcription, documents read in chat, files sent back."""
