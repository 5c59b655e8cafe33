"use strict";
// SVG chart helpers for the edge-sdk dashboard: no library and no network, so the exported page works
// offline. Text from the database only ever goes through textContent/setAttribute (never innerHTML).

// The SVG namespace, taken from the HTML parser so that no URL needs to appear in the page.
const SVG_NS = (() => { const d = document.createElement("div"); d.innerHTML = "<svg></svg>"; return d.firstChild.namespaceURI; })();

const PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#444444"];
const KIND_COLOR = { conv: "#0072B2", glue: "#E69F00", outside: "#9A9A9A" };
const LABEL_W = 250, RIGHT_PAD = 90, WIDTH = 900;

function tickFmt(t) {
  if (t !== 0 && (Math.abs(t) >= 1e5 || Math.abs(t) < 1e-3)) return t.toExponential(0);
  return String(+t.toPrecision(6));
}

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function h(tag, attrs, parent, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function fmt(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "–";
  const a = Math.abs(x);
  if (a >= 1000) return x.toFixed(0);
  if (a >= 100) return x.toFixed(1);
  if (a >= 10) return x.toFixed(2);
  if (a >= 0.01 || a === 0) return x.toFixed(3);
  return x.toExponential(1);
}

// Data attributes on every mark: the test counts them and matches them to the database rows.
function tag(mark, chart, data) {
  mark.setAttribute("data-chart", chart);
  for (const [k, v] of Object.entries(data)) {
    if (v !== undefined && v !== null && typeof v !== "object") mark.setAttribute("data-" + k.replace(/_/g, "-"), String(v));
  }
  return mark;
}

function linearScale(lo, hi, a, b) {
  const step = niceStep((hi - lo) / 5);
  const top = Math.ceil(hi / step) * step || 1, bottom = Math.floor(lo / step) * step;
  const f = (x) => a + (x - bottom) / (top - bottom) * (b - a);
  f.ticks = () => { const t = []; for (let v = bottom; v <= top + step / 2; v += step) t.push(+v.toPrecision(12)); return t; };
  f.domain = [bottom, top];
  return f;
}

function niceStep(raw) {
  const p = Math.pow(10, Math.floor(Math.log10(raw || 1)));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

function logScale(lo, hi, a, b) {
  const l0 = Math.floor(Math.log10(lo)), l1 = Math.ceil(Math.log10(hi));
  const top = l1 === l0 ? l0 + 1 : l1;
  const f = (x) => a + (Math.log10(x) - l0) / (top - l0) * (b - a);
  f.ticks = () => { const t = []; for (let e = l0; e <= top; e++) t.push(Math.pow(10, e)); return t; };
  f.domain = [Math.pow(10, l0), Math.pow(10, top)];
  return f;
}

function svgRoot(parent, height, label) {
  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${height}`, role: "img", "aria-label": label, class: "chart" }, parent);
  el("title", {}, svg, label);
  return svg;
}

function xAxis(svg, scale, y0, y1, label, fmtTick) {
  for (const t of scale.ticks()) {
    const x = scale(t);
    el("line", { x1: x, x2: x, y1: y0, y2: y1, class: "grid" }, svg);
    el("text", { x, y: y1 + 16, class: "tick", "text-anchor": "middle" }, svg, (fmtTick || tickFmt)(t));
  }
  el("text", { x: (scale(scale.domain[0]) + scale(scale.domain[1])) / 2, y: y1 + 36, class: "axis-label",
    "text-anchor": "middle" }, svg, label);
}

function yAxis(svg, scale, x0, x1, label, fmtTick) {
  for (const t of scale.ticks()) {
    const y = scale(t);
    el("line", { x1: x0, x2: x1, y1: y, y2: y, class: "grid" }, svg);
    el("text", { x: x0 - 6, y: y + 4, class: "tick", "text-anchor": "end" }, svg, (fmtTick || tickFmt)(t));
  }
  const ym = (scale(scale.domain[0]) + scale(scale.domain[1])) / 2;
  el("text", { x: 16, y: ym, class: "axis-label", "text-anchor": "middle", transform: `rotate(-90 16 ${ym})` }, svg, label);
}

// A legend as HTML under the chart (wraps, and screen readers read it as a list).
function legend(parent, items) {
  const ul = h("ul", { class: "legend" }, parent);
  for (const it of items) {
    const li = h("li", {}, ul);
    h("span", { class: "swatch " + (it.shape || "box"), style: `--c:${it.color}` }, li);
    li.appendChild(document.createTextNode(it.label));
  }
  return ul;
}

function note(parent, text) { return h("p", { class: "note" }, parent, text); }

// Horizontal bars grouped under headings. rows: {group, label, value, color, chart, data, tip, text,
// lo, hi (thick whisker), min, max (thin whisker)}; opts: {title, xLabel, ref (a reference value)}.
function hbarChart(parent, rows, opts) {
  const groups = [];
  for (const r of rows) {
    if (!groups.length || groups[groups.length - 1].name !== r.group) groups.push({ name: r.group, rows: [] });
    groups[groups.length - 1].rows.push(r);
  }
  const BAR = 18, GAP = 5, HEAD = 22, TOP = 10;
  const height = TOP + groups.length * HEAD + rows.length * (BAR + GAP) + 50;
  const svg = svgRoot(parent, height, opts.title);
  const hi = Math.max(...rows.map((r) => Math.max(r.value, r.max ?? 0, r.hi ?? 0)), opts.ref ?? 0);
  const x = linearScale(0, hi, LABEL_W, WIDTH - RIGHT_PAD);
  const yEnd = height - 44;
  xAxis(svg, x, TOP, yEnd, opts.xLabel);
  let y = TOP;
  for (const g of groups) {
    el("text", { x: 8, y: y + 15, class: "group-label" }, svg, g.name);
    y += HEAD;
    for (const r of g.rows) {
      el("text", { x: LABEL_W - 8, y: y + BAR - 5, class: "bar-label", "text-anchor": "end" }, svg, r.label);
      const bar = el("rect", { x: x(0), y, width: Math.max(1, x(r.value) - x(0)), height: BAR, fill: r.color,
        class: r.cls ? `mark ${r.cls}` : "mark" }, svg);
      tag(bar, r.chart, r.data);
      el("title", {}, bar, r.tip);
      const cy = y + BAR / 2;
      if (r.min != null && r.max != null) {
        el("line", { x1: x(r.min), x2: x(r.max), y1: cy, y2: cy, class: "whisker-thin" }, svg);
        for (const v of [r.min, r.max]) el("line", { x1: x(v), x2: x(v), y1: cy - 4, y2: cy + 4, class: "whisker-thin" }, svg);
      }
      if (r.lo != null && r.hi != null) {
        el("line", { x1: x(r.lo), x2: x(r.hi), y1: cy, y2: cy, class: "whisker" }, svg);
        for (const v of [r.lo, r.hi]) el("line", { x1: x(v), x2: x(v), y1: cy - 7, y2: cy + 7, class: "whisker" }, svg);
      }
      el("text", { x: x(Math.max(r.value, r.max ?? 0, r.hi ?? 0)) + 6, y: y + BAR - 5, class: "value" }, svg, r.text);
      y += BAR + GAP;
    }
  }
  if (opts.ref != null) {
    el("line", { x1: x(opts.ref), x2: x(opts.ref), y1: TOP, y2: yEnd, class: "ref" }, svg);
    el("text", { x: x(opts.ref) + 4, y: TOP + 10, class: "tick" }, svg, opts.refLabel || "");
  }
  return svg;
}

// One horizontal bar per run, made of one segment per layer (a <g>, the layer's mark): one rect in its
// op's colour, or, when the run was profiled, a conv rect then a glue rect of the measured split.
function stackedChart(parent, runs, opts) {
  const BAR = 22, GAP = 12, TOP = 10;
  const height = TOP + runs.length * (BAR + GAP) + 50;
  const svg = svgRoot(parent, height, opts.title);
  const hi = Math.max(...runs.map((r) => r.conv_ms + r.glue_ms + (r.outside_ms || 0)));
  const x = linearScale(0, hi, LABEL_W, WIDTH - RIGHT_PAD - 150);
  xAxis(svg, x, TOP, height - 44, opts.xLabel);
  let y = TOP;
  for (const r of runs) {
    el("text", { x: LABEL_W - 8, y: y + BAR - 6, class: "bar-label", "text-anchor": "end" }, svg, r.rowLabel);
    let t = 0;
    for (const s of r.segments) {
      const seg = el("g", { class: "segment" }, svg);
      tag(seg, "layer", { run_id: r.run_id, model: r.model, variant: r.variant, device: r.device, layer: s.name,
        op: s.op, kind: s.kind, ms: s.ms, conv_ms: s.conv_ms, glue_ms: s.glue_ms, split: s.split });
      const parts = s.kind === "outside" ? [["outside", s.ms]]
        : s.split === "measured" || s.split === "modelled" ? [["conv", s.conv_ms], ["glue", s.glue_ms]] : [[s.kind, s.ms]];
      let u = t;
      for (const [kind, ms] of parts) {
        if (ms <= 0 && parts.length > 1) continue;
        el("rect", { x: x(u), y, width: Math.max(0.5, x(u + ms) - x(u)), height: BAR, fill: KIND_COLOR[kind],
          class: "mark", "data-part": kind }, seg);
        u += ms;
      }
      el("title", {}, seg, s.kind === "outside" ? `${s.name}: ${fmt(s.ms)} ${s.ms_is || "ms"}, outside the layers`
        : s.split === "measured" || s.split === "modelled"
          ? `${s.name} (${s.op || "?"}): ${fmt(s.ms)} ${s.ms_is || "ms"}, ${s.split} conv ${fmt(s.conv_ms)} + glue ${fmt(s.glue_ms)}`
          : `${s.name} (${s.op || "?"}, ${s.kind}): ${fmt(s.ms)} ms`);
      t += s.ms;
    }
    const layersMs = r.conv_ms + r.glue_ms, out = r.outside_ms || 0;
    el("text", { x: x(t) + 6, y: y + BAR - 6, class: "value" }, svg, `${fmt(layersMs + out)} ms${r.modelled ? " modelled" : ""}, ` +
      `glue ${Math.round(100 * r.glue_ms / (layersMs || 1))}%` + (out ? `, outside ${Math.round(100 * out / (layersMs + out))}%` : ""));
    y += BAR + GAP;
  }
  return svg;
}

// Log-log roofline: min(peak, bandwidth x intensity), and one point per layer.
function rooflineChart(parent, panel, colorOf, opts) {
  const height = 420, L = 80, R = WIDTH - 40, T = 20, B = height - 60;
  const svg = svgRoot(parent, height, opts.title);
  const xs = panel.points.map((p) => p.intensity).concat([panel.ridge]);
  const ys = panel.points.map((p) => p.gflops).concat([panel.peak_gflops]);
  const x = logScale(Math.min(...xs) / 2, Math.max(...xs) * 2, L, R);
  const y = logScale(Math.min(...ys) / 2, Math.max(...ys) * 2, B, T);
  xAxis(svg, x, T, B, "arithmetic intensity (FLOP/byte, log scale)");
  yAxis(svg, y, L, R, "attained GFLOP/s (log scale)");
  const [x0, x1] = x.domain;
  const roofAt = (i) => Math.min(panel.peak_gflops, panel.mem_gbps * i);
  const start = Math.max(x0, y.domain[0] / panel.mem_gbps);  // where the bandwidth slope enters the plot
  const pts = [start, panel.ridge, x1].map((i) => `${x(i)},${y(roofAt(i))}`);
  tag(el("polyline", { points: pts.join(" "), class: "roof" }, svg), "roof", { device: panel.device, target: panel.target,
    threads: panel.threads, cores: panel.cores, peak_gflops: panel.peak_gflops, mem_gbps: panel.mem_gbps });
  const cores = panel.cores ? ` (${panel.cores_used} of ${panel.cores} cores)` : "";
  el("text", { x: R, y: y(panel.peak_gflops) - 6, class: "roof-label", "text-anchor": "end" }, svg,
    `peak ${fmt(panel.peak_gflops)} GFLOP/s${cores} · ${fmt(panel.mem_gbps)} GB/s · ridge ${fmt(panel.ridge)} FLOP/B`);
  for (const p of panel.points) {
    const c = colorOf(p.variant);
    const dot = el("circle", { cx: x(p.intensity), cy: y(p.gflops), r: 5, class: "mark point",
      fill: p.measured ? c : "white", stroke: c, "stroke-width": 2 }, svg);
    tag(dot, "roofline", { run_id: p.run_id, model: p.model, variant: p.variant, device: p.device,
      target: p.target, layer: p.layer, kind: p.kind, intensity: p.intensity, gflops: p.gflops, measured: p.measured,
      basis: p.basis });
    el("title", {}, dot, `${p.model} ${p.variant} ${p.layer} (${p.op}): ${fmt(p.intensity)} FLOP/B, ` +
      (p.basis === "modelled" ? `attained ${fmt(p.gflops)} GFLOP/s at its modelled Pi ms`
        : p.measured ? `attained ${fmt(p.gflops)} GFLOP/s` : `bound ${fmt(p.gflops)} GFLOP/s (no per-layer time)`));
  }
  return svg;
}

// Scatter: x = latency (ms: measured on a device, modelled Pi ms for an emulated Pi), y = accuracy (%).
// A point's shape says where its ms come from (circle: measured on the device; diamond: the emulated Pi's
// modelled Pi ms; square: an emulated run with only the emulator's wall time); its label names the model,
// variant, device and target, placed where it overlaps no other label and no point (placeLabels).
function scatterChart(parent, points, colorOf, opts) {
  const height = 400, L = 80, R = WIDTH - 230, T = 20, B = height - 60;
  const svg = svgRoot(parent, height, opts.title);
  const ms = points.map((p) => p.median_ms), acc = points.map((p) => 100 * p.accuracy);
  const logx = Math.max(...ms) / Math.min(...ms) > 20;
  const x = logx ? logScale(Math.min(...ms) / 1.5, Math.max(...ms) * 1.5, L, R) : linearScale(0, Math.max(...ms) * 1.1, L, R);
  const y = linearScale(Math.max(0, Math.min(...acc) - 5), Math.min(100, Math.max(...acc) + 5), B, T);
  xAxis(svg, x, T, B, "latency (ms" + (logx ? ", log scale" : "") + "): measured on the device, or modelled Pi ms for an emulated Pi");
  yAxis(svg, y, L, R, "top-1 accuracy (%)");
  const marks = [];
  for (const p of points) {
    const cx = x(p.median_ms), cy = y(100 * p.accuracy), c = colorOf(p.variant);
    const dot = p.basis === "modelled" ? el("path", { d: `M${cx} ${cy - 8}L${cx + 8} ${cy}L${cx} ${cy + 8}L${cx - 8} ${cy}Z`, fill: c })
      : p.basis === "qemu-wall" ? el("rect", { x: cx - 6, y: cy - 6, width: 12, height: 12, fill: "white", stroke: c, "stroke-width": 2 })
        : el("circle", { cx, cy, r: 6, fill: c });
    dot.setAttribute("class", "mark point");
    svg.appendChild(dot);
    tag(dot, "accuracy", { run_id: p.run_id, model: p.model, variant: p.variant, device: p.device, target: p.target,
      median_ms: p.median_ms, accuracy: p.accuracy, basis: p.basis });
    el("title", {}, dot, `${p.model} ${p.variant} on ${p.setup}: ${fmt(p.median_ms)} ${p.ms_is === "measured" ? "ms measured" : p.ms_is}, ` +
      `${fmt(100 * p.accuracy)}%`);
    marks.push({ x: cx, y: cy, text: `${p.model} ${p.variant} · ${p.device} (${p.target})`, run_id: p.run_id });
  }
  placeLabels(svg, marks, { L, R: WIDTH - 8, T: 4, B: B - 2 });
  return svg;
}

function overlaps(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

// Labels beside their points, none over another label or any point: each label takes the first spot,
// nearest first (right, left, above, below, the diagonals, then farther rings), whose box is free and
// inside the plot; a label moved off its point gets a thin leader line back to it.
function placeLabels(svg, marks, box) {
  const taken = marks.map((m) => ({ x: m.x - 9, y: m.y - 9, width: 18, height: 18 }));
  for (const m of marks) {
    const t = el("text", { x: m.x, y: m.y, class: "tick point-label" }, svg, m.text);
    t.setAttribute("data-label-for", String(m.run_id));
    const b = t.getBBox(), w = b.width + 2, hh = b.height, offX = b.x - m.x, offY = b.y - m.y;
    let spot = null;
    for (let ring = 0; ring < 14 && !spot; ring++) {
      const d = 11 + ring * (hh + 2);
      for (const [dx, dy] of [[1, 0], [-1, 0], [0, -1], [0, 1], [1, -1], [-1, -1], [1, 1], [-1, 1]]) {
        const bx = dx > 0 ? m.x + d * (dy ? 0.7 : 1) : dx < 0 ? m.x - d * (dy ? 0.7 : 1) - w : m.x - w / 2;
        const by = m.y + dy * d - hh / 2;
        const cand = { x: bx, y: by, width: w, height: hh };
        if (bx < box.L || bx + w > box.R || by < box.T || by + hh > box.B) continue;
        if (taken.some((o) => overlaps(o, cand))) continue;
        spot = cand;
        break;
      }
    }
    if (!spot) spot = { x: m.x + 11, y: m.y - hh / 2, width: w, height: hh };  // no free spot: beside its point
    t.setAttribute("x", String(spot.x - offX));
    t.setAttribute("y", String(spot.y - offY));
    taken.push(spot);
    const near = { x: Math.max(spot.x, Math.min(m.x, spot.x + w)), y: Math.max(spot.y, Math.min(m.y, spot.y + hh)) };
    if (Math.hypot(near.x - m.x, near.y - m.y) > 14) {
      el("line", { x1: m.x, y1: m.y, x2: near.x, y2: near.y, class: "leader" }, svg);
    }
  }
}

// The same data as a real table, for screen readers (and for anyone, with "Show data tables").
function dataTable(parent, caption, columns, rows) {
  const wrap = h("div", { class: "table-view" }, parent);
  const table = h("table", {}, wrap);
  h("caption", {}, table, caption);
  const tr = h("tr", {}, h("thead", {}, table));
  for (const c of columns) h("th", { scope: "col" }, tr, c[0]);
  const body = h("tbody", {}, table);
  for (const r of rows) {
    const row = h("tr", {}, body);
    for (const c of columns) {
      const v = c[1](r);
      h("td", { class: typeof v === "number" ? "num" : "" }, row, typeof v === "number" ? fmt(v) : String(v ?? "–"));
    }
  }
  return table;
}
