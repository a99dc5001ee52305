"""The .sql files: loadable by name, named parameters only, no stray percent signs."""

from __future__ import annotations

import re

import pytest

from pgq import _sql

SQL_DIR = _sql.data_dir("sql")
NAMES = sorted(p.stem for p in SQL_DIR.glob("*.sql"))


def test_there_are_operation_files() -> None:
    assert {"job_enqueue", "job_claim", "job_complete", "job_fail", "job_heartbeat", "job_rescue"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_operation_file_uses_named_parameters_only(name: str) -> None:
    text = _sql.query(name)
    without_params = re.sub(r"%\(\w+\)[sb]", "", text).replace("%%", "")
    assert "%" not in without_params, f"{name}.sql: a bare % is a psycopg placeholder; write %% for a literal"
    assert "$1" not in text, f"{name}.sql: use named parameters"
    assert text.lstrip().startswith("--"), f"{name}.sql: start with a comment saying what and why"


def test_unknown_query_name_raises() -> None:
    with pytest.raises(FileNotFoundError):
        _sql.query("no_such_operation")
