# pip install openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http \
#     opentelemetry-instrumentation-openai-v2
import json
import os

# Opt in to messages, tool arguments and results on the spans (off by default).
os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

from openai import OpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.util.genai.handler import TelemetryHandler
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
genai = TelemetryHandler(tracer_provider=provider)

TOOLS = {"get_weather": get_weather, "add": add}
SCHEMAS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                     "b": {"type": "integer"}}}}},
]  # fmt: skip


def run_agent(request: str) -> str:
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    messages = [{"role": "user", "content": request}]
    with genai.invoke_local_agent(agent_name=AGENT) as agent:
        agent.conversation_id = SESSION
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
                name = call.function.name
                with genai.tool(name, tool_type="function") as tool:
                    tool.tool_call_id = call.id
                    tool.tool_description = TOOLS[name].__doc__
                    tool.arguments = json.loads(call.function.arguments)
                    tool.tool_result = TOOLS[name](**tool.arguments)
                messages.append(
                    {"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps(tool.tool_result)}
                )  # fmt: skip


def main() -> str:
    return run_agent(REQUEST)


if __name__ == "__main__":
    print(main())
