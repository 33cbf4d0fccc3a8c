"""Gunicorn settings: `gunicorn ares_site.wsgi --config ares_site/gunicorn.conf.py`."""

import os

workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# One fixed socket path per user would clash between servers on one machine.
control_socket_disable = True
