"""pgq as a Django tasks backend (`django.tasks` in Django 6.0, the `django-tasks` backport on 5.2;
where Django has `django.tasks`, that is the API used).

In settings::

    INSTALLED_APPS = [..., "django_tasks", "pgq.contrib.django"]  # "django_tasks": on Django 5.2 only
    TASKS = {"default": {"BACKEND": "pgq.contrib.django.PgqBackend", "QUEUES": ["default"], "OPTIONS": {}}}

`task.enqueue(...)` writes the pgq job through Django's own database connection (psycopg 3), so inside
`transaction.atomic()` the job exists only if the transaction commits. `manage.py pgq_worker` runs the
project's tasks; `manage.py pgq_migrate` installs pgq's schema; `pgq.contrib.django.dashboard.urls()`
mounts the dashboard behind the staff login. See `PgqBackend` for the mapping and docs/integrations.md.
"""

from __future__ import annotations

from .backend import PgqBackend

__all__ = ["PgqBackend"]
