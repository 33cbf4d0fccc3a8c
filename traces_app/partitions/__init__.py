"""Daily partitions of the span table on PostgreSQL: layout, conversion, maintenance."""
