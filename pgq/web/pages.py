"""The HTML pages: overview, jobs, one job, workers, schedules, limits, and the form actions behind
their buttons. Each page is rendered on the server from its templates; a page with a live region
(`data-live`) answers a request carrying the header `X-Pgq-Live` with that region's fragment only,
which static/app.js fetches every few seconds and swaps in."""

from __future__ import annotations

import functools
import importlib.metadata
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from .. import _ops
from ..models import JobStatus
from . import actions, chart, limits, params, queries
from .dashboard import Dashboard
from .errors import HttpError
from .queue_page import CANCELLED_CAP, TABS, queue_page
from .security import CSRF_FIELD
from .views import queue_path

__all__ = ["LIVE_HEADER", "Pages", "version"]

LIVE_HEADER = "x-pgq-live"
"""Request header of app.js's refreshes: answer with the page's live fragment only."""

JOBS_PER_PAGE = 50
FORM_MAX = 4096
"""Largest action form accepted, in bytes (a CSRF token is 43)."""

_NOTICES = {
    "cancel": "Job cancelled: it will not run again.",
    "retry": "Job queued again, with a fresh series of attempts (waiting first for any parent not finished).",
    "pause": "Queue paused: no worker claims its jobs until it is resumed.",
    "resume": "Queue resumed: its ready jobs start again.",
    "run_now": "Job due now: the next free worker of its queue takes it.",
    "pause_all": "Every queue is paused: no worker claims a job until they are resumed.",
    "limits": "Limit saved: claims that start from now on apply it.",
}
"""The notices a page shows after an action (`?done=<key>`): fixed texts, nothing of the URL in them,
so a link of another site cannot make the dashboard say what it likes."""
MAX_FORM_FIELDS = 10
BULK_FORM_MAX = 32_768
"""Largest bulk form accepted, in bytes: up to BULK_IDS_MAX selected ids, or the search's filters."""


@functools.cache
def version() -> str:
    """pgq's version (cache-busts the static files' URLs); "dev" when not installed as a package."""
    try:
        return importlib.metadata.version("pgq-jobs")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "dev"


def base_path(request: Request) -> str:
    """The path the dashboard is served under ("" at the root, "/pgq" when mounted there)."""
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


