"""The built-in tools, one module each, without Django (configured_builtins.py configures them)."""
