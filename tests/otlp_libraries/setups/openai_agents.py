# pip install openai-agents opentelemetry-sdk opentelemetry-exporter-otlp-proto-http \
#     openinference-instrumentation-openai-agents
import os

from agents import Agent, Runner, function_tool, set_default_openai_api, trace
from openinference.instrumentation import using_session
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
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
otel_trace.set_tracer_provider(provider)
# Replaces the SDK's own exporter to OpenAI's platform with OpenTelemetry spans.
OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
# Most OpenAI-compatible servers speak Chat Completions, not the Responses API.
set_default_openai_api("chat_completions")

agent = Agent(
    name=AGENT,
    instructions="Answer with the tools.",
    model="gpt-4o-mini",
    tools=[function_tool(get_weather), function_tool(add)],
)


def main() -> str:
    # OPENAI_BASE_URL and OPENAI_API_KEY from the environment.
    with using_session(SESSION), trace("weather workflow", group_id=SESSION):
        return Runner.run_sync(agent, REQUEST).final_output


if __name__ == "__main__":
    print(main())
