"""The browser fixture survives a Chromium that exits between two tests."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Error as PlaywrightError

from tests.ares_site import conftest as browser_fixtures

pytestmark = pytest.mark.browser

browser = browser_fixtures.browser


def chromium_main_processes() -> list[int]:
    """Return the pids of this test process's descendant Chromium browsers (not renderers)."""
    parents: dict[int, int] = {}
    commands: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # the process ended while it was read
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        commands[int(entry.name)] = [part.decode(errors="replace") for part in command if part]

    def descends_from_this_test(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return [
        pid
        for pid, command in commands.items()
        if command
        and Path(command[0]).name in ("chromium", "chrome")
        and "--type=" not in " ".join(command)  # a zygote, renderer or helper
        and descends_from_this_test(pid)
    ]


def test_a_killed_chromium_is_launched_again_and_reported(browser: Any) -> None:
    context = browser.new_context()
    context.new_page().set_content("<p id='one'>first</p>")
    context.close()
    (pid,) = chromium_main_processes()
    os.kill(pid, signal.SIGKILL)
    chromium = browser._browser
    for _ in range(100):  # the driver sees the exit at its next exchange with the browser
        with contextlib.suppress(PlaywrightError):
            chromium.new_context().close()
        if not chromium.is_connected():
            break
        time.sleep(0.05)
    assert not chromium.is_connected()
    with pytest.warns(UserWarning, match="Chromium had exited"):
        context = browser.new_context()
    page = context.new_page()
    page.set_content("<p id='two'>second</p>")
    assert page.locator("#two").inner_text() == "second"
    assert chromium_main_processes() != [pid]
    context.close()
