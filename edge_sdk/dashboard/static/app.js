"use strict";
// The dashboard page: read the data (inlined by the export, else from the server's api/data) and draw
// one section per chart, each followed by its data table. Needs charts.js.

async function loadData() {
  const inline = document.getElementById("edge-data");
  if (inline) return JSON.parse(inline.textContent);
  const resp = await fetch("api/data", { cache: "no-store" });
  if (!resp.ok) {
    // The server answers a store it cannot read with 500 and {"error": "..."}: show that reason.
    const body = await resp.json().catch(() => null);
    throw new Error(`api/data: HTTP ${resp.status}` + (body && body.error ? `: ${body.error}` : ""));
  }
  return resp.json();
}

function section(id, title, intro) {
  const s = h("section", { id, "aria-labelledby": id + "-title" }, document.getElementById("charts"));
  h("h2", { id: id + "-title" }, s, title);
  if (intro) h("p", { class: "intro" }, s, intro);
  return s;
}

function byModel(rows) {
  const out = new Map();
  for (const r of rows) { if (!out.has(r.model)) out.set(r.model, []); out.get(r.model).push(r); }
  return out;
}

const RUN_COLS = [["model", (r) => r.model], ["device and setup", (r) => r.setup], ["variant", (r) => r.variant]];

let LABELS = { qemu_wall: "QEMU wall time (emulator speed, not a Pi)" };  // data.labels replaces it
// What a latency bar is: measured on the device, modelled Pi time (emulated Pi), or the emulator's wall time.
const BASIS_TEXT = { measured: "", modelled: " modelled", "qemu-wall": " QEMU wall" };

function latencyTip(model, r) {
  const wall = r.qemu_wall_ms == null ? "" : `; ${LABELS.qemu_wall}: ${fmt(r.qemu_wall_ms)} ms median of ${r.repeats} runs`;
  if (r.basis === "modelled") return `${model} ${r.variant} on ${r.setup}: ${fmt(r.ms)} ${r.basis_label} (Cortex-A53 timing model ${r.model_version || ""})${wall}`;
  return `${model} ${r.variant} on ${r.setup}: median ${fmt(r.ms)} ms, ${r.basis === "measured" ? "measured" : LABELS.qemu_wall} ` +
    `(p10 ${fmt(r.p10_ms)}, p90 ${fmt(r.p90_ms)}, min ${fmt(r.min_ms)}, max ${fmt(r.max_ms)}; ${r.repeats} runs)`;
}

function drawLatency(data, colorOf) {
  LABELS = data.labels || LABELS;
  const s = section("latency", "Latency per model, variant and device",
    "Bars: median latency of the newest run, measured on the device. For an emulated Pi the bar is the modelled Pi time " +
    "(the Cortex-A53 timing model at the board's clock, labelled modelled), without whiskers; the emulator's own time is its " +
    `${LABELS.qemu_wall}, in the tooltip and the table only. An emulated run without a modelled figure is drawn as its QEMU wall time, ` +
    "pale with a dashed outline and labelled so. Thick whisker: 10th to 90th percentile; thin whisker: min to max.");
  legend(s, data.variants.map((v) => ({ label: `${v.name}: ${v.description}`, color: colorOf(v.name) })));
  const bases = new Set(data.latency.map((r) => r.basis));
  if (bases.has("modelled")) note(s, "“modelled”: modelled Pi ms (edge_sdk/timing), not a measurement.");
  if (bases.has("qemu-wall")) note(s, `“QEMU wall” (pale, dashed): ${LABELS.qemu_wall}; no modelled Pi time was recorded for that run.`);
  for (const [model, rows] of byModel(data.latency)) {
    h("h3", {}, s, model);
    hbarChart(s, rows.map((r) => ({
      group: r.setup, label: r.variant, value: r.ms, lo: r.p10_ms, hi: r.p90_ms, min: r.min_ms, max: r.max_ms,
      color: colorOf(r.variant), chart: "latency", text: `${fmt(r.ms)} ms${BASIS_TEXT[r.basis] || ""}`,
      cls: r.basis === "qemu-wall" ? "qemu-wall" : undefined, tip: latencyTip(model, r),
      data: { run_id: r.run_id, model, variant: r.variant, device: r.device, target: r.target, threads: r.threads,
        median_ms: r.median_ms, ms: r.ms, basis: r.basis, qemu_wall_ms: r.qemu_wall_ms, modelled_ms: r.modelled_ms },
    })), { title: `${model}: latency in milliseconds per variant and device (emulated Pi: modelled Pi ms)`, xLabel: "latency (ms)" });
  }
  dataTable(s, "Latency (ms) per model, device and variant", RUN_COLS.concat([
    ["ms", (r) => r.ms], ["what the ms is", (r) => r.basis_label], ["p10 ms", (r) => r.p10_ms], ["p90 ms", (r) => r.p90_ms],
    ["min ms", (r) => r.min_ms], ["max ms", (r) => r.max_ms], [`${LABELS.qemu_wall}, median ms`, (r) => r.qemu_wall_ms],
    ["modelled cycles", (r) => r.modelled_cycles], ["runs", (r) => r.repeats],
    ["golden check", (r) => (r.golden_ok === null ? "–" : r.golden_ok ? "ok" : "FAILED")]]), data.latency);
}

