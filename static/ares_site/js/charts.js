// Draw every chart on the page from its JSON figure in the page's theme colours (redrawn
// when the theme changes), and wire the CSV buttons and the log-scale switches.
(function () {
  "use strict";

  // Box and lasso select do nothing on these charts: leave them out of the toolbar.
  var CONFIG = {
    responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"],
  };

  // Charts take the page's colours: no paper of their own (the card shows through), and the
  // text and grid colours of the theme in force, whether the system's setting or the admin's
  // switch (data-theme) chose it. Read from the page's CSS, so there is one palette.
  var TRANSPARENT = "rgba(0,0,0,0)";
  var AXIS = /^[xy]axis\d*$/;

  // Return the layout attributes that colour a chart, as Plotly.relayout takes them.
  function themeColours(layout) {
    var style = getComputedStyle(document.documentElement);
    var fg = style.getPropertyValue("--fg").trim();
    var line = style.getPropertyValue("--line").trim();
    var colours = {
      "paper_bgcolor": TRANSPARENT, "plot_bgcolor": TRANSPARENT, "font.color": fg,
      "modebar.bgcolor": TRANSPARENT, "modebar.color": style.getPropertyValue("--muted").trim(),
      "modebar.activecolor": fg,
      // The "x unified" hover box is drawn in the legend's colour: the card's, not white.
      "legend.bgcolor": style.getPropertyValue("--surface").trim(),
    };
    var axes = Object.keys(layout).filter(function (key) { return AXIS.test(key); });
    ["xaxis", "yaxis"].concat(axes).forEach(function (axis) {
      colours[axis + ".gridcolor"] = line;
      colours[axis + ".linecolor"] = line;
      colours[axis + ".zerolinecolor"] = line;
    });
    return colours;
  }

  // Set the colours in a layout before its first drawing; return them.
  function applyColours(layout) {
    var colours = themeColours(layout);
    Object.keys(colours).forEach(function (path) {
      var parts = path.split(".");
      var node = layout;
      parts.slice(0, -1).forEach(function (part) { node = node[part] = node[part] || {}; });
      node[parts[parts.length - 1]] = colours[path];
    });
    return colours;
  }

  function draw(element) {
    var source = document.getElementById(element.dataset.figure);
    if (!source || !window.Plotly) { return; }
    var figure = JSON.parse(source.textContent);
    var colours = applyColours(figure.layout);
    window.Plotly.newPlot(element, figure.data, figure.layout, CONFIG).then(function () {
      drillDown(element);
      element.dataset.rendered = "true";
      element.dataset.fg = colours["font.color"];  // the text colour it was drawn in
      element.dispatchEvent(new CustomEvent("chart:drawn"));
    });
  }

  // A chart with links per point (data-drill): a click on a point opens its traces. In the
  // "x unified" hover the click names every series at that x: the first one's link is taken.
  function drillDown(element) {
    var source = element.dataset.drill && document.getElementById(element.dataset.drill);
    if (!source) { return; }
    var links = JSON.parse(source.textContent);
    element.on("plotly_click", function (data) {
      var point = data.points && data.points[0];
      if (!point) { return; }
      var index = point.pointIndex !== undefined ? point.pointIndex : point.pointNumber;
      var url = (links[point.curveNumber] || [])[index];
      if (url) { window.location.assign(url); }
    });
  }

  // The theme changed (the system's setting, or data-theme): recolour the drawn charts.
  function recolour() {
    document.querySelectorAll('.plot[data-rendered="true"]').forEach(function (plot) {
      var colours = themeColours(plot.layout);
      window.Plotly.relayout(plot, colours).then(function () {
        plot.dataset.fg = colours["font.color"];
      });
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
  if (window.Plotly) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", recolour);
    new MutationObserver(recolour).observe(document.documentElement, {
      attributes: true, attributeFilter: ["data-theme"],
    });
  }
})();
