"""What a msgspec decoder's refusal says, as nodesync words every decoding error:
``<path>: <what is wrong>``, the JSON path of the field in error first (``$`` is the whole
document, ``$.alerts[0].startsAt`` a field of the first alert).

Every format nodesync reads from outside (the webhook payload, the API server's objects, the
simulator's scenario files) is a set of msgspec structs; their decoders' errors are worded
here, once."""

from __future__ import annotations

import re

import msgspec

_MISSING = re.compile(r"Object missing required field `([^`]*)`(?: - at `(.*)`)?")
_AT = re.compile(r"(.*) - at `(key` in `)?(.*)`")


def error_message(error: msgspec.ValidationError | str, root: str = "$") -> str:
    """``error`` (msgspec's message) as ``<path>: <what is wrong>``. A missing field is named
    by the path it would have, a bad key of a map by the map's path; ``root`` stands for the
    document (``$`` by default; a name where the document is one of several)."""
    text = str(error)
    missing = _MISSING.fullmatch(text)
    if missing is not None:
        field, parent = missing.groups()
        return f"{_rooted(parent or '$', root)}.{field}: missing"
    at = _AT.fullmatch(text)
    if at is not None:
        what, key, path = at.groups()
        what = lower_first(what)
        return f"{_rooted(path, root)}: {'a key: ' if key else ''}{what}"
    return f"{root}: {lower_first(text)}"


def _rooted(path: str, root: str) -> str:
    return root + path[1:] if path.startswith("$") else path


def lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
