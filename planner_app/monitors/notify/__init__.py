"""Notifications of monitor events: bodies, signing, senders and the delivery queue."""
