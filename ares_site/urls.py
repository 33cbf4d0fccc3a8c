from django.contrib import admin
from django.urls import include, path

from ares_site import views
from ares_site.api import api

admin.site.site_header = "ARES Console"
admin.site.site_title = "ARES Console"
admin.site.index_title = "Administration"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("healthz", views.healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("planner/", include("planner_app.urls")),
]
