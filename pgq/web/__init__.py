"""pgq's dashboard: a web UI and JSON API to watch and operate the queue (`pgq dashboard`, or
`create_app` mounted in your own ASGI app). Needs the `web` extra: ``pip install 'pgq-jobs[web]'``.

Modules: `app` (create_app, routes), `pages` (the HTML pages), `api` (the JSON API), `actions`
(cancel, retry, pause, resume), `queries` (the reads, as pgq operations on sql/dashboard_*.sql),
`security` (authentication, headers, CSRF), `chart` (SVG charts), `views` (templates, formatting),
`params` (request input), `errors` (HTTP statuses), `dashboard` (what one dashboard holds).
"""

from __future__ import annotations

WEB_EXTRA = "pip install 'pgq-jobs[web]'"
try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:
    raise ImportError(f"the pgq dashboard needs the web extra ({exc.name or 'a dependency'} is not installed): "
                      f"{WEB_EXTRA}", name=exc.name) from exc

from .app import create_app  # noqa: E402 - only once its dependencies are known to be there

__all__ = ["WEB_EXTRA", "create_app"]
