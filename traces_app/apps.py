from django.apps import AppConfig


class TracesAppConfig(AppConfig):
    name = "traces_app"
    verbose_name = "Traces"
