"""Keeping CPython's full garbage collections short in a long-running process.

A full collection walks every object the process holds, with the event loop held meanwhile:
in the controller that is the imported libraries and the cluster view, and during a 1,000-node
scale-out each full pass took 28-46 ms, as long as the slowest webhook acknowledgements. What
exists once the cluster view is listed is mostly there for good (modules, classes, the view's
nodes): :func:`freeze` moves it out of the collector's sight (``gc.freeze``), so that later full
passes walk only what came after. Objects frozen are still freed when nothing refers to them;
only a reference cycle among them, already garbage when frozen, would stay.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze() -> int:
    """Leave every object that exists now out of later collections; how many are left out."""
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info(
        "left the objects of the started process out of garbage collection",
        extra={"objects": frozen},
    )
    return frozen


def unfreeze() -> None:
    """Undo :func:`freeze` (the objects are collected again, from the oldest generation)."""
    gc.unfreeze()
