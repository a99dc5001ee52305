"""The test project's manage.py: ``python -m tests.djangotasks.manage pgq_worker`` (PGQ_DJANGO_DSN set)."""

from __future__ import annotations

import os
import sys

from django.core.management import execute_from_command_line

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.djangotasks.settings")
    execute_from_command_line(sys.argv)
