"""How the daemon imports the Anthropic SDK: only the parts a Messages request uses.

Why: `import anthropic` runs ~100 package `__init__.py` files that import every type and
resource of the whole API (~2,900 modules, ~1.9 s of CPU on a 2-core box: the largest single
cost between `agentd run` and the first answer). Those files only re-export names, so
`agentd.runtime.lazy_packages` makes each bind a name when it is first read; a request then imports
about a third of the SDK.

Why it holds on the next release: nothing here names an SDK version or a private module. Each
package's `__init__.py` is read as it is installed, and only a package that is nothing but
re-exports is made lazy (any other statement: that package imports as usual); the names the
adapter needs are resolved before the daemon relies on them, and any failure imports the whole
SDK. CI runs the lazy/eager equivalence tests on the lowest and the newest SDK allowed.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Literal

from agentd.runtime import lazy_packages

log = logging.getLogger("agentd.llm")
Mode = Literal["lazy", "eager"]


def load(*, lazy: bool = True) -> Mode:
    """Import anthropic once (lazily if asked and safe); return how it was, or had been."""
    if "anthropic" in sys.modules:
        return "lazy" if lazy_packages.is_lazy(sys.modules["anthropic"]) else "eager"
    if not lazy:
        importlib.import_module("anthropic")
        return "eager"
    try:
        lazy_packages.install("anthropic")
        sdk = importlib.import_module("anthropic")
        # What the adapter uses, resolved now: a failure here still has the eager fallback.
        for name in ("AsyncAnthropic", "AnthropicError", "APIStatusError", "APIConnectionError"):
            getattr(sdk, name)
    except Exception as exc:
        log.warning("lazy anthropic import failed (%r): importing all of it", exc)
        _eager_after_failure()
        return "eager"
    return "lazy"


def _eager_after_failure() -> None:
    """Forget the half-made lazy SDK and import it the ordinary way."""
    lazy_packages.uninstall("anthropic")
    for name in [m for m in sys.modules if m == "anthropic" or m.startswith("anthropic.")]:
        del sys.modules[name]
    importlib.import_module("anthropic")
