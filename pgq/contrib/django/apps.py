"""The Django app `pgq.contrib.django`: its management commands `pgq_worker` and `pgq_migrate`."""

from __future__ import annotations

from django.apps import AppConfig


class PgqConfig(AppConfig):  # type: ignore[misc]  # Django ships no type information
    """pgq's Django app (no models: pgq's tables live in schema `pgq`, migrated by `pgq_migrate`)."""

    name = "pgq.contrib.django"
    label = "pgq"
    verbose_name = "pgq"
