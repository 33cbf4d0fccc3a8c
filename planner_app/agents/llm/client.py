"""A chat model behind any OpenAI-compatible endpoint, through the `openai` SDK.

OpenAI, vLLM, Ollama, llama.cpp server and LM Studio all speak chat completions. What
differs is whether a model takes tools: Ollama answers 400 "does not support tools",
vLLM without a tool parser 400 "auto tool choice requires --enable-auto-tool-choice",
llama.cpp without --jinja "tools param requires --jinja". Those become ToolsNotSupported,
so the loop asks again without tools instead of failing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import openai

from planner_app.agents.llm import openai_format
from planner_app.agents.llm.messages import LlmError, LlmReply, Message, ToolsNotSupported
from tools_app.specs import ToolSpec

_NO_TOOLS = re.compile(
    r"does not support tools|tools? (are |is )?not supported|not support(ed)? (function|tool)"
    r"|tool.?choice.{0,40}requires|--enable-auto-tool-choice|--jinja|function calling is not",
    re.IGNORECASE,
)


class OpenAICompatibleModel:
    """One model at one OpenAI-compatible endpoint; streamed or not, the reply is the same."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        *,
        timeout_s: float = 120.0,
        stream: bool = False,
        max_retries: int = 1,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.stream = stream
        # Local servers want no key, but the SDK refuses to start without one.
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=timeout_s,
            max_retries=max_retries,
        )

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), tool_choice: str = "auto"
    ) -> LlmReply:
        """Return the model's reply; LlmError (ToolsNotSupported) when the endpoint fails."""
        request: dict = {
            "model": self.model,
            "messages": openai_format.request_messages(messages),
        }
        if tools:
            request["tools"] = openai_format.request_tools(tools)
            request["tool_choice"] = tool_choice
        try:
            if self.stream:
                chunks = self.client.chat.completions.create(
                    **request, stream=True, stream_options={"include_usage": True}
                )
                with chunks:
                    return openai_format.reply_from_chunks(c.model_dump() for c in chunks)
            response = self.client.chat.completions.create(**request)
            return openai_format.reply_from_response(response.model_dump())
        except openai.APIStatusError as exc:
            message = _error_message(exc)
            if tools and _NO_TOOLS.search(message):
                raise ToolsNotSupported(message) from None
            raise LlmError(f"{self.base_url} answered {exc.status_code}: {message}") from None
        except openai.APITimeoutError:
            raise LlmError(f"{self.base_url} did not answer in time") from None
        except openai.APIConnectionError as exc:
            raise LlmError(f"cannot reach {self.base_url}: {exc.__cause__ or exc}") from None
        except (openai.OpenAIError, ValueError) as exc:
            raise LlmError(f"{self.base_url} sent an unusable reply: {exc}") from None


def _error_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return exc.message
