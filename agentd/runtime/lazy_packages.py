"""Re-export packages that import a submodule only when one of its names is first read.

Why: an SDK's `__init__.py` that is a list of `from .x import Y` lines makes `import sdk`
import every submodule (the Anthropic SDK: ~2,900 modules, ~1,400 pydantic classes, seconds of
CPU) when a client needs a few hundred. Once `install("sdk")` has run, a package of that SDK
whose top level holds only imports, `__all__`, single-name assignments,
`if TYPE_CHECKING` blocks, argument-less calls of imported names and the Stainless
"`__module__` = package" loop is created without running its body: reading a name runs just
the statement that binds it. A name the body never binds (a submodule it happened to import,
say) runs the real `__init__.py` first, so the package then holds what an eager import gives.
A package with any other statement imports as usual.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

LAZY_MARK = "__agentd_lazy__"


class _NotLazy(Exception):
    """The package's `__init__.py` does something a lazy package cannot reproduce."""


@dataclass(frozen=True)
class _FromImport:
    module: str  # absolute
    attribute: str | None  # None: the module itself (`import x as y`)


@dataclass(frozen=True)
class _Expression:
    code: types.CodeType


@dataclass
class _Plan:
    """What a package's `__init__.py` binds, and what it does besides."""

    bindings: dict[str, _FromImport | _Expression] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)  # statement index of each binding
    stars: list[tuple[int, str]] = field(default_factory=list)  # `from m import *`: (index, m)
    submodules: set[str] = field(default_factory=set)  # first parts of relative imports
    calls: list[str] = field(default_factory=list)  # names called with no arguments, in order
    retags_module: bool = False  # sets `__module__` = package on every name in `__all__`

    def bind(self, name: str, binding: _FromImport | _Expression) -> None:
        if name in self.bindings:  # which one a name means would depend on where it is read
            raise _NotLazy(name)
        self.bindings[name] = binding
        self.order[name] = len(self.order) + len(self.stars)


def plan_package(source: str, package: str) -> _Plan | None:
    """The plan for a package's `__init__.py`, or None if it does anything else."""
    plan = _Plan()
    try:
        if not _add_statements(ast.parse(source).body, package, plan):
            return None
    except _NotLazy:
        return None
    if any(callee not in plan.bindings for callee in plan.calls):
        return None  # only calls of what the package itself imports are reproduced
    return plan


def _add_statements(body: Sequence[ast.stmt], package: str, plan: _Plan) -> bool:
    for node in body:
        if not _add_statement(node, package, plan):
            return False
    return True


def _add_statement(node: ast.stmt, package: str, plan: _Plan) -> bool:
    if isinstance(node, ast.ImportFrom):
        module = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
        if node.level == 1 and node.module:
            plan.submodules.add(node.module.split(".")[0])
        if any(alias.name == "*" for alias in node.names):
            plan.stars.append((len(plan.order) + len(plan.stars), module))
            return True
        for alias in node.names:
            plan.bind(alias.asname or alias.name, _FromImport(module, alias.name))
        return True
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                plan.bind(alias.asname, _FromImport(alias.name, None))
            else:
                top = alias.name.split(".")[0]
                plan.bind(top, _FromImport(top, None))
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return True  # a docstring
    if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            return False
        code = compile(ast.Expression(node.value), f"<{package}.__init__>", "eval")
        plan.bind(targets[0].id, _Expression(code))
        return True
    if isinstance(node, ast.If) and (checking := _type_checking(node.test)) is not None:
        return _add_statements(node.orelse if checking else node.body, package, plan)
    if _is_bare_call(node):
        plan.calls.append(node.value.func.id)  # type: ignore[attr-defined]
        return True
    if ast.unparse(node) == _RETAG_LOOP.replace("PACKAGE", repr(package)):
        plan.retags_module = True
        return True
    return False


