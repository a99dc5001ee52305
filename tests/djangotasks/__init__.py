"""A small Django project using pgq as its tasks backend (pgq.contrib.django), against real Postgres.

Its settings read the database from PGQ_DJANGO_DSN, which the `django_dsn` fixture (tests/conftest.py)
sets before it configures Django, once per test session."""
