"""The test project's URLs: the admin (its login page) and pgq's dashboard behind the staff login."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from pgq.contrib.django import dashboard

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/pgq/", include(dashboard.urls(title="shop jobs"))),
]
