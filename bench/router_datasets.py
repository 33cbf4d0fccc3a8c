"""The router benchmark's public data sets, converted to its JSON format (bench/README.md).

StableToolBench's test queries and BFCL's answered categories become (catalogue, queries)
pairs that bench/router.py measures the router on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from planner_app.discovery.catalogue import Server, catalogue_from_dict

STB_FILES = [
    "G1_category",
    "G1_instruction",
    "G1_tool",
    "G2_category",
    "G2_instruction",
    "G3_instruction",
]
# The categories whose questions come with several functions, one or more of them right.
BFCL_CATEGORIES = ["multiple", "parallel_multiple", "live_multiple"]
# BFCL's categories of one function per question, never tuned on: "bfcl-unseen" keeps only
# their functions that BFCL_CATEGORIES do not have, and the questions that expect them.
BFCL_UNSEEN_CATEGORIES = ["simple_python", "live_simple", "parallel"]


def stabletoolbench(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return StableToolBench's test queries as (catalogue, queries) in the bench format.

    A RapidAPI "tool" is a server, its APIs are its tools; the catalogue is the union of
    every query's api_list; a query expects its "relevant APIs".
    """
    servers: dict[str, dict[str, Any]] = {}
    queries = []
    for name in STB_FILES:
        for item in json.loads((folder / f"{name}.json").read_text(encoding="utf-8")):
            for api in item["api_list"]:
                server = servers.setdefault(
                    api["tool_name"],
                    {"name": api["tool_name"], "description": api["category_name"], "tools": {}},
                )
                parameters = api["required_parameters"] + api["optional_parameters"]
                server["tools"].setdefault(
                    api["api_name"],
                    {
                        "name": api["api_name"],
                        "description": api["api_description"] or "",
                        "parameters": {
                            parameter["name"]: parameter.get("description") or ""
                            for parameter in parameters
                        },
                    },
                )
            expected = [{"server": s, "tool": t} for s, t in item["relevant APIs"]]
            queries.append(
                {"id": f"{name}/{item['query_id']}", "query": item["query"], "expected": expected}
            )
    for server in servers.values():
        server["tools"] = list(server["tools"].values())
    return {"servers": list(servers.values())}, {"queries": queries}


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _user_text(question: list[list[dict[str, str]]]) -> str:
    return " ".join(turn["content"] for turn in question[0] if turn["role"] == "user")