class Pages:
    """The page handlers of one dashboard."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, request: Request, template: str, *, status: int = 200, live: str | None = None,
               **context: Any) -> HTMLResponse:
        """Render `template` (or, for a live refresh, its fragment `live`) with the common context:
        the base path, the settings, the CSRF token (setting its cookie when new) and the notice."""
        cookie, new = self.dash.csrf.cookie_for(request)
        settings = self.dash.current
        context = {
            "base": base_path(request), "settings": settings, "version": version(),
            "csrf_token": self.dash.csrf.token(cookie), "notice": _notice(request),
            "refresh_label": f"{settings.refresh_s:g} s", "section": None, "now": None, "live_page": live is not None,
            **context,
        }
        name = live if live is not None and LIVE_HEADER in request.headers else template
        html = self.dash.templates.get_template(name).render(context)
        response = HTMLResponse(html, status_code=status, headers={"Vary": "X-Pgq-Live"})
        if new:
            self.dash.csrf.set_cookie(response, request, cookie)
        return response

    def error(self, request: Request, error: HttpError) -> HTMLResponse:
        """The error page for `error`."""
        try:
            reason = HTTPStatus(error.status).phrase
        except ValueError:
            reason = "Error"
        return self.render(request, "error.html", status=error.status, status_code=error.status, reason=reason,
                           message=error.message, back=None)

    # -- pages ---------------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        """`/` (`?range=1h|24h|7d`: the chart's window): tiles, the chart, the queues table (with pause /
        resume where allowed)."""
        chart_range = params.chart_range(request.query_params)
        data = await self.dash.read(queries.overview(chart_range=chart_range))
        t = data.throughput
        sparklines = {q.name: chart.sparkline(q.per_minute, q.failed_per_minute, t.minutes) for q in data.queues}
        can_pause = not self.dash.current.read_only and data.rights.pause
        return self.render(request, "overview.html", live="_overview.html", section="overview", overview=data,
                           now=data.now, chart=chart.throughput_chart(data.chart or t), sparklines=sparklines,
                           can_pause=can_pause, finished_cap=queries.FINISHED_CAP,
                           chart_range=queries.RANGES[chart_range], ranges=queries.RANGES)

    async def jobs(self, request: Request) -> Response:
        """`/jobs`: the filter form and a page of matching jobs, newest first, with the selection of bulk
        actions; for the failed filter, the dead-letter groups (kind and error) first."""
        query = request.query_params
        if query.get("id", "").strip():
            job_id = params.job_id(query["id"].strip().lstrip("#"))
            return RedirectResponse(f"{base_path(request)}/jobs/{job_id}", status_code=303)
        filters = params.job_filter(query)
        cursor = params.cursor(query)
        limit = params.limit(query, JOBS_PER_PAGE)
        page = await self.dash.read(queries.find_jobs(filters, before=cursor, limit=limit))
        names = await self.dash.read(queries.queue_names())
        app = self.dash.settings.app
        filter_params = filters.query()
        groups = None
        if filters.status is JobStatus.FAILED:
            groups = await self.dash.read(queries.failed_groups(filters.queue, filters.kind))
        can_bulk = False
        if page.jobs and not self.dash.current.read_only:
            can_bulk = (await self.dash.read(queries.rights())).change_jobs
        if limit != JOBS_PER_PAGE:
            filter_params["limit"] = str(limit)
        return self.render(request, "jobs.html", section="jobs", page=page, now=page.now, filters=filters,
                           cursor=cursor, limit=limit, filter_params=filter_params, queue_names=names,
                           kind_names=sorted(app.tasks) if app is not None else [],
                           statuses=[s.value for s in JobStatus],
                           can_bulk=can_bulk, groups=groups, failed_scan=queries.FAILED_GROUPS_SCAN,
                           # Acting on all matching jobs needs a filter (the rule of cancel_where).
                           bulk_all=[a for a, applies in _ops.BULK_STATUSES.items()
                                     if filters.active and (filters.status is None or filters.status in applies)])

    async def bulk_confirm(self, request: Request) -> Response:
        """`GET /jobs/bulk?action=...&<the search's filters>`: how many jobs the action would change
        now, and the form that applies it to all of them."""
        query = request.query_params
        action = _bulk_action(query.get("action", ""))
        filters = params.job_filter(query)
        count, complete = await actions.bulk_count(self.dash, action, filters.bulk())
        refusal = self.dash.refusal(actions.READ_ONLY) if self.dash.current.read_only else (
            await self.dash.read(queries.rights())).refusal(action)
        if refusal is None and not filters.active:  # what the POST would refuse (a 400): no form
            refusal = actions.unfiltered(action)
        return self.render(request, "bulk.html", section="jobs", action=action, filters=filters,
                           described=filters.bulk().describe(action), count=count, count_complete=complete,
                           refusal=refusal, result=None, filter_params=filters.query())

    async def bulk_action(self, request: Request) -> Response:
        """`POST /jobs/bulk` from the jobs page (fields `action` and the selected `id`s) or from the
        confirmation page (`action`, `all=1` and the search's filters): apply it, then show what it did."""
        fields = await self._check_form(request, max_bytes=BULK_FORM_MAX, max_fields=_ops.BULK_IDS_MAX + 16)
        last = {k: v[-1] for k, v in fields.items() if v}
        action = _bulk_action(last.get("action", ""))
        if last.get("all") == "1":
            filters = params.job_filter(last)
            result = await actions.bulk_action(self.dash, action, where=filters.bulk(), actor=self.dash.actor(request))
        else:
            filters = params.job_filter({})
            ids = [params.job_id(i) for i in fields.get("id", [])]
            if not ids:
                raise HttpError(400, "select at least one job")
            if len(ids) > _ops.BULK_IDS_MAX:
                raise HttpError(400, f"select at most {_ops.BULK_IDS_MAX} jobs (or apply to all matching)")
            result = await actions.bulk_action(self.dash, action, ids=ids, actor=self.dash.actor(request))
        return self.render(request, "bulk.html", section="jobs", action=action, filters=filters,
                           described=None, count=result.matched, count_complete=True, refusal=None, result=result,
                           filter_params={})

    async def job(self, request: Request) -> Response:
        """`/jobs/{id}`: every field of the job, its parents and children, why it is not running, and
        cancel / retry where they apply."""
        job_id = params.job_id(request.path_params["job_id"])
        detail = await self.dash.read(queries.job_detail(job_id))
        if detail.job is None:
            raise HttpError(404, f"job {job_id} not found")
        return self.render(request, "job.html", live="_job.html", section="jobs", job=detail.job,
                           deps=detail.dependencies, now=detail.now, rights=detail.rights,
                           explanation=detail.explanation, blockers=detail.blockers, audit=detail.audit)

    async def queue(self, request: Request) -> Response:
        """`/queues/{name}` (or `/queue?name=`, for a name a browser would rewrite in a path): the
        queue's counts, chart, workers, pause / resume, and its jobs by state in tabs (`?tab=`)."""
        raw = request.path_params.get("name")
        name = params.queue_name(raw if raw is not None else request.query_params.get("name", ""))
        tab = params.tab(request.query_params, TABS)
        data = await self.dash.read(queue_page(name, tab))
        s = data.summary or queries.QueueSummary(name)
        t = data.throughput
        finished = [a - b for a, b in zip(s.per_minute, s.failed_per_minute, strict=True)]
        own = queries.Throughput(t.minutes, finished, s.failed_per_minute, [0] * len(t.minutes), t.counted_from,
                                 t.capped)
        can_act = not self.dash.settings.read_only
        return self.render(request, "queue.html", live="_queue.html", section="overview", data=data, q=s,
                           now=data.now, chart=chart.throughput_chart(own), tabs=TABS,
                           can_pause=can_act and data.rights.pause, can_bulk=False,
                           finished_cap=queries.FINISHED_CAP, cancelled_cap=CANCELLED_CAP)

    async def workers(self, request: Request) -> Response:
        """`/workers`: every registered worker (idle ones too) and those holding jobs, and the running jobs."""
        data = await self.dash.read(queries.workers())
        return self.render(request, "workers.html", live="_workers.html", section="workers", data=data, now=data.now,
                           running_limit=queries.RUNNING_LIMIT)

    async def schedules(self, request: Request) -> Response:
        """`/schedules`: the App's periodic schedules, their next run and their last ticks' jobs."""
        app = self.dash.settings.app
        if app is None:
            return self.render(request, "schedules.html", section="schedules", rows=None, now=None)
        now, rows = await self.dash.read(queries.schedules(app.periodic_tasks))
        return self.render(request, "schedules.html", section="schedules", rows=rows, now=now)

    async def limits(self, request: Request) -> Response:
        """`/limits`: concurrency and rate limits with their use now."""
        data = await self.dash.read(queries.limits())
        rights = await self.dash.read(queries.rights())
        can_edit = not self.dash.settings.read_only and rights.refusal("limits") is None
        return self.render(request, "limits.html", section="limits", data=data, now=data.now, can_edit=can_edit)

    # -- form actions ----------------------------------------------------------------------------------

    async def job_action(self, action: actions.JobAction, request: Request) -> Response:
        """`POST /jobs/{id}/cancel|retry` from the job page's form: then back to the job page."""
        await self._check_form(request)
        job_id = params.job_id(request.path_params["job_id"])
        await actions.job_action(self.dash, action, job_id, actor=self.dash.actor(request))
        return RedirectResponse(f"{base_path(request)}/jobs/{job_id}?done={action}", status_code=303)

    async def queue_action(self, action: actions.QueueAction, request: Request) -> Response:
        """`POST /queues/pause|resume` from the overview's form, the queue's name in its field `queue`
        (a name like ``..`` or ``a/b`` in the path would be rewritten by the browser before it is sent),
        or `POST /queues/{name}/pause|resume`: then back to the overview."""
        fields = await self._check_form(request)
        if "name" in request.path_params:
            name = params.queue_name(request.path_params["name"])
        else:
            name = params.queue_name((fields.get("queue") or [""])[-1])
        await actions.queue_action(self.dash, action, name, actor=self.dash.actor(request))
        if (fields.get("back") or [""])[-1] == "queue":
            path = queue_path(name)
            joiner = "&" if "?" in path else "?"
            return RedirectResponse(f"{base_path(request)}{path}{joiner}done={action}", status_code=303)
        return RedirectResponse(f"{base_path(request)}/?done={action}", status_code=303)

    async def pause_all(self, request: Request) -> Response:
        """`POST /queues/pause-all` from the overview: pause every queue listed, then back there."""
        await self._check_form(request)
        await actions.pause_all(self.dash, actor=self.dash.actor(request))
        return RedirectResponse(f"{base_path(request)}/?done=pause_all", status_code=303)

    async def limit_action(self, request: Request) -> Response:
        """`POST /limits` from the limits page's forms (admin only): set or remove a kind's concurrency,
        rate or group limits (`limits.apply_form` reads the fields), then back to the limits page."""
        fields = await self._check_form(request)
        await limits.apply_form(self.dash, {k: v[-1] for k, v in fields.items()}, actor=self.dash.actor(request))
        return RedirectResponse(f"{base_path(request)}/limits?done=limits", status_code=303)

    async def _check_form(self, request: Request, *, max_bytes: int = 0,
                          max_fields: int = 0) -> dict[str, list[str]]:
        if self.dash.current.read_only:
            raise HttpError(403, self.dash.refusal(actions.READ_ONLY))
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media != "application/x-www-form-urlencoded":
            raise HttpError(403, "an action form must be sent as a form, with its CSRF token")
        # The dashboard's forms carry one short field: read at most FORM_MAX bytes of it, parsed here
        # (no multipart, so no python-multipart).
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > (max_bytes or FORM_MAX):
                raise HttpError(413, "the form is too large")
        most = max_fields or MAX_FORM_FIELDS
        try:
            fields = parse_qs(body.decode("latin-1"), max_num_fields=most)
        except ValueError:
            raise HttpError(400, f"the form has more than {most} fields") from None
        self.dash.csrf.check_form(request, {CSRF_FIELD: (fields.get(CSRF_FIELD) or [""])[-1]})
        return fields


def _bulk_action(text: str) -> actions.BulkAction:
    """The `action` of a bulk form or confirmation: cancel, retry or delete (400 otherwise)."""
    action = _BULK_ACTIONS.get(text)
    if action is None:
        raise HttpError(400, "action must be cancel, retry or delete")
    return action


_BULK_ACTIONS: dict[str, actions.BulkAction] = {"cancel": "cancel", "retry": "retry", "delete": "delete"}


def _notice(request: Request) -> str | None:
    return _NOTICES.get(request.query_params.get("done") or "")
