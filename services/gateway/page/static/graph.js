// A run's steps drawn on a canvas, for runs too large for SVG: layered by depth, pan (drag,
// arrows), zoom (wheel, + and -), fit, find a step by id, states coloured live, a click (or
// Enter on the found step) opens it. A node may carry a note after its id (a loop's count of
// instances, with a bar of how many ended). Plain JavaScript, no build step, nothing fetched.
//
// Why it stays fast at thousands of steps: the layout is computed once (depths, then one
// barycentre pass to order each layer), kept in typed arrays; a frame draws only what is in
// view (the layers crossing it, and in each the rows crossing it), all edges as one path and
// all nodes of a state as one path, and labels only once they are readable. A frame is drawn
// only when something changed (requestAnimationFrame, at most one pending).
"use strict";

window.HeddleGraph = (() => {
  const W = 140, H = 26, GX = 70, GY = 10;   // node size and gaps, in world units
  const COL = W + GX, ROW = H + GY;
  const MIN_SCALE = 0.01, MAX_SCALE = 4;
  const LABEL_PX = 11;                        // a node this high on screen gets its label
  const STATS_KEPT = 600;                     // draw durations kept for graphStats

  // Depth of each step (0 without dependencies, else one more than its deepest parent),
  // by Kahn's order: no recursion, whatever the chain's length. A step in a cycle or with an
  // unknown parent (not possible in a stored run) gets the depth reached so far.
  function layout(steps) {
    const n = steps.length;
    const index = new Map(steps.map((st, i) => [st.id, i]));
    const parents = steps.map((st) => (st.dependsOn || []).map((d) => index.get(d))
      .filter((p) => p !== undefined));
    const children = Array.from({ length: n }, () => []);
    const waiting = new Int32Array(n);
    parents.forEach((ps, i) => {
      waiting[i] = ps.length;
      for (const p of ps) children[p].push(i);
    });
    const depth = new Int32Array(n);
    const queue = [];
    for (let i = 0; i < n; i++) if (waiting[i] === 0) queue.push(i);
    for (let q = 0; q < queue.length; q++) {
      const i = queue[q];
      for (const c of children[i]) {
        if (depth[i] + 1 > depth[c]) depth[c] = depth[i] + 1;
        if (--waiting[c] === 0) queue.push(c);
      }
    }
    const layers = [];
    for (let i = 0; i < n; i++) (layers[depth[i]] ||= []).push(i);
    for (let d = 0; d < layers.length; d++) layers[d] ||= [];
    // Order each layer by the mean row of its parents (one pass, top to bottom): fewer
    // crossings than document order, in O(edges + n log n).
    const row = new Float64Array(n);
    layers[0].forEach((i, r) => { row[i] = r; });
    for (let d = 1; d < layers.length; d++) {
      const key = new Map();
      for (const i of layers[d]) {
        const ps = parents[i].filter((p) => depth[p] === d - 1);
        key.set(i, ps.length ? ps.reduce((a, p) => a + row[p], 0) / ps.length : Infinity);
      }
      layers[d].sort((a, b) => key.get(a) - key.get(b) || a - b);
      layers[d].forEach((i, r) => { row[i] = r; });
    }
    const tallest = Math.max(1, ...layers.map((l) => l.length));
    const xs = new Float64Array(n), ys = new Float64Array(n);
    const top = new Float64Array(layers.length);  // each layer centred on the tallest
    layers.forEach((layer, d) => {
      top[d] = (tallest - layer.length) * ROW / 2;
      layer.forEach((i, r) => { xs[i] = d * COL; ys[i] = top[d] + r * ROW; });
    });
    const edges = [];
    parents.forEach((ps, i) => { for (const p of ps) edges.push(p, i); });
    return { n, xs, ys, depth, layers, top, edges: Int32Array.from(edges),
      width: layers.length * COL - GX, height: tallest * ROW - GY };
  }

  function create(box, steps, opts) {
    const ids = steps.map((st) => st.id);
    const index = new Map(ids.map((id, i) => [id, i]));
    const states = opts.states;                 // state names, in colour order
    const colors = states.map((st) => opts.color(st));
    const stateOf = new Uint8Array(steps.length);
    const notes = new Map();                    // node -> {text, done (0..1, or -1), title}
    const L = layout(steps);
    const canvas = document.createElement("canvas");
    canvas.id = "dag-canvas";
    canvas.className = "dag-canvas";
    canvas.tabIndex = 0;
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", `the run's ${steps.length} steps by depth; drag to pan, ` +
      "wheel or + and - to zoom, 0 to fit, Enter opens the found step");
    canvas.dataset.nodes = String(steps.length);
    canvas.dataset.drawn = "0";
    const ctx = canvas.getContext("2d", { alpha: false });
    const stats = { draws: [], frames: 0, firstDrawMs: null, created: performance.now() };
    canvas.graphStats = stats;
    let view = { x: 0, y: 0, k: 1 };             // screen = world * k + (x, y)
    let cssW = 0, cssH = 0, dpr = 1;
    let pending = false;
    let found = -1, hover = -1;
    let destroyed = false;
    let fitted = false;

    function setStates(list) {
      let changed = canvas.dataset.states === undefined;
      for (const st of list) {
        const i = index.get(st.id);
        if (i === undefined) continue;
        const s = Math.max(0, states.indexOf(st.status));
        if (stateOf[i] !== s) { stateOf[i] = s; changed = true; }
      }
      if (!changed) return;
      const counts = new Array(states.length).fill(0);
      for (let i = 0; i < stateOf.length; i++) counts[stateOf[i]] += 1;
      canvas.dataset.states = states.map((st, s) => (counts[s] ? `${st}:${counts[s]}` : ""))
        .filter(Boolean).join(" ");
      invalidate();
    }

    // A step's note: text after its id, a bar `done` (0 to 1; -1 for none), a title.
    function note(id, text, done, title) {
      const i = index.get(id);
      if (i === undefined) return;
      const was = notes.get(i);
      if (was && was.text === text && was.done === done && was.title === title) return;
      notes.set(i, { text, done, title });
      canvas.dataset.notes = String(notes.size);
      invalidate();
    }

    function invalidate() {
      if (pending || destroyed) return;
      pending = true;
      requestAnimationFrame(draw);
    }

    function resize() {
      const rect = box.getBoundingClientRect();
      const w = Math.max(100, Math.floor(rect.width));
      const h = Math.max(200, Math.floor(rect.height));
      dpr = window.devicePixelRatio || 1;
      if (w === cssW && h === cssH && canvas.width === Math.round(w * dpr)) return;
      // Fitted once it has its real size (created before it is in the page, it has none).
      const first = !fitted && rect.width > 0;
      if (first) fitted = true;
      cssW = w; cssH = h;
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
      canvas.style.width = w + "px";
      canvas.style.height = h + "px";
      if (first) fit(); else invalidate();
    }

    function fit() {
      const k = Math.min(MAX_SCALE, Math.max(MIN_SCALE,
        Math.min((cssW - 20) / L.width, (cssH - 20) / L.height)));
      view = { k, x: (cssW - L.width * k) / 2, y: (cssH - L.height * k) / 2 };
      invalidate();
    }

    function zoomAt(sx, sy, factor) {
      const k = Math.min(MAX_SCALE, Math.max(MIN_SCALE, view.k * factor));
      const wx = (sx - view.x) / view.k, wy = (sy - view.y) / view.k;
      view = { k, x: sx - wx * k, y: sy - wy * k };
      invalidate();
    }

    function panBy(dx, dy) {
      view = { ...view, x: view.x + dx, y: view.y + dy };
      invalidate();
    }

    // The node under a screen point: its layer from x, its row from y. O(1).
    function nodeAt(sx, sy) {
      const wx = (sx - view.x) / view.k, wy = (sy - view.y) / view.k;
      const d = Math.floor(wx / COL);
      if (d < 0 || d >= L.layers.length || wx - d * COL > W) return -1;
      const r = Math.floor((wy - L.top[d]) / ROW);
      const layer = L.layers[d];
      if (r < 0 || r >= layer.length || wy - L.top[d] - r * ROW > H) return -1;
      return layer[r];
    }

    // The rows of layer d that cross world y from y0 to y1.
    function rowsIn(d, y0, y1) {
      const layer = L.layers[d];
      const a = Math.max(0, Math.floor((y0 - L.top[d]) / ROW));
      const b = Math.min(layer.length - 1, Math.floor((y1 - L.top[d]) / ROW));
      return [a, b];
    }

    function draw() {
      pending = false;
      if (destroyed) return;
      const t0 = performance.now();
      const k = view.k;
      ctx.setTransform(1, 0, 0, 1, 0, 0);
      ctx.fillStyle = opts.background;
      ctx.fillRect(0, 0, canvas.width, canvas.height);
      ctx.setTransform(dpr * k, 0, 0, dpr * k, dpr * view.x, dpr * view.y);
      const x0 = -view.x / k, y0 = -view.y / k;
      const x1 = x0 + cssW / k, y1 = y0 + cssH / k;
      const d0 = Math.max(0, Math.floor(x0 / COL) - 1);
      const d1 = Math.min(L.layers.length - 1, Math.floor(x1 / COL));
      // Edges: one path. An edge is drawn when a layer it spans is in view and its ends'
      // vertical extent crosses the view.
      ctx.beginPath();
      const E = L.edges, xs = L.xs, ys = L.ys, dep = L.depth;
      const curved = k > 0.25;
      for (let e = 0; e < E.length; e += 2) {
        const a = E[e], b = E[e + 1];
        if (dep[b] < d0 || dep[a] > d1 + 1) continue;
        const ya = ys[a] + H / 2, yb = ys[b] + H / 2;
        if ((ya < y0 && yb < y0) || (ya > y1 && yb > y1)) continue;
        const xa = xs[a] + W, xb = xs[b];
        ctx.moveTo(xa, ya);
        if (curved) {
          const mx = (xa + xb) / 2;
          ctx.bezierCurveTo(mx, ya, mx, yb, xb, yb);
        } else ctx.lineTo(xb, yb);
      }
      ctx.strokeStyle = opts.edge;
      ctx.lineWidth = Math.max(1 / k, 1.2);
      ctx.stroke();
      // Nodes: one path per state.
      const visible = [];
      for (let d = d0; d <= d1; d++) {
        const [a, b] = rowsIn(d, y0 - H, y1);
        for (let r = a; r <= b; r++) visible.push(L.layers[d][r]);
      }
      const radius = k * H > 8 ? 5 : 0;
      for (let s = 0; s < states.length; s++) {
        ctx.beginPath();
        let any = false;
        for (const i of visible) {
          if (stateOf[i] !== s) continue;
          any = true;
          if (radius) ctx.roundRect(xs[i], ys[i], W, H, radius);
          else ctx.rect(xs[i], ys[i], W, H);
        }
        if (any) {
          ctx.fillStyle = colors[s];
          ctx.fill();
        }
      }
      // A noted node's bar: how much of it is done (a loop's instances ended).
      if (notes.size) {
        ctx.fillStyle = "rgba(255, 255, 255, 0.7)";
        for (const [i, note] of notes) {
          if (note.done > 0 && dep[i] >= d0 && dep[i] <= d1) ctx.fillRect(xs[i], ys[i] + H - 3, W * note.done, 3);
        }
      }
      // Labels once readable, trimmed to the node.
      if (k * H >= LABEL_PX * 1.6) {
        ctx.fillStyle = "#fff";
        ctx.font = `12px ${opts.font}`;
        ctx.textBaseline = "middle";
        ctx.textAlign = "center";
        for (const i of visible) {
          const id = ids[i];
          const note = notes.has(i) && notes.get(i).text ? " " + notes.get(i).text : "";
          const room = Math.max(4, 17 - note.length);
          ctx.fillText((id.length > room ? id.slice(0, room - 1) + "…" : id) + note,
            xs[i] + W / 2, ys[i] + H / 2, W - 8);
        }
      }
      for (const [i, color, width] of [[hover, opts.ink, 2], [found, opts.accent, 4]]) {
        if (i < 0) continue;
        ctx.strokeStyle = color;
        ctx.lineWidth = width / k;
        ctx.strokeRect(xs[i] - 2 / k, ys[i] - 2 / k, W + 4 / k, H + 4 / k);
      }
      const took = performance.now() - t0;
      stats.frames += 1;
      stats.draws.push(took);
      if (stats.draws.length > STATS_KEPT) stats.draws.shift();
      if (stats.firstDrawMs === null) {
        stats.drawnAt = performance.now();  // since the page's navigation began
        stats.firstDrawMs = stats.drawnAt - stats.created;
        canvas.dataset.firstDrawMs = stats.firstDrawMs.toFixed(1);
      }
      canvas.dataset.drawn = String(stats.frames);
      canvas.dataset.view = `${view.x.toFixed(1)} ${view.y.toFixed(1)} ${view.k.toFixed(4)}`;
    }

    // Centre a step, zoomed in to read it, and mark it found.
    function show(i) {
      found = i;
      const k = Math.max(view.k, 1);
      view = { k, x: cssW / 2 - (L.xs[i] + W / 2) * k, y: cssH / 2 - (L.ys[i] + H / 2) * k };
      invalidate();
    }

    function find(text) {
      const q = text.trim();
      if (!q) return null;
      let i = index.get(q);
      if (i === undefined) {
        const low = q.toLowerCase();
        i = ids.findIndex((id) => id.toLowerCase().includes(low));
      }
      if (i < 0) return null;
      show(i);
      return ids[i];
    }

    // ---- input ----
    let drag = null;
    canvas.addEventListener("pointerdown", (ev) => {
      if (ev.button !== 0) return;
      canvas.setPointerCapture(ev.pointerId);
      drag = { x: ev.clientX, y: ev.clientY, sx: ev.clientX, sy: ev.clientY, moved: false };
    });
    canvas.addEventListener("pointermove", (ev) => {
      if (drag) {
        const dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
        drag.x = ev.clientX; drag.y = ev.clientY;
        if (Math.abs(ev.clientX - drag.sx) + Math.abs(ev.clientY - drag.sy) > 4) drag.moved = true;
        if (drag.moved) panBy(dx, dy);
        return;
      }
      const r = canvas.getBoundingClientRect();
      const i = nodeAt(ev.clientX - r.left, ev.clientY - r.top);
      if (i !== hover) {
        hover = i;
        canvas.title = i < 0 ? "" : `${ids[i]}: ${states[stateOf[i]]}` +
          (notes.has(i) && notes.get(i).title ? `; ${notes.get(i).title}` : "");
        canvas.style.cursor = i < 0 ? "grab" : "pointer";
        invalidate();
      }
    });
    canvas.addEventListener("pointerup", (ev) => {
      const was = drag;
      drag = null;
      if (!was || was.moved) return;
      const r = canvas.getBoundingClientRect();
      const i = nodeAt(ev.clientX - r.left, ev.clientY - r.top);
      if (i >= 0) opts.open(ids[i]);
    });
    canvas.addEventListener("pointercancel", () => { drag = null; });
    canvas.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const r = canvas.getBoundingClientRect();
      zoomAt(ev.clientX - r.left, ev.clientY - r.top, Math.exp(-ev.deltaY * 0.0015));
    }, { passive: false });
    canvas.addEventListener("keydown", (ev) => {
      const step = 60;
      const keys = {
        ArrowLeft: () => panBy(step, 0), ArrowRight: () => panBy(-step, 0),
        ArrowUp: () => panBy(0, step), ArrowDown: () => panBy(0, -step),
        "+": () => zoomAt(cssW / 2, cssH / 2, 1.25), "=": () => zoomAt(cssW / 2, cssH / 2, 1.25),
        "-": () => zoomAt(cssW / 2, cssH / 2, 0.8), 0: fit,
        Enter: () => { if (found >= 0) opts.open(ids[found]); },
      };
      if (keys[ev.key]) {
        ev.preventDefault();
        keys[ev.key]();
      }
    });
    const observer = new ResizeObserver(resize);
    box.appendChild(canvas);
    observer.observe(box);
    setStates(steps);
    resize();

    return {
      canvas,
      update: setStates,
      note,
      find,
      fit,
      zoom: (factor) => zoomAt(cssW / 2, cssH / 2, factor),
      destroy() {
        destroyed = true;
        observer.disconnect();
      },
    };
  }

  return { create, layout };
})();
