"""The JSON API under /api/: the same reads as the pages, and the four actions.

    GET  /api/queues                    per queue: backlog, workers, pause state, last hour and 24 h
                                        (exact, per status and kind)
    GET  /api/throughput?range=1h|24h|7d&queue=
                                        jobs finished per minute, quarter hour or hour (exact)
    GET  /api/jobs?queue=&kind=&status=&q=&payload=&error_line=&limit=&cursor=
                                        newest first; `next_cursor` pages (keyset: see JobPage);
                                        `partial`: the time budget ran out before the page was
                                        full (jobs older than `searched_down_to` not searched)
    GET  /api/jobs?id=N                 the job N alone (or no job), as the job-id box finds it
    GET  /api/jobs/{id}                 one job, with its parents and children
    GET  /api/jobs/{id}/explain         why it is not running now (pgq.explain): its reasons and facts
    POST /api/jobs/{id}/cancel          -> {"job": ...}
    POST /api/jobs/{id}/retry           -> {"job": ...}
    POST /api/jobs/{id}/run-now         -> {"job": ...} (a scheduled job made due now)
    GET  /api/queues/{name}?tab=        one queue: counts per state, pause state, workers, a tab's jobs
    POST /api/queues/{name}/pause       -> {"queue": name, "paused": true, "changed": bool}
    POST /api/queues/{name}/resume      -> {"queue": name, "paused": false, "changed": bool}
    GET  /api/workers, GET /api/limits  the workers and limits pages' data

Errors answer ``{"error": message}`` with 400 (malformed id or filter), 401, 403 (read-only, no right,
CSRF rule), 404, 409 (the job's state forbids it) or 503 (database unavailable). POSTs must carry
`Content-Type: application/json` (pgq.web.security says why); their body is ignored.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from . import actions, params, queries
from .dashboard import Dashboard
from .errors import HttpError
from .queue_page import CANCELLED_CAP, TABS, queue_page
from .security import check_api_request
from .views import dependencies_json, job_json, job_row_json, jsonable

__all__ = ["Api", "json_error"]

JOBS_PER_PAGE = 50


def json_error(error: HttpError) -> JSONResponse:
    """The API's answer to `error`: ``{"error": message}`` with its status."""
    return JSONResponse({"error": error.message}, status_code=error.status)


def _freshness(t: queries.Throughput) -> dict[str, Any]:
    # Where the counts come from: pgq.finished_counts before `kept_through`, the jobs after it.
    return {"kept_through": t.counted_through, "kept_at": t.counted_at, "recount_s": t.recount_s}


