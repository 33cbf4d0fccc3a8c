// Draw every chart on the page from its JSON figure, and wire the CSV buttons and the
// log-scale switches.
(function () {
  "use strict";

  // Box and lasso select do nothing on these charts: leave them out of the toolbar.
  var CONFIG = {
    responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"],
  };

  function draw(element) {
    var source = document.getElementById(element.dataset.figure);
    if (!source || !window.Plotly) { return; }
    var figure = JSON.parse(source.textContent);
    window.Plotly.newPlot(element, figure.data, figure.layout, CONFIG).then(function () {
      element.dataset.rendered = "true";
      element.dispatchEvent(new CustomEvent("chart:drawn"));
    });
  }

  // A cell a spreadsheet would run as a formula (OWASP: it starts with = + - @, a tab or a
  // carriage return) gets a leading quote. A number, signed or not, stays a number, and a
  // lone "-" (no value) stays as shown: neither can hold a formula.
  var FORMULA_START = /^[=+\-@\t\r]/;
  var NUMBER = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

  function csvCell(text) {
    if (FORMULA_START.test(text) && !NUMBER.test(text) && text !== "-") { text = "'" + text; }
    return /[",\n\r]/.test(text) ? '"' + text.replace(/"/g, '""') + '"' : text;
  }

  function download(button) {
    var table = document.querySelector("#" + button.dataset.csv + " table");
    var lines = Array.prototype.map.call(table.rows, function (row) {
      return Array.prototype.map.call(row.cells, function (cell) {
        return csvCell(cell.textContent);  // not trimmed: a leading tab is kept, then neutralized
      }).join(",");
    });
    var blob = new Blob([lines.join("\n") + "\n"], { type: "text/csv" });
    var link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = button.dataset.filename;
    link.click();
    URL.revokeObjectURL(link.href);
  }

  // A latency chart's p95 spikes flatten its p50: a log axis shows both.
  function switchScale(input) {
    var plot = document.querySelector("#" + input.dataset.logScale + " .plot");
    if (!plot || !window.Plotly || plot.dataset.rendered !== "true") { return; }
    window.Plotly.relayout(plot, {
      "yaxis.type": input.checked ? "log" : "linear", "yaxis.autorange": true,
    }).then(function () { plot.dataset.scale = input.checked ? "log" : "linear"; });
  }

  document.querySelectorAll(".plot[data-figure]").forEach(draw);
  document.querySelectorAll("button[data-csv]").forEach(function (button) {
    button.addEventListener("click", function () { download(button); });
  });
  document.querySelectorAll("input[data-log-scale]").forEach(function (input) {
    input.addEventListener("change", function () { switchScale(input); });
  });
})();
