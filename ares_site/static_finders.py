"""Serve plotly.js from the installed plotly package as static/vendor/plotly.min.js.

The Python package pins the matching plotly.js, so the charts never load from a CDN and
the repository does not carry a 4.6 MB copy of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PACKAGE_DATA = Path(plotly.__file__).parent / "package_data"
PLOTLY_JS = "plotly.min.js"
PREFIX = "vendor"


class PlotlyJsFinder(BaseFinder):
    def __init__(self) -> None:
        self.storage = FileSystemStorage(location=PACKAGE_DATA)
        self.storage.prefix = PREFIX  # collectstatic copies it to vendor/plotly.min.js

    def check(self, **kwargs: Any) -> list:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        if path != f"{PREFIX}/{PLOTLY_JS}":
            return [] if find_all or kwargs.get("all") else ""
        found = str(PACKAGE_DATA / PLOTLY_JS)
        return [found] if find_all or kwargs.get("all") else found

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, FileSystemStorage]]:
        yield PLOTLY_JS, self.storage
