// The trace page: one span shown at a time, picked in the span tree, on the waterfall or by
// the address's #span-<id>. Without JavaScript every span is shown, one after the other.
(function () {
  "use strict";

  var panel = document.getElementById("span-detail");
  if (!panel) { return; }
  var sections = panel.querySelectorAll("section.span[data-span]");
  if (!sections.length) { return; }
  document.body.classList.add("picking-spans");

  function select(spanId, scroll) {
    var target = document.getElementById("span-" + spanId);
    if (!target || !panel.contains(target)) { return false; }
    sections.forEach(function (section) { section.hidden = section !== target; });
    document.querySelectorAll("#span-tree a.span-pick").forEach(function (link) {
      var current = link.dataset.span === spanId;
      link.classList.toggle("selected", current);
      if (current) { link.setAttribute("aria-current", "true"); } else { link.removeAttribute("aria-current"); }
    });
    panel.dataset.selected = spanId;
    if (scroll) { target.scrollIntoView({ block: "nearest" }); }
    return true;
  }

  function pick(spanId) {
    if (select(spanId, true) && history.replaceState) {
      history.replaceState(null, "", "#span-" + spanId);
    }
  }

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("#span-tree button.tree-toggle");
    if (toggle) {
      var open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      document.getElementById(toggle.getAttribute("aria-controls")).hidden = !open;
      return;
    }
    var link = event.target.closest("a.span-pick[data-span]");
    if (!link) { return; }
    event.preventDefault();
    pick(link.dataset.span);
  });

  function fromHash() {
    var match = /^#span-(.+)$/.exec(location.hash);
    return match && select(decodeURIComponent(match[1]), true);
  }
  window.addEventListener("hashchange", fromHash);
  if (!fromHash()) { select(sections[0].dataset.span, false); }

  // A waterfall bar carries its span id in customdata[5].
  function wire(plot) {
    plot.on("plotly_click", function (data) {
      var point = data.points && data.points[0];
      if (point && point.customdata) { pick(String(point.customdata[5])); }
    });
  }
  var waterfall = document.querySelector("#waterfall .plot");
  if (waterfall) {
    if (waterfall.dataset.rendered === "true") { wire(waterfall); }
    else { waterfall.addEventListener("chart:drawn", function () { wire(waterfall); }, { once: true }); }
  }
})();
