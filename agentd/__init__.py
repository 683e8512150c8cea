"""agentd: a personal AI agent on your own server, talked to over Telegram, Matrix or the web.

The packages, bottom to top (each imports only from the rows below it; tests/test_layout.py
holds the tiers and docs/architecture.md walks a message through them):

    cli                   the `agentd` command line
    daemon                `agentd run`: builds everything from the config and runs it
    dashboard             the owner's web dashboard: private pages over the CLI's queries
    telegram              the Bot API adapter (the only package that imports aiogram)
    automations           workflows the owner writes: start, signal, webhooks
    schedule              reminders and recurring prompts
    agent, commands       the turn workflow and tool loop; chat commands and buttons
    media, skills         photos, voice, documents in chat; Agent Skills
    knowledge, memory, web, hands, mail, calendar
                          documents, long-term memory, web search; workspace files and the
                          sandboxed shell; mailboxes; calendars
    tools                 the tool registry and risk policy, plugins, MCP
    chat, llm, access, retention, retrieval
                          conversation types and the outbox; the model; who may do what;
                          how long things are kept; embedding, FTS and fusion
    durable               the step journal: workflows that survive a crash
    db                    SQLite: connections, migrations, the single writer
    config                the TOML file, validated
    runtime, ledger, net  the process (logs, lease, start-up); audit and cost; safe HTTP
    parsing               outside data parsed in a bounded child process
"""

__version__ = "0.1.0"
