"""Settings of the test project: the database from PGQ_DJANGO_DSN, pgq as the tasks backend (on
Django 5.2 through the django-tasks backport, on Django 6 through its own django.tasks)."""

from __future__ import annotations

import os

import django
from psycopg.conninfo import conninfo_to_dict

_params = conninfo_to_dict(os.environ["PGQ_DJANGO_DSN"])

SECRET_KEY = "pgq-tests-only"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["testserver", "localhost"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    *(["django_tasks"] if django.VERSION < (6,) else []),  # the backport; Django 6 has django.tasks
    "pgq.contrib.django",
    "tests.djangotasks.shop",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _params.pop("dbname"),
        "USER": _params.pop("user", ""),
        "PASSWORD": _params.pop("password", ""),
        "HOST": _params.pop("host", ""),
        "PORT": _params.pop("port", ""),
        "OPTIONS": _params,
    }
}
TASKS = {
    "default": {
        "BACKEND": "pgq.contrib.django.PgqBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {},
    }
}
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.djangotasks.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                       "django.contrib.auth.context_processors.auth",
                                       "django.contrib.messages.context_processors.messages"]},
}]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
