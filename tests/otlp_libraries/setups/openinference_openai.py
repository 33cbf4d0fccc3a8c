# pip install openai opentelemetry-sdk opentelemetry-exporter-otlp-proto-http \
#     openinference-instrumentation-openai
import json
import os

from openai import OpenAI
from openinference.instrumentation import TracerProvider, using_session
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
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

TOOLS = {"get_weather": tracer.tool(get_weather), "add": tracer.tool(add)}
SCHEMAS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                     "b": {"type": "integer"}}}}},
]  # fmt: skip


@tracer.agent(name=AGENT)
def run_agent(request: str) -> str:
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    messages = [{"role": "user", "content": request}]
    while True:
        reply = (
            client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=SCHEMAS)
            .choices[0]
            .message
        )
        if not reply.tool_calls:
            return reply.content
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            result = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )


def main() -> str:
    with using_session(SESSION):
        return run_agent(REQUEST)


if __name__ == "__main__":
    print(main())
