"""Metric text kept per object, kube-state-metrics' way: each object's lines of each family are
rendered when the object changes, and a scrape writes them out without building families.

A :class:`LineStore` holds, for each object (by key), one chunk of bytes per family: its
samples, zero or more lines ending in a newline. :meth:`LineStore.exposition` writes each
family's HELP and TYPE and then every object's chunk of it, objects in key order. A family's
text is joined once and kept until a chunk of it changes, so a scrape after a Lease renewal
joins one family again, not all of them. Every family here is a gauge: a gauge's lines read
the same in the Prometheus text format and in OpenMetrics, so one set of chunks serves both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Family:
    """A gauge family: its name and help (neither may need escaping)."""

    name: str
    help: str

    def __post_init__(self) -> None:
        if any(c in self.help for c in '\\\n"'):
            raise ValueError(f"{self.name}: help must not need escaping")

    def header(self) -> bytes:
        """HELP and TYPE, the same in the Prometheus text format and in OpenMetrics."""
        return f"# HELP {self.name} {self.help}\n# TYPE {self.name} gauge\n".encode()


class LineStore:
    """Each object's chunks, family by family (see the module's doc)."""

    def __init__(self, families: Sequence[Family]) -> None:
        self.families = tuple(families)
        self._headers = tuple(f.header() for f in self.families)
        self._chunks: list[dict[str, bytes]] = [{} for _ in self.families]
        self._keys: dict[str, None] = {}
        self._order: list[str] | None = []  # the keys sorted; None: sort again
        self._joined: list[bytes | None] = [None] * len(self.families)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def put(self, key: str, chunks: Sequence[bytes]) -> None:
        """Set the object's chunks, one per family."""
        if len(chunks) != len(self.families):
            raise ValueError(f"{len(chunks)} chunks for {len(self.families)} families")
        if key not in self._keys:
            self._keys[key] = None
            self._order = None
            self._joined = [None] * len(self.families)
        for i, chunk in enumerate(chunks):
            by_key = self._chunks[i]
            if by_key.get(key) != chunk:
                by_key[key] = chunk
                self._joined[i] = None

    def delete(self, key: str) -> None:
        if key not in self._keys:
            return
        del self._keys[key]
        for by_key in self._chunks:
            del by_key[key]
        self._order = None
        self._joined = [None] * len(self.families)

    def replace(self, objects: Mapping[str, Sequence[bytes]]) -> None:
        """Every object at once: those not given are deleted."""
        for key in [k for k in self._keys if k not in objects]:
            self.delete(key)
        for key, chunks in objects.items():
            self.put(key, chunks)

    def chunks(self, key: str) -> tuple[bytes, ...]:
        """The object's chunks (KeyError when unknown)."""
        if key not in self._keys:
            raise KeyError(key)
        return tuple(by_key[key] for by_key in self._chunks)

    def exposition(self) -> list[bytes]:
        """Each family's header and text, in family order: join them, or write them out."""
        if self._order is None:
            self._order = sorted(self._keys)
        out: list[bytes] = []
        for i, header in enumerate(self._headers):
            joined = self._joined[i]
            if joined is None:
                joined = self._joined[i] = b"".join(map(self._chunks[i].__getitem__, self._order))
            out += [header, joined]
        return out


def render_all(families: Sequence[Family], objects: Iterable[tuple[str, Sequence[bytes]]]) -> bytes:
    """The exposition of a store filled with ``objects`` at once (a from-scratch render)."""
    store = LineStore(families)
    for key, chunks in objects:
        store.put(key, chunks)
    return b"".join(store.exposition())
