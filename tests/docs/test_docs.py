"""Every fenced block of README.md and docs/*.md, run or checked by its kind, so none drifts.

A block's kind comes from its fence's language, or, where the language does not say, from
a comment on the line before the fence, `<!-- check: KIND ARGS -->`:

- `sh`: each command is run or checked. `curl` runs against the live server on 127.0.0.1
  with a real key for the placeholder; `manage.py` commands that are quick on an empty
  database run, the others have their command and options checked; `make` targets must
  be in the Makefile; `bench/` scripts and `python -m` modules must exist with the options
  given; every environment variable set must be one the site (or an SDK) reads.
- `python`: a setup CI runs (tests/otlp_libraries/setups/) must be its file verbatim;
  any other snippet runs, against the live server and the Django test setup, with the
  stand-ins in GIVEN for what the page says is the reader's (a span, a model's reply),
  and every HTTP answer it gets must be a success. A snippet that sets OpenTelemetry's
  global tracer provider runs in a Python process of its own.
- `toml`: loaded by the real ares.toml loader; no entry may be refused.
- `text`: a diagram; every module or package it names exists.
- `json` and unlabelled blocks need a comment: `json-schema NAME` (an API schema; `NAME[]`
  for a list of them), `workflow` (imported by `manage.py import_workflow`), `plan` (read
  and checked as an agent's plan), `engine-text TOOL ARGUMENTS` (the text the engine
  answers for that call), `tool-request` (an agent's tool request, parsed).
- `clickhouse-schema DAYS` (an `sql` block): verbatim the DDL `bench/clickhouse.py` creates
  with a retention of DAYS; checked without ClickHouse.

A block of any other kind fails. Beside the blocks, every path, dotted module, setting and
link the pages name must exist, and the README must link every page of docs/.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from django.core.management import call_command, get_commands, load_command_class

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("README.md", *sorted(f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")))
APPS = ("ares_site", "planner_app", "tools_app", "traces_app")
# Pages whose names (paths, modules, settings, links) are checked, beside the docs' blocks.
NAMING_PAGES = (*PAGES, "bench/README.md")
SETUPS = ROOT / "tests" / "otlp_libraries" / "setups"
DOCS_URL = "http://127.0.0.1:8000"  # where the docs say the site is
KEY_PLACEHOLDERS = ("$ARES_KEY", "ares_...")
ALL_SCOPES = ("report", "read", "plan", "execute", "chat", "score", "tune", "monitor")
LANGUAGE_KINDS = {"sh": "shell", "python": "python", "toml": "ares-toml", "text": "diagram"}
# Management commands quick enough on an empty test database to run as the docs give them.
RUNNABLE_COMMANDS = {"create_api_key", "check_rollups"}
# Environment variables the docs name that the site's settings do not read, and who does.
OTHER_ENV = {
    "ARES_URL": "tests/otlp_libraries/setups/traceloop_sdk.py",
    "ARES_API_KEY": "tests/otlp_libraries/setups/traceloop_sdk.py",
    "ARES_AXE_REPORT": "tests/ares_site/test_accessibility.py",
    "ARES_TESTS_DATABASE_ONLY": "tests/conftest.py",
    "ARES_KEY": "tests/docs/test_docs.py",  # the curl examples' key, replaced by a real one
}
# Paths the docs name that are not in the tree, and why.
NOT_IN_TREE = {
    "var/ares.sqlite3": "the SQLite database make run creates",
    "static/vendor/plotly.min.js": "served from the plotly package (ares_site/static_finders.py)",
    "solvable_queries/test_instruction/": "StableToolBench's own folder, in ../shared/bench-data/",
}
REPLY = "<tool_request>\nserver: a calculator\ntool: add two numbers\n</tool_request>"


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with its fence language and its check comment."""

    page: str
    line: int
    language: str
    marker: str
    text: str

    @property
    def kind(self) -> str:
        if self.marker:
            return self.marker.split(maxsplit=1)[0]
        return LANGUAGE_KINDS.get(self.language, "")

    @property
    def args(self) -> str:
        parts = self.marker.split(maxsplit=1)
        return parts[1] if len(parts) > 1 else ""

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def page_blocks(page: str) -> list[Block]:
    """Return the fenced blocks of a page, in order."""
    lines = (ROOT / page).read_text(encoding="utf-8").split("\n")
    blocks, index = [], 0
    while index < len(lines):
        fence = re.fullmatch(r"```(\w*)\s*", lines[index])
        if fence:
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            marker = re.fullmatch(r"<!-- check: (.+?) -->", lines[index - 1].strip())
            text = "\n".join(lines[index + 1 : end]) + "\n"
            blocks.append(Block(page, index + 1, fence[1], marker[1] if marker else "", text))
            index = end
        index += 1
    return blocks


