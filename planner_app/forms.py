"""Forms of the planner's pages."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from django import forms

from planner_app.agents.llm.messages import Message
from planner_app.agents.sandbox_runner import LLM_MODES, MODES, SandboxTask, llm_problem_of
from planner_app.models import Agent, Workflow

MAX_MESSAGE_CHARS = 4000
# A conversation's earlier turns, sent back by the page with each message: the page keeps
# the newest MAX_HISTORY_MESSAGES, and the server holds no state between messages.
MAX_HISTORY_MESSAGES = 40
MAX_HISTORY_CHARS = 100_000
HISTORY_ROLES = ("user", "assistant")
SESSION_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


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
    history = forms.CharField(required=False, widget=forms.HiddenInput)
    session = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.HiddenInput,
        error_messages={"max_length": "The session id is over %(limit_value)d characters."},
    )

    def clean_history(self) -> tuple[Message, ...]:
        """Return the conversation's earlier turns, oldest first; each problem is named."""
        text = self.cleaned_data["history"]
        if not text:
            return ()
        try:
            turns = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"The history is not valid JSON: {exc}.") from exc
        if not isinstance(turns, list):
            raise forms.ValidationError("The history must be a list of messages.")
        if len(turns) > MAX_HISTORY_MESSAGES:
            raise forms.ValidationError(
                f"The history has {len(turns)} messages; the limit is {MAX_HISTORY_MESSAGES}: "
                "start a new conversation."
            )
        messages = []
        for number, turn in enumerate(turns, start=1):
            if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
                raise forms.ValidationError(
                    f"History message {number} must be an object with a text content."
                )
            if turn.get("role") not in HISTORY_ROLES:
                raise forms.ValidationError(
                    f"History message {number}: the role must be user or assistant, "
                    f"not {turn.get('role')!r}."
                )
            messages.append(Message(turn["role"], turn["content"]))
        size = sum(len(message.content) for message in messages)
        if size > MAX_HISTORY_CHARS:
            raise forms.ValidationError(
                f"The history is {size:,} characters long; the limit is {MAX_HISTORY_CHARS:,}: "
                "start a new conversation."
            )
        return tuple(messages)

    def clean_session(self) -> str:
        """Return the conversation's session id, a new one when the page has none yet."""
        session = self.cleaned_data["session"]
        if not session:
            return f"sandbox-{secrets.token_hex(8)}"
        if not SESSION_ID.fullmatch(session):
            raise forms.ValidationError("The session id may hold only letters, digits and _ . : -")
        return session

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
            data["mode"],
            data["message"],
            data["agent"],
            data["workflow"],
            secrets.token_hex(16),
            history=data["history"],
            session_id=data["session"],
        )

    def first_error(self) -> str:
        """Return the first problem, for a one-line message."""
        for errors in self.errors.values():
            return str(errors[0])
        return ""