function drawSpeedup(data, colorOf) {
  const s = section("speedup", "Speedup over float32",
    "Median float32 latency divided by the variant's median, on the same device, target and threads; for an emulated Pi the " +
    "modelled Pi ms of both (the timing model), never the emulator's wall time. Right of the line: faster.");
  const skipped = data.speedup_skipped || [];
  if (skipped.length) {
    note(s, "No speedup for: " + skipped.map((r) => `${r.model} ${r.variant} on ${r.setup}: ${r.reason}`).join("; ") + ".");
  }
  if (!data.speedup.length) { note(s, "No speedup to show yet: it needs a float32 run and another variant on the same device."); return; }
  for (const [model, rows] of byModel(data.speedup)) {
    h("h3", {}, s, model);
    hbarChart(s, rows.map((r) => ({
      group: r.setup, label: r.variant, value: r.speedup, color: colorOf(r.variant), chart: "speedup",
      text: `${fmt(r.speedup)}×${r.basis === "modelled" ? " modelled" : ""}`,
      tip: `${model} ${r.variant} on ${r.setup}: ${fmt(r.speedup)}× (float32 ${fmt(r.float_ms)} → ${fmt(r.ms)} ${r.basis_label})`,
      data: { run_id: r.run_id, model, variant: r.variant, device: r.device, speedup: r.speedup, basis: r.basis,
        float_ms: r.float_ms, ms: r.ms },
    })), { title: `${model}: speedup over float32 per variant and device`, xLabel: "speedup over float32 (×)", ref: 1, refLabel: "float32 (1×)" });
  }
  dataTable(s, "Speedup over float32", RUN_COLS.concat([["float32 ms", (r) => r.float_ms], ["variant ms", (r) => r.ms],
    ["what the ms are", (r) => r.basis_label], ["speedup ×", (r) => r.speedup]]), data.speedup);
}

function drawLayers(data) {
  const s = section("layers", "Per-layer time: conv vs glue",
    "Each bar is one run, cut into its layers in execution order. Conv: convolutions and dense layers (the bitserial kernels included); glue: everything else (pooling, softmax, standalone quantize/bitpack). " +
    "A profiled run splits each layer as measured by the runner (a conv layer's fused epilogue and its quantize/bitpack kernels count as glue); other runs give a layer's whole time to its op's kind. " +
    "An emulated Pi's bars are modelled Pi ms: the Cortex-A53 timing model's price of each layer's functions in model.so, split the same way, " +
    "with the time no layer owns (the TVM runtime's VM calls and allocations, libc) as grey rows after the layers, so the bar is the model's whole figure. " +
    `An emulated run without that split is not drawn from its ${LABELS.qemu_wall} per layer.`);
  legend(s, [{ label: "conv (compute layers)", color: KIND_COLOR.conv }, { label: "glue (other layers)", color: KIND_COLOR.glue },
    { label: "outside the layers (runtime, VM calls, allocations, libc; modelled bars)", color: KIND_COLOR.outside }]);
  if (!data.layers.length) {
    note(s, "No per-layer profile yet: none of the runs carries per-layer times.");
  } else {
    for (const [model, rows] of byModel(data.layers)) {
      h("h3", {}, s, model);
      stackedChart(s, rows.map((r) => ({ ...r, rowLabel: `${r.variant} · ${r.device} (${r.target}` +
          `${r.threads === 1 ? "" : `, ${r.threads} threads`}${r.emulated ? ", emulated" : ""})` })),
        { title: `${model}: time per layer in milliseconds (emulated Pi: modelled Pi ms), conv vs glue`, xLabel: "time (ms), layers stacked" });
    }
    if (data.unprofiled.length) {
      note(s, "No per-layer profile yet for: " + data.unprofiled.map((r) => `${r.model} ${r.variant} on ${r.setup}`).join("; ") + ".");
    }
  }
  const flat = data.layers.flatMap((r) => r.segments.map((x) => ({ ...x, model: r.model, setup: r.setup, variant: r.variant })));
  dataTable(s, "Per-layer time (ms)", RUN_COLS.concat([["layer", (r) => r.name], ["op", (r) => r.op],
    ["kind", (r) => r.kind], ["ms", (r) => r.ms], ["conv ms", (r) => r.conv_ms], ["glue ms", (r) => r.glue_ms],
    ["split", (r) => r.split], ["what the ms are", (r) => r.ms_is]]), flat);
}