BLOCKS = [block for page in PAGES for block in page_blocks(page)]


def is_setup(block: Block) -> bool:
    """Say whether a block is one of the setups CI runs, as its file is."""
    return any(path.read_text() == block.text for path in SETUPS.glob("*.py"))


def needs_database(block: Block) -> bool:
    """Say whether checking a block touches the database (then it gets a transactional one)."""
    if block.kind == "python":
        return not is_setup(block)
    if block.kind == "shell":
        return "curl " in block.text or any(name in block.text for name in RUNNABLE_COMMANDS)
    return block.kind in {"ares-toml", "workflow", "plan", "engine-text"}


def block_params() -> list[Any]:
    database = pytest.mark.django_db(transaction=True)
    return [
        pytest.param(block, id=str(block), marks=[database] if needs_database(block) else [])
        for block in BLOCKS
    ]


def prose(page: str) -> str:
    """Return a page without its fenced blocks."""
    return re.sub(r"^```.*?^```", "", (ROOT / page).read_text(encoding="utf-8"), flags=re.S | re.M)


def inline_words(page: str) -> Iterator[str]:
    """Yield each word of the page's inline code spans, trailing punctuation left out."""
    for span in re.findall(r"`([^`]+)`", prose(page)):
        for word in span.split():
            yield word.rstrip(".,;:)")


# The checks by kind.


def test_the_docs_have_blocks_of_every_kind_checked() -> None:
    kinds = {block.kind for block in BLOCKS}
    assert {"shell", "python", "ares-toml", "json-schema", "workflow"} <= kinds


@pytest.mark.parametrize("block", block_params())
def test_each_block_runs_or_checks_as_written(block: Block, request: pytest.FixtureRequest) -> None:
    check = CHECKS.get(block.kind)
    if needs_database(block):
        request.getfixturevalue("shipped_data")
    if check is None:
        pytest.fail(
            f"{block}: no check for a {block.language or 'plain'} block; put a "
            f"`<!-- check: KIND -->` before it, KIND one of {', '.join(sorted(CHECKS))}"
        )
    check(block, request)


def check_shell(block: Block, request: pytest.FixtureRequest) -> None:
    commands = shell_commands(block.text)
    assert commands, f"{block}: no command"
    for words in commands:
        check_command(block, words, request)


def shell_commands(text: str) -> list[list[str]]:
    """Return the block's commands as words: lines split outside quotes, comments left out."""
    text = text.replace("\\\n", " ")
    lines, chars, quote, comment = [], [], "", False
    for index, char in enumerate(text):
        if comment and char != "\n":
            continue
        comment = False
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1].isspace()):
            comment = True
            continue
        elif char == "\n":
            lines.append("".join(chars))
            chars = []
            continue
        chars.append(char)
    lines.append("".join(chars))
    return [words for line in lines if (words := shlex.split(line))]


def check_command(block: Block, words: list[str], request: pytest.FixtureRequest) -> None:
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        assert_env_known(words.pop(0).split("=")[0], block)
    program, args = words[0], words[1:]
    if program == "export":
        for assignment in args:
            assert_env_known(assignment.split("=")[0], block)
    elif program == "make":
        check_make(block, args)
    elif program == "curl":
        run_curl(block, args, request)
    elif program.endswith("bin/python"):
        check_python_command(block, args, request)
    else:
        pytest.fail(f"{block}: no check for the command {program!r}")


def check_make(block: Block, args: list[str]) -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w.-]+):", makefile, flags=re.M))
    for arg in args:
        if "=" in arg:
            variable = arg.split("=")[0]
            assert f"$({variable})" in makefile, f"{block}: the Makefile uses no {variable}"
        else:
            assert arg in targets, f"{block}: the Makefile has no target {arg}"


