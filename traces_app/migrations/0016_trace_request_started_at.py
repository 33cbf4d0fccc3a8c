"""A trace's request text names when its span started, so the earliest span's text wins.

Traces stored before keep their request text; none has a start, so no span replaces it.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces_app", "0015_stopped_status"),
    ]

    operations = [
        migrations.AddField(
            model_name="trace",
            name="request_started_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
