"""What a tool is, as a hash: its name, source, description, schema and code.

An approval records the fingerprint of the tool it was asked for. After a restart with a
changed plugin or MCP server, a tool of the same name may be another implementation; a call
approved for the old one is refused rather than run by the new one. Python code is hashed by
its bytecode, constants and names (recursively through closures and nested functions), not
by `repr`, which carries memory addresses and would differ in every process. An MCP
server's code is out of reach: its tools count as changed when their name, description or
schema does (or the server's name in the config), not when only the server's code does.
"""

from __future__ import annotations

import hashlib
import json
import types
from typing import Any

from agentd.tools.base import Tool

_MAX_DEPTH = 6


def _code_parts(code: types.CodeType, out: list[bytes], depth: int) -> None:
    out.append(code.co_code)
    out.append(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if depth < _MAX_DEPTH:
                _code_parts(const, out, depth + 1)
        else:
            out.append(repr(const).encode())


def _callable_parts(fn: Any, out: list[bytes], depth: int, seen: set[int]) -> None:
    """The code of `fn` and of the functions it closes over (a plugin's own function sits in
    the closure of the wrapper `@tool` builds around it)."""
    if depth > _MAX_DEPTH or id(fn) in seen:
        return
    seen.add(id(fn))
    fn = getattr(fn, "__func__", fn)  # bound methods
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        out.append(type(fn).__qualname__.encode())
        return
    out.append(f"{getattr(fn, '__module__', '')}.{fn.__qualname__}".encode())
    _code_parts(code, out, 0)
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(value) and hasattr(getattr(value, "__func__", value), "__code__"):
            _callable_parts(value, out, depth + 1, seen)
        elif isinstance(value, str | bytes | int | float | bool):
            out.append(repr(value).encode())  # e.g. which MCP tool a wrapper calls


def fingerprint(tool: Tool) -> str:
    """sha256 of everything that makes the tool what it is; stable across processes."""
    parts: list[bytes] = []
    _callable_parts(tool.fn, parts, 0, set())
    described = json.dumps(
        {
            "name": tool.name,
            "source": tool.source,
            "description": tool.description,
            "schema": tool.input_schema,
        },
        sort_keys=True,
        default=str,
    ).encode()
    digest = hashlib.sha256(described)
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()