def check_python_command(block: Block, args: list[str], request: pytest.FixtureRequest) -> None:
    if args[0] == "manage.py":
        check_management_command(block, args[1], args[2:], request)
    elif args[0] == "-m":
        spec = importlib.util.find_spec(args[1])
        assert spec is not None and spec.origin, f"{block}: no module {args[1]}"
        assert_options_in(block, Path(spec.origin), args[2:])
    else:
        script = ROOT / args[0]
        assert script.is_file(), f"{block}: no script {args[0]}"
        assert_options_in(block, script, args[1:])


def assert_options_in(block: Block, source: Path, args: list[str]) -> None:
    text = source.read_text()
    for option in (arg.split("=")[0] for arg in args if arg.startswith("--")):
        assert f'"{option}"' in text, f"{block}: {source.name} takes no {option}"


def check_management_command(
    block: Block, name: str, args: list[str], request: pytest.FixtureRequest
) -> None:
    app = get_commands().get(name)
    assert app is not None, f"{block}: no management command {name}"
    parser = load_command_class(app, name).create_parser("manage.py", name)
    try:
        parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"{block}: manage.py {name} does not take {' '.join(args)}")
    if name in RUNNABLE_COMMANDS:
        call_command(name, *args, stdout=io.StringIO(), stderr=io.StringIO())


def run_curl(block: Block, args: list[str], request: pytest.FixtureRequest) -> None:
    url, headers, data = "", {}, None
    words = iter(args)
    for word in words:
        if word == "-H":
            name, value = next(words).split(":", 1)
            headers[name] = with_real_key(value.strip(), request)
        elif word == "-d":
            data = next(words)
        elif word != "-s":
            url = word
    assert url.startswith(DOCS_URL), f"{block}: curl to {url}, not the site"
    prepare_for(url, data, request)
    live_url = request.getfixturevalue("live_server").url
    method = "POST" if data is not None else "GET"
    answer = httpx.request(
        method, live_url + url.removeprefix(DOCS_URL), headers=headers, content=data, timeout=60
    )
    assert answer.status_code == 200, f"{block}: {method} {url}: {answer.status_code} {answer.text}"


def prepare_for(url: str, data: str | None, request: pytest.FixtureRequest) -> None:
    """Give the request what the docs assume the site has: rules, or an agent and its LLM."""
    if url.endswith(("/plan", "/execute")):
        request.getfixturevalue("default_rules")
    if url.endswith("/chat"):
        from planner_app.models import Agent
        from tests.planner_app.fake_llm import call, say

        llm = request.getfixturevalue("fake_llm")
        settings = request.getfixturevalue("settings")
        settings.ARES_LLM_BASE_URL, settings.ARES_LLM_MODEL = llm.base_url, "fake-model"
        settings.ARES_LLM_STREAM = False
        Agent.objects.create(name=json.loads(data or "{}")["agent"], tools=["calculator"])
        llm.script(call("calculator", {"expression": "2^10"}), say("2^10 is 1024."))


def with_real_key(text: str, request: pytest.FixtureRequest) -> str:
    if not any(placeholder in text for placeholder in KEY_PLACEHOLDERS):
        return text
    key = request.getfixturevalue("make_key")(*ALL_SCOPES, name="docs")
    for placeholder in KEY_PLACEHOLDERS:
        text = text.replace(placeholder, key)
    return text


def check_python(block: Block, request: pytest.FixtureRequest) -> None:
    if is_setup(block):
        return  # tests/otlp_libraries/test_otlp_libraries.py runs it as written
    if "from weather import" in block.text:
        pytest.fail(f"{block}: a setup that is no file of tests/otlp_libraries/setups/ as it is")
    live_url = request.getfixturevalue("live_server").url
    code = with_real_key(block.text.replace(DOCS_URL, live_url), request)
    if "set_tracer_provider(" in code:
        run_in_own_process(block, code)
    else:
        run_in_this_process(block, code, request)