def _type_checking(test: ast.expr) -> bool | None:
    """True for `TYPE_CHECKING` (or `typing.TYPE_CHECKING`), False for its `not`, else None."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _type_checking(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.Name | ast.Attribute):
        name = test.id if isinstance(test, ast.Name) else test.attr
        return True if name == "TYPE_CHECKING" else None
    return None


def _is_bare_call(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and not node.value.args
        and not node.value.keywords
    )


# The loop Stainless-generated SDKs end their top-level `__init__.py` with.
_RETAG_LOOP = ast.unparse(
    ast.parse(
        "for __name in __all__:\n"
        "    if not __name.startswith('__'):\n"
        "        try:\n"
        "            __locals[__name].__module__ = PACKAGE\n"
        "        except (TypeError, AttributeError):\n"
        "            pass\n"
    )
)


class _Names(Mapping[str, Any]):
    """The package's names as they stood just before statement `before`, bound on demand."""

    def __init__(self, package: _LazyPackage, before: int) -> None:
        self._package, self._before = package, before

    def __getitem__(self, key: str) -> Any:
        return self._package.value_before(key, self._before)

    def __iter__(self) -> Iterator[str]:
        return iter(self._package.plan.bindings)

    def __len__(self) -> int:
        return len(self._package.plan.bindings)


class _LazyPackage:
    """Binds a package's names one at a time, as its `__init__.py` would have bound them."""

    def __init__(self, module: types.ModuleType, plan: _Plan, real: importlib.abc.Loader) -> None:
        self.module, self.plan, self._real = module, plan, real
        self._values: dict[str, Any] = {}  # each statement's own value, made once
        self._lock = threading.RLock()
        self._whole = False

    def install(self) -> None:
        self.module.__getattr__ = self.getattr  # type: ignore[method-assign]
        self.module.__dir__ = self.names  # type: ignore[method-assign]
        setattr(self.module, LAZY_MARK, True)
        for name in self.plan.calls:
            self.resolve(name)()

    def names(self) -> list[str]:
        """What `dir(package)` shows: bound and loaded names and those of its star imports."""
        stars = (_exports(importlib.import_module(m)) for _, m in self.plan.stars)
        return sorted({*self.module.__dict__, *self.plan.bindings, *(n for s in stars for n in s)})

    def getattr(self, name: str) -> Any:
        if name in self.plan.bindings:
            return self.resolve(name)
        if name == "__all__":
            return self._public_names()
        if name.startswith("__"):
            raise AttributeError(f"module {self.module.__name__!r} has no attribute {name!r}")
        if self._star_source(name, -1) is not None:
            return self.resolve(name)
        submodule = f"{self.module.__name__}.{name}"
        if importlib.machinery.PathFinder.find_spec(submodule, self.module.__path__):
            # `from . import sub` asks hasattr(package, "sub") first: import just that one.
            return importlib.import_module(submodule)
        self.run_whole()
        try:
            return self.module.__dict__[name]
        except KeyError:
            raise AttributeError(
                f"module {self.module.__name__!r} has no attribute {name!r}"
            ) from None

    def resolve(self, name: str) -> Any:
        """`name` as the finished `__init__.py` leaves it (a later star import wins)."""
        if name in self.module.__dict__:
            return self.module.__dict__[name]
        star = self._star_source(name, self.plan.order.get(name, -1))
        value = getattr(star, name) if star is not None else self._value(name)
        if self.plan.retags_module and not name.startswith("__") and name in self._exported():
            with contextlib.suppress(TypeError, AttributeError):
                value.__module__ = self.module.__name__
        return self.module.__dict__.setdefault(name, value)

    def value_before(self, name: str, before: int) -> Any:
        """`name` as it stood just before statement `before` (for evaluating that statement)."""
        bound = self.plan.order.get(name, -1)
        bound = bound if bound < before else -1
        star = self._star_source(name, bound, before)
        if star is not None:
            return getattr(star, name)
        if bound < 0:
            raise KeyError(name)  # eval then looks in the globals and builtins
        return self._value(name)

    def _value(self, name: str) -> Any:
        """What the statement binding `name` binds."""
        if name not in self._values:
            binding = self.plan.bindings[name]
            if isinstance(binding, _Expression):
                names = _Names(self, self.plan.order[name])
                value = eval(binding.code, self.module.__dict__, names)
            else:
                value = self._import(binding)
            self._values.setdefault(name, value)
        return self._values[name]

    def _star_source(
        self, name: str, after: int, before: float = float("inf")
    ) -> types.ModuleType | None:
        """The module of the last `import *` between two statements that exports `name`."""
        for index, module_name in reversed(self.plan.stars):
            if index < after:
                break
            if index > before:
                continue
            module = importlib.import_module(module_name)
            if name in _exports(module):
                return module
        return None

    def _public_names(self) -> list[str]:
        """What `from package import *` gives when `__init__.py` sets no `__all__`."""
        names = {*self.plan.bindings, *self.plan.submodules}
        for _, module_name in self.plan.stars:
            names.update(_exports(importlib.import_module(module_name)))
        return sorted(n for n in names if not n.startswith("_"))

    def _exported(self) -> list[str]:
        return self.resolve("__all__") if "__all__" in self.plan.bindings else []

    def _import(self, binding: _FromImport) -> Any:
        if binding.attribute is None:
            return importlib.import_module(binding.module)
        if binding.module == self.module.__name__:  # `from . import sub`
            return importlib.import_module(f"{binding.module}.{binding.attribute}")
        source = importlib.import_module(binding.module)
        try:
            return getattr(source, binding.attribute)
        except AttributeError:  # a submodule the package itself does not import
            return importlib.import_module(f"{binding.module}.{binding.attribute}")

    def run_whole(self) -> None:
        """Run the real `__init__.py` once: the package then has all an eager import gives."""
        with self._lock:
            if self._whole:
                return
            self._whole = True
            for name in ("__getattr__", "__dir__"):
                self.module.__dict__.pop(name, None)
            source = self._real.get_source(self.module.__name__)  # type: ignore[attr-defined]
            tree = ast.parse(source)
            tree.body = [n for n in tree.body if not _is_bare_call(n)]  # made at import already
            exec(
                compile(tree, self.module.__file__ or self.module.__name__, "exec"),
                self.module.__dict__,
            )


