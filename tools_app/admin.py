"""Admin pages for tools: operator settings per tool, and MCP servers."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tools_app import site_engine
from tools_app.models import McpServer, ToolSetting


@admin.register(ToolSetting)
class ToolSettingAdmin(admin.ModelAdmin):
    list_display = ["name", "enabled", "timeout_s", "description", "updated_at"]
    list_editable = ["enabled", "timeout_s"]
    list_filter = ["enabled"]
    search_fields = ["name", "description"]
    readonly_fields = ["updated_at"]


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin):
    list_display = ["name", "transport", "enabled", "tool_count", "last_synced_at", "last_error"]
    list_filter = ["transport", "enabled"]
    search_fields = ["name", "command", "url"]
    readonly_fields = ["last_synced_at", "last_error", "tool_names", "updated_at"]
    actions = ["sync_tools"]

    @admin.display(description="Tools")
    def tool_count(self, server: McpServer) -> int:
        return len(server.tool_names)

    @admin.action(description="Sync tools now (connect and list each server's tools)")
    def sync_tools(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        errors = site_engine.resync_now()
        for server in queryset.order_by("name"):
            server.refresh_from_db()
            if server.name in errors:
                self.message_user(
                    request, f"{server.name}: {errors[server.name]}", level=messages.ERROR
                )
            elif not server.enabled:
                self.message_user(request, f"{server.name}: disabled, its tools are removed")
            else:
                names = ", ".join(server.tool_names) or "no tools"
                self.message_user(request, f"{server.name}: {names}")
