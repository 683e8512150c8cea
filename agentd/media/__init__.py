"""Media in chat: photos seen by the vision model, voice transcribed, documents read and added
to the library."""
