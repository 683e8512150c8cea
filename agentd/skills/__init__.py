"""Agent Skills: folders with a SKILL.md (and scripts, references) the owner enables; read,
pinned by content hash, listed in the prompt by name and description, loaded only when used."""
