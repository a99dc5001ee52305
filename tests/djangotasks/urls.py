"""The test project's URLs: the admin (its login page), pgq's dashboard behind the staff login, and
the views of the task-contract tests."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from pgq.contrib.django import dashboard

from . import contract_views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/pgq/", include(dashboard.urls(title="shop jobs"))),
    # Permissions of the project's own (here: Django's auth app's) instead of staff and superuser.
    path("ops/pgq-perms/", include(dashboard.urls(view_permission="auth.view_user",
                                                  action_permission="auth.change_user"))),
    # The task-contract tests' views (test_contract_api.py).
    path("contract/answer", contract_views.enqueue_answer),
    path("contract/answer-async", contract_views.enqueue_answer_async),
    path("contract/result/<str:result_id>", contract_views.result),
]
