# pip install openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http \
#     opentelemetry-instrumentation-openai
import json
import os

from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from weather import AGENT, REQUEST, SESSION, add, get_weather  # your tools

ARES_URL = os.environ.get("ARES_URL", "http://127.0.0.1:8000")
provider = TracerProvider(resource=Resource.create({"service.name": "weather-app"}))
provider.add_span_processor(
    BatchSpanProcessor(
        OTLPSpanExporter(
            endpoint=f"{ARES_URL}/v1/traces",
            headers={"Authorization": f"Bearer {os.environ['ARES_API_KEY']}"},
        )
    )
)
trace.set_tracer_provider(provider)
OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer(__name__)

TOOLS = {"get_weather": get_weather, "add": add}
SCHEMAS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                     "b": {"type": "integer"}}}}},
]  # fmt: skip


def run_tool(name: str, call_id: str, arguments: str) -> object:
    """Run a tool in an execute_tool span (OpenTelemetry GenAI conventions)."""
    with tracer.start_as_current_span(
        f"execute_tool {name}",
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": TOOLS[name].__doc__,
            "gen_ai.tool.call.arguments": arguments,
        },
    ) as span:
        result = TOOLS[name](**json.loads(arguments))
        span.set_attribute("gen_ai.tool.call.result", json.dumps(result))
        return result


def run_agent(request: str) -> str:
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    messages = [{"role": "user", "content": request}]
    with tracer.start_as_current_span(
        f"invoke_agent {AGENT}",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT,
                    "gen_ai.conversation.id": SESSION},
    ):  # fmt: skip
        while True:
            reply = (
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=messages, tools=SCHEMAS
                )
                .choices[0]
                .message
            )
            if not reply.tool_calls:
                return reply.content
            messages.append(reply.model_dump(exclude_none=True))
            for call in reply.tool_calls:
                result = run_tool(call.function.name, call.id, call.function.arguments)
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
                )


def main() -> str:
    return run_agent(REQUEST)


if __name__ == "__main__":
    print(main())
