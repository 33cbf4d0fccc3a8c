// The time range follows the operator from page to page: the range a page shows (its range
// picker's data-range-query) is remembered for this tab, and the top menu's links to the
// pages that read a range, plus any link marked data-keep-range, carry it. Linked on every
// page by base.html: a page without a picker (the sandbox, Try the planner, Backtest) only
// rewrites those links, and leaves them alone when no range was chosen in this tab.
(function () {
  "use strict";

  var KEY = "ares.range";
  var RANGE_PAGES = ["/", "/traces/", "/tools/", "/spirals/", "/evidence/"];
  var RANGE_PARAMS = ["range", "since", "until"];

  var picker = document.querySelector("form.range-picker[data-range-query]");
  var query = picker ? picker.dataset.rangeQuery : null;
  try {
    if (query) { sessionStorage.setItem(KEY, query); } else { query = sessionStorage.getItem(KEY); }
  } catch (error) { /* storage refused (private mode): the links keep their own range */ }
  if (!query) { return; }
  var range = new URLSearchParams(query);

  function carry(link) {
    var url = new URL(link.href, location.href);
    if (url.origin !== location.origin) { return; }
    RANGE_PARAMS.forEach(function (name) { url.searchParams.delete(name); });
    range.forEach(function (value, name) { url.searchParams.set(name, value); });
    link.href = url.pathname + url.search + url.hash;
  }

  document.querySelectorAll("header a[href]").forEach(function (link) {
    var url = new URL(link.href, location.href);
    if (url.origin === location.origin && RANGE_PAGES.indexOf(url.pathname) !== -1) { carry(link); }
  });
  document.querySelectorAll("a[data-keep-range]").forEach(function (link) {
    var url = new URL(link.href, location.href);
    var has = RANGE_PARAMS.some(function (name) { return url.searchParams.has(name); });
    if (!has) { carry(link); }
  });
})();
