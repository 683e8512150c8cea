"""How the daemon imports aiogram: schemas of Telegram types and methods are built on first use.

Why: `aiogram/types/__init__.py` calls `model_rebuild()` on all ~300 types at import, so pydantic
builds every schema up front (about 165 MB and seconds of CPU); the daemon uses a few dozen. Here
that import-time loop is skipped and the namespace it would have used is kept; `model_rebuild`
on aiogram's two base classes then supplies that namespace whenever pydantic builds a type or
method on first validation, so forward references resolve exactly as in the eager loop. A
method builds the types it returns first, so the session's `Response[...]` finds them complete.

Why it holds on the next release: no version is named. The set-up proves itself before the
daemon relies on it (aiogram must hand its namespace to the skipped loop, and `Message` and
`Update` must build and validate through it); anything else, or any failure, gets the eager
import with one log line. CI runs the lazy/eager equivalence tests on the lowest and the newest
aiogram and pydantic allowed.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import typing
from collections.abc import Iterator, Mapping
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel

log = logging.getLogger("agentd.telegram")
Mode = Literal["lazy", "eager"]


def load(*, lazy: bool = True) -> Mode:
    """Import aiogram once (lazily if asked and safe); return how it was, or had been, imported."""
    if "aiogram.types" in sys.modules:
        return _current_mode()
    if not lazy:
        importlib.import_module("aiogram")
        return "eager"
    try:
        namespace = _import_without_rebuild()
        _build_on_demand(namespace)
    except Exception as exc:
        log.warning("lazy aiogram set-up failed (%r): building all Telegram types now", exc)
        _eager_after_failure()
        return "eager"
    return "lazy"


def _current_mode() -> Mode:
    from aiogram.types.base import TelegramObject

    rebuild = getattr(TelegramObject.model_rebuild, "__func__", None)
    return "lazy" if getattr(rebuild, "agentd_lazy", False) else "eager"


@contextlib.contextmanager
def _rebuild_loop_skipped(namespace: dict[str, Any]) -> Iterator[None]:
    """While aiogram.types imports, its rebuild-everything loop records its namespace instead."""
    original = BaseModel.__dict__["model_rebuild"]

    def skip(cls: type[BaseModel], **kwargs: Any) -> bool | None:
        types_namespace = kwargs.get("_types_namespace")
        if types_namespace is not None and cls.__module__.startswith("aiogram.types."):
            namespace.update(types_namespace)
            return None
        # Any other model rebuilds as usual; one frame deeper, as this wrapper is a frame too.
        kwargs["_parent_namespace_depth"] = kwargs.get("_parent_namespace_depth", 2) + 1
        return original.__func__(cls, **kwargs)

    BaseModel.model_rebuild = classmethod(skip)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        BaseModel.model_rebuild = original  # type: ignore[method-assign]


def _import_without_rebuild() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    with _rebuild_loop_skipped(namespace):
        importlib.import_module("aiogram")
    if "Update" not in namespace or "Message" not in namespace:
        raise RuntimeError("aiogram.types did not hand its namespace to model_rebuild")
    return namespace


def _build_on_demand(namespace: Mapping[str, Any]) -> None:
    from aiogram.methods.base import TelegramMethod
    from aiogram.types.base import TelegramObject

    rebuild = _rebuild_with(dict(namespace))
    for base in (TelegramObject, TelegramMethod):
        base.model_rebuild = rebuild  # type: ignore[method-assign]
    # Prove the mechanism on the type every poll needs before the daemon relies on it. Message
    # first: Update then reuses its finished schema, and so does the first reply (SendMessage
    # returns a Message), instead of each building all of Message's types again (~0.14 s CPU).
    namespace["Message"].model_rebuild()
    namespace["Update"].model_validate({"update_id": 0})


def _rebuild_with(namespace: Mapping[str, Any]) -> classmethod[Any, ..., bool | None]:
    """A `model_rebuild` for aiogram's base classes that brings aiogram's own namespace."""
    pydantic_rebuild = BaseModel.__dict__["model_rebuild"].__func__

    def rebuild(
        cls: type[BaseModel],
        *,
        force: bool = False,
        raise_errors: bool = True,
        _parent_namespace_depth: int = 2,
        _types_namespace: Mapping[str, Any] | None = None,
    ) -> bool | None:
        if cls.__pydantic_complete__ and not force:
            return None
        for returned in _models_in(getattr(cls, "__returning__", None)):
            returned.model_rebuild()
        return pydantic_rebuild(  # type: ignore[no-any-return]
            cls,
            force=force,
            raise_errors=raise_errors,
            _types_namespace=_types_namespace or namespace,
        )

    rebuild.agentd_lazy = True  # type: ignore[attr-defined]
    return classmethod(rebuild)


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic models inside a type such as `Message`, `list[Update]` or `Message | bool`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _eager_after_failure() -> None:
    """Finish what aiogram's own import does, from whatever state the lazy attempt left."""
    for module, name in (
        ("aiogram.types.base", "TelegramObject"),
        ("aiogram.methods.base", "TelegramMethod"),
    ):
        base = getattr(sys.modules.get(module), name, None)
        if base is not None and "model_rebuild" in base.__dict__:
            delattr(base, "model_rebuild")
    if "aiogram" not in sys.modules:  # the import itself failed: run it again, unpatched
        importlib.import_module("aiogram")
        return
    types, methods = sys.modules["aiogram.types"], sys.modules["aiogram.methods"]
    default = importlib.import_module("aiogram.client.default").Default
    namespace = {
        "List": list,
        "Optional": Optional,
        "Union": Union,
        "Literal": Literal,
        "Default": default,
    }
    namespace.update({name: getattr(types, name) for name in types.__all__})
    for module in (types, methods):
        for name in module.__all__:
            model = getattr(module, name)
            if isinstance(model, type) and issubclass(model, BaseModel):
                model.model_rebuild(force=True, _types_namespace=namespace)
