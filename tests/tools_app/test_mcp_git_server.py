"""mcp-server-git (stdio, from PyPI) on a repository the test makes: its tools join the engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools_app import site_engine
from tools_app.models import McpServer
from tools_app.specs import ErrorKind, SideEffect, ToolCall, ToolResult

pytestmark = pytest.mark.django_db(transaction=True)


def git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=t", "-c", "user.email=t@x"]
    subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture(autouse=True)
def look_every_call(settings: Any) -> None:
    settings.ARES_TOOL_SETTINGS_CHECK_S = 0


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with two commits, served by mcp-server-git as the "git" MCP server."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md")
    git(repo, "commit", "-q", "-m", "Add the readme")
    (repo / "notes.txt").write_text("first note\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "Write down a note")
    args = ["-m", "mcp_server_git", "--repository", str(repo)]
    McpServer.objects.create(name="git", command=sys.executable, args=args, timeout_s=20)
    return repo


def run(tool: str, arguments: dict[str, Any]) -> ToolResult:
    return site_engine.get_engine().execute(ToolCall(f"mcp.git.{tool}", arguments))


def test_it_registers_the_git_servers_tools(repo: Path) -> None:
    names = {spec.name for spec in site_engine.get_engine().registry.list(enabled_only=False)}
    assert {"mcp.git.git_status", "mcp.git.git_log", "mcp.git.git_commit"} <= names
    assert McpServer.objects.get(name="git").last_error == ""


def test_it_reads_the_log_of_the_repository(repo: Path) -> None:
    result = run("git_log", {"repo_path": str(repo)})
    assert result.success, result.text
    assert "Write down a note" in result.text and "Add the readme" in result.text
    assert result.text.index("Write down a note") < result.text.index("Add the readme")


def test_it_sees_an_untracked_file_in_the_status(repo: Path) -> None:
    assert "todo.txt" not in run("git_status", {"repo_path": str(repo)}).text
    (repo / "todo.txt").write_text("buy milk\n")
    result = run("git_status", {"repo_path": str(repo)})
    assert result.success, result.text
    assert "Untracked files" in result.text and "todo.txt" in result.text


def test_it_returns_an_error_for_a_path_outside_the_repository(repo: Path, tmp_path: Path) -> None:
    result = run("git_status", {"repo_path": str(tmp_path)})
    assert result.error.kind == ErrorKind.TOOL_ERROR
    assert "outside the allowed repository" in result.text


def test_it_returns_an_error_for_an_unknown_revision(repo: Path) -> None:
    result = run("git_show", {"repo_path": str(repo), "revision": "no-such-branch"})
    assert result.error.kind == ErrorKind.TOOL_ERROR
    assert "Ref 'no-such-branch' did not resolve to an object" in result.text
    # The server stays up: the next call still works.
    assert run("git_status", {"repo_path": str(repo)}).success


def test_it_rejects_arguments_that_break_the_servers_schema(repo: Path) -> None:
    result = run("git_log", {"repo_path": str(repo), "max_count": "ten"})
    assert result.error.kind == ErrorKind.INVALID_ARGUMENTS
    assert 'max_count: expected integer, got string "ten"' in result.text


@pytest.mark.parametrize(
    ("tool", "side_effect"),
    [
        ("git_log", SideEffect.READ_ONLY),
        ("git_commit", SideEffect.WRITE),
        ("git_reset", SideEffect.DESTRUCTIVE),
    ],
)
def test_it_takes_side_effects_from_the_servers_annotations(
    repo: Path, tool: str, side_effect: SideEffect
) -> None:
    assert site_engine.get_engine().registry.get(f"mcp.git.{tool}").side_effect == side_effect
