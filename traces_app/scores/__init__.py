"""Scores: judgements of calls and traces, their REST API and the form that sends them."""