function drawRoofline(data, colorOf) {
  const s = section("roofline", "Roofline per device",
    "Each layer sits at its arithmetic intensity (FLOPs / bytes read and written, from the package manifest) under the target's " +
    "roof: min(peak GFLOP/s, bandwidth × intensity); the peak is that of the cores the run's threads use (a one-thread run: one core's peak). Filled: attained = layer FLOPs / layer time, " +
    "measured on a device, or for an emulated Pi the layer's modelled Pi ms (the timing model's price of its functions). Hollow: no per-layer time, " +
    "so the point shows the layer's bound (the emulator's own time per layer is never used). Integer and bitserial layers count their multiply-adds as FLOPs against the fp32 peak, so they can sit above it.");
  if (!data.roofline.length) { note(s, "No roofline yet: no run's package carries a layer table with the target's peaks."); return; }
  legend(s, data.variants.map((v) => ({ label: v.name, color: colorOf(v.name), shape: "dot" }))
    .concat([{ label: "attained: measured, or modelled Pi ms (filled)", color: "#444", shape: "dot" },
      { label: "bound only (hollow)", color: "#444", shape: "ring" }]));
  for (const p of data.roofline) {
    const setup = `${p.device} (${p.target}, ${p.threads} thread${p.threads === 1 ? "" : "s"})`;
    h("h3", {}, s, setup);
    rooflineChart(s, p, colorOf, { title: `Roofline of ${setup}: attained GFLOP/s against arithmetic intensity` });
  }
  const flat = data.roofline.flatMap((p) => p.points);
  dataTable(s, "Roofline points", [["device and setup", (r) => r.setup], ["model", (r) => r.model], ["variant", (r) => r.variant],
    ["layer", (r) => r.layer], ["op", (r) => r.op], ["FLOP/byte", (r) => r.intensity], ["GFLOP/s", (r) => r.gflops],
    ["bound GFLOP/s", (r) => r.bound_gflops], ["from", (r) => (r.basis === "modelled" ? "modelled Pi ms" : r.measured ? "measured" : "bound only")]], flat);
}

function drawAccuracy(data, colorOf) {
  const s = section("accuracy", "Accuracy vs latency", "Top-1 accuracy on labelled images (edge-sdk eval), against the " +
    "latency per image of the same run: measured on a device (circles), or for an emulated Pi its modelled Pi ms (diamonds: the " +
    `Cortex-A53 timing model; an emulated run with only the ${LABELS.qemu_wall} is an open square). Each label names the model, variant, device and target.`);
  if (!data.accuracy.length) { note(s, "No accuracy measured yet: edge-sdk eval PKG --images DIR records it."); return; }
  const bases = new Set(data.accuracy.map((r) => r.basis));
  legend(s, data.variants.map((v) => ({ label: v.name, color: colorOf(v.name), shape: "dot" })).concat([
    { label: "measured on the device", color: "#444", shape: "dot", basis: "measured" },
    { label: "emulated Pi: modelled Pi ms", color: "#444", shape: "diamond", basis: "modelled" },
    { label: `emulated, ${LABELS.qemu_wall}`, color: "#444", shape: "square", basis: "qemu-wall" }].filter((x) => bases.has(x.basis))));
  scatterChart(s, data.accuracy, colorOf, { title: "Top-1 accuracy (%) against latency (ms: measured, or modelled Pi ms for an emulated Pi)" });
  dataTable(s, "Accuracy and latency", RUN_COLS.concat([["ms", (r) => r.median_ms],
    ["what the ms is", (r) => r.ms_is || ""], ["top-1 accuracy %", (r) => 100 * r.accuracy],
    ["top-5 accuracy %", (r) => (r.top5 == null ? "" : 100 * r.top5)],
    ["images", (r) => (r.images == null ? "" : r.images)]]), data.accuracy);
}

function setupToggle() {
  const b = document.getElementById("toggle-tables");
  b.addEventListener("click", () => {
    const on = document.body.classList.toggle("show-tables");
    b.setAttribute("aria-pressed", String(on));
    b.textContent = on ? "Hide data tables" : "Show data tables";
  });
}

async function main() {
  setupToggle();
  try {
    const data = await loadData();
    const m = data.meta;
    document.getElementById("meta").textContent = `${m.runs_shown} newest runs (one per model, variant, device, target and threads) ` +
      `of ${m.models.length} model(s) on ${m.devices.length} device(s), from ${m.db}; generated ${m.generated}.`;
    if (!data.latency.length) {
      note(document.getElementById("charts"), "No runs recorded yet. Record one with `edge-sdk results record RUN.json --package PKG --device NAME`.");
    } else {
      const colors = new Map(data.variants.map((v, i) => [v.name, PALETTE[i % PALETTE.length]]));
      const colorOf = (v) => colors.get(v) || "#888888";
      drawLatency(data, colorOf);
      drawSpeedup(data, colorOf);
      drawLayers(data);
      drawRoofline(data, colorOf);
      drawAccuracy(data, colorOf);
    }
    document.body.dataset.ready = "1";
  } catch (err) {
    note(document.getElementById("charts"), `Could not load the results: ${err.message}`).classList.add("error");
    document.body.dataset.ready = "error";
    throw err;
  }
}

main();
