"""Ingest: record calls from REST and OTLP, redact and bound them, read spans into calls."""
