// Scoring a sandbox answer: thumbs up or down (the "feedback" score) on its turn's trace,
// sent to POST /api/v1/scores with the staff session (and its CSRF token). Every turn has
// its own answer and trace, so one listener on the conversation serves them all.
(function () {
  "use strict";
  const conversation = document.getElementById("transcript");
  if (!conversation) return;

  function csrfToken() {
    const field = document.querySelector("[name=csrfmiddlewaretoken]");
    if (field) return field.value;
    const cookie = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
    return cookie ? decodeURIComponent(cookie.split("=")[1]) : "";
  }

  function traceId(turn) {
    const href = turn.querySelector(".trace-link").getAttribute("href") || "";
    const match = href.match(/\/traces\/([0-9a-f]{32})\//);
    return match ? match[1] : "";
  }

  async function send(turn, value) {
    const status = turn.querySelector(".score-status");
    const comment = turn.querySelector(".score-comment");
    const trace = traceId(turn);
    if (!trace) {
      status.textContent = "This answer has no trace to score.";
      return;
    }
    status.textContent = "Sending…";
    const body = {scores: [{name: "feedback", value: value, source: "human", trace_id: trace,
                            comment: comment.value}]};
    try {
      const response = await fetch("/api/v1/scores", {
        method: "POST",
        credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrfToken()},
        body: JSON.stringify(body),
      });
      const answer = await response.json();
      const item = (answer.items || [])[0];
      if (item && item.status !== "rejected") {
        status.textContent = "Scored: thumbs " + (value ? "up" : "down") + ".";
      } else {
        const reasons = item ? item.errors.map((e) => e.field + ": " + e.reason) : [answer.detail];
        status.textContent = "Not stored: " + reasons.join("; ");
      }
    } catch (error) {
      status.textContent = "Not stored: " + error;
    }
  }

  conversation.addEventListener("click", (event) => {
    const button = event.target.closest(".score-thumbs button[data-value]");
    if (button) send(button.closest("li.turn"), button.dataset.value === "true");
  });
})();
