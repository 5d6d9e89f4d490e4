"""The two PATCH flavours its clients send, applied to plain JSON dicts.

- JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge, null deletes, lists
  are replaced.
- Strategic merge patch (`application/strategic-merge-patch+json`): a merge patch where some lists
  merge by a key (`status.conditions` by `type`, ...) and finalizers merge as a set. The merge
  keys come from a table of the fields the served kinds use; any other list is replaced, as it
  is for a list without a patchMergeKey on a real server.

JSON patch (RFC 6902) and the strategic merge patch's directives (`$patch`, `$retainKeys`,
`$setElementOrder/...`, `$deleteFromPrimitiveList/...`) are not served: neither nodesync nor the
simulator sends them (a JSON patch is answered 415 Unsupported Media Type), and the fidelity of
PATCH is the real kube-apiserver's (tests/kube).

All functions return new objects and never modify their inputs. Failures raise `PatchError`
with the HTTP code the real server uses (400 for a malformed patch, 415 for an unknown type).
"""

from __future__ import annotations

import copy
from typing import Any

JSON = Any
JSONObject = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH)


class PatchError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------- merge patch (RFC 7386)


def _merge(target: JSON, patch: JSON) -> JSON:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def apply_merge_patch(doc: JSONObject, patch: JSON) -> JSONObject:
    if not isinstance(patch, dict):
        raise PatchError(400, "merge patch must be a JSON object")
    out = _merge(copy.deepcopy(doc), patch)
    assert isinstance(out, dict)
    return out


# ---------------------------------------------------------------- strategic merge patch

# Lists that merge by a key (patchStrategy=merge, patchMergeKey=...) in the served kinds.
# Paths are relative to the object root.
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}

# Lists of scalars with patchStrategy=merge (set union).
PRIMITIVE_MERGE: frozenset[tuple[str, ...]] = frozenset(
    {("metadata", "finalizers"), ("spec", "finalizers")}
)


def _smp_map(target: JSON, patch: JSONObject, path: tuple[str, ...]) -> JSONObject:
    result: JSONObject = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            raise PatchError(400, f"unsupported strategic merge patch directive {key!r}")
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = _smp_map(result.get(key), value, (*path, key))
        elif isinstance(value, list):
            result[key] = _smp_list(result.get(key), value, (*path, key))
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_list(target: JSON, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    current: list[Any] = list(target) if isinstance(target, list) else []
    if path in PRIMITIVE_MERGE:
        out = list(current)
        for v in patch:
            if v not in out:
                out.append(copy.deepcopy(v))
        return out
    key = MERGE_KEYS.get(path)
    if key is None:
        return copy.deepcopy(patch)
    out = list(current)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(400, f"map: {item!r} does not contain declared merge key: {key}")
        idx = next(
            (i for i, v in enumerate(out) if isinstance(v, dict) and v.get(key) == item[key]),
            None,
        )
        if idx is None:
            out.append(_smp_map({}, item, path))
        else:
            out[idx] = _smp_map(out[idx], item, path)
    return out


def apply_strategic_merge_patch(doc: JSONObject, patch: JSON) -> JSONObject:
    if not isinstance(patch, dict):
        raise PatchError(400, "strategic merge patch must be a JSON object")
    return _smp_map(copy.deepcopy(doc), patch, ())


def apply_patch(doc: JSONObject, content_type: str, patch: JSON) -> JSONObject:
    """Apply a patch of the given media type; PatchError(415) for unknown types."""
    if content_type == MERGE_PATCH:
        return apply_merge_patch(doc, patch)
    if content_type == STRATEGIC_MERGE_PATCH:
        return apply_strategic_merge_patch(doc, patch)
    raise PatchError(415, f"unsupported patch type {content_type!r}")
