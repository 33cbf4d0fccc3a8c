from django.apps import AppConfig


class PlannerAppConfig(AppConfig):
    name = "planner_app"
    verbose_name = "Planner"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from planner_app import signals

        signals.connect()
        post_migrate.connect(_record_initial_version, sender=self)


def _record_initial_version(**kwargs: object) -> None:
    """Make the shipped rules version 1, so the first edit has something to compare with."""
    from planner_app.models import RuleSetVersion
    from planner_app.ruleset_versions import record_version

    if not RuleSetVersion.objects.exists():
        record_version("initial rule set")
