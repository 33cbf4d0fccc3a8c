// Scoring a sandbox answer: thumbs up or down (the "feedback" score) on the answer's trace,
// sent to POST /api/v1/scores with the staff session (and its CSRF token).
(function () {
  "use strict";
  const box = document.getElementById("answer-score");
  if (!box) return;
  const status = document.getElementById("answer-score-status");
  const comment = document.getElementById("answer-score-comment");

  function csrfToken() {
    const field = document.querySelector("[name=csrfmiddlewaretoken]");
    if (field) return field.value;
    const cookie = document.cookie.split("; ").find((c) => c.startsWith("csrftoken="));
    return cookie ? decodeURIComponent(cookie.split("=")[1]) : "";
  }

  function traceId() {
    const href = document.getElementById("trace-link").getAttribute("href") || "";
    const match = href.match(/\/traces\/([0-9a-f]{32})\//);
    return match ? match[1] : "";
  }

  async function send(value) {
    const trace = traceId();
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

  box.querySelectorAll("button[data-value]").forEach((button) => {
    button.addEventListener("click", () => send(button.dataset.value === "true"));
  });
})();
