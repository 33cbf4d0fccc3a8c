// Draw every chart on the page from its JSON figure, and wire the CSV buttons.
(function () {
  "use strict";

  function draw(element) {
    var source = document.getElementById(element.dataset.figure);
    if (!source || !window.Plotly) { return; }
    var figure = JSON.parse(source.textContent);
    window.Plotly.newPlot(element, figure.data, figure.layout, {
      responsive: true, displaylogo: false,
    }).then(function () { element.dataset.rendered = "true"; });
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

  document.querySelectorAll(".plot[data-figure]").forEach(draw);
  document.querySelectorAll("button[data-csv]").forEach(function (button) {
    button.addEventListener("click", function () { download(button); });
  });
})();
