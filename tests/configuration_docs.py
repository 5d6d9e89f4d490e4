"""Regenerate docs/configuration.md's tables from the settings' declarations
(exporter.configuration_docs); ``--check`` only says whether they are current."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from exporter.cli import get_parser
from exporter.configuration_docs import render
from tests.support.docs import CONFIGURATION_DOC

DOC = CONFIGURATION_DOC


def main(argv: Sequence[str] | None = None) -> int:
    check = list(sys.argv[1:] if argv is None else argv) == ["--check"]
    current = DOC.read_text(encoding="utf-8")
    wanted = render(current, get_parser({}))
    if current == wanted:
        return 0
    if check:
        print(
            "docs/configuration.md is not current: run scripts/gen-configuration", file=sys.stderr
        )
        return 1
    DOC.write_text(wanted, encoding="utf-8")
    print("wrote docs/configuration.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
