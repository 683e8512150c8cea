"""`agentd run`: the composition root. It builds every service from the configuration, serves
until SIGTERM, and stops without losing work.

- `startup`: what must be open before anything runs (logging, the database, each configured
  channel of `agentd/channels/` and who the agent is on it, the single-runner lease), and
  the errors that stop a start. The daemon names no channel: it routes each chat's output to
  the channel that owns it (`chat/route.py`).
- `capabilities`: the one list of capabilities (built-ins, in order) that the daemon,
  `agentd doctor` and the redactor loop over.
- `services`: the wiring: each capability contributes (agentd/tools/capability.py), then the
  registry, the turn and the core workflows are built over what they gave.
- `process`: `run()`, which opens, builds, serves and shuts down in that order.

The only package that knows every other; nothing imports it but the CLI.
"""

from agentd.daemon.process import run
from agentd.daemon.startup import ConfigProblem, StartupError

__all__ = ["ConfigProblem", "StartupError", "run"]
