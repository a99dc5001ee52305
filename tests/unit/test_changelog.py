"""CHANGELOG.md keeps up with the package: a section for the version pyproject.toml declares, and an
upgrade note for every schema revision."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHANGELOG = (REPO / "CHANGELOG.md").read_text()


def test_changelog_has_a_dated_section_for_the_declared_version() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", CHANGELOG, flags=re.MULTILINE)
    assert releases and releases[0] == version, (releases, version)
    assert "## [Unreleased]" in CHANGELOG


def test_changelog_has_an_upgrade_note_for_every_schema_revision() -> None:
    revisions = sorted(p.name[:4] for p in (REPO / "alembic" / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert revisions and revisions[0] == "0001"
    noted = set(re.findall(r"^- \*\*(\d{4}) ", CHANGELOG, flags=re.MULTILINE))
    noted |= set(re.findall(r"and \*\*(\d{4}) ", CHANGELOG))
    assert [r for r in revisions if r not in noted] == []
