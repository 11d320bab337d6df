// The leaderboard page's one script (admitted by hash in its Content-Security-Policy).
// Sorting: a click on a header sorts its table by that column (numbers by data-v, NaN last; text by content), a
// second click reverses. Filters: the experiment and model-size selects hide the rows and tables that do not match.
// The URL hash sets both on load: #sort=<column key>[:asc|:desc]&model=<size>&experiment=<name>.
(function () {
  "use strict";
  function key(td, numeric) {
    if (!numeric) { return td.textContent.trim().toLowerCase(); }
    var v = parseFloat(td.getAttribute("data-v"));
    return isNaN(v) ? null : v;
  }
  function sortTable(table, index, dir) {
    var ths = table.tHead.rows[0].cells, numeric = ths[index].getAttribute("data-type") === "num";
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[index], numeric), y = key(b.cells[index], numeric);
      if (x === y) { return 0; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      return (x < y ? -1 : 1) * (dir === "descending" ? -1 : 1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
    for (var i = 0; i < ths.length; i++) { ths[i].setAttribute("aria-sort", i === index ? dir : "none"); }
  }
  function each(selector, fn) { Array.prototype.forEach.call(document.querySelectorAll(selector), fn); }
  function hashValue(name) {
    var m = new RegExp("(?:^#|&)" + name + "=([^&]*)").exec(window.location.hash);
    return m ? decodeURIComponent(m[1]) : null;
  }
  function applyFilters() {
    var model = document.getElementById("filter-model"), experiment = document.getElementById("filter-experiment");
    var wantModel = model ? model.value : "", wantExperiment = experiment ? experiment.value : "";
    each("section.board", function (section) {
      var shown = 0;
      Array.prototype.forEach.call(section.querySelectorAll("tbody tr"), function (tr) {
        var ok = !wantExperiment || tr.getAttribute("data-experiment") === wantExperiment;
        tr.hidden = !ok;
        shown += ok ? 1 : 0;
      });
      section.hidden = (wantModel && section.getAttribute("data-model") !== wantModel) || shown === 0;
    });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      var button = th.querySelector("button");
      if (!button) { return; }
      button.addEventListener("click", function () {
        var now = th.getAttribute("aria-sort");
        var first = th.getAttribute("data-type") === "num" ? "descending" : "ascending";
        var flip = now === "descending" ? "ascending" : "descending";
        sortTable(table, index, now === "none" || !now ? first : flip);
      });
    });
  });
  each("select[data-filter]", function (select) {
    var want = hashValue(select.getAttribute("data-filter"));
    if (want !== null) { select.value = want; }
    select.addEventListener("change", applyFilters);
  });
  applyFilters();
  var sort = /^([^:]+)(?::(asc|desc))?$/.exec(hashValue("sort") || "");
  if (sort) {
    var dir = sort[2] === "asc" ? "ascending" : "descending";
    Array.prototype.forEach.call(tables, function (table) {
      var ths = table.tHead.rows[0].cells;
      for (var i = 0; i < ths.length; i++) {
        if (ths[i].getAttribute("data-key") === sort[1]) { sortTable(table, i, dir); }
      }
    });
  }
  document.documentElement.setAttribute("data-sortable", "ready");
})();
