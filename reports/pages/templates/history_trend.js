{% raw %}
  /* The opened series (included into history.js's closure): its full trend as an SVG, the gate's
     verdict in words, and its runs newest first. */
  const W = 960, H = 320, L = 70, R = 20, T = 14, B = 44;
  const band = (k, off) => med[k] * Math.exp(off / STEP);
  function axis(min, max, n) {
    const step = Math.pow(10, Math.floor(Math.log10((max - min) / n || 1))), ticks = [];
    const nice = [1, 2, 5, 10].map((m) => m * step).find((s) => (max - min) / s <= n) || 10 * step;
    const digits = Math.max(0, -Math.floor(Math.log10(nice)));
    for (let v = Math.ceil(min / nice) * nice; v <= max + nice * 1e-9; v += nice) ticks.push([v, v.toFixed(digits)]);
    return ticks;
  }
  const label = (x, text, y, cls) => `<text class="${cls}" x="${+x > W - 160 ? +x - 3 : +x + 3}" y="${y}" text-anchor="${+x > W - 160 ? "end" : "start"}">${esc(text)}</text>`;
  function chart(i, line, segs) {
    const ks = [];
    for (const j of line) for (let k = start[j]; k < start[j + 1]; k++) ks.push(k);
    const useTime = ks.every((k) => RT[run[k]] !== null);
    const xs = ks.map((k, n) => useTime ? RT[run[k]] : n), at = new Map(ks.map((k, n) => [k, xs[n]]));
    let ymin = Infinity, ymax = -Infinity;
    for (const k of ks) { ymin = Math.min(ymin, band(k, -lo[k])); ymax = Math.max(ymax, band(k, hi[k])); }
    const b = S.b[i], s = S.s[i], z = D.z;
    if (b !== null) { ymin = Math.min(ymin, b - z * s); ymax = Math.max(ymax, b + z * s); }
    const pad = (ymax - ymin) * 0.05 || ymax * 0.05 || 1;
    ymin -= pad; ymax += pad;
    const x0 = Math.min(...xs), x1 = Math.max(...xs), xspan = x1 - x0 || 1;
    const X = (x) => (L + (x - x0) / xspan * (W - L - R)).toFixed(1), Y = (v) => (T + (ymax - v) / (ymax - ymin) * (H - T - B)).toFixed(1);
    const out = [`<svg class="trend" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="trend of ${esc(S.key[i])}">`];
    for (const [v, text] of axis(ymin, ymax, 6)) out.push(`<line class="grid" x1="${L}" x2="${W - R}" y1="${Y(v)}" y2="${Y(v)}"/><text class="tick" x="${L - 6}" y="${Y(v)}" text-anchor="end" dy="3">${text}</text>`);
    const xt = ks.filter((_, n) => n % Math.max(1, Math.ceil(ks.length / 7)) === 0);
    for (const k of xt) out.push(`<text class="tick" x="${X(at.get(k))}" y="${H - B + 16}" text-anchor="middle">${useTime ? date(run[k]).slice(0, 10) : "run " + RID[run[k]]}</text>`);
    out.push(`<text class="tick" x="${L}" y="${T - 3}">median ms (band: p10-p90 of each run)</text>`);
    if (b !== null) {
      const own = [start[i], start[i + 1] - 1].map((k) => X(at.get(k)));
      out.push(`<rect class="baseline" x="${own[0]}" width="${Math.max(1, own[1] - own[0])}" y="${Y(b + z * s)}" height="${Math.max(1, Y(b - z * s) - Y(b + z * s))}"><title>baseline ${num(b)} ms, +/- ${z} spreads (${num(s)} ms)</title></rect>`);
      out.push(`<line class="baseline-mid" x1="${own[0]}" x2="${own[1]}" y1="${Y(b)}" y2="${Y(b)}"/>`);
    }
    if (S.dr[i] && S.dr[i][0] >= 0) {
      const first = ks.find((k) => run[k] === S.dr[i][0] && k >= start[i]);
      if (first !== undefined) out.push(`<rect class="drift" x="${X(at.get(first))}" width="${Math.max(1, X(x1) - X(at.get(first)))}" y="${T}" height="${H - T - B}"><title>drift ${pct(S.dr[i][1])} over ${S.dr[i][2]} runs</title></rect>`);
    }
    for (const j of line) {
      const a = start[j], e = start[j + 1], up = [], down = [], mid = [];
      for (let k = a; k < e; k++) { up.push(X(at.get(k)) + "," + Y(band(k, hi[k]))); down.unshift(X(at.get(k)) + "," + Y(band(k, -lo[k]))); mid.push(X(at.get(k)) + "," + Y(med[k])); }
      out.push(`<polygon class="p1090${j === i ? "" : " other"}" points="${up.concat(down).join(" ")}"/><polyline class="median${j === i ? "" : " other"}" points="${mid.join(" ")}"/>`);
    }
    for (const g of segs) out.push(`<line class="segment" x1="${X(at.get(g.k))}" x2="${X(at.get(g.k))}" y1="${T}" y2="${H - B}"><title>segment starts: ${esc(g.why)}</title></line>` + label(X(at.get(g.k)), g.why, T + 10, "seg-label"));
    for (const c of S.cp[i]) {
      const k = ks.find((q) => q >= start[i] && q < start[i + 1] && run[q] === c[0]);
      if (k === undefined) continue;
      const dir = c[1] > 0 ? "slower" : "faster";
      out.push(`<line class="cp cp-${dir}" x1="${X(at.get(k))}" x2="${X(at.get(k))}" y1="${T}" y2="${H - B}"><title>change point, ${dir} ${pct(c[1])} at run ${esc(RID[c[0]])} (p = ${c[2]})</title></line>` + label(X(at.get(k)), "change " + pct(c[1]), H - B - 4, "cp-label cp-" + dir));
    }
    const flagged = new Set(S.fl[i]);
    for (const k of ks) {
      const mine = k >= start[i] && k < start[i + 1], r = run[k];
      const title = `run ${RID[r]}, ${date(r)}, commit ${RC[r] || "not recorded"}\nmedian ${num(med[k])} ms, p10 ${num(band(k, -lo[k]))}, p90 ${num(band(k, hi[k]))}` +
        (ex[k] ? `\nkept out of the baseline: ${D.excluded[ex[k]]}` : "") + (fl[k] >= 0 ? `\nflush ${D.flush[fl[k]]}` : "") + (pc[k] >= 0 ? `, pace ${D.pace[pc[k]]}` : "") + (mine && flagged.has(r) ? "\nflagged by the regression check" : "");
      const cls = (mine && flagged.has(r) ? "pt flagged" : "pt") + (ex[k] ? " excluded" : "") + (mine ? "" : " other");
      out.push(`<circle class="${cls}" cx="${X(at.get(k))}" cy="${Y(med[k])}" r="${mine && flagged.has(r) ? 5 : 2.6}"><title>${esc(title)}</title></circle>`);
      if (mine && r === S.fb[i]) out.push(`<circle class="first-bad" cx="${X(at.get(k))}" cy="${Y(med[k])}" r="9"><title>first bad run ${esc(RID[r])} (commit ${esc(RC[r] || "not recorded")})</title></circle>`);
    }
    out.push("</svg>");
    return out.join("");
  }
  function runsTable(i, all) {
    const rows = [], [a, b] = points(i), flagged = new Set(S.fl[i]), cps = new Map(S.cp[i].map((c) => [c[0], c]));
    for (let k = b - 1; k >= a && (all || rows.length < 30); k--) {
      const r = run[k], notes = [];
      if (flagged.has(r)) notes.push('<span class="status-regression">flagged</span>');
      if (r === S.fb[i]) notes.push("first bad run");
      if (cps.has(r)) notes.push("change point " + pct(cps.get(r)[1]));
      if (ex[k]) notes.push("kept out of baseline: " + D.excluded[ex[k]]);
      if (k > a && fl[k] !== fl[k - 1] && fl[k] >= 0 && fl[k - 1] >= 0) notes.push("flush method changed");
      if (k > a && pc[k] !== pc[k - 1] && pc[k] >= 0 && pc[k - 1] >= 0) notes.push("pace changed");
      if ((S.ev[i] || []).some((e) => e[0] > 0 && a + e[0] === k)) notes.push("environment changed");
      rows.push(`<tr><td class="key">${esc(RID[r])}</td><td>${date(r)}</td><td class="key">${esc(RC[r] || "")}</td><td class="n">${num(med[k])}</td><td class="n">${num(band(k, -lo[k]))}</td><td class="n">${num(band(k, hi[k]))}</td><td>${esc(fl[k] >= 0 ? D.flush[fl[k]] : "")}</td><td>${esc(pc[k] >= 0 ? D.pace[pc[k]] : "")}</td><td>${notes.join("; ")}</td></tr>`);
    }
    return rows.join("");
  }
  function openSeries(i) {
    const box = $("detail");
    if (i === undefined) { box.hidden = true; box.innerHTML = ""; return; }
    const fp = D.fps[S.fp[i]], line = lineage(i), segs = segments(line), [a, b] = points(i), v = verdict(i);
    const close = hashOf(Object.assign({}, state, {open: ""}));
    const fb = S.fb[i] >= 0 ? `first bad run <span class="key">${esc(RID[S.fb[i]])}</span> (${date(S.fb[i])}, commit <span class="key">${esc(RC[S.fb[i]] || "not recorded")}</span>)` : "";
    const d = dev(i), others = "";
    box.innerHTML = `<h2><span class="status-${esc(v)}">${esc(v.replace("_", " "))}</span>${S.d[i] ? ' + <span class="status-suspect">drift</span>' : ""}: <span class="key">${esc(S.key[i])}</span> <a class="close" href="${esc(close)}">close</a></h2>` +
      `<p>${esc(fp.device)}: device <span class="key">${esc(d.key)}</span>${d.host ? " on " + esc(d.host) : ""}${d.id !== d.key ? " (" + esc(d.id.split("@")[0]) + ")" : ""} <span class="note">newest environment ${esc(fp.fp)}; driver ${esc(fp.driver || "?")}, CUDA ${esc(fp.cuda || "?")}, torch ${esc(fp.torch || "?")}</span></p>` +
      `<p>${b - a} runs; newest ${num(med[b - 1])} ms (${esc(RID[run[b - 1]])}, ${date(run[b - 1])})` +
      (S.b[i] !== null ? `; baseline ${num(S.b[i])} ms, spread ${num(S.s[i])} ms; change of the newest ${pct(S.c[i])}` : "") +
      (fb ? `; ${fb}` : "") + (S.dr[i] ? `; drift ${pct(S.dr[i][1])} over ${S.dr[i][2]} runs` : "") + `. <span class="note">${esc(S.nt[i] || "")}</span></p>` +
      others + `<div class="figure">${chart(i, line, segs)}</div>` +
      `<p class="note">Blue: per-run medians with their p10-p90 band; hollow: kept out of the baseline; large red dots: nights the regression check flagged; black ring: first bad run; shaded box: the baseline +/- ${D.z} spreads; red dash-dot (slower) and green (faster): change points; purple: drift window; green dashed: a segment starts (${segs.length ? esc(segs.map((g) => g.why).join("; ")) : "none in this trend"}). Hover a point for its run, date and commit.</p>` +
      `<table class="runs"><thead><tr><th>run</th><th>started (UTC)</th><th>commit</th><th>median ms</th><th>p10 ms</th><th>p90 ms</th><th>flush</th><th>pace</th><th>note</th></tr></thead><tbody>${runsTable(i, false)}</tbody></table>` +
      (b - a > 30 ? '<p><button id="all-runs" type="button">all runs</button></p>' : "");
    box.hidden = false;
    const more = $("all-runs");
    if (more) more.addEventListener("click", () => { box.querySelector("table.runs tbody").innerHTML = runsTable(i, true); more.remove(); });
  }
{% endraw %}
