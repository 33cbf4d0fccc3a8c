# pip install openai traceloop-sdk
import json
import os

from openai import OpenAI
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import agent, tool
from weather import AGENT, REQUEST, SESSION, add, get_weather  # your tools

ARES_URL = os.environ.get("ARES_URL", "http://127.0.0.1:8000")
Traceloop.init(
    app_name="weather-app",
    api_endpoint=ARES_URL,  # spans go to {ARES_URL}/v1/traces (metrics and logs are dropped)
    headers={"Authorization": f"Bearer {os.environ['ARES_API_KEY']}"},
    telemetry_enabled=False,
)

TOOLS = {"get_weather": tool(name="get_weather")(get_weather), "add": tool(name="add")(add)}
SCHEMAS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                     "b": {"type": "integer"}}}}},
]  # fmt: skip


@agent(name=AGENT)
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
    Traceloop.set_association_properties({"session_id": SESSION})
    return run_agent(REQUEST)


if __name__ == "__main__":
    print(main())
