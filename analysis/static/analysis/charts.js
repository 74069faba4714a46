/* Interactive charts: every element with data-vega-spec="URL" gets the Vega-Lite chart that URL
 * answers (a JSON spec built on the server from a stored report, see analysis/chart_views.py),
 * drawn by the vendored vega-embed (static/analysis/vendor/, no CDN).
 *
 * - 202 (report being computed): the element says so and asks again after Retry-After seconds;
 *   likewise 503 or 429 with Retry-After (the server computes as many reports as it may at once, or
 *   the report rate limit: analysis/limits.py).
 * - Large data (more than 1000 marks) is drawn on a canvas, small charts as SVG.
 * - vega-embed's menu exports the chart as PNG or SVG; the editor/source actions (which would
 *   open an external site) are off.
 * - Each drawn element gets data-ready="1" and el.vegaView (the Vega view, for tests and the
 *   console); window.captionevalCharts maps element ids to views.
 * - spec.usermeta.n / n_shown fill the element's ".chart-note" ("showing N of M captions").
 */
(function () {
  "use strict";
  const views = (window.captionevalCharts = window.captionevalCharts || {});

  function countMarks(spec) {
    let n = 0;
    for (const layer of spec.layer || [spec]) {
      if (layer.data && Array.isArray(layer.data.values)) n += layer.data.values.length;
    }
    if (spec.data && Array.isArray(spec.data.values)) n += spec.data.values.length;
    return n;
  }

  function say(el, text, cls) {
    const box = el.querySelector(".chart-view") || el;
    box.textContent = text;
    if (cls) box.className = "chart-view " + cls;
  }

  function note(el, spec) {
    const meta = spec.usermeta || {};
    const target = el.querySelector(".chart-note");
    if (!target) return;
    if (meta.kind === "scatter") {
      target.textContent = meta.n_shown < meta.n
        ? `showing ${meta.n_shown.toLocaleString("en")} of ${meta.n.toLocaleString("en")} captions (a random sample; the grey cells count every caption)`
        : `${meta.n.toLocaleString("en")} captions; hover a point for the caption, its references and scores`;
    } else if (meta.kind === "leaderboard-pvalues") {
      target.textContent = `${meta.systems.length} systems; * = p < ${meta.alpha}; hover a cell for the difference and its interval`;
    }  // a bar chart's note (where the ceiling is) is its subtitle; a leaderboard interval chart's too
  }

  async function draw(el) {
    const url = el.dataset.vegaSpec;
    let response;
    try {
      response = await fetch(url, { headers: { Accept: "application/json" } });
    } catch (err) {
      say(el, "The chart could not be loaded: " + err, "chart-error");
      return;
    }
    const busy = (response.status === 503 || response.status === 429) && response.headers.get("Retry-After");
    if (response.status === 202 || busy) {
      const wait = parseInt(response.headers.get("Retry-After") || "2", 10);
      say(el, busy ? `The server is busy; this chart is asked for again in ${wait} s.`
        : "The report behind this chart is being computed; it appears here when done.", "chart-wait");
      setTimeout(() => draw(el), Math.max(1, wait) * 1000);
      return;
    }
    if (!response.ok) {
      const body = await response.text();
      let message;
      try { message = JSON.parse(body).problem; } catch (e) { message = null; }
      say(el, "No chart: " + (message || body.replace(/<[^>]*>/g, " ").trim()).slice(0, 300), "chart-error");
      return;
    }
    const spec = await response.json();
    const box = el.querySelector(".chart-view") || el;
    box.textContent = "";
    box.className = "chart-view";
    const renderer = el.dataset.renderer || (countMarks(spec) > 1000 ? "canvas" : "svg");
    const result = await window.vegaEmbed(box, spec, {
      renderer: renderer,
      actions: { export: true, source: false, compiled: false, editor: false },
      downloadFileName: el.dataset.filename || "chart",
      scaleFactor: { png: 2 },
      tooltip: { theme: "light" },
    });
    el.vegaView = result.view;
    if (el.id) views[el.id] = result.view;
    note(el, spec);
    el.dataset.renderer = renderer;
    el.dataset.ready = "1";
  }

  function start() {
    if (!window.vegaEmbed) {
      for (const el of document.querySelectorAll("[data-vega-spec]")) say(el, "The chart library did not load.", "chart-error");
      return;
    }
    for (const el of document.querySelectorAll("[data-vega-spec]")) draw(el);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
