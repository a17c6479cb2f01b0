// scalestudy's published site: draws a page's charts with uPlot from the page's own data
// (the JSON embedded in #page-data, the same as the page's .json file), so the site works
// offline and from file://. Each chart records how many points it drew in data-points.
"use strict";

(function () {
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                  "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

  function seconds(iso) { return Date.parse(iso) / 1000; }

  function fade(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
  }

  // One chart over time: a line per scale, and (for throughput) its repeats' band.
  function timeChart(box, series, field, title, unit, marks) {
    const times = [...new Set(series.scales.flatMap(sc => sc.points.map(p => seconds(p.when))))]
      .sort((a, b) => a - b);
    const at = new Map(times.map((t, i) => [t, i]));
    const data = [times];
    const specs = [{}];
    const bands = [];
    const hidden = [];  // the bands' edges: drawn, not listed in the legend
    let drawn = 0;
    series.scales.forEach((scale, i) => {
      const color = COLORS[i % COLORS.length];
      const column = () => times.map(() => null);
      const y = column(), lo = column(), hi = column();
      for (const p of scale.points) {
        const k = at.get(seconds(p.when));
        y[k] = p[field];
        if (p[field] !== null) drawn += 1;
        if (field === "per_gpu") { lo[k] = p.low; hi[k] = p.high; }
      }
      const label = `${scale.world_size} GPU${scale.world_size === 1 ? "" : "s"}`;
      data.push(y);
      specs.push({label, stroke: color, width: 2, spanGaps: true,
                  points: {show: true, size: 5, fill: color}});
      if (field === "per_gpu") {
        const top = data.length;
        data.push(hi, lo);
        specs.push({label: `${label} max`, stroke: fade(color, 0.25), width: 1,
                    spanGaps: true, points: {show: false}},
                   {label: `${label} min`, stroke: fade(color, 0.25), width: 1,
                    spanGaps: true, points: {show: false}});
        hidden.push(top, top + 1);
        bands.push({series: [top, top + 1], fill: fade(color, 0.15)});
      }
    });
    const opts = {
      title, width: Math.max(320, box.clientWidth || 900), height: 300,
      series: specs, bands,
      scales: {x: {time: true}},
      axes: [{}, {label: unit, size: 70,
                  values: field === "efficiency"
                    ? (u, ticks) => ticks.map(v => `${Math.round(v * 100)}%`) : undefined}],
      legend: {show: true},
      hooks: {draw: [u => mark(u, marks)]},
    };
    const chart = new uPlot(opts, data, box);
    const entries = chart.root.querySelectorAll(".u-legend .u-series");
    for (const k of hidden) if (entries[k]) entries[k].style.display = "none";
    box.dataset.points = String(drawn);
    return drawn;
  }

  // Provenance changes (dashed, labelled) and change points (triangles) on a chart.
  function mark(u, marks) {
    const ctx = u.ctx;
    const px = window.devicePixelRatio || 1;
    ctx.save();
    ctx.font = `${10 * px}px sans-serif`;
    for (const m of marks.provenance) {
      const x = u.valToPos(seconds(m.when), "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      ctx.strokeStyle = "#666";
      ctx.setLineDash([4 * px, 4 * px]);
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.setLineDash([]);
      ctx.fillStyle = "#444";
      ctx.fillText(m.what.slice(0, 2).join("; "), x + 3 * px, u.bbox.top + 12 * px);
    }
    for (const c of marks.changes) {
      const x = u.valToPos(seconds(c.when), "x", true);
      const index = marks.scaleIndex.get(c.world_size);
      if (index === undefined) continue;
      const values = u.data[index];
      const k = u.data[0].findIndex(t => t >= seconds(c.when));
      if (k < 0 || values[k] === null) continue;
      const y = u.valToPos(values[k], "y", true);
      const r = 7 * px, down = c.size < 0;
      ctx.beginPath();
      ctx.moveTo(x - r, down ? y - r : y + r);
      ctx.lineTo(x + r, down ? y - r : y + r);
      ctx.lineTo(x, down ? y + r : y - r);
      ctx.closePath();
      ctx.fillStyle = c.confirmed ? "#d62728" : "#fff";
      ctx.fill();
      ctx.strokeStyle = "#000";
      ctx.stroke();
    }
    ctx.restore();
  }

  // The latest campaign's throughput at each scale, and the ledger's newest forecast of
  // each scale with its interval: where the series is headed, at scales not yet paid for.
  function scaleChart(box, series, forecasts, unit) {
    const latest = new Map(series.scales.map(sc => {
      const p = sc.points[sc.points.length - 1];
      return [sc.world_size, p.per_gpu * sc.world_size];
    }));
    const newest = new Map();
    for (const f of forecasts) {
      const held = newest.get(f.gpus);
      if (!held || Date.parse(f.made) >= Date.parse(held.made)) newest.set(f.gpus, f);
    }
    const gpus = [...new Set([...latest.keys(), ...newest.keys()])].sort((a, b) => a - b);
    const pick = (source, field) => gpus.map(g => source.has(g) ? field(source.get(g)) : null);
    const data = [gpus, pick(latest, v => v), pick(newest, f => f.throughput),
                  pick(newest, f => f.high), pick(newest, f => f.low)];
    const opts = {
      title: "At scale: the latest campaign, and forecasts with their intervals",
      width: Math.max(320, box.clientWidth || 900), height: 300,
      scales: {x: {time: false, distr: 3, log: 2}},
      series: [{label: "GPUs"},
               {label: "measured", stroke: COLORS[0], width: 2,
                points: {show: true, size: 6, fill: COLORS[0]}},
               {label: "forecast", stroke: COLORS[3], width: 2, dash: [6, 4],
                points: {show: true, size: 6, fill: COLORS[3]}},
               {label: "high", stroke: fade(COLORS[3], 0.3), width: 1},
               {label: "low", stroke: fade(COLORS[3], 0.3), width: 1}],
      bands: [{series: [3, 4], fill: fade(COLORS[3], 0.12)}],
      axes: [{label: "GPUs"}, {label: unit, size: 80}],
    };
    const chart = new uPlot(opts, data, box);
    const entries = chart.root.querySelectorAll(".u-legend .u-series");
    for (const k of [3, 4]) if (entries[k]) entries[k].style.display = "none";
    const drawn = data[1].filter(v => v !== null).length + data[2].filter(v => v !== null).length;
    box.dataset.points = String(drawn);
    return drawn;
  }

  // Imported measurements that are no throughput, one chart per unit, a line each.
  function measureChart(box, unit, measures) {
    const times = [...new Set(measures.flatMap(m => m.readings.map(r => seconds(r.when))))]
      .sort((a, b) => a - b);
    const at = new Map(times.map((t, i) => [t, i]));
    const data = [times];
    let drawn = 0;
    const specs = [{}];
    measures.forEach((m, i) => {
      const y = times.map(() => null);
      for (const r of m.readings) { y[at.get(seconds(r.when))] = r.value; drawn += 1; }
      data.push(y);
      const color = COLORS[i % COLORS.length];
      specs.push({label: m.label, stroke: color, width: 2, spanGaps: true,
                  points: {show: true, size: 5, fill: color}});
    });
    new uPlot({title: `Imported measurements (${unit || "no unit"})`,
               width: Math.max(320, box.clientWidth || 900), height: 300, series: specs,
               scales: {x: {time: true}}, axes: [{}, {label: unit, size: 70}]}, data, box);
    box.dataset.points = String(drawn);
  }

  // An imported sweep (nccl-tests): its value against message size, a line per run.
  function sizeChart(box, label, curves) {
    const sizes = [...new Set(curves.flatMap(c => c.points.map(p => p.message_bytes)))]
      .sort((a, b) => a - b);
    const at = new Map(sizes.map((b, i) => [b, i]));
    const data = [sizes];
    const specs = [{label: "message size", value: (u, v) => v === null ? "–" : bytes(v)}];
    let drawn = 0;
    curves.forEach((c, i) => {
      const y = sizes.map(() => null);
      for (const p of c.points) { y[at.get(p.message_bytes)] = p.value; drawn += 1; }
      data.push(y);
      const color = COLORS[i % COLORS.length];
      specs.push({label: `${c.when.slice(0, 16).replace("T", " ")} (${c.study})`,
                  stroke: color, width: 2, spanGaps: true,
                  points: {show: true, size: 4, fill: color}});
    });
    new uPlot({title: `${curves[0].unit} against message size: ${label}`,
               width: Math.max(320, box.clientWidth || 900), height: 320, series: specs,
               scales: {x: {time: false, distr: 3, log: 2}},
               axes: [{label: "message size", values: (u, ticks) => ticks.map(bytes)},
                      {label: curves[0].unit, size: 70}]}, data, box);
    box.dataset.points = String(drawn);
  }

  function bytes(v) {
    for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
      if (v >= scale) return `${+(v / scale).toPrecision(3)} ${unit}`;
    }
    return `${v} B`;
  }

  function matches(forecast, series) {
    return Object.entries(forecast.point).every(([k, v]) => series.point[k] === v);
  }

  function systemPage(page) {
    const root = document.getElementById("charts");
    let charts = 0;
    page.series.forEach((series, n) => {
      const block = document.createElement("section");
      block.className = "series";
      const head = document.createElement("h3");
      head.textContent = series.label;
      block.appendChild(head);
      root.appendChild(block);
      const perGpu = document.createElement("div");
      const efficiency = document.createElement("div");
      perGpu.className = efficiency.className = "chart";
      perGpu.id = `series-${n}-per-gpu`;
      efficiency.id = `series-${n}-efficiency`;
      block.append(perGpu, efficiency);
      const changes = page.changes.filter(c => c.series === series.label);
      const throughputMarks = {provenance: page.provenance, changes,
                               scaleIndex: new Map(series.scales.map((sc, i) =>
                                 [sc.world_size, 1 + 3 * i]))};
      timeChart(perGpu, series, "per_gpu", "Per-GPU throughput (median; band: repeats)",
                `${series.unit} per GPU`, throughputMarks);
      const efficient = series.scales.some(sc => sc.points.some(p => p.efficiency !== null));
      if (efficient) {
        timeChart(efficiency, series, "efficiency", "Efficiency against the campaign's " +
                  "smallest scale", "efficiency",
                  {provenance: page.provenance, changes: [], scaleIndex: new Map()});
        charts += 2;
      } else {
        efficiency.remove();
        charts += 1;
      }
      const ahead = page.forecasts.filter(f => matches(f, series));
      if (ahead.length) {
        const atScale = document.createElement("div");
        atScale.className = "chart";
        atScale.id = `series-${n}-at-scale`;
        block.appendChild(atScale);
        scaleChart(atScale, series, ahead, series.unit);
        charts += 1;
      }
    });
    const units = [...new Set(page.measures.map(m => m.unit))];
    units.forEach((unit, n) => {
      const box = document.createElement("div");
      box.className = "chart";
      box.id = `measures-${n}`;
      root.appendChild(box);
      measureChart(box, unit, page.measures.filter(m => m.unit === unit));
      charts += 1;
    });
    const labels = [...new Set((page.curves || []).map(c => c.label))];
    labels.forEach((label, n) => {
      const box = document.createElement("div");
      box.className = "chart";
      box.id = `curves-${n}`;
      root.appendChild(box);
      sizeChart(box, label, page.curves.filter(c => c.label === label));
      charts += 1;
    });
    document.body.dataset.charts = String(charts);
  }

  function main() {
    const holder = document.getElementById("page-data");
    if (!holder) return;
    const page = JSON.parse(holder.textContent);
    if (page.kind === "system") {
      if (typeof uPlot === "undefined") {
        throw new Error("the chart library (assets/uPlot.iife.min.js) did not load");
      }
      systemPage(page);
      const fallback = document.getElementById("fallback");
      if (fallback) fallback.hidden = true;
    }
    document.body.dataset.ready = "1";
  }

  document.addEventListener("DOMContentLoaded", main);
})();