def bfcl(
    folder: Path, categories: Sequence[str] = BFCL_CATEGORIES
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return BFCL's answered categories as (catalogue, queries) in the bench format.

    The functions offered together with a question form a server: each function joins the
    first such set it appears in, named by its functions' shared dotted prefix when they
    have one. A question expects the functions of its gold calls, by name, on any server,
    so a name is one tool: where BFCL repeats a name with another description, the
    first description stays.
    """
    servers: dict[str, dict[str, Any]] = {}
    placed: set[str] = set()
    queries = []
    for category in categories:
        answers = {
            a["id"]: a for a in _jsonl(folder / "possible_answer" / f"BFCL_v4_{category}.json")
        }
        for item in _jsonl(folder / f"BFCL_v4_{category}.json"):
            new = {f["name"]: f for f in item["function"] if f["name"] not in placed}
            new = list(new.values())
            if new:
                placed.update(f["name"] for f in new)
                name = _unique(_group_name([f["name"] for f in new]), servers)
                servers[name] = {
                    "name": name,
                    "description": "",
                    "tools": [_bfcl_tool(f) for f in new],
                }
            expected = sorted(
                {name for call in answers[item["id"]]["ground_truth"] for name in call}
            )
            queries.append(
                {
                    "id": item["id"],
                    "query": _user_text(item["question"]),
                    "expected": [{"tool": name} for name in expected],
                }
            )
    return {"servers": list(servers.values())}, {"queries": queries}


def bfcl_unseen(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return a catalogue no choice was tuned on: BFCL's one-function categories' functions
    that the "bfcl" set lacks (by name), and the questions expecting only those."""
    tuned = {tool["name"] for server in bfcl(folder)[0]["servers"] for tool in server["tools"]}
    catalogue, queries = bfcl(folder, BFCL_UNSEEN_CATEGORIES)
    servers = []
    for server in catalogue["servers"]:
        tools = [tool for tool in server["tools"] if tool["name"] not in tuned]
        if tools:
            servers.append({**server, "tools": tools})
    kept = {tool["name"] for server in servers for tool in server["tools"]}
    unseen = [q for q in queries["queries"] if {e["tool"] for e in q["expected"]} <= kept]
    return {"servers": servers}, {"queries": unseen}


def _bfcl_tool(function: dict[str, Any]) -> dict[str, Any]:
    properties = function.get("parameters", {}).get("properties", {})
    return {
        "name": function["name"],
        "description": function["description"],
        "parameters": {
            name: (schema.get("description") or "") if isinstance(schema, dict) else ""
            for name, schema in properties.items()
        },
    }


def _group_name(names: list[str]) -> str:
    prefixes = {name.split(".")[0] for name in names if "." in name}
    if len(prefixes) == 1 and all("." in name for name in names):
        return prefixes.pop()
    return " + ".join(sorted(names))


def _unique(name: str, taken: dict[str, Any]) -> str:
    suffix = 2
    candidate = name
    while candidate in taken:
        candidate, suffix = f"{name} ({suffix})", suffix + 1
    return candidate


_HUB_CALL = re.compile(r"repo_or_dir=['\"]([^'\"]+)['\"].*?model=['\"]([^'\"]+)['\"]")
_INSTRUCTION = re.compile(r"Instruction'?:\s*(.*?)(?:,\s*'Output'|\n###Output)", re.DOTALL)


def apibench(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return Gorilla's TorchHub set as (catalogue, queries): its 94 API documents, and the
    186 evaluation instructions, each expecting the API of its `api_call`.

    An API is a tool named by its repository and model ("pytorch/vision:resnet34"), on
    a server per domain; its description is its functionality and description.
    """
    servers: dict[str, dict[str, Any]] = {}
    for api in _jsonl(folder / "torchhub_api.jsonl"):
        server = servers.setdefault(
            api["domain"], {"name": api["domain"], "description": api["domain"], "tools": []}
        )
        arguments = api["api_arguments"]
        server["tools"].append(
            {
                "name": hub_tool_name(api["api_call"]),
                "description": f"{api['functionality']}. {api['description']}",
                "parameters": dict.fromkeys(arguments, "") if isinstance(arguments, dict) else {},
            }
        )
    queries = [
        {"id": f"eval/{i}", "query": instruction, "expected": [{"tool": tool}]}
        for i, (instruction, tool) in enumerate(apibench_pairs(folder / "torchhub_eval.json"))
    ]
    return {"servers": list(servers.values())}, {"queries": queries}


def apibench_history(folder: Path) -> dict[str, Any]:
    """Return the 837 training instructions as recorded outcomes: each served by its API."""
    pairs = apibench_pairs(folder / "torchhub_train.json")
    return {"outcomes": [{"request": text, "tool": tool, "outcome": "ok"} for text, tool in pairs]}


def apibench_pairs(path: Path) -> list[tuple[str, str]]:
    """Return each item's (instruction, expected tool name)."""
    pairs = []
    for item in _jsonl(path):
        found = _INSTRUCTION.search(item["code"])
        instruction = found.group(1) if found else item["code"]
        pairs.append((" ".join(instruction.split()), hub_tool_name(item["api_call"])))
    return pairs


def hub_tool_name(api_call: str) -> str:
    """Return "repository:model" of a torch.hub.load call (api_name repeats across APIs)."""
    found = _HUB_CALL.search(api_call)
    if found:
        return f"{found.group(1)}:{found.group(2)}"
    return api_call  # a call without both keywords stays whole, still unique


def crowded(
    dataset: tuple[dict[str, Any], dict[str, Any]], data: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return a data set with StableToolBench's 2,479 tools added to its catalogue: its
    queries then choose among thousands of tools, most of them never recorded."""
    catalogue, queries = dataset
    distractors = stabletoolbench(data / "stabletoolbench")[0]["servers"]
    return {"servers": catalogue["servers"] + distractors}, queries


def stabletoolbench_servers(data: Path) -> list[Server]:
    """Return StableToolBench's services, to crowd a catalogue; none without the data."""
    if not (data / "stabletoolbench").is_dir():
        print(f"no {data / 'stabletoolbench'}: the site tasks run without distractors")
        return []
    return list(catalogue_from_dict(stabletoolbench(data / "stabletoolbench")[0]))


DATASETS: dict[str, Callable[[Path], tuple[dict[str, Any], dict[str, Any]]]] = {
    "stabletoolbench": lambda data: stabletoolbench(data / "stabletoolbench"),
    "bfcl": lambda data: bfcl(data / "bfcl"),
    "bfcl-unseen": lambda data: bfcl_unseen(data / "bfcl"),
    "apibench": lambda data: apibench(data / "apibench"),
    "apibench-crowded": lambda data: crowded(apibench(data / "apibench"), data),
}
# The sets that come with recorded outcomes of their own, to learn from.
HISTORIES: dict[str, Callable[[Path], dict[str, Any]]] = {
    "apibench": lambda data: apibench_history(data / "apibench"),
    "apibench-crowded": lambda data: apibench_history(data / "apibench"),
}
