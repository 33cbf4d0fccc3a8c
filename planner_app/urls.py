from django.urls import path

from planner_app import views

urlpatterns = [
    path("try", views.try_planner, name="planner-try"),
    path("backtest", views.backtest_rules, name="planner-backtest"),
]
