"""`python -m pgq ...`: the same program as the `pgq` command (see pgq.cli)."""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
