from django.apps import AppConfig


class PlannerAppConfig(AppConfig):
    name = "planner_app"
    verbose_name = "Planner"
