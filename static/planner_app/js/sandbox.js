// The sandbox chat: a conversation of turns. Each message posts the form with the earlier
// turns (the page keeps them; the server keeps nothing between messages), reads the
// server-sent events of the answer as they come and shows each step in the turn. Stop asks
// the server to stop the task (POST /sandbox/stop); if that fails, closing the stream stops
// it too. Everything from the server goes in as text (textContent), never HTML.
(function () {
  "use strict";

  const PATHS = { 1: "1 LLM", 2: "2 planner", 3: "3 workflow", 4: "4 MCP" };
  const form = document.getElementById("sandbox-form");
  const agentSelect = document.getElementById("id_agent");
  const modeSelect = document.getElementById("id_mode");
  const workflowField = document.getElementById("workflow-field");
  const messageField = document.getElementById("message-field");
  const messageBox = document.getElementById("id_message");
  const conversation = document.getElementById("transcript");
  const turnTemplate = document.getElementById("turn-template");
  const historyField = document.getElementById("id_history");
  const sessionField = document.getElementById("id_session");
  const formError = document.getElementById("form-error");
  const runState = document.getElementById("run-state");
  const sendButton = document.getElementById("send-button");
  const stopButton = document.getElementById("stop-button");
  const newButton = document.getElementById("new-conversation");
  const conversationState = document.getElementById("conversation-state");
  const maxHistory = Number(form.dataset.maxHistory);
  const maxHistoryChars = Number(form.dataset.maxHistoryChars);
  let history = []; // the finished turns, oldest first: {role: "user" | "assistant", content}
  let turn = null; // the turn running or last run: its elements, trace id and stream
  let pending = new Map(); // call id -> the entry of a tool call still running

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function pretty(value) {
    if (typeof value === "string") return value;
    return JSON.stringify(value, null, 2);
  }

  function badge(path) {
    const node = el("span", "badge path-" + path, PATHS[path] || "path " + path);
    node.dataset.path = String(path);
    return node;
  }

  function facts(parts) {
    return el("span", "facts", parts.filter(Boolean).join(" · "));
  }

  function entry(type, title) {
    const item = el("li", "step step-" + type);
    item.dataset.type = type;
    const head = el("div", "step-head");
    head.append(el("strong", "", title));
    item.append(head);
    turn.steps.append(item);
    item.scrollIntoView({ block: "nearest" });
    return item;
  }

  // A payload block scrolls when long: focusable and named, so a keyboard can scroll it too.
  function payloadBlock(label, value) {
    const block = el("pre", "payload", pretty(value));
    block.tabIndex = 0;
    block.setAttribute("aria-label", label);
    return block;
  }

  function payload(item, label, value) {
    if (value === undefined || value === null || value === "") return;
    item.append(el("div", "step-label", label), payloadBlock(label, value));
  }

  // One request's routing: stage 1's servers, then each tool with its combined score, the
  // server and tool scores it came from and, below it, what put it there.
  function routingText(routing) {
    const lines = [routing.mode.replace(/_/g, " ") + (routing.cached ? " (cached)" : "")];
    if (routing.servers.length) {
      lines.push("servers: " + routing.servers.map((s) => s.server + " " + s.score.toFixed(3)).join(", "));
    }
    routing.tools.forEach((t) => {
      lines.push(t.tool + " " + t.score.toFixed(3) + " (server " + t.server_score.toFixed(3) +
        ", tool " + t.tool_score.toFixed(3) + (t.placed_by ? "; " + t.placed_by : "") + ")");
      if (t.why) lines.push("  why: " + t.why);
    });
    if (!routing.tools.length) lines.push("no tool above the threshold");
    return lines.join("\n");
  }

  function traceLink(event) {
    if (!event.trace_url) return;
    turn.traceLink.href = event.trace_url;
    turn.traceLink.textContent = "Full trace " + event.trace_id;
  }

  // One renderer per event type ------------------------------------------------------------

  function toolEntry(event) {
    const item = entry("tool", "");
    item.classList.add("tool-call");
    const head = item.querySelector(".step-head");
    head.textContent = "";
    head.append(badge(event.path), " ", el("strong", "tool-name", event.tool));
    if (event.ran_on && event.ran_on.startsWith("mcp:") && event.path !== 4) {
      head.append(" ", el("span", "badge path-4", "on " + event.ran_on));
    }
    head.append(" ", el("span", "tool-state range", "running…"));
    item.dataset.callId = event.call_id;
    item.dataset.path = String(event.path);
    return item;
  }

  const render = {
    accepted(event) {
      traceLink(event);
      turn.traceId = event.trace_id;
      sessionField.value = event.session_id;
      stopButton.disabled = false;
    },
    started(event) {
      traceLink(event);
      const item = entry("started", "Started");
      item.querySelector(".step-head").append(" ", facts([
        "agent " + event.agent,
        event.model ? "model " + event.model : "no LLM",
        event.tools.length + " tool" + (event.tools.length === 1 ? "" : "s") + " offered",
        event.schema_tokens ? event.schema_tokens + " schema tokens" : "",
      ]));
    },
    model_turn(event) {
      const item = entry("model_turn", "Model turn " + event.iteration);
      item.querySelector(".step-head").append(" ", facts([
        event.input_tokens + " in / " + event.output_tokens + " out tokens",
        Math.round(event.latency_ms) + " ms",
        event.finish_reason,
        event.with_tools ? "" : "no tools offered",
      ]));
      payload(item, "Said", event.content);
      if (event.tool_calls.length) {
        payload(item, "Asked for", event.tool_calls.map(
          (call) => call.name + " " + pretty(call.arguments)).join("\n"));
      }
    },
    tool_started(event) {
      const item = toolEntry(event);
      payload(item, "Arguments", event.arguments);
      pending.set(event.call_id, item);
    },
    tool_finished(event) {
      let item = pending.get(event.call_id);
      pending.delete(event.call_id);
      if (!item) item = toolEntry(event);
      // A cancelled call (not run, or stopped with its task) is no failure of the tool.
      const outcome = event.success ? "ok" : event.error_kind === "cancelled" ? "cancelled" : "failed";
      item.classList.add(outcome);
      const state = item.querySelector(".tool-state");
      state.className = "tool-state " + (outcome === "failed" ? "status-error" : "status-" + outcome);
      state.textContent = outcome === "failed" && event.error_kind ? "failed (" + event.error_kind + ")" : outcome;
      item.querySelector(".step-head").append(" ", facts([
        Math.round(event.latency_ms) + " ms",
        event.tokens + " tokens",
        event.truncated ? "truncated for the model" : "",
        event.ran ? "" : "not run: refused by the loop",
      ]));
      payload(item, "Result", event.text);
    },
    fallback(event) {
      const item = entry("fallback", "Fallback to the planner");
      item.querySelector(".step-head").prepend(badge(event.path), " ");
      item.querySelector(".step-head").append(" ", facts([
        event.reason.replace(/_/g, " "), event.tool ? "from " + event.tool : "", "outcome " + event.outcome,
      ]));
      payload(item, "Warnings", event.warnings.join("\n"));
    },
    spiral(event) {
      const item = entry("spiral", "Failure spiral broken");
      item.querySelector(".step-head").append(" ", facts([
        event.tool, event.kind, event.attempts + " attempts", event.error_kind, "resolution " + event.resolution,
      ]));
    },
    tools_discovered(event) {
      const item = entry("tools_discovered", "Tools discovered");
      item.querySelector(".step-head").append(" ", facts([
        event.loaded.length + " new", event.offered.length + " offered now",
      ]));
      payload(item, "Asked for", event.requests.map((r) => (r.server || "") + " / " + r.tool).join("\n"));
      payload(item, "Loaded", event.loaded.join(", "));
      payload(item, "Routing", (event.routing || []).map(routingText).join("\n\n"));
    },
    plan(event) {
      const item = entry("plan", "Plan " + event.attempt);
      if (event.steps.length) {
        const table = el("table", "plan-steps");
        const head = el("tr");
        ["Step", "Tool", "Arguments", "Depends on", "Why"].forEach((h) => head.append(el("th", "", h)));
        table.append(head);
        event.steps.forEach((step) => {
          const row = el("tr");
          row.append(el("td", "", step.id), el("td", "", step.tool));
          const args = el("td");
          args.append(payloadBlock("Arguments of step " + step.id, step.arguments));
          row.append(args, el("td", "", (step.depends_on || []).join(", ")), el("td", "", step.reason));
          table.append(row);
        });
        item.append(table);
      }
      if (event.problems.length) {
        item.classList.add("failed");
        payload(item, "Cannot run", event.problems.join("\n"));
      }
    },
    replan(event) {
      const item = entry("replan", "Replanning: draft " + event.attempt);
      payload(item, "Told the model", event.feedback);
    },
    notice(event) {
      entry("notice", "Note").querySelector(".step-head").append(" ", el("span", "", event.message));
    },
    stopping(event) {
      runState.textContent = event.message;
      entry("notice", "Stopping").querySelector(".step-head").append(" ", el("span", "", event.message));
    },
    final(event) {
      traceLink(event);
      turn.answerBox.hidden = false;
      turn.answer.textContent = event.content || "(no answer)";
      turn.facts.dataset.finishReason = event.finish_reason;
      turn.facts.textContent = [
        event.finished || event.finish_reason,
        event.input_tokens || event.output_tokens
          ? event.input_tokens + " in / " + event.output_tokens + " out model tokens" : "",
      ].filter(Boolean).join(" · ");
      if (event.finish_reason === "cancelled") turn.item.classList.add("stopped");
      // The turn joins the conversation: the next message is sent with it.
      history.push({ role: "user", content: turn.said }, { role: "assistant", content: event.content || "" });
      turn.answered = true;
    },
    error(event) {
      traceLink(event);
      const item = entry("error", "Error");
      item.classList.add("failed");
      item.append(el("p", "status-error", event.message));
      if (event.trace_url) turn.answerBox.hidden = false;
    },
  };

  function show(event) {
    const renderer = render[event.type];
    if (renderer) renderer(event);
    else entry(event.type, event.type);
  }

  // The form and the stream ----------------------------------------------------------------

  function fitModes() {
    const option = agentSelect.options[agentSelect.selectedIndex];
    const hasLlm = option && option.dataset.llm === "yes";
    for (const mode of modeSelect.options) {
      if (mode.dataset.needsLlm === "yes") mode.disabled = !hasLlm;
    }
    if (modeSelect.options[modeSelect.selectedIndex].disabled) modeSelect.value = "planner";
    // A workflow runs its saved steps: it takes no message, so none is asked for.
    const workflow = modeSelect.value === "workflow";
    workflowField.hidden = !workflow;
    messageField.hidden = workflow;
    messageBox.disabled = workflow;
  }

  function showError(message) {
    formError.textContent = message;
    formError.hidden = false;
  }

  // The turns -----------------------------------------------------------------------------

  function sentAs() {
    if (modeSelect.value !== "workflow") return messageBox.value;
    return "Run the workflow " + document.getElementById("id_workflow").value;
  }

  function newTurn(said) {
    const item = turnTemplate.content.firstElementChild.cloneNode(true);
    const number = conversation.querySelectorAll(":scope > li.turn").length + 1;
    const agent = agentSelect.options[agentSelect.selectedIndex].value || "no agent";
    item.querySelector(".turn-title").textContent =
      "Turn " + number + " · " + modeSelect.options[modeSelect.selectedIndex].text + " · " + agent;
    item.querySelector(".turn-message").textContent = said;
    conversation.append(item);
    return {
      item,
      said,
      steps: item.querySelector("ol.transcript"),
      answerBox: item.querySelector("section.answer"),
      answer: item.querySelector(".answer-text"),
      facts: item.querySelector(".answer-facts"),
      traceLink: item.querySelector(".trace-link"),
      traceId: "",
      controller: new AbortController(),
      answered: false,
    };
  }

  // What the next message carries: the newest turns the server accepts (so many messages,
  // so many characters; a JS length counts an emoji twice, so it errs on the safe side).
  function historyToSend() {
    const size = (messages) => messages.reduce((total, m) => total + m.content.length, 0);
    let sent = history.slice(Math.max(0, history.length - maxHistory));
    while (sent.length && size(sent) > maxHistoryChars) sent = sent.slice(2);
    const left = (history.length - sent.length) / 2;
    conversationState.textContent = sent.length
      ? sent.length / 2 + " earlier turn" + (sent.length === 2 ? "" : "s") + " sent with this message" +
        (left ? " (" + left + " older left out)" : "")
      : "";
    return JSON.stringify(sent);
  }

  function running(yes) {
    sendButton.disabled = yes;
    newButton.disabled = yes;
    stopButton.hidden = !yes;
    stopButton.disabled = true; // until the server says which task to stop
    runState.textContent = yes ? "running…" : "";
  }

  async function stop() {
    stopButton.disabled = true;
    runState.textContent = "asking the task to stop…";
    const body = new FormData();
    body.append("trace_id", turn.traceId);
    body.append("csrfmiddlewaretoken", form.querySelector("[name=csrfmiddlewaretoken]").value);
    try {
      const response = await fetch(stopButton.dataset.url, { method: "POST", body, credentials: "same-origin" });
      if (response.status === 202) return; // the stream says when it has stopped
    } catch (error) {
      // fall through: closing the stream stops the task as well
    }
    turn.controller.abort();
  }

  function newConversation() {
    history = [];
    sessionField.value = "";
    conversation.textContent = "";
    conversationState.textContent = "";
    formError.hidden = true;
    messageBox.focus();
  }

  async function readEvents(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trim()).join("\n");
        if (data) show(JSON.parse(data));
      }
    }
  }

  async function send(submitEvent) {
    submitEvent.preventDefault();
    formError.hidden = true;
    historyField.value = historyToSend();
    const body = new FormData(form);
    pending = new Map();
    running(true);
    const current = newTurn(sentAs());
    turn = current;
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body,
        credentials: "same-origin",
        headers: { Accept: "text/event-stream" },
        signal: current.controller.signal,
      });
      const type = response.headers.get("Content-Type") || "";
      if (!response.ok || !type.startsWith("text/event-stream")) {
        let message = "The server answered " + response.status + ".";
        if (type.startsWith("application/json")) message = (await response.json()).error || message;
        else if (response.redirected) message = "Your session has ended: log in again.";
        current.item.remove(); // nothing ran: the message stays in the box to mend and resend
        showError(message);
        return;
      }
      if (modeSelect.value !== "workflow") messageBox.value = "";
      await readEvents(response);
    } catch (error) {
      if (error.name === "AbortError") entry("notice", "Stopped: the stream was closed, which stops the task.");
      else showError("The stream broke off: " + error.message + ". The trace may still be complete.");
    } finally {
      if (current.item.isConnected && !current.answered) {
        current.item.classList.add("unanswered");
        current.item.append(el("p", "range", "No answer: this turn is left out of the conversation."));
      }
      running(false);
    }
  }

  messageBox.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && !sendButton.disabled) {
      form.requestSubmit();
    }
  });
  stopButton.addEventListener("click", stop);
  newButton.addEventListener("click", newConversation);
  agentSelect.addEventListener("change", fitModes);
  modeSelect.addEventListener("change", fitModes);
  form.addEventListener("submit", send);
  fitModes();
})();
