"""Load pgq's hand-written SQL once, by operation name.

The `.sql` files are the product: one operation per file under `sql/`, named parameters in psycopg's
`%(name)s` style, comments that say why. In a built wheel they live in `pgq/_data/sql` (hatch's
force-include); in a source checkout they are at the repository's top level. `data_dir()` hides that
difference for the SQL files and for the alembic environment alike. The migrations' files are read
by pgq._schema, which assembles them from their function definitions.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import LiteralString

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory of pgq's shipped data `name` (``"sql"`` or ``"alembic"``).

    Looks inside the installed package first (wheel layout), then next to the package (source
    checkout, editable install). Raises FileNotFoundError when neither exists, which means a broken
    installation.
    """
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"pgq installation is missing its {name!r} directory")


@functools.cache
def query(name: str) -> LiteralString:
    """Return the text of `sql/<name>.sql` (cached after the first read).

    The files ship with pgq and never contain user input, hence the LiteralString typing that
    psycopg requires of query text. Raises FileNotFoundError for an unknown name.
    """
    text: LiteralString = (data_dir("sql") / f"{name}.sql").read_text(encoding="utf-8")
    return text

