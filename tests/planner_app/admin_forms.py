"""Read an admin page's form as a browser would submit it, so tests post what the page holds."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class _FormReader(HTMLParser):
    """Collect the successful controls of the form with id `form_id` (inputs, selects, texts)."""

    def __init__(self, form_id: str) -> None:
        super().__init__(convert_charrefs=True)
        self.form_id, self.inside = form_id, False
        self.fields: list[tuple[str, str]] = []
        self.select: str | None = None
        self.textarea: str | None = None
        self.text = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.inside = a.get("id") == self.form_id
        if not self.inside:
            return
        if tag == "input" and "name" in a and a.get("type") not in ("submit", "button"):
            if a.get("type") not in ("checkbox", "radio"):
                self.fields.append((a["name"], a.get("value", "")))
            elif "checked" in a:
                self.fields.append((a["name"], a.get("value", "on")))
        elif tag == "select":
            self.select = a.get("name")
        elif tag == "option" and self.select and "selected" in a:
            self.fields.append((self.select, a.get("value", "")))
        elif tag == "textarea":
            self.textarea, self.text = a.get("name"), ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea" and self.textarea:
            self.fields.append((self.textarea, self.text.removeprefix("\n")))
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.textarea:
            self.text += data


def form_fields(page: str, form_id: str) -> dict[str, list[str]]:
    """Return the values the form with id `form_id` would submit, by name."""
    reader = _FormReader(form_id)
    reader.feed(page)
    fields: dict[str, list[str]] = {}
    for name, value in reader.fields:
        fields.setdefault(name, []).append(value)
    return fields


def csrf_of(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
