"""Admin pages for tools: operator settings per tool."""

from __future__ import annotations

from django.contrib import admin

from tools_app.models import ToolSetting


@admin.register(ToolSetting)
class ToolSettingAdmin(admin.ModelAdmin):
    list_display = ["name", "enabled", "timeout_s", "description", "updated_at"]
    list_editable = ["enabled", "timeout_s"]
    list_filter = ["enabled"]
    search_fields = ["name", "description"]
    readonly_fields = ["updated_at"]
