"""Forms of the planner's pages."""

from __future__ import annotations

import secrets
from typing import Any

from django import forms

from planner_app.agents.sandbox import LLM_MODES, MODES, SandboxTask, llm_problem_of
from planner_app.models import Agent, Workflow

MAX_MESSAGE_CHARS = 4000


class SandboxForm(forms.Form):
    """One sandbox message: which agent, which path, which workflow, and the text."""

    agent = forms.ModelChoiceField(
        Agent.objects.all(),
        to_field_name="name",
        required=False,
        empty_label="— none: any tool, the site's LLM —",
        error_messages={"invalid_choice": "There is no agent named %(value)s."},
    )
    mode = forms.ChoiceField(
        choices=MODES.items(),
        error_messages={
            "required": "Choose a path.",
            "invalid_choice": "There is no path %(value)s.",
        },
    )
    workflow = forms.ModelChoiceField(
        Workflow.objects.all(),
        to_field_name="name",
        required=False,
        error_messages={"invalid_choice": "There is no workflow named %(value)s."},
    )
    message = forms.CharField(
        required=False,
        max_length=MAX_MESSAGE_CHARS,
        widget=forms.Textarea(attrs={"rows": 3}),
        error_messages={
            "max_length": "The message is %(show_value)d characters long; the limit is "
            "%(limit_value)d."
        },
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        mode = data.get("mode")
        if mode == "workflow" and "workflow" in data and data["workflow"] is None:
            self.add_error("workflow", "Choose the workflow to run.")
        if mode != "workflow" and "message" in data and not data["message"]:
            self.add_error("message", "Type a message.")
        if mode in LLM_MODES and "agent" in data:
            problem = llm_problem_of(data["agent"])
            if problem:
                self.add_error("mode", f"{MODES[mode]} needs an LLM endpoint: {problem}")
        return data

    def task(self) -> SandboxTask:
        """Return the task the valid form describes, with a fresh trace id."""
        data = self.cleaned_data
        return SandboxTask(
            data["mode"], data["message"], data["agent"], data["workflow"], secrets.token_hex(16)
        )

    def first_error(self) -> str:
        """Return the first problem, for a one-line message."""
        for errors in self.errors.values():
            return str(errors[0])
        return ""
