"""Background tasks: work delegated by a turn (the `delegate` tool) or the owner (`/task`),
each its own durable workflow with its own token budget, step limit and tool subset, whose
result comes to the chat as a message of its own when it ends (docs/messages.md, "Tasks")."""
