"""`python -m app.settings --markdown` prints the README's Configuration table;
`--update-readme FILE` rewrites that table in FILE."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from app.settings.markdown import markdown_table, with_table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.settings")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="print the Configuration table")
    what.add_argument("--update-readme", type=Path, metavar="FILE", help="rewrite the table in FILE")
    args = parser.parse_args(argv)
    if args.update_readme:
        path: Path = args.update_readme
        path.write_text(with_table(path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(markdown_table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
