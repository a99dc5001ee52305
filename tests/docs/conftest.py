"""The docs' examples use pytest-django's marker (docs/django.md) without pytest-django installed."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Register `django_db`, so that the example's decorator is no unknown-mark warning here."""
    config.addinivalue_line("markers", "django_db: pytest-django's, in docs/django.md's example (no-op here)")
