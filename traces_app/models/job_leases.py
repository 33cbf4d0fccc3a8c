"""Job leases as stored (which process runs each periodic job in its current period), and
the transaction-scoped locks writers of one thing queue on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import models, transaction
from django.utils import timezone

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class JobLeaseManager(models.Manager):
    def take(self, job: str, every_s: float, holder: str) -> datetime | None:
        """Take a periodic job for the current period; return the period's start, or None.

        Periods start on multiples of `every_s` since 1970, so every process agrees on
        them. One UPDATE decides, so of several processes asking at once exactly one
        gets the period. It is refused while an earlier holder is presumed still running
        (before its expiry): a holder killed with kill -9 delays its job one period at
        most.
        """
        now = timezone.now()
        period = datetime.fromtimestamp(now.timestamp() // every_s * every_s, UTC)
        free = self.filter(job=job, period_start__lt=period, expires_at__lte=now)
        fields = {"period_start": period, "holder": holder[:200], "taken_at": now}
        fields["expires_at"] = now + timedelta(seconds=every_s)
        taken = free.update(**fields)
        if not taken and not self.filter(job=job).exists():
            self.bulk_create([self.model(job=job)], ignore_conflicts=True)
            taken = free.update(**fields)
        return period if taken else None

    def release(self, job: str, period: datetime, holder: str) -> None:
        """Say the job's run for this period is over, so the next period may start on time."""
        self.filter(job=job, period_start=period, holder=holder[:200]).update(
            expires_at=timezone.now()
        )


class JobLease(models.Model):
    """Which process runs a periodic job (settings.ARES_PERIODIC_JOBS) in its current period.

    A row per job, taken atomically (JobLeaseManager.take), so two beats, or a beat and
    a worker, never run the same job twice in one period.
    """

    job = models.CharField(max_length=100, primary_key=True)
    period_start = models.DateTimeField(default=EPOCH, help_text="The last period taken")
    holder = models.CharField(max_length=200, blank=True, help_text="host:pid that took it")
    taken_at = models.DateTimeField(default=EPOCH)
    expires_at = models.DateTimeField(
        default=EPOCH, help_text="Until then its holder is presumed running; released when done"
    )

    objects = JobLeaseManager()

    def __str__(self) -> str:
        return f"{self.job}: {self.holder or 'never taken'}"


def hold_transaction_lock(key: int, table: str, column: str) -> None:
    """Hold a lock named `key` until the current transaction ends; its writers queue here.

    PostgreSQL: a transaction-scoped advisory lock. SQLite locks the whole database for
    writing: the site opens transactions IMMEDIATE (settings), which takes that lock at
    BEGIN; a no-op write to `table` takes it for a connection opened otherwise.
    """
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        raise RuntimeError("a transaction lock needs a transaction: take it inside atomic()")
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [key])
        else:
            cursor.execute(f"UPDATE {table} SET {column} = {column} WHERE 0 = 1")  # noqa: S608
