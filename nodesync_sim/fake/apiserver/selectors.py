"""Label and field selectors: parsing the query-string syntax and matching objects.

Label selector syntax (k8s.io/apimachinery/pkg/labels): comma-separated requirements
`key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`.
`!=` and `notin` also match objects that lack the key, as on a real server.

Field selector syntax (k8s.io/apimachinery/pkg/fields): comma-separated `field=value`,
`field==value`, `field!=value`; backslash escapes `,` `=` `!` and `\\` inside values. Only the
fields a resource supports are accepted; anything else is a 400 "field label not supported".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodesync_sim.fake.apiserver.errors import APIError, bad_request
from nodesync_sim.fake.apiserver.resources import FieldGetter

JSONObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin"
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True, slots=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    def matches_object(self, obj: JSONObject) -> bool:
        if not self.requirements:
            return True
        return self.matches(obj.get("metadata", {}).get("labels"))


_TOKEN = re.compile(r"\s*(!=|==|=|!|,|\(|\)|[^\s!=,()]+)")
_KEY = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$"
)
_VALUE = re.compile(r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?)?$")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:  # pragma: no cover - the pattern matches any non-space character
            raise bad_request(f"unable to parse requirement: {text!r}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _check_key(key: str) -> str:
    if not _KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r}")
    return key


def _check_value(value: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise bad_request(f"unable to parse requirement: invalid label value {value!r}")
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a `labelSelector` query value; raises a 400 APIError when malformed."""
    if not text or not text.strip():
        return LabelSelector()
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0

    def peek() -> str | None:
        return toks[i] if i < len(toks) else None

    while i < len(toks):
        if toks[i] == "!":
            i += 1
            key = peek()
            if key is None or key in "!=,()":
                raise bad_request(f"unable to parse requirement: {text!r}: missing key after '!'")
            reqs.append(Requirement(_check_key(key), "!exists", frozenset()))
            i += 1
        else:
            key = _check_key(toks[i])
            i += 1
            op = peek()
            if op is None or op == ",":
                reqs.append(Requirement(key, "exists", frozenset()))
            elif op in ("=", "==", "!="):
                i += 1
                value = peek()
                if value is None or value == ",":
                    value = ""
                else:
                    i += 1
                reqs.append(
                    Requirement(key, "!=" if op == "!=" else "=", frozenset({_check_value(value)}))
                )
            elif op in ("in", "notin"):
                i += 1
                if peek() != "(":
                    raise bad_request(f"unable to parse requirement: {text!r}: expected '('")
                i += 1
                values: list[str] = []
                while True:
                    tok = peek()
                    if tok is None:
                        raise bad_request(f"unable to parse requirement: {text!r}: expected ')'")
                    i += 1
                    if tok == ")":
                        break
                    if tok == ",":
                        continue
                    values.append(_check_value(tok))
                reqs.append(Requirement(key, op, frozenset(values)))
            else:
                raise bad_request(f"unable to parse requirement: {text!r}: unexpected {op!r}")
        if i < len(toks):
            if toks[i] != ",":
                raise bad_request(f"unable to parse requirement: {text!r}: expected ','")
            i += 1
            if i == len(toks):
                raise bad_request(f"unable to parse requirement: {text!r}: expected a key")
    return LabelSelector(tuple(reqs))


def label_selector_from_object(selector: JSONObject | None) -> LabelSelector | None:
    """A metav1.LabelSelector (matchLabels/matchExpressions) as a LabelSelector.

    None (a null selector) selects nothing; {} selects everything (policy/v1 semantics).
    """
    if selector is None:
        return None
    reqs: list[Requirement] = []
    for key, value in sorted((selector.get("matchLabels") or {}).items()):
        reqs.append(Requirement(key, "=", frozenset({value})))
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in selector.get("matchExpressions") or []:
        op = ops.get(expr.get("operator", ""))
        if op is None:
            raise APIError(422, "Invalid", f"invalid label selector operator {expr!r}")
        reqs.append(Requirement(expr["key"], op, frozenset(expr.get("values") or [])))
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class FieldTerm:
    getter: FieldGetter
    field: str
    negate: bool
    value: str

    def matches(self, obj: JSONObject) -> bool:
        return (self.getter(obj) == self.value) != self.negate


@dataclass(frozen=True, slots=True)
class FieldSelector:
    terms: tuple[FieldTerm, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.terms

    def matches(self, obj: JSONObject) -> bool:
        return all(t.matches(obj) for t in self.terms)

    def required_value(self, field: str) -> str | None:
        """The value an `=` term pins `field` to, if any (lets the store skip a scan)."""
        for t in self.terms:
            if t.field == field and not t.negate:
                return t.value
        return None


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    escaped = False
    for ch in text:
        if escaped:
            cur.append("\\" + ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if escaped:
        raise bad_request(f"invalid field selector: {text!r}: trailing backslash")
    parts.append("".join(cur))
    return parts


def _unescape(value: str) -> str:
    out: list[str] = []
    it = iter(value)
    for ch in it:
        if ch == "\\":
            nxt = next(it, "")
            if nxt not in ("\\", ",", "=", "!"):
                raise bad_request(f"invalid field selector value: {value!r}")
            out.append(nxt)
        else:
            out.append(ch)
    return "".join(out)


def _split_term(term: str) -> tuple[str, str, str]:
    escaped = False
    for i, ch in enumerate(term):
        if escaped:
            escaped = False
            continue
        if ch == "\\":
            escaped = True
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op) :]
    raise bad_request(f"invalid selector: '{term}'; can't understand '{term}'")


def parse_field_selector(text: str | None, getters: Mapping[str, FieldGetter]) -> FieldSelector:
    """Parse a `fieldSelector` query value against the fields `getters` supports."""
    if not text or not text.strip():
        return FieldSelector()
    terms: list[FieldTerm] = []
    for raw in _split_unescaped(text, ","):
        if not raw.strip():
            continue
        field, op, value = _split_term(raw)
        field = field.strip()
        getter = getters.get(field)
        if getter is None:
            raise bad_request(f"field label not supported: {field}")
        terms.append(FieldTerm(getter, field, op == "!=", _unescape(value)))
    return FieldSelector(tuple(terms))
