"""A lazily imported re-export package shows what the eager import shows, and imports less."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from agentd.runtime import lazy_packages

INIT = '''
"""A package like an SDK's: re-exports, an alias, a star import that shadows, set-up."""
from __future__ import annotations
import typing as _t
from .a import A as A
from .b import B, helper
from . import c
from .sub.deep import D
from ._setup import configure
if _t.TYPE_CHECKING:
    from .never import Never
if not _t.TYPE_CHECKING:
    from .runtime import R
ALIAS = A
EARLY = [B]
__all__ = ["A", "B", "ALIAS", "D"]
from .stars import *
LATE = [B]
configure()
__locals = locals()
for __name in __all__:
    if not __name.startswith("__"):
        try:
            __locals[__name].__module__ = "PKG"
        except (TypeError, AttributeError):
            pass
'''
FILES = {
    "a.py": "class A: ...\n",
    "b.py": "class B: ...\ndef helper(): return 'helped'\n",
    "c.py": "X = 1\n",
    "sub/__init__.py": "from .deep import D\n",
    "sub/deep.py": "class D: ...\n",
    "_setup.py": "configured = []\ndef configure(): configured.append(1)\n",
    "runtime.py": "R = 'runtime'\n",
    "never.py": "raise AssertionError('imported under TYPE_CHECKING only')\n",
    "stars.py": "__all__ = ['S', 'B']\nclass S: ...\nclass B: ...\n",
    "other.py": "O = 'other'\n",
    "messy/__init__.py": "from .m import M\ncount = 0\nfor _ in range(2):\n    count += 1\n",
    "messy/m.py": "M = 'm'\n",
}
LOGGED = "import sys; sys.modules['lazylog'].LOG.append(__name__)\n"


def _write(root: Path, name: str) -> None:
    pkg = root / name
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(INIT.replace("PKG", name))  # logs nothing: it must not run
    for path, text in FILES.items():
        (pkg / path).parent.mkdir(parents=True, exist_ok=True)
        (pkg / path).write_text(LOGGED + textwrap.dedent(text))


@pytest.fixture
def pkgs(tmp_path: Path) -> Iterator[tuple[ModuleType, ModuleType, list[str]]]:
    """The same package twice: `lazypkg` through lazy_packages, `eagerpkg` the usual way."""
    log = ModuleType("lazylog")
    log.LOG = []  # type: ignore[attr-defined]
    sys.modules["lazylog"] = log
    for name in ("lazypkg", "eagerpkg"):
        _write(tmp_path, name)
    sys.path.insert(0, str(tmp_path))
    lazy_packages.install("lazypkg")
    try:
        eager = importlib.import_module("eagerpkg")
        log.LOG.clear()  # type: ignore[attr-defined]
        yield importlib.import_module("lazypkg"), eager, log.LOG  # type: ignore[attr-defined]
    finally:
        lazy_packages.uninstall("lazypkg")
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.split(".")[0] in ("lazypkg", "eagerpkg")]:
            del sys.modules[name]
        del sys.modules["lazylog"]


def _shape(value: object) -> object:
    """A value with the package name taken out, so lazypkg and eagerpkg compare."""
    if isinstance(value, list):
        return [_shape(v) for v in value]
    module = getattr(value, "__module__", None)
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or value
    return (str(module).replace("lazypkg", "P").replace("eagerpkg", "P"), str(name).replace(
        "lazypkg", "P").replace("eagerpkg", "P"))  # fmt: skip


def test_importing_runs_only_the_set_up_call(pkgs) -> None:  # type: ignore[no-untyped-def]
    lazy, _, log = pkgs
    assert lazy_packages.is_lazy(lazy)
    # stars.py is imported to see that it does not rebind `configure` (an SDK's are packages).
    assert log == ["lazypkg.stars", "lazypkg._setup"]
    assert sys.modules["lazypkg._setup"].configured == [1]


def test_a_name_imports_only_the_module_that_binds_it(pkgs) -> None:  # type: ignore[no-untyped-def]
    lazy, _, log = pkgs
    log.clear()
    assert lazy.helper() == "helped"
    assert log == ["lazypkg.b"]
    assert lazy.R == "runtime"
    assert "lazypkg.never" not in sys.modules


def test_every_name_is_what_the_eager_import_binds(pkgs) -> None:  # type: ignore[no-untyped-def]
    lazy, eager, _ = pkgs

    def bound(module: ModuleType) -> list[str]:  # submodules left out: eager binds them all
        return [
            n for n in dir(module)
            if not n.startswith("__") and not isinstance(getattr(module, n), ModuleType)
        ]  # fmt: skip

    names = bound(eager)
    assert bound(lazy) == names and "annotations" in names
    for name in names:
        assert _shape(getattr(lazy, name)) == _shape(getattr(eager, name)), name
    stars, b = sys.modules["lazypkg.stars"], sys.modules["lazypkg.b"]
    assert lazy.B is stars.B  # the later star import wins
    assert lazy.EARLY == [b.B] and lazy.LATE == [stars.B]  # assignments see the names of their time
    assert lazy.A.__module__ == "lazypkg"  # retagged like the eager loop does


def test_star_import_and_submodules_behave_as_eager(pkgs) -> None:  # type: ignore[no-untyped-def]
    lazy, eager, _ = pkgs
    namespace: dict[str, object] = {}
    exec("from lazypkg import *", namespace)
    assert sorted(n for n in namespace if n != "__builtins__") == sorted(eager.__all__)
    assert lazy.other.O == "other"  # a submodule the package never imported
    from lazypkg import c

    assert c.X == 1


def test_an_unknown_name_runs_the_real_init_then_answers_as_eager(pkgs) -> None:  # type: ignore[no-untyped-def]
    lazy, eager, log = pkgs
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        _ = lazy.missing
    assert not lazy_packages.is_lazy(lazy)
    assert "lazypkg.a" in log and "lazypkg.stars" in log
    assert sys.modules["lazypkg._setup"].configured == [1]  # the set-up call is not made twice
    assert _shape(lazy.B) == _shape(eager.B)
    with pytest.raises(AttributeError):
        _ = eager.missing


def test_a_package_with_other_statements_imports_as_usual(pkgs) -> None:  # type: ignore[no-untyped-def]
    _, _, log = pkgs
    log.clear()
    import lazypkg.messy as messy

    assert not lazy_packages.is_lazy(messy)
    assert messy.count == 2 and log == ["lazypkg.messy", "lazypkg.messy.m"]


def test_plans_refuse_what_they_cannot_reproduce() -> None:
    assert lazy_packages.plan_package("from .a import A\nA = 1\n", "p") is None  # bound twice
    assert lazy_packages.plan_package("from .a import A\nprint(A)\n", "p") is None
    assert lazy_packages.plan_package("x, y = 1, 2\n", "p") is None
    assert lazy_packages.plan_package("print()\n", "p") is None  # a call of nothing it imports
    guarded = "if TYPE_CHECKING and X:\n    from .a import A\n"
    assert lazy_packages.plan_package(guarded, "p") is None
    plan = lazy_packages.plan_package("'''doc'''\nfrom ..up import U as V\n", "p.q")
    assert plan is not None and list(plan.bindings) == ["V"]
