from django.db import migrations, models


class Migration(migrations.Migration):
    """A loop of successes the agent moved on from is 'repeated', no longer 'recovered'."""

    dependencies = [("traces_app", "0013_purge_horizon_and_job_leases")]

    operations = [
        migrations.AlterField(
            model_name="failurespiral",
            name="resolution",
            field=models.CharField(
                choices=[
                    ("gave_up", "Gave up"),
                    ("recovered", "Recovered"),
                    ("repeated", "Repeated calls"),
                    ("planner_fallback", "Planner fallback"),
                    ("ongoing", "Ongoing"),
                ],
                max_length=20,
            ),
        ),
    ]
