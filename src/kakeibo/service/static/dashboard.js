// kakeibo budget dashboard: fetches v1/dashboard with the key the user typed and draws, per dataset and
// analyst, the spending curve (inline SVG), the remaining budget and the query history.
// Every text that comes from the service (analyst names, SQL, dataset names) is inserted as a text node,
// never as markup: an analyst's SQL is shown to the administrator.
"use strict";

(() => {
  const KEY = "kakeibo.dashboard.key"; // sessionStorage only: gone when the tab is closed
  const SVG = "http://www.w3.org/2000/svg";

  // -- DOM helpers: attributes are set one by one, children are nodes or strings (text nodes) ----------

  function fill(node, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(name, String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  const html = (tag, attrs, ...children) => fill(document.createElement(tag), attrs, children);
  const svg = (tag, attrs, ...children) => fill(document.createElementNS(SVG, tag), attrs, children);

  // -- formatting ------------------------------------------------------------------------------------

  function num(value, digits = 4) {
    if (value === null || value === undefined) return "–";
    if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString("en-US");
    return String(Number(value.toPrecision(digits)));
  }

  const utc = (iso) => new Date(iso).toISOString().slice(0, 19).replace("T", " ");

  // Time ticks at round UTC times: the first step that leaves at most five ticks on the axis.
  const SECOND = 1e3, MINUTE = 60e3, HOUR = 3600e3, DAY = 86400e3;
  const TIME_STEPS = [1, 2, 5, 10, 15, 30].map((n) => n * SECOND)
    .concat([1, 2, 5, 10, 15, 30].map((n) => n * MINUTE), [1, 2, 3, 6, 12].map((n) => n * HOUR))
    .concat([1, 2, 7, 14, 30, 91, 182, 365].map((n) => n * DAY));

  function timeTicks(t0, t1) {
    const step = TIME_STEPS.find((s) => (t1 - t0) / s <= 5) ?? TIME_STEPS[TIME_STEPS.length - 1];
    const ticks = [];
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) ticks.push(t);
    const text = (t) => new Date(t).toISOString();
    if (step < MINUTE) return ticks.map((t) => [t, text(t).slice(11, 19)]); // hh:mm:ss
    if (step < DAY) return ticks.map((t) => [t, text(t).slice(11, 16)]); // hh:mm
    return ticks.map((t) => [t, text(t).slice(0, 10)]); // YYYY-MM-DD
  }

  function niceStep(range, count) {
    const raw = range / count;
    const power = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 2.5, 5, 10].find((m) => m * power >= raw) * power;
  }

  function share(remaining, budget) {
    if (remaining === null || budget === null || !(budget > 0)) return null;
    return Math.max(0, Math.min(1, 1 - remaining / budget));
  }

  function bar(spentShare) {
    const track = html("div", { class: "bar", role: "presentation" });
    if (spentShare === null) return track;
    track.title = `${Math.round(100 * spentShare)}% of the budget spent`;
    if (spentShare >= 1) track.classList.add("out");
    else if (spentShare >= 0.8) track.classList.add("low");
    const part = html("div", { class: "fill" });
    part.style.width = `${(100 * spentShare).toFixed(1)}%`; // CSSOM: allowed by the page's CSP
    track.append(part);
    return track;
  }

  // -- the chart: cumulative epsilon spent over time, the budget as a dashed line -------------------------

  function chart(analyst, dataset) {
    const W = 460, H = 240, left = 42, right = 14, top = 14, bottom = 26;
    const plotW = W - left - right, plotH = H - top - bottom;
    const budget = analyst.budget ? analyst.budget.epsilon : null;
    const points = analyst.series.map((p) => ({ t: Date.parse(p.time), e: p.epsilon ?? 0 }));
    const root = svg("svg", {
      class: "chart",
      viewBox: `0 0 ${W} ${H}`,
      role: "img",
      "data-dataset": dataset,
      "data-analyst": analyst.name,
      "aria-label": `Epsilon spent over time by ${analyst.name} on ${dataset}`,
    });

    const highest = Math.max(budget ?? 0, ...points.map((p) => p.e), 0);
    const step = niceStep(highest > 0 ? highest * 1.08 : 1, 4);
    const yMax = Math.ceil((highest > 0 ? highest * 1.08 : 1) / step) * step;
    const y = (e) => top + plotH * (1 - e / yMax);

    // the time axis: the queries' span, at least ten seconds (centred on them), plus a margin
    const first = points.length ? points[0].t : Date.now();
    const last = points.length ? points[points.length - 1].t : first;
    const middle = (first + last) / 2, half = Math.max(last - first, 10 * SECOND) / 2;
    const t0 = middle - 1.08 * half, t1 = middle + 1.08 * half;
    const x = (t) => left + (plotW * (t - t0)) / (t1 - t0);

    for (let v = 0; v <= yMax + step / 2; v += step) {
      root.append(svg("line", { class: "grid", x1: left, x2: W - right, y1: y(v), y2: y(v) }));
      root.append(svg("text", { class: "tick", x: left - 6, y: y(v) + 4, "text-anchor": "end" }, num(v, 3)));
    }
    root.append(svg("line", { class: "axis", x1: left, x2: W - right, y1: y(0), y2: y(0) }));
    for (const [t, label] of timeTicks(t0, t1)) {
      if (x(t) < 26 || x(t) > W - 26) continue; // its label would be cut off by the edge
      root.append(svg("line", { class: "axis", x1: x(t), x2: x(t), y1: y(0), y2: y(0) + 4 }));
      root.append(svg("text", { class: "tick", x: x(t), y: y(0) + 17, "text-anchor": "middle" }, label));
    }

    if (points.length) {
      let line = `M ${x(t0)} ${y(0)}`;
      for (const p of points) line += ` H ${x(p.t)} V ${y(p.e)}`;
      line += ` H ${x(t1)}`;
      root.append(svg("path", { class: "series-area", d: `${line} V ${y(0)} Z` }));
      root.append(svg("path", { class: "series-line", d: line }));
      analyst.history.forEach((row, i) => {
        const p = points[i];
        root.append(
          svg("circle", { class: "series-point", cx: x(p.t), cy: y(p.e), r: 3.5 },
            svg("title", {}, `#${row.entry}  ε ${num(row.epsilon)} → ${num(p.e)} spent\n${row.sql}`)),
        );
      });
    } else {
      root.append(svg("text", { class: "empty", x: left + plotW / 2, y: top + plotH / 2, "text-anchor": "middle" }, "no queries yet"));
    }
    if (budget !== null) {
      root.append(svg("line", { class: "budget-line", x1: left, x2: W - right, y1: y(budget), y2: y(budget) }));
      root.append(svg("text", { class: "budget-label", x: W - right - 2, y: y(budget) - 5, "text-anchor": "end" }, `budget ε ${num(budget)}`));
    }
    return root;
  }

  // -- the history table --------------------------------------------------------------------------------

  function intervals(row) {
    if (row.intervals === null) return html("span", { class: "ci-missing", title: "no release stored" }, "–");
    const cell = html("div", { class: "cis" });
    for (const ci of row.intervals) {
      cell.append(
        html("span", { class: "ci", "data-aggregate": ci.aggregate },
          html("span", { class: "agg" }, ci.aggregate),
          num(ci.median_width, 3),
          ci.groups === 1 ? null : html("span", { class: "groups" }, `${ci.groups} groups`)),
      );
    }
    return cell;
  }

  function history(analyst) {
    const body = html("tbody");
    for (const row of analyst.history) {
      const epsilon = row.delta ? `${num(row.epsilon)} (δ ${num(row.delta, 2)})` : num(row.epsilon);
      body.append(
        html("tr", { class: "history-row", "data-entry": row.entry },
          html("td", { class: "num" }, String(row.entry)),
          html("td", { class: "when" }, utc(row.time)),
          html("td", { class: "sql" }, html("code", {}, row.sql)),
          html("td", { class: "num epsilon" }, epsilon),
          html("td", { class: "widths" }, intervals(row))),
      );
    }
    if (!analyst.history.length) {
      body.append(html("tr", {}, html("td", { class: "none", colspan: 5 }, "No queries yet.")));
    }
    return html("table", { class: "history" },
      html("thead", {},
        html("tr", {},
          html("th", { class: "num" }, "entry"),
          html("th", {}, "time (UTC)"),
          html("th", {}, "SQL"),
          html("th", { class: "num" }, "ε"),
          html("th", { title: "median over groups" }, "95% CI width"))),
      body);
  }

  // -- one card per (dataset, analyst), one section per dataset ---------------------------------------

  function analystCard(analyst, dataset) {
    const remaining = analyst.remaining ? analyst.remaining.epsilon : null;
    const budget = analyst.budget ? analyst.budget.epsilon : null;
    const head = html("header", { class: "analyst-head" },
      html("h3", {}, html("span", { class: "kind" }, "analyst"), analyst.name,
        analyst.revoked ? html("span", { class: "badge" }, "key revoked") : null),
      html("div", { class: "remaining" },
        html("span", {}, "ε remaining "),
        html("span", { class: "remaining-value", "data-epsilon": remaining }, num(remaining)),
        html("span", {}, budget === null ? " (no budget)" : ` of ${num(budget)}`),
        bar(share(remaining, budget))));
    const figure = html("figure", { class: "chart-box" },
      chart(analyst, dataset),
      html("figcaption", { class: "legend" },
        html("span", { class: "key" }, "ε spent"),
        budget === null ? null : html("span", { class: "key budget" }, "budget"),
        html("span", { class: "note" }, "time in UTC")));
    return html("article", { class: "analyst", "data-dataset": dataset, "data-analyst": analyst.name },
      head,
      html("div", { class: "analyst-body" }, figure, html("div", { class: "history-box" }, history(analyst))));
  }

  function total(label, value, cls) {
    return html("div", { class: `total ${cls}` },
      html("span", { class: "label" }, label),
      html("span", { class: "value", "data-epsilon": value }, num(value)));
  }

  function datasetSection(ds) {
    const budget = ds.budget ? ds.budget.epsilon : null;
    const remaining = ds.remaining ? ds.remaining.epsilon : null;
    const section = html("section", { class: "dataset", "data-dataset": ds.name },
      html("div", { class: "dataset-head" },
        html("h2", {}, html("span", { class: "kind" }, "dataset"), ds.name),
        html("div", { class: "totals" },
          bar(share(remaining, budget)),
          total("dataset budget ε", budget, "dataset-budget"),
          total("spent", ds.spent.epsilon, "dataset-spent"),
          total("remaining", remaining, "dataset-remaining"))));
    for (const analyst of ds.analysts) section.append(analystCard(analyst, ds.name));
    if (!ds.analysts.length) section.append(html("p", { class: "empty-note" }, "No analyst has access yet."));
    return section;
  }

  // -- loading ------------------------------------------------------------------------------------------

  function status(text, isError = false) {
    const el = document.getElementById("status");
    el.textContent = text;
    el.classList.toggle("error", isError);
  }

  function render(data) {
    const viewer = document.getElementById("viewer");
    viewer.replaceChildren(
      ...(data.viewer.role === "admin"
        ? ["Signed in as ", html("strong", {}, "administrator"), ": every analyst on every dataset."]
        : ["Signed in as analyst ", html("strong", {}, data.viewer.name), "."]),
    );
    const root = document.getElementById("datasets");
    root.replaceChildren(...data.datasets.map(datasetSection));
    status(data.datasets.length ? "" : "No dataset is granted to this key.");
  }

  let latest = 0; // only the last load started may draw (a key entered while another loads wins)

  async function load(key) {
    const mine = ++latest;
    document.body.dataset.state = "loading";
    status("Loading…");
    try {
      const response = await fetch("v1/dashboard", {
        headers: { Authorization: `Bearer ${key}` },
        cache: "no-store",
        credentials: "omit",
      });
      const data = response.ok ? await response.json() : null;
      if (mine !== latest) return;
      if (response.status === 401) {
        sessionStorage.removeItem(KEY);
        document.getElementById("datasets").replaceChildren();
        document.getElementById("viewer").replaceChildren();
        status("That key is missing, invalid or revoked.", true);
        document.body.dataset.state = "denied";
        return;
      }
      if (!response.ok) throw new Error(`the service answered ${response.status}`);
      render(data);
      document.body.dataset.state = "ready";
    } catch (error) {
      if (mine !== latest) return;
      status(`Could not load the dashboard: ${error.message}.`, true);
      document.body.dataset.state = "error";
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("key-form");
    const input = document.getElementById("api-key");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      input.value = "";
      load(key);
    });
    document.getElementById("forget").addEventListener("click", () => {
      latest += 1; // a load still under way must not draw
      sessionStorage.removeItem(KEY);
      document.getElementById("datasets").replaceChildren();
      document.getElementById("viewer").replaceChildren();
      status("Key forgotten.");
      document.body.dataset.state = "idle";
    });
    const stored = sessionStorage.getItem(KEY);
    if (stored) load(stored);
  });
})();
