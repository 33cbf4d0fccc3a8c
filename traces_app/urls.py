from django.urls import path

from traces_app import views

urlpatterns = [
    path("traces/", views.traces, name="traces"),
    path("traces/<str:trace_id>/", views.trace_detail, name="trace-detail"),
    path("spirals/", views.spirals, name="spirals"),
    path("spirals/<int:pk>/", views.spiral_detail, name="spiral-detail"),
]