def run_in_own_process(block: Block, code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{block}: {done.stderr}"
    assert "Failed to export" not in done.stderr, f"{block}: {done.stderr}"


def run_in_this_process(block: Block, code: str, request: pytest.FixtureRequest) -> None:
    answers: list[httpx.Response] = []
    send = httpx.Client.send

    def recording_send(client: httpx.Client, *args: Any, **kwargs: Any) -> httpx.Response:
        answers.append(send(client, *args, **kwargs))
        return answers[-1]

    request.getfixturevalue("monkeypatch").setattr(httpx.Client, "send", recording_send)
    exec(compile(code, str(block), "exec"), {"__name__": "docs_snippet", **given()})  # noqa: S102
    failed = [f"{answer.request.url}: {answer.status_code}"
              for answer in answers if answer.is_error]  # fmt: skip
    assert not failed, f"{block}: {failed}"


def given() -> dict[str, Any]:
    """Return the stand-ins for what a snippet takes as the reader's own."""
    from opentelemetry.sdk.trace import TracerProvider

    span = TracerProvider().get_tracer("docs").start_span("execute_tool get_weather")
    span.end()
    return {"span": span, "reply": REPLY}


def check_ares_toml(block: Block, request: pytest.FixtureRequest) -> None:
    from planner_app.agent_config_file import import_config

    # The docs' examples are one site's ares.toml: an agent may use a server defined in another.
    for other in BLOCKS:
        if other.kind == "ares-toml" and other != block and "[mcp_servers." in other.text:
            import_config(other.text)
    report = import_config(block.text)
    assert report.saved and not report.problems, f"{block}: {report.problems}"


def check_diagram(block: Block, request: pytest.FixtureRequest) -> None:
    names = re.findall(r"\b([a-z_]+(?:/|\.py))(?=[\s,)]|$)", block.text)
    assert names, f"{block}: names no module or package"
    for name in names:
        assert_relative_path_exists(name, block)
    for app in re.findall(r"^\s*(ares_site|\w+_app)\b", block.text, flags=re.M):
        assert (ROOT / app / "__init__.py").exists(), f"{block}: no app {app}"


def check_json_schema(block: Block, request: pytest.FixtureRequest) -> None:
    from ares_site.api import api

    name = block.args.removesuffix("[]")
    schema = api.get_openapi_schema()
    assert name in schema["components"]["schemas"], f"{block}: the API has no schema {name}"
    ref: dict[str, Any] = {"$ref": f"#/components/schemas/{name}"}
    if block.args.endswith("[]"):
        ref = {"type": "array", "items": ref}
    jsonschema.validate(json.loads(block.text), {**ref, "components": schema["components"]})


def check_workflow(block: Block, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue("tmp_path") / "workflow.json"
    path.write_text(block.text)
    call_command("import_workflow", str(path), stdout=io.StringIO())


def check_plan(block: Block, request: pytest.FixtureRequest) -> None:
    from planner_app.agents.replan import plan_from_reply
    from planner_app.workflows.graph import validate_workflow
    from tools_app import site_engine

    plan = plan_from_reply(block.text, "docs", max_steps=20)
    assert validate_workflow(plan, site_engine.get_engine().registry) == [], str(block)


def check_engine_text(block: Block, request: pytest.FixtureRequest) -> None:
    from tools_app import site_engine
    from tools_app.specs import ToolCall

    tool, arguments = block.args.split(maxsplit=1)
    result = site_engine.get_engine().execute(ToolCall(tool, json.loads(arguments)))
    assert result.text + "\n" == block.text, f"{block}: the engine says {result.text!r}"


def check_tool_request(block: Block, request: pytest.FixtureRequest) -> None:
    from planner_app.discovery import parse_tool_requests

    requests = parse_tool_requests(block.text)
    assert requests and all(r.server and r.tool for r in requests), str(block)


def check_clickhouse_schema(block: Block, request: pytest.FixtureRequest) -> None:
    bench = importlib.import_module("bench.clickhouse")  # imports no chdb
    statements = bench.schema(int(block.args))
    assert block.text == ";\n\n".join(statements) + ";\n", f"{block}: not bench.clickhouse.schema"


CHECKS: dict[str, Callable[[Block, pytest.FixtureRequest], None]] = {
    "shell": check_shell,
    "python": check_python,
    "ares-toml": check_ares_toml,
    "diagram": check_diagram,
    "json-schema": check_json_schema,
    "workflow": check_workflow,
    "plan": check_plan,
    "engine-text": check_engine_text,
    "tool-request": check_tool_request,
    "clickhouse-schema": check_clickhouse_schema,
}


# What the pages name: paths, modules, settings, links.


@cache
def tree_names() -> tuple[frozenset[str], tuple[Path, ...]]:
    """Return every file and directory name of the tree, and every directory of the apps."""
    skipped = {".venv", ".git", "var", "node_modules", "__pycache__"}
    names: set[str] = set()
    app_dirs: list[Path] = []
    for top, directories, files in os.walk(ROOT):
        directories[:] = [name for name in directories if name not in skipped]
        names.update(files, directories)
        if Path(top).relative_to(ROOT).parts[:1] and Path(top).relative_to(ROOT).parts[0] in APPS:
            app_dirs.append(Path(top))
    return frozenset(names), tuple(app_dirs)


def assert_relative_path_exists(name: str, where: object) -> None:
    """Assert a path named from inside an app (`rollups/marks.py`, `agents/`) exists there."""
    file_names, app_dirs = tree_names()
    if "/" not in name.rstrip("/"):
        found = name.rstrip("/") in file_names
    else:
        found = any((directory / name).exists() for directory in app_dirs)
    assert found, f"{where}: no {name} in the apps"


def named_paths(page: str) -> Iterator[str]:
    for word in inline_words(page):
        if re.search(r"[<>{}*$]|://|^\.\.|^/", word):
            continue
        if "/" not in word and not word.endswith(".py"):
            continue
        if re.fullmatch(r"[\w.-]+(/[\w.-]*)*", word):
            yield word


@pytest.mark.parametrize("page", NAMING_PAGES)
def test_every_path_the_page_names_exists(page: str) -> None:
    tops = {path.name for path in ROOT.iterdir()}
    for word in named_paths(page):
        if word in NOT_IN_TREE:  # named as the reader's, or made at run time
            continue
        if word.split("/")[0] in tops:
            assert (ROOT / word).exists(), f"{page}: no {word}"
        elif re.search(r"/$|\.(py|html|js|md|css)$", word):  # not a media type
            assert_relative_path_exists(word, page)


@pytest.mark.parametrize("page", NAMING_PAGES)
def test_every_module_the_page_names_imports(page: str) -> None:
    for word in inline_words(page):
        dotted = re.match(r"((?:ares_site|planner_app|tools_app|traces_app|bench)(?:\.\w+)+)", word)
        if dotted:
            assert_importable(dotted[1], page)


def assert_importable(dotted: str, page: str) -> None:
    """Assert the longest module prefix of a dotted name imports and holds the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            assert hasattr(found, attribute), f"{page}: {dotted}: no {attribute}"
            found = getattr(found, attribute)
        return
    pytest.fail(f"{page}: no module {dotted}")


def assert_env_known(name: str, where: object) -> None:
    """Assert the site's settings read an environment variable, or an SDK, or a file we name."""
    if name in OTHER_ENV:
        reader = OTHER_ENV[name]
        assert name in (ROOT / reader).read_text(), f"{where}: {name} not in {reader}"
    elif name.startswith("OTEL_"):
        from opentelemetry.sdk import environment_variables

        assert hasattr(environment_variables, name), f"{where}: OpenTelemetry reads no {name}"
    else:
        assert re.search(rf"\b{name}\b", settings_source()), f"{where}: settings.py has no {name}"


@cache
def settings_source() -> str:
    return (ROOT / "ares_site" / "settings.py").read_text()


@pytest.mark.parametrize("page", NAMING_PAGES)
def test_every_ares_setting_the_page_names_exists(page: str) -> None:
    for word in inline_words(page):
        name = re.fullmatch(r"(ARES_[A-Z0-9_]*[A-Z0-9])(=.*)?", word)
        if name:
            assert_env_known(name[1], page)


def test_every_variable_of_the_settings_table_is_read_by_the_settings() -> None:
    table = (ROOT / "docs" / "operations.md").read_text().split("## Configuration", 1)[1]
    names = re.findall(r"^\| `([A-Z_]+)` \|", table.split("\n## ", 1)[0], flags=re.M)
    assert len(names) > 40
    for name in names:
        assert_env_known(name, "docs/operations.md")


def slug(heading: str) -> str:
    """Return the anchor GitHub gives a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", text))


@pytest.mark.parametrize("page", NAMING_PAGES)
def test_every_link_the_page_makes_resolves(page: str) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(page)):
        if re.match(r"\w+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = ((ROOT / page).parent / path).resolve() if path else ROOT / page
        assert linked.exists(), f"{page}: the link {target} leads nowhere"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", prose(str(linked.relative_to(ROOT))), flags=re.M)
            assert anchor in {slug(h) for h in headings}, f"{page}: no heading for {target}"


def test_the_readme_is_short_and_links_every_page_of_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split("\n")) < 250
    for page in PAGES[1:]:
        assert f"]({page})" in readme, f"README.md does not link {page}"
