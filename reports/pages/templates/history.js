{% raw %}
/* rooflab history page: the table of series, its filters and the trend of an opened series.
   Plain JavaScript, no library, no request: everything comes from the JSON in #history-data
   (reports/pages/history_page.py writes it). The filters and the opened series live in the URL's hash,
   so a view can be linked. */
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("history-data").textContent);
  const decode = (b64, Type) => {
    const bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new Type(bytes.buffer);
  };
  const P = D.pts, S = D.series, N = S.key.length, STEP = 2000, PAGE = 100;
  const start = decode(P.start, Uint32Array), run = decode(P.run, Uint32Array), med = decode(P.med, Float32Array);
  const lo = decode(P.lo, Uint16Array), hi = decode(P.hi, Uint16Array), ex = decode(P.x, Uint8Array);
  const fl = decode(P.fl, Int8Array);
  const pc = decode(P.pc, Int8Array);
  const RT = D.runs.t, RID = D.runs.id, RC = D.runs.commit;
  const FIELDS = ["op", "family", "dtype", "backend", "cache"];
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
  const num = (v) => v === null || v === undefined || !isFinite(v) ? "" : (Math.abs(v) >= 1e5 || (v !== 0 && Math.abs(v) < 1e-3)) ? v.toExponential(3) : String(+v.toPrecision(4));
  const pct = (v) => v === null || v === undefined ? "" : (v > 0 ? "+" : "") + (100 * v).toFixed(1) + " %";
  const date = (r) => RT[r] === null ? "" : new Date(RT[r] * 1000).toISOString().slice(0, 16).replace("T", " ");
  const model = (i) => D.fps[S.fp[i]].device;  // the device's model (name)
  const dev = (i) => D.devs[S.dv[i]];  // the physical device: its key, host and series id
  const device = (i) => (dev(i).host ? dev(i).host + " " : "") + dev(i).key;
  const verdict = (i) => D.verdicts[S.v[i]];
  const rank = (i) => { const v = verdict(i); return v === "regression" ? 0 : v === "suspect" ? 1 : S.d[i] ? 2 : v === "improvement" ? 3 : v === "ok" ? 4 : 5; };
  const order = Array.from({length: N}, (_, i) => i).sort((a, b) => rank(a) - rank(b)
    || Math.abs(S.c[b] || 0) - Math.abs(S.c[a] || 0) || (S.key[a] < S.key[b] ? -1 : S.key[a] > S.key[b] ? 1 : 0));
  const byKey = new Map();
  for (let i = 0; i < N; i++) byKey.set(S.key[i] + "@" + dev(i).id, i);
  const $ = (id) => document.getElementById(id);
  let state = {}, shown = PAGE;

  function options(id, values) {
    const counts = new Map();
    for (const v of values) counts.set(v, (counts.get(v) || 0) + 1);
    const names = [...counts.keys()].sort();
    $(id).innerHTML = '<option value="">all</option>' + names.map((n) => `<option value="${esc(n)}">${esc(n)} (${counts.get(n)})</option>`).join("");
  }
  const all = Array.from({length: N}, (_, i) => i);
  for (const f of FIELDS) options("f-" + f, all.map((i) => D.str[f][S[f][i]]));
  options("f-model", all.map(model));
  options("f-device", all.map(device));
  options("f-verdict", all.map(verdict).concat(all.filter((i) => S.d[i]).map(() => "drift")));

  function readHash() {
    const out = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      const k = part.split("=")[0];
      if (k) out[decodeURIComponent(k)] = decodeURIComponent(part.slice(k.length + 1));
    }
    return out;
  }
  function hashOf(s) {
    return "#" + Object.entries(s).filter(([, v]) => v).map(([k, v]) => encodeURIComponent(k) + "=" + encodeURIComponent(v)).join("&");
  }
  function matches(i, s) {
    for (const f of FIELDS) if (s[f] && D.str[f][S[f][i]] !== s[f]) return false;
    if (s.model && model(i) !== s.model) return false;
    if (s.device && device(i) !== s.device) return false;
    if (s.verdict && !(s.verdict === "drift" ? S.d[i] : verdict(i) === s.verdict)) return false;
    if (s.q) {
      const key = S.key[i].toLowerCase();
      for (const word of s.q.toLowerCase().split(/\s+/)) if (word && !key.includes(word)) return false;
    }
    return true;
  }
  function points(i) { return [start[i], start[i + 1]]; }
  function sparkline(i) {
    const [a, b] = points(i), n = b - a, W = 140, H = 26;
    if (!n) return "";
    let min = Infinity, max = -Infinity;
    for (let k = a; k < b; k++) { min = Math.min(min, med[k]); max = Math.max(max, med[k]); }
    const span = max - min || max || 1, buckets = Math.min(n, W / 2), pts = [];
    const y = (v) => (H - 3 - (v - min) / span * (H - 6)).toFixed(1);
    for (let q = 0; q < buckets; q++) {
      const k0 = a + Math.floor(q * n / buckets), k1 = a + Math.max(Math.floor((q + 1) * n / buckets), q * n / buckets + 1);
      let bmin = Infinity, bmax = -Infinity;
      for (let k = k0; k < k1; k++) { bmin = Math.min(bmin, med[k]); bmax = Math.max(bmax, med[k]); }
      const x = (2 + q * (W - 4) / Math.max(buckets - 1, 1)).toFixed(1);
      pts.push(x + "," + y(bmax), x + "," + y(bmin));
    }
    const flagged = S.fl[i].length ? '<circle cx="' + (W - 2) + '" cy="' + y(med[b - 1]) + '" r="2.5" class="sp-flag"/>' : "";
    return `<svg class="spark" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="trend of ${n} runs"><polyline points="${pts.join(" ")}"/>${flagged}</svg>`;
  }
  function row(i) {
    const [a, b] = points(i), d = dev(i), v = verdict(i);
    const link = hashOf(Object.assign({}, state, {open: S.key[i] + "@" + d.id}));
    return `<tr data-i="${i}"><td class="key"><a class="open" href="${esc(link)}">${esc(S.key[i])}</a></td>` +
      `<td>${esc(model(i))} <span class="note">${esc(d.host)} ${esc(d.id === d.key ? d.key : d.id)}</span></td><td>${sparkline(i)}</td>` +
      `<td class="n">${b - a}</td><td class="n">${num(med[b - 1])}</td><td class="n">${pct(S.c[i])}</td>` +
      `<td class="status-${esc(v)}">${esc(v.replace("_", " "))}${S.d[i] ? ' + <span class="status-suspect">drift</span>' : ""}</td></tr>`;
  }
  function render() {
    const hits = order.filter((i) => matches(i, state));
    $("series").tBodies[0].innerHTML = hits.slice(0, shown).map(row).join("");
    $("matches").textContent = `${hits.length} of ${N} series match` + (hits.length > shown ? `; showing the first ${shown} (most urgent first)` : "") + ".";
    $("more").hidden = hits.length <= shown;
    openSeries(state.open ? byKey.get(state.open) : undefined);
  }
  function apply() {
    state = readHash();
    for (const f of FIELDS.concat(["model", "device", "verdict"])) $("f-" + f).value = state[f] || "";
    $("f-q").value = state.q || "";
    shown = PAGE;
    render();
  }
  function fromForm() {
    const s = {};
    for (const f of FIELDS.concat(["model", "device", "verdict"])) s[f] = $("f-" + f).value;
    s.q = $("f-q").value.trim();
    if (state.open) s.open = state.open;
    history.replaceState(null, "", hashOf(s) || "#");
    apply();
  }
  for (const f of FIELDS.concat(["model", "device", "verdict"])) $("f-" + f).addEventListener("change", fromForm);
  $("f-q").addEventListener("input", fromForm);
  $("f-clear").addEventListener("click", () => { history.replaceState(null, "", "#"); apply(); });
  $("more").addEventListener("click", () => { shown += PAGE * 5; render(); });
  window.addEventListener("hashchange", apply);

  function envDiff(a, b) {
    const what = [];
    for (const k of ["driver", "cuda", "torch"]) if (a[k] !== b[k]) what.push(`${k} ${a[k] || "?"} \u2192 ${b[k] || "?"}`);
    return what.join(", ") || "device fingerprint changed";
  }
  // a series holds every environment its device ran the case in: one trend, a segment at each change
  function lineage(i) { return [i]; }
  function segments(line) {
    const out = [];
    line.forEach((j) => {
      // S.ev: a series' environments where it has more than one, [point offset, fingerprint] from its first point on
      const envs = S.ev[j] || [];
      for (let n = 1; n < envs.length; n++) out.push({k: start[j] + envs[n][0], why: envDiff(D.fps[envs[n - 1][1]], D.fps[envs[n][1]])});
      for (let k = start[j] + 1; k < start[j + 1]; k++) {
        // a method not recorded (a result stored before it was) runs on into the recorded one, as in the regression check
        if (fl[k] !== fl[k - 1] && fl[k] >= 0 && fl[k - 1] >= 0) out.push({k, why: `flush method ${D.flush[fl[k - 1]]} \u2192 ${D.flush[fl[k]]}`});
        if (pc[k] !== pc[k - 1] && pc[k] >= 0 && pc[k - 1] >= 0) out.push({k, why: `pace ${D.pace[pc[k - 1]]} \u2192 ${D.pace[pc[k]]}`});
      }
    });
    return out;
  }
  {% endraw %}{% include "history_trend.js" %}{% raw %}
  $("series").addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-i]");
    if (!tr || e.target.closest("a")) return;
    const i = +tr.dataset.i;
    location.hash = hashOf(Object.assign({}, state, {open: S.key[i] + "@" + dev(i).id}));
  });
  apply();
  performance.mark("history-ready");
  document.body.dataset.ready = "1";
})();
{% endraw %}
