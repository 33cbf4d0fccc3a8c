"""Failure spirals: the rule that finds them (detection) and storing what it finds (scanning)."""
