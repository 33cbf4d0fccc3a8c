"""The hourly rollups: marking, recounting, checking and purging them, and what pages read."""