def _exports(module: types.ModuleType) -> list[str]:
    """The names `from module import *` binds."""
    try:
        return list(module.__all__)
    except AttributeError:
        return [n for n in module.__dict__ if not n.startswith("_")]


class _LazyLoader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader, plan: _Plan) -> None:
        self._real, self._plan = real, plan

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: types.ModuleType) -> None:
        _LazyPackage(module, self._plan, self._real).install()


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.root and not fullname.startswith(self.root + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if spec is None or spec.submodule_search_locations is None or loader is None:
            return spec
        get_source = getattr(loader, "get_source", None)
        source = get_source(fullname) if get_source else None
        plan = plan_package(source, fullname) if source else None
        if plan is not None:
            spec.loader = _LazyLoader(loader, plan)
        return spec


def install(root: str) -> None:
    """From now on, packages under `root` that qualify are imported lazily (see module doc).

    It stays for the life of the process because SDKs import parts on first use too (the
    Anthropic client imports its resources when a request is first made).
    """
    if not any(isinstance(f, _Finder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(root))


def uninstall(root: str) -> None:
    """Import packages under `root` the ordinary way again (those already imported stay)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not (isinstance(f, _Finder) and f.root == root)]


def is_lazy(module: types.ModuleType) -> bool:
    """Whether `module` was created by `lazy_packages` (and has not run its body since)."""
    return bool(module.__dict__.get(LAZY_MARK)) and "__getattr__" in module.__dict__
