"""Views of the Django task-contract tests: enqueue a task from a request (sync and async views)
and read a result back in another request, as JSON."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse

from .contract_tasks import answer


def _as_json(result: Any) -> JsonResponse:
    return JsonResponse({"result_id": result.id, "status": result.status,
                         "result": result.return_value if result.is_finished else None})


def enqueue_answer(request: HttpRequest) -> JsonResponse:
    """Enqueue `answer` and describe the result."""
    return _as_json(answer.enqueue())


async def enqueue_answer_async(request: HttpRequest) -> JsonResponse:
    """Enqueue `answer` from an async view."""
    return _as_json(await answer.aenqueue())


def result(request: HttpRequest, result_id: str) -> JsonResponse:
    """Describe the result `result_id` of `answer`."""
    return _as_json(answer.get_result(result_id))
