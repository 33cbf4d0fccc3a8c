# pip install langchain langchain-openai opentelemetry-sdk \
#     opentelemetry-exporter-otlp-proto-http openinference-instrumentation-langchain
import os

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry import trace
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
trace.set_tracer_provider(provider)
LangChainInstrumentor().instrument(tracer_provider=provider)

agent = create_agent(
    model=ChatOpenAI(model="gpt-4o-mini"),  # OPENAI_BASE_URL and OPENAI_API_KEY from the env
    tools=[tool(get_weather), tool(add)],
    name=AGENT,
)


def main() -> str:
    state = agent.invoke(
        {"messages": [{"role": "user", "content": REQUEST}]},
        config={"metadata": {"session_id": SESSION}},
    )
    return state["messages"][-1].content


if __name__ == "__main__":
    print(main())