def _json(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(jsonable(data), status_code=status)


class Api:
    """The API handlers of one dashboard."""

    def __init__(self, dash: Dashboard) -> None:
        self.dash = dash

    async def queues(self, request: Request) -> JSONResponse:
        """`GET /api/queues`."""
        data = await self.dash.read(queries.overview())
        t = data.throughput
        queues = [{
            "name": q.name, "paused": q.paused, "paused_at": q.paused_at, "paused_by": q.paused_by,
            "paused_role": q.paused_role, "waiting": q.waiting, "ready": q.ready, "scheduled": q.scheduled,
            "running": q.running,
            "expired_leases": q.expired_leases, "retrying": q.retrying, "unknown_kind": q.unknown_kind,
            "unknown_kind_capped": q.unknown_kind_capped,
            "unknown_kinds": q.unknown_kinds, "unknown_kinds_capped": q.unknown_kinds_capped, "workers": q.workers,
            "oldest_ready_age_s": q.oldest_ready_age_s, "next_run_at": q.next_run_at,
            "last_hour": {"succeeded": q.succeeded, "failed": q.failed, "cancelled": q.cancelled,
                          "finished_per_minute": q.per_minute, "failed_per_minute": q.failed_per_minute,
                          "kinds": q.kinds},
            "last_24h": {**q.day, "kinds": q.day_kinds},
        } for q in data.queues]
        return _json({"now": data.now, "minutes": t.minutes, "counted_from": t.counted_from, "queues": queues,
                      "busy_workers": data.workers, "last_hour_partial": t.capped,
                      "counted_over_finished": queries.FINISHED_CAP if t.capped else None,
                      "last_24h_since": data.day_since,
                      "counts": _freshness(t)})

    async def throughput(self, request: Request) -> JSONResponse:
        """`GET /api/throughput?range=1h|24h|7d&queue=`: jobs finished per bucket, exact."""
        chart_range = params.chart_range(request.query_params)
        queue = request.query_params.get("queue")
        t = await self.dash.read(queries.throughput(chart_range, None if queue is None else params.queue_name(queue)))
        return _json({"range": chart_range, "bucket_s": t.bucket_s, "buckets": t.minutes,
                      "succeeded": t.succeeded, "failed": t.failed, "cancelled": t.cancelled, "partial": t.capped,
                      "counted_from": t.counted_from, "queue": queue, "counts": _freshness(t)})

    async def jobs(self, request: Request) -> JSONResponse:
        """`GET /api/jobs`: a page of jobs and the cursor of the next one."""
        query = request.query_params
        if query.get("id"):
            job_id = params.job_id(query["id"])
            detail = await self.dash.read(queries.job_detail(job_id))
            jobs = [] if detail.job is None else [job_json(detail.job)]
            return _json({"jobs": jobs, "next_cursor": None, "partial": False})
        filters = params.job_filter(query)
        page = await self.dash.read(queries.find_jobs(
            filters, before=params.cursor(query), limit=params.limit(query, JOBS_PER_PAGE)))
        cursor = None if page.next_cursor is None else str(page.next_cursor)
        return _json({"jobs": [job_row_json(r) for r in page.jobs], "next_cursor": cursor, "partial": page.partial,
                      "searched_down_to": cursor if page.partial else None})

    async def queue(self, request: Request) -> JSONResponse:
        """`GET /api/queues/{name}?tab=`: the queue page's data: counts per state (`cancelled` up to
        `cancelled_cap`, `cancelled_partial` when there are more), pause state (who paused it, through
        which role), the queued jobs of kinds no live worker of it knows (`unknown_kinds`,
        `unknown_kinds_capped`), workers serving it (`running`: their jobs of this queue;
        `running_all`: of every queue), and the jobs of one state tab."""
        name = params.queue_name(request.path_params["name"])
        tab = params.tab(request.query_params, TABS)
        data = await self.dash.read(queue_page(name, tab, limit=params.limit(request.query_params, JOBS_PER_PAGE)))
        s = data.summary
        return _json({"now": data.now, "queue": name, "paused": bool(s and s.paused),
                      "paused_at": s and s.paused_at, "paused_by": s and s.paused_by,
                      "paused_role": s and s.paused_role, "counts": data.counts,
                      "unknown_kinds": s.unknown_kinds if s else {},
                      "unknown_kinds_capped": s.unknown_kinds_capped if s else [],
                      "cancelled_partial": data.cancelled_partial, "cancelled_cap": CANCELLED_CAP,
                      "last_hour_partial": data.throughput.capped, "tab": tab,
                      "last_hour": s and {"succeeded": s.succeeded, "failed": s.failed, "cancelled": s.cancelled,
                                          "kinds": s.kinds},
                      "last_24h": s and {**s.day, "kinds": s.day_kinds}, "counts_kept": _freshness(data.throughput),
                      "jobs": [job_row_json(r) for r in data.jobs],
                      "workers": [{"worker": w["worker"], "live": w["live"], "running": w["running"],
                                   "running_all": w["running_all"]} for w in data.workers]})

    async def job(self, request: Request) -> JSONResponse:
        """`GET /api/jobs/{id}`: the job and its dependencies (as the job page shows them)."""
        job_id = params.job_id(request.path_params["job_id"])
        detail = await self.dash.read(queries.job_detail(job_id))
        if detail.job is None or detail.dependencies is None:
            raise HttpError(404, f"job {job_id} not found")
        return _json({"job": job_json(detail.job), "dependencies": dependencies_json(detail.dependencies)})

    async def explain(self, request: Request) -> JSONResponse:
        """`GET /api/jobs/{id}/explain`: ``{"job_id", "status", "reasons": [{"code", "detail", "facts"}]}``."""
        job_id = params.job_id(request.path_params["job_id"])
        explanation = await self.dash.read(queries.explain(job_id))
        if explanation is None:
            raise HttpError(404, f"job {job_id} not found")
        return _json(explanation.to_json())

    async def job_action(self, action: actions.JobAction, request: Request) -> JSONResponse:
        """`POST /api/jobs/{id}/cancel|retry`."""
        self._check(request)
        job_id = params.job_id(request.path_params["job_id"])
        job = await actions.job_action(self.dash, action, job_id, actor=self.dash.actor(request))
        return _json({"job": job_json(job)})

    async def queue_action(self, action: actions.QueueAction, request: Request) -> JSONResponse:
        """`POST /api/queues/{name}/pause|resume`."""
        self._check(request)
        name = params.queue_name(request.path_params["name"])
        changed = await actions.queue_action(self.dash, action, name, actor=self.dash.actor(request))
        return _json({"queue": name, "paused": action == "pause", "changed": changed})

    async def workers(self, request: Request) -> JSONResponse:
        """`GET /api/workers`."""
        data = await self.dash.read(queries.workers())
        return _json({"now": data.now, "workers": data.workers, "running": data.running})

    async def limits(self, request: Request) -> JSONResponse:
        """`GET /api/limits`."""
        data = await self.dash.read(queries.limits())
        return _json({"now": data.now, "concurrency": data.concurrency, "rate": data.rate, "group": data.group})

    def _check(self, request: Request) -> None:
        if self.dash.current.read_only:
            raise HttpError(403, self.dash.refusal(actions.READ_ONLY))
        check_api_request(request)
