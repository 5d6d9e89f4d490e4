"""The three PATCH flavours the Kubernetes API accepts, applied to plain JSON dicts.

- JSON patch (RFC 6902, `application/json-patch+json`): add, remove, replace, move, copy, test.
- JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge, null deletes, lists
  are replaced.
- Strategic merge patch (`application/strategic-merge-patch+json`): a merge patch where some lists
  merge by a key (`status.conditions` by `type`, `spec.containers` by `name`, ...) and the
  `$patch`, `$retainKeys`, `$setElementOrder/...` and `$deleteFromPrimitiveList/...` directives
  are understood. The merge keys come from a table of the fields the served kinds use; any other
  list is replaced, as it is for a list without a patchMergeKey on a real server.

All functions return new objects and never modify their inputs. Failures raise `PatchError`
with the HTTP code the real server uses (400 for a malformed patch, 422 for one that does not
apply).
"""

from __future__ import annotations

import copy
from typing import Any

JSON = Any
JSONObject = dict[str, Any]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH)


class PatchError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---------------------------------------------------------------- JSON patch (RFC 6902)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(422, f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(422, f"invalid array index {token!r}")
    idx = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if idx > limit:
        raise PatchError(422, f"array index {idx} out of bounds")
    return idx


def _parent(doc: JSON, tokens: list[str], path: str) -> JSON:
    cur = doc
    for tok in tokens[:-1]:
        if isinstance(cur, dict):
            if tok not in cur:
                raise PatchError(422, f"doc is missing path: {path!r}")
            cur = cur[tok]
        elif isinstance(cur, list):
            cur = cur[_index(cur, tok, allow_end=False)]
        else:
            raise PatchError(422, f"doc is missing path: {path!r}")
    return cur


def _get(doc: JSON, path: str) -> JSON:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(422, f"doc is missing key: {path!r}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise PatchError(422, f"doc is missing path: {path!r}")


def _add(doc: JSON, path: str, value: JSON) -> JSON:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(422, f"doc is missing path: {path!r}")
    return doc


def _remove(doc: JSON, path: str) -> tuple[JSON, JSON]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError(422, "cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(422, f"unable to remove nonexistent key: {last}: missing value")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(422, f"doc is missing path: {path!r}")


def apply_json_patch(doc: JSONObject, ops: JSON) -> JSONObject:
    if not isinstance(ops, list):
        raise PatchError(400, "json patch must be a list of operations")
    out: JSON = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise PatchError(400, f"invalid json patch operation: {op!r}")
        kind = op.get("op")
        path = op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise PatchError(400, f"json patch {kind} operation has no value: {op!r}")
        if kind == "add":
            out = _add(out, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            out, _ = _remove(out, path)
        elif kind == "replace":
            _get(out, path)  # must exist
            if _pointer(path):
                out, _ = _remove(out, path)
            out = _add(out, path, copy.deepcopy(op["value"]))
        elif kind == "test":
            if _get(out, path) != op["value"]:
                raise PatchError(422, f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            src = op.get("from")
            if not isinstance(src, str):
                raise PatchError(400, f"json patch {kind} operation has no from: {op!r}")
            if kind == "move":
                out, value = _remove(out, src)
            else:
                value = copy.deepcopy(_get(out, src))
            out = _add(out, path, value)
        else:
            raise PatchError(400, f"unexpected json patch operation kind {kind!r}")
    if not isinstance(out, dict):
        raise PatchError(422, "the patched document is not an object")
    return out


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
# "*" stands for "any element of a list". Paths are relative to the object root.
MERGE_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "ownerReferences"): "uid",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}
for _c in ("containers", "initContainers", "ephemeralContainers"):
    MERGE_KEYS[("spec", _c, "*", "env")] = "name"
    MERGE_KEYS[("spec", _c, "*", "ports")] = "containerPort"
    MERGE_KEYS[("spec", _c, "*", "volumeMounts")] = "mountPath"
    MERGE_KEYS[("spec", _c, "*", "volumeDevices")] = "devicePath"

# Lists of scalars with patchStrategy=merge (set union).
PRIMITIVE_MERGE: frozenset[tuple[str, ...]] = frozenset(
    {("metadata", "finalizers"), ("spec", "finalizers")}
)

_SET_ORDER = "$setElementOrder/"
_DELETE_PRIMITIVE = "$deleteFromPrimitiveList/"


def _smp_map(target: JSON, patch: JSONObject, path: tuple[str, ...]) -> JSON:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    if directive is not None:
        raise PatchError(400, f"unknown patch directive {directive!r}")
    result: JSONObject = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key in ("$retainKeys", "$patch"):
            continue
        if key.startswith(_SET_ORDER):
            orders[key[len(_SET_ORDER) :]] = value if isinstance(value, list) else []
            continue
        if key.startswith(_DELETE_PRIMITIVE):
            field = key[len(_DELETE_PRIMITIVE) :]
            drop = value if isinstance(value, list) else []
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in drop]
            continue
        if value is None:
            result.pop(key, None)
            continue
        sub = (*path, key)
        if isinstance(value, dict):
            merged = _smp_map(result.get(key), value, sub)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(result.get(key), value, sub)
        else:
            result[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    for field, order in orders.items():
        current = result.get(field)
        if isinstance(current, list):
            result[field] = _apply_order(current, order, MERGE_KEYS.get((*path, field)))
    return result


def _apply_order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(item: Any) -> Any:
        if key is not None and isinstance(item, dict):
            return item.get(key)
        return item

    order_ids = [ident(o) for o in order]
    positions = {repr(oid): i for i, oid in enumerate(order_ids)}
    ranked = sorted(
        enumerate(items),
        key=lambda pair: (positions.get(repr(ident(pair[1])), len(order_ids)), pair[0]),
    )
    return [item for _, item in ranked]


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
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
        return [copy.deepcopy(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
    out = list(current)
    item_path = (*path, "*")
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(400, f"map: {item!r} does not contain declared merge key: {key}")
        idx = next(
            (i for i, v in enumerate(out) if isinstance(v, dict) and v.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            merged = _smp_map({}, item, item_path)
            out.append(merged)
        else:
            out[idx] = _smp_map(out[idx], item, item_path)
    return out


def apply_strategic_merge_patch(doc: JSONObject, patch: JSON) -> JSONObject:
    if not isinstance(patch, dict):
        raise PatchError(400, "strategic merge patch must be a JSON object")
    out = _smp_map(copy.deepcopy(doc), patch, ())
    if not isinstance(out, dict):
        raise PatchError(422, "the patch deleted the whole object")
    return out


def apply_patch(doc: JSONObject, content_type: str, patch: JSON) -> JSONObject:
    """Apply a patch of the given media type; PatchError(415) for unknown types."""
    if content_type == JSON_PATCH:
        return apply_json_patch(doc, patch)
    if content_type == MERGE_PATCH:
        return apply_merge_patch(doc, patch)
    if content_type == STRATEGIC_MERGE_PATCH:
        return apply_strategic_merge_patch(doc, patch)
    raise PatchError(415, f"unsupported patch type {content_type!r}")
