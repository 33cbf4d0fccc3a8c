"""Monitors on the figures the pages show, their alerts, and the notifications they send.

records.py holds the models (imported by planner_app.models); metrics.py computes each
metric over a window; evaluation.py moves monitors between OK, firing and resolved;
notify/ delivers each transition to webhooks, Slack-compatible webhooks and email.
"""
