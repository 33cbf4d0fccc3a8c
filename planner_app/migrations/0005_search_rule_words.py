"""The search rule learns 'look up', 'google', 查一下 and 搜一下 in databases made before.

0002 ships them to new databases. The rule-set version the planner reads is a snapshot, so
the change is also recorded as a new version built from the newest one.
"""

from django.db import migrations

NEW_KEYWORDS = ["look up", "google", "查一下", "搜一下"]
CHANGE = "default rules: the search rule reads 'look up', 'google', 查一下, 搜一下"


def add_search_words(apps, schema_editor):
    IntentRule = apps.get_model("planner_app", "IntentRule")
    RuleSetVersion = apps.get_model("planner_app", "RuleSetVersion")
    rule = IntentRule.objects.filter(name="search").first()
    if rule is None:  # an operator removed or renamed it: leave their rules alone
        return
    missing = [word for word in NEW_KEYWORDS if word not in rule.keywords]
    if not missing:
        return
    rule.keywords = [*rule.keywords, *missing]
    rule.save(update_fields=["keywords"])
    latest = RuleSetVersion.objects.order_by("-number").first()
    if latest is None:  # the planner records its first version from the rows
        return
    snapshot = latest.snapshot
    for entry in snapshot["rules"]:
        if entry["name"] == "search":
            entry["keywords"] = rule.keywords
    RuleSetVersion.objects.create(number=latest.number + 1, change=CHANGE, snapshot=snapshot)


class Migration(migrations.Migration):
    dependencies = [("planner_app", "0004_agents")]
    operations = [migrations.RunPython(add_search_words, migrations.RunPython.noop)]
