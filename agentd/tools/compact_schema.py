"""A tool's JSON schema as the model reads it: what pydantic writes, less what tells it nothing.

Every turn sends every offered tool's schema, so each needless token is paid on every call:
- `title` on the schema and on each property: pydantic derives it from the name beside it;
- an optional argument's `anyOf: [X, {"type": "null"}]` with `default: null`: the model leaves
  the argument out to mean "none", so X alone says the same (the arguments are still parsed by
  the tool's pydantic model, where None stays the default);
- the arguments model's docstring as the schema's `description`: the tool's own description
  says what the tool is for, and the docstring is written for the code's readers;
- a string's length bounds that no sensible argument comes near (`maxLength` of 100 or more,
  `minLength` of 1), there to refuse hostile or runaway input; the tool's pydantic model still
  enforces them and its error names the limit, should the model ever pass one;
- a default that is what leaving the argument out already means: "" for a string, false for a
  boolean;
- `additionalProperties: false`: the model is shown every argument there is, and the tool's
  pydantic model refuses any other by name;
- a `$defs` entry used by one `$ref` only: it is written where it is used, which says the same
  without the indirection's framing (an entry used twice, or one that refers to others, stays).
Nothing else changes: names, types, numeric bounds, enums, other defaults, required lists and
descriptions of the arguments stay as they are.
"""

from __future__ import annotations

from typing import Any

_NULL = {"type": "null"}
_NODE_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_NODE_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_NODE_ONE = ("items", "additionalProperties", "not")
_FAR_BOUND = {"maxLength": lambda n: n >= 100, "minLength": lambda n: n <= 1}
_IMPLIED_DEFAULT = {"string": "", "boolean": False}
_REF = "#/$defs/"


def for_model(schema: dict[str, Any]) -> dict[str, Any]:
    """A compact copy of an arguments schema (the input is left as it is)."""
    out = _inline_single_refs(_node(schema))
    out.pop("description", None)
    return out


def _inline_single_refs(schema: dict[str, Any]) -> dict[str, Any]:
    defs = schema.get("$defs")
    if not isinstance(defs, dict):
        return schema
    uses: dict[str, int] = {}
    _count_refs(schema, uses)
    single = {
        name: body
        for name, body in defs.items()
        if uses.get(_REF + name) == 1 and not _count_refs(body, {})
    }
    if not single:
        return schema
    out = _replace_refs({k: v for k, v in schema.items() if k != "$defs"}, single)
    rest = {name: _replace_refs(body, single) for name, body in defs.items() if name not in single}
    return {**out, "$defs": rest} if rest else out


def _count_refs(node: Any, uses: dict[str, int]) -> dict[str, int]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            uses[ref] = uses.get(ref, 0) + 1
        for value in node.values():
            _count_refs(value, uses)
    elif isinstance(node, list):
        for value in node:
            _count_refs(value, uses)
    return uses


def _replace_refs(node: Any, single: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_replace_refs(value, single) for value in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF) and ref[len(_REF) :] in single:
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return {**_replace_refs(single[ref[len(_REF) :]], single), **siblings}
    return {key: _replace_refs(value, single) for key, value in node.items()}


def _node(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _NODE_MAPS and isinstance(value, dict):
            out[key] = {name: _node(sub) for name, sub in value.items()}
        elif key in _NODE_LISTS and isinstance(value, list):
            out[key] = [_node(sub) for sub in value]
        elif key == "additionalProperties" and value is False:
            continue
        elif key in _NODE_ONE:
            out[key] = _node(value)
        elif not (key in _FAR_BOUND and isinstance(value, int) and _FAR_BOUND[key](value)):
            out[key] = value
    return _implied_default(_optional(out))


def _implied_default(node: dict[str, Any]) -> dict[str, Any]:
    kind = node.get("type")
    if isinstance(kind, str) and kind in _IMPLIED_DEFAULT and "default" in node:
        implied = _IMPLIED_DEFAULT[kind]
        if node["default"] == implied and type(node["default"]) is type(implied):
            return {k: v for k, v in node.items() if k != "default"}
    return node


def _optional(node: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, null]` with `default: null` → X (with the node's own description)."""
    variants = node.get("anyOf")
    if "default" not in node or node["default"] is not None or not isinstance(variants, list):
        return node
    rest = [v for v in variants if v != _NULL]
    if len(variants) != 2 or len(rest) != 1 or not isinstance(rest[0], dict):
        return node
    merged = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
    return {**rest[0], **merged}
