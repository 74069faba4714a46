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
 * - fitSpec: the chart fits the width its box has (a phone's 390 px as a desktop's grid cell): the
 *   title and subtitle are broken into lines that fit beside the "..." menu instead of being cut,
 *   several legends below the plot stack vertically (side by side they would squeeze the plot, which
 *   autosize "fit" narrows by whatever sticks out) and a legend label is cut only where the box ends.
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

  const measure = document.createElement("canvas").getContext("2d");

  /* ``text`` (a string or an array of lines) broken at spaces into lines at most ``width`` px wide in ``font``. */
  function wrap(text, font, width) {
    measure.font = font;
    const lines = [];
    for (const paragraph of [].concat(text)) {
      let line = "";
      for (const word of String(paragraph).split(" ")) {
        const candidate = line ? line + " " + word : word;
        if (line && measure.measureText(candidate).width > width) {
          lines.push(line);
          line = word;
        } else {
          line = candidate;
        }
      }
      lines.push(line);
    }
    return lines.length === 1 ? lines[0] : lines;
  }

  const MENU = 40;  // px at the top right taken by vega-embed's "..." menu (over the chart, not beside it)

  /* The spec made to fit ``width`` px (the chart's box): wrapped title and subtitle, stacked legends. */
  function fitSpec(spec, width) {
    const title = spec.title;
    if (title && typeof title === "object") {
      const room = Math.max(120, width - MENU);
      const size = title.fontSize || 13;
      spec.title = Object.assign({}, title, {
        text: wrap(title.text, `bold ${size}px sans-serif`, room),
        limit: room,
      });
      if (title.subtitle) {
        spec.title.subtitle = wrap(title.subtitle, `${title.subtitleFontSize || 11}px sans-serif`, room);
        spec.title.subtitleFontSize = title.subtitleFontSize || 11;
      }
    }
    const config = Object.assign({}, spec.config);
    config.legend = Object.assign({
      layout: { bottom: { anchor: "start", direction: "vertical", margin: 6 } },
    }, config.legend);
    spec.config = config;
    for (const layer of spec.layer || [spec]) {  // a legend label may use the box's width, not more
      for (const channel of Object.values(layer.encoding || {})) {
        const legend = channel && channel.legend;
        if (legend && typeof legend === "object" && legend.labelLimit > width - 60) {
          channel.legend = Object.assign({}, legend, { labelLimit: Math.max(100, width - 60) });
        }
      }
    }
    return spec;
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
    const box = el.querySelector(".chart-view") || el;
    box.textContent = "";
    box.className = "chart-view";
    const spec = fitSpec(await response.json(), box.clientWidth);
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
