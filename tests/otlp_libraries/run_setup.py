"""Run one setup of docs/opentelemetry.md in this process; write the spans its SDK finished as JSON.

    python run_setup.py setups/openinference_openai.py spans.json

The setup configures OpenTelemetry (and its instrumentation) when imported and runs its
agent in main(). Before main() runs, an in-memory exporter is added to the global tracer
provider beside the setup's OTLP exporter, so the test can compare what the SDK finished
with what ARES Console stored. Runs in a process of its own per setup, as a user's app
does: instrumentations patch libraries process-wide.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """Return what the test compares of a finished span: ids in hex, times in nanoseconds."""
    return {
        "name": span.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else "",
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "resource": dict(span.resource.attributes),
    }


def run(setup: Path, output: Path) -> None:
    spec = importlib.util.spec_from_file_location(setup.stem, setup)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    memory = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(memory))  # type: ignore[attr-defined]
    answer = module.main()
    provider.shutdown()  # type: ignore[attr-defined]  # flushes the OTLP exporter first
    spans = [as_dict(span) for span in memory.get_finished_spans()]
    output.write_text(json.dumps({"answer": answer, "spans": spans}, default=list))


if __name__ == "__main__":
    run(Path(sys.argv[1]), Path(sys.argv[2]))
