"""The test project's settings with the contract tasks (contract_tasks.py) among the backend's
MODULES: what the tests that run `manage.py pgq_worker` on those tasks start it with."""

from __future__ import annotations

from .settings import *  # noqa: F403  # the project's settings, TASKS changed below
from .settings import TASKS

TASKS = {**TASKS, "default": {**TASKS["default"], "OPTIONS": {"MODULES": ["tests.djangotasks.contract_tasks"]}}}
