"""The test project's URLs: the admin (its login page) and pgq's dashboard behind the staff login."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from pgq.contrib.django import dashboard

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/pgq/", include(dashboard.urls(title="shop jobs"))),
    # Permissions of the project's own (here: Django's auth app's) instead of staff and superuser.
    path("ops/pgq-perms/", include(dashboard.urls(view_permission="auth.view_user",
                                                  action_permission="auth.change_user"))),
]
