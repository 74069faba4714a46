/* Sortable tables: in every <table class="sortable">, click a header cell (or focus it and press
 * Enter or Space) to sort the rows by that column; again to reverse. Numbers sort as numbers (the
 * first number of the cell, so "45.3 [40.1, 50.2]" sorts by 45.3; a data-sort attribute on a cell
 * wins), other cells as text; empty, "n/a" and "–" cells go last. The header row is the first row
 * (or the <thead>); rows marked class="sort-fixed" (e.g. a human-ceiling row) stay at the bottom.
 * The sorted header carries aria-sort="ascending" | "descending". */
(function () {
  "use strict";
  const NUMBER = /[-+\u2212]?\d+(?:\.\d+)?(?:e[-+]?\d+)?/i;

  function key(cell) {
    if (!cell) return { empty: true };
    const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    if (raw === "" || raw === "n/a" || raw === "\u2013" || raw === "-") return { empty: true };
    const m = raw.match(NUMBER);
    if (m && raw.indexOf(m[0]) <= 1) return { num: parseFloat(m[0].replace("\u2212", "-")) };
    return { text: raw.toLowerCase() };
  }

  function compare(a, b) {
    if (a.empty || b.empty) return (a.empty ? 1 : 0) - (b.empty ? 1 : 0);
    if (a.num !== undefined && b.num !== undefined) return a.num - b.num;
    if (a.num !== undefined) return -1;
    if (b.num !== undefined) return 1;
    return a.text.localeCompare(b.text);
  }

  function setup(table) {
    const headRow = table.tHead ? table.tHead.rows[0] : table.rows[0];
    if (!headRow) return;
    const body = headRow.parentElement.tagName === "THEAD" ? table.tBodies[0] : headRow.parentElement;
    Array.from(headRow.cells).forEach(function (th, index) {
      th.tabIndex = 0;
      th.classList.add("sort-header");
      th.title = th.title || "sort by this column";
      const sort = function (event) {
        if (event.target.closest("a, button, input, select")) return;  // a link in a header still works
        const ascending = th.getAttribute("aria-sort") !== "ascending";
        const rows = Array.from(body.rows).filter((r) => r !== headRow);
        const fixed = rows.filter((r) => r.classList.contains("sort-fixed"));
        const moving = rows.filter((r) => !r.classList.contains("sort-fixed"))
          .map((r, i) => ({ r: r, k: key(r.cells[index]), i: i }));
        moving.sort(function (x, y) {
          if (x.k.empty !== y.k.empty) return x.k.empty ? 1 : -1;  // blanks last either way
          const c = compare(x.k, y.k);
          return (ascending ? c : -c) || x.i - y.i;
        });
        for (const m of moving) body.appendChild(m.r);
        for (const r of fixed) body.appendChild(r);
        for (const other of headRow.cells) other.removeAttribute("aria-sort");
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sort(event); }
      });
    });
  }

  function start() { document.querySelectorAll("table.sortable").forEach(setup); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
