from django.apps import AppConfig


class PlannerAppConfig(AppConfig):
    name = "planner_app"
    verbose_name = "Planner"

    def ready(self) -> None:
        from planner_app import signals

        signals.connect()
