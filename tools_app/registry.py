"""The tool registry: unique names, aliases, per-tool settings, LLM-format listings."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable
from typing import Any

from tools_app.specs import ToolSpec


class DuplicateToolError(ValueError):
    pass


class UnknownToolError(LookupError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        known = sorted(known)
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        super().__init__(f"no tool named {name!r}; available: {shown or 'none'}")


class ToolRegistry:
    """A thread-safe set of tools, found by name, LLM-safe alias, or bare MCP tool name."""

    def __init__(self, tools: Iterable[ToolSpec] = ()) -> None:
        self._lock = threading.RLock()
        self._tools: dict[str, ToolSpec] = {}
        self._listeners: list[Callable[[str, ToolSpec | None], None]] = []
        for spec in tools:
            self.register(spec)

    def register(self, spec: ToolSpec) -> None:
        """Add a tool; a name or LLM alias already taken is an error."""
        with self._lock:
            if spec.name in self._tools:
                raise DuplicateToolError(f"a tool named {spec.name!r} is already registered")
            clash = next(
                (t.name for t in self._tools.values() if t.llm_name == spec.llm_name), None
            )
            if clash:
                raise DuplicateToolError(
                    f"{spec.name!r} and {clash!r} would both be shown to LLMs as {spec.llm_name!r}"
                )
            self._tools[spec.name] = spec
        self._notify(spec.name, spec)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._tools.pop(name, None)
        self._notify(name, None)

    def replace(self, spec: ToolSpec) -> None:
        """Register a tool, replacing one of the same name (an MCP server re-synced)."""
        with self._lock:
            old = self._tools.pop(spec.name, None)
            try:
                self.register(spec)
            except DuplicateToolError:
                if old is not None:  # keep the working tool rather than lose both
                    self._tools[old.name] = old
                raise

    def configure(
        self,
        name: str,
        *,
        enabled: bool | None = None,
        timeout_s: float | None = None,
        description: str | None = None,
    ) -> ToolSpec:
        """Apply operator settings (from the database or ares.toml) to a registered tool."""
        changes: dict[str, Any] = {}
        if enabled is not None:
            changes["enabled"] = enabled
        if timeout_s is not None:
            changes["timeout_s"] = timeout_s
        if description:
            changes["description"] = description
        with self._lock:
            spec = dataclasses.replace(self.get(name), **changes)
            self._tools[spec.name] = spec  # `name` may be an alias: store under the real name
        self._notify(spec.name, spec)
        return spec

    def on_change(self, listener: Callable[[str, ToolSpec | None], None]) -> None:
        """Call listener(name, spec or None) after every registration, change or removal."""
        self._listeners.append(listener)

    def get(self, name: str) -> ToolSpec:
        """Return the tool with this exact name, LLM alias, or unambiguous bare MCP name."""
        with self._lock:
            spec = self._tools.get(name)
            if spec is not None:
                return spec
            matches = [t for t in self._tools.values() if name in (t.llm_name, _bare_name(t.name))]
            if len(matches) == 1:
                return matches[0]
            raise UnknownToolError(name, self._tools)

    def __contains__(self, name: str) -> bool:
        try:
            self.get(name)
        except UnknownToolError:
            return False
        return True

    def list(
        self, *, enabled_only: bool = True, names: Iterable[str] | None = None
    ) -> list[ToolSpec]:
        """Return tools sorted by name, only enabled ones and only `names` when given."""
        with self._lock:
            tools = list(self._tools.values())
        if names is not None:
            wanted = {self.get(name).name for name in names if name in self}
            tools = [t for t in tools if t.name in wanted]
        if enabled_only:
            tools = [t for t in tools if t.enabled]
        return sorted(tools, key=lambda t: t.name)

    def openai_tools(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return [spec.openai_definition() for spec in self.list(names=names)]

    def anthropic_tools(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return [spec.anthropic_definition() for spec in self.list(names=names)]

    def _notify(self, name: str, spec: ToolSpec | None) -> None:
        for listener in list(self._listeners):
            listener(name, spec)


def _bare_name(name: str) -> str:
    """Return an MCP tool's own name: 'mcp.time.get_current_time' -> 'get_current_time'."""
    return name.split(".", 2)[2] if name.startswith("mcp.") and name.count(".") >= 2 else name
