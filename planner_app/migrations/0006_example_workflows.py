"""Two example workflows, so that a new site has saved workflows to run.

They run on the built-in tools alone (no network), so the sandbox's workflow path and the
admin's "Run now" work out of the box; the demo traces' `workflow:nightly-report` and
`workflow:invoice-check` agents are these. An operator may edit or delete them.
"""

from django.db import migrations

WORKFLOWS = {
    "nightly-report": (
        "Yesterday's calls: the total, the hourly rate and a headline, stamped with the time",
        {
            "steps": [
                {"id": "total", "tool": "calculator", "arguments": {"expression": "1250+980+1432"},
                 "request": "add up the calls of the three regions"},
                {"id": "per_hour", "tool": "calculator",
                 "arguments": {"expression": "round({$total.result}/24, 1)"},
                 "request": "calls per hour"},
                {"id": "headline", "tool": "string_utils",
                 "arguments": {"operation": "upper",
                               "text": "nightly report: {$total.result} calls, "
                                       "{$per_hour.result} an hour"},
                 "request": "upper-case the headline"},
                {"id": "stamp", "tool": "datetime",
                 "arguments": {"operation": "now", "timezone": "UTC"},
                 "request": "what time is it in UTC"},
            ],
        },
    ),
    "invoice-check": (
        "Check an invoice: read a line's price, total the lines with tax, fingerprint it",
        {
            "steps": [
                {"id": "first_price", "tool": "json_tools",
                 "arguments": {"operation": "query", "pointer": "/lines/0/price",
                               "text": '{"invoice": "INV-2026-0042", "lines": '
                                       '[{"price": 120}, {"price": 75.5}, {"price": 19.99}]}'},
                 "request": "get the first line's price from the invoice JSON"},
                {"id": "total", "tool": "calculator",
                 "arguments": {"expression": "{$first_price.value}+75.5+19.99"},
                 "request": "total of the invoice lines"},
                {"id": "with_tax", "tool": "calculator",
                 "arguments": {"expression": "round({$total.result}*1.2, 2)"},
                 "request": "add 20% tax"},
                {"id": "fingerprint", "tool": "hash_tool",
                 "arguments": {"operation": "sha256",
                               "text": "INV-2026-0042 {$with_tax.result}"},
                 "request": "sha256 of the invoice and its total"},
            ],
        },
    ),
}  # fmt: skip


def add_examples(apps, schema_editor):
    Workflow = apps.get_model("planner_app", "Workflow")
    for name, (description, definition) in WORKFLOWS.items():
        Workflow.objects.get_or_create(
            name=name, defaults={"description": description, "definition": definition}
        )


def remove_examples(apps, schema_editor):
    apps.get_model("planner_app", "Workflow").objects.filter(name__in=WORKFLOWS).delete()


class Migration(migrations.Migration):
    dependencies = [("planner_app", "0005_search_rule_words")]
    operations = [migrations.RunPython(add_examples, remove_examples)]
