"""Telegram's HTML parse mode, as strict as the real server (modelled on tdlib's parse_html).

Returns the plain text plus entities (UTF-16 offsets), or raises HtmlError with Telegram's words.
"""

from __future__ import annotations

import re
from typing import Any

SUPPORTED_TAGS = {
    "a",
    "b",
    "strong",
    "i",
    "em",
    "s",
    "strike",
    "del",
    "u",
    "ins",
    "tg-spoiler",
    "tg-emoji",
    "span",
    "pre",
    "code",
    "blockquote",
}

SIMPLE_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "u": "underline",
    "ins": "underline",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
}

NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_ENTITY_RE = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z]{2,8});")


class HtmlError(ValueError):
    """The server would answer 400 "Bad Request: can't parse entities: <message>"."""


def utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def _decode_entity(text: str, i: int) -> tuple[str, int] | None:
    """Decode an HTML entity at text[i] == '&'; unknown ones stay literal, as in tdlib."""
    m = _ENTITY_RE.match(text, i)
    if not m:
        return None
    name = m.group(1)
    if name[0] == "#":
        code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
        if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            return None
        return chr(code), m.end()
    if name in NAMED_ENTITIES:
        return NAMED_ENTITIES[name], m.end()
    return None


def parse_html(text: str) -> tuple[str, list[dict[str, Any]]]:
    """Parse Telegram HTML: return (plain text, entities) or raise HtmlError."""

    def byte_offset(pos: int) -> int:
        return len(text[:pos].encode("utf-8"))

    out: list[str] = []
    u16 = 0  # current UTF-16 offset in the output
    stack: list[tuple[str, str | None, int]] = []  # (tag, argument, utf16 start)
    entities: list[dict[str, Any]] = []
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c == "&":
            decoded = _decode_entity(text, i)
            if decoded:
                out.append(decoded[0])
                u16 += utf16_len(decoded[0])
                i = decoded[1]
                continue
        if c != "<":
            out.append(c)
            u16 += utf16_len(c)
            i += 1
            continue

        tag_start = i
        i += 1
        if i < n and text[i] == "/":
            # End tag.
            if not stack:
                raise HtmlError(f"Unexpected end tag at byte offset {byte_offset(tag_start)}")
            j = i + 1
            while j < n and not text[j].isspace() and text[j] != ">":
                j += 1
            end_name = text[i + 1 : j].lower()
            while j < n and text[j].isspace():
                j += 1
            if j >= n or text[j] != ">":
                raise HtmlError(f"Unclosed end tag at byte offset {byte_offset(tag_start)}")
            tag, arg, start = stack.pop()
            if end_name and end_name != tag:
                raise HtmlError(
                    f"Unmatched end tag at byte offset {byte_offset(tag_start)}, "
                    f'expected "</{tag}>", found "</{end_name}>"'
                )
            i = j + 1
            if u16 > start:
                entities.extend(_make_entity(tag, arg, start, u16 - start, entities))
            continue

        # Start tag: name, then attributes up to '>'.
        j = i
        while j < n and not text[j].isspace() and text[j] != ">":
            j += 1
        if j >= n:
            raise HtmlError(f"Unclosed start tag at byte offset {byte_offset(tag_start)}")
        tag = text[i:j].lower()
        if tag not in SUPPORTED_TAGS:
            raise HtmlError(
                f'Unsupported start tag "{tag}" at byte offset {byte_offset(tag_start)}'
            )
        arg: str | None = None
        while True:
            while j < n and text[j].isspace():
                j += 1
            if j >= n:
                raise HtmlError(
                    f'Unclosed start tag "{tag}" at byte offset {byte_offset(tag_start)}'
                )
            if text[j] == ">":
                break
            k = j
            while k < n and not text[k].isspace() and text[k] not in "=>/\"'":
                k += 1
            attr = text[j:k].lower()
            if not attr:
                raise HtmlError(
                    f'Empty attribute name in the tag "{tag}" at byte offset '
                    f"{byte_offset(tag_start)}"
                )
            j = k
            while j < n and text[j].isspace():
                j += 1
            if j >= n:
                raise HtmlError(
                    f'Unclosed start tag "{tag}" at byte offset {byte_offset(tag_start)}'
                )
            if text[j] != "=":
                if tag == "blockquote" and attr == "expandable":
                    arg = "expandable"
                continue
            j += 1
            while j < n and text[j].isspace():
                j += 1
            if j >= n:
                raise HtmlError(
                    f'Unclosed start tag "{tag}" at byte offset {byte_offset(tag_start)}'
                )
            if text[j] in "\"'":
                quote = text[j]
                j += 1
                value_chars: list[str] = []
                while j < n and text[j] != quote:
                    decoded = _decode_entity(text, j) if text[j] == "&" else None
                    if decoded:
                        value_chars.append(decoded[0])
                        j = decoded[1]
                    else:
                        value_chars.append(text[j])
                        j += 1
                if j >= n:
                    raise HtmlError(f"Unclosed start tag at byte offset {byte_offset(tag_start)}")
                j += 1
                value = "".join(value_chars)
            else:
                k = j
                while k < n and (text[k].isalnum() or text[k] in ".-"):
                    k += 1
                value = text[j:k].lower()
                if k >= n or (not text[k].isspace() and text[k] != ">"):
                    raise HtmlError(f"Unexpected end of name token at byte offset {byte_offset(k)}")
                j = k
            if tag == "a" and attr == "href":
                arg = value
            elif tag == "code" and attr == "class" and value.startswith("language-"):
                arg = value.removeprefix("language-")
            elif tag == "span" and attr == "class" and value.startswith("tg-"):
                arg = value.removeprefix("tg-")
            elif tag == "tg-emoji" and attr == "emoji-id":
                arg = value
        if tag == "span" and arg != "spoiler":
            raise HtmlError(
                f'Tag "span" must have class "tg-spoiler" at byte offset {byte_offset(tag_start)}'
            )
        stack.append((tag, arg, u16))
        i = j + 1

    if stack:
        raise HtmlError(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    plain = "".join(out)
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return plain, entities


def _make_entity(
    tag: str, arg: str | None, offset: int, length: int, done: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The entity for a closed tag; <pre><code class="language-x"> merge into one pre."""
    if tag in SIMPLE_TYPES:
        return [{"type": SIMPLE_TYPES[tag], "offset": offset, "length": length}]
    if tag == "a":
        return [{"type": "text_link", "offset": offset, "length": length, "url": arg or ""}]
    if tag == "tg-emoji":
        if not (arg or "").isdigit():
            raise HtmlError("Invalid custom emoji identifier specified")
        return [
            {"type": "custom_emoji", "offset": offset, "length": length, "custom_emoji_id": arg}
        ]
    if tag == "blockquote":
        kind = "expandable_blockquote" if arg == "expandable" else "blockquote"
        return [{"type": kind, "offset": offset, "length": length}]
    if tag == "code":
        entity: dict[str, Any] = {"type": "code", "offset": offset, "length": length}
        if arg:
            entity["language"] = arg
        return [entity]
    if tag == "pre":
        last = done[-1] if done else None
        if last and last["type"] == "code" and (last["offset"], last["length"]) == (offset, length):
            done.pop()
            last["type"] = "pre"
            return [last]
        return [{"type": "pre", "offset": offset, "length": length}]
    return []
