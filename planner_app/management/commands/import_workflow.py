"""Save a workflow from a JSON file (create or replace by name), validated first."""

from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from planner_app.models import Workflow
from planner_app.workflows.graph import WorkflowError, workflow_from_json, workflow_to_json


class Command(BaseCommand):
    help = "Save the workflow a JSON file describes ({name, steps, max_steps, max_parallel})."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--description", default="")

    def handle(self, *args: object, path: Path, description: str, **options: object) -> None:
        try:
            parsed = workflow_from_json(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        except WorkflowError as exc:
            raise CommandError("\n".join(str(problem) for problem in exc.problems)) from None
        definition = {k: v for k, v in workflow_to_json(parsed).items() if k != "name"}
        workflow = Workflow.objects.filter(name=parsed.name).first() or Workflow(name=parsed.name)
        workflow.definition = definition
        workflow.description = description or workflow.description
        try:
            workflow.full_clean()
        except ValidationError as exc:
            raise CommandError("\n".join(exc.messages)) from None
        workflow.save()
        self.stdout.write(f"saved workflow {workflow.name} ({len(parsed.steps)} steps)")
