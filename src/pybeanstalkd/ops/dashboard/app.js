/* pybeanstalkd dashboard. Plain JS, no dependencies, no build step.
 * Reads and acts through the JSON API of docs/HTTP-API.md (/api/v1). */
'use strict';

(function () {
  const API = '/api/v1';
  const WINDOW_MS = 5 * 60 * 1000;      // history drawn (the server keeps as much: GET /history)
  const RATE_WINDOW_MS = 3000;          // rates shown as numbers: averaged over this
  const MIN_SPAN_MS = 60 * 1000;        // the charts' shortest time axis
  const STATES = ['ready', 'delayed', 'buried', 'reserved'];
  const MAX_TUBE_ROWS = 500;            // rows drawn at once; the filter narrows the rest
  const MAX_TUBES_WITH_HISTORY = 300;   // above this, no per-tube sparklines

  // ------------------------------------------------------------ formatting

  const nfInt = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });
  const nf1 = new Intl.NumberFormat('en-US', { minimumFractionDigits: 1, maximumFractionDigits: 1 });

  function fmtInt(v) {
    return v == null || Number.isNaN(v) ? '—' : nfInt.format(v);
  }

  function fmtRate(v) {
    if (v == null || Number.isNaN(v)) return '—';
    if (v === 0) return '0';
    return Math.abs(v) < 100 ? nf1.format(v) : nfInt.format(v);
  }

  function fmtShort(v) {
    const a = Math.abs(v);
    const num = (x) => {
      const s = Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 1 ? x.toFixed(1) : x.toFixed(2);
      return s.replace(/\.0+$/, '').replace(/(\.\d*?)0+$/, '$1');
    };
    if (a >= 1e9) return num(v / 1e9) + 'G';
    if (a >= 1e6) return num(v / 1e6) + 'M';
    if (a >= 1e3) return num(v / 1e3) + 'k';
    return num(v);
  }

  const pad2 = (n) => (n < 10 ? '0' : '') + n;

  function fmtDur(s) {
    if (s == null || Number.isNaN(s)) return '—';
    s = Math.max(0, Math.floor(s));
    const two = (big, bigUnit, small, smallUnit, padded) =>
      big + bigUnit + (small ? ' ' + (padded ? pad2(small) : small) + smallUnit : '');
    if (s < 60) return s + 's';
    if (s < 3600) return two(Math.floor(s / 60), 'm', s % 60, 's', true);
    if (s < 86400) return two(Math.floor(s / 3600), 'h', Math.floor((s % 3600) / 60), 'm', true);
    return two(Math.floor(s / 86400), 'd', Math.floor((s % 86400) / 3600), 'h', false);
  }

  function fmtBytes(n) {
    if (n == null) return '—';
    if (n < 1024) return n + ' B';
    const units = ['KiB', 'MiB', 'GiB', 'TiB'];
    let v = n / 1024;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (v >= 100 ? v.toFixed(0) : v.toFixed(1)) + ' ' + units[i];
  }

  function fmtClock(t) {
    const d = new Date(t);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes());
  }

  function fmtClockSec(t) {
    const d = new Date(t);
    return fmtClock(t) + ':' + pad2(d.getSeconds());
  }

  // hex string -> "68 65 6c 6c 6f"
  function spacedHex(hex) {
    return hex.replace(/(..)(?!$)/g, '$1 ');
  }

  // hex string -> hexdump lines: offset, 16 bytes in two groups, printable ASCII
  function hexdump(hex) {
    const lines = [];
    for (let off = 0; off * 2 < hex.length; off += 16) {
      const chunk = hex.slice(off * 2, off * 2 + 32);
      const bytes = chunk.match(/../g) || [];
      let hx = '';
      let asc = '';
      for (let i = 0; i < 16; i++) {
        hx += (i < bytes.length ? bytes[i] : '  ') + (i === 7 ? '  ' : ' ');
        if (i < bytes.length) {
          const b = parseInt(bytes[i], 16);
          asc += b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.';
        }
      }
      lines.push(off.toString(16).padStart(8, '0') + '  ' + hx + ' |' + asc + '|');
    }
    return lines.join('\n');
  }

  // ------------------------------------------------------------ DOM helpers

  const $ = (sel, root) => (root || document).querySelector(sel);
  const byTest = (id, root) => $('[data-testid="' + id + '"]', root);

  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v == null || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = v;
        else if (k === 'dataset') Object.assign(el.dataset, v);
        else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
        else el.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const kid of kids.flat()) {
      if (kid == null || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  // Restart a short highlight on an element whose value changed.
  function flash(el, dir) {
    clearTimeout(el._flashTimer);
    el.classList.remove('flash', 'flash-up', 'flash-down');
    void el.offsetWidth; // restart the CSS animation
    el.classList.add('flash', dir > 0 ? 'flash-up' : 'flash-down');
    el._flashTimer = setTimeout(() => el.classList.remove('flash', 'flash-up', 'flash-down'), 1600);
  }

  // Set a cell's value; returns true when it changed. `raw` goes to data-value.
  function setCell(el, raw, text, doFlash) {
    if (el._raw === raw && el._text === text) return false;
    const had = el._raw !== undefined;
    const old = el._raw;
    el._raw = raw;
    el._text = text;
    el.textContent = text;
    el.dataset.value = raw == null ? '' : String(raw);
    if (typeof raw === 'number') el.classList.toggle('zero', raw === 0);
    if (had && doFlash && old !== raw) flash(el, typeof raw === 'number' && typeof old === 'number' ? raw - old : 1);
    return true;
  }

  // ------------------------------------------------------------ HTTP

  function httpError(r, data) {
    const msg = data && data.error ? data.error : r.status + ' ' + (r.statusText || 'error');
    const e = new Error(msg);
    e.status = r.status;
    return e;
  }

  async function request(method, path, body) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 10000);
    const init = { method, cache: 'no-store', signal: ctl.signal, headers: { Accept: 'application/json' } };
    if (method === 'POST') {
      init.headers['Content-Type'] = 'application/json';
      init.headers['X-Pybeanstalkd'] = '1';
      init.body = JSON.stringify(body || {});
    }
    try {
      const r = await fetch(API + path, init);
      const text = await r.text();
      let data = null;
      try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
      if (!r.ok) throw httpError(r, data || (text ? { error: r.status + ' ' + text.trim().slice(0, 200) } : null));
      return data;
    } catch (e) {
      if (e.name === 'AbortError') throw new Error('timed out');
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  const getJSON = (path) => request('GET', path);
  const postJSON = (path, body) => request('POST', path, body);
  const tubePath = (name) => '/tubes/' + encodeURIComponent(name);

  // ------------------------------------------------------------ state

  const params = new URLSearchParams(location.search);

  const S = {
    interval: 1000,
    timer: null,
    inflight: false,
    again: false,
    online: null,
    failures: 0,
    cluster: null,               // GET /cluster's report; false: not in a cluster
    groups: null,                // GET /groups' list; false: no --extensions (no put tags)
    groupRows: new Map(),        // group name -> {tr, cells:{}}
    tubeExt: false,              // the tube JSON has the put tags' counts (--extensions)
    stats: null,
    draining: false,
    memory: null,
    lastPid: null,
    lastUptime: null,
    // The server's samples (GET /history), one a second: t is the server's
    // monotonic clock in ms, wall its clock (for the axis' labels).
    samples: [],                 // {t, wall, gap, dt, c:{put,res,del}, put,res,del (per s), dput.., ready, reserved, delayed, buried, urgent}
    wallOffset: 0,               // the server's wall clock minus its monotonic one, in ms
    tubes: new Map(),            // name -> stats-tube object
    tubeNames: [],               // API order (by name)
    tubeHist: new Map(),         // name -> [{t, gap, ready, total, del, put, dl, dt}]
    sort: { key: 'name', dir: 1 },
    filter: '',
    rows: new Map(),             // name -> {tr, cells:{}, spark, pauseBtn}
    hover: new Map(),            // chart id -> x in px
    hidden: new Set(),           // series keys switched off in the legends
    scale: { 'chart-depth': 'log' },  // chart id -> 'lin' or 'log'
    jobs: {
      tube: null, state: 'ready', offset: 0, limit: 50, mode: 'text',
      data: null, error: null, rows: new Map(), expanded: new Set(), loading: false,
    },
  };

  // ------------------------------------------------------------ charts

  const THROUGHPUT = [
    { key: 'put', label: 'Puts', color: 'var(--c-put)' },
    { key: 'res', label: 'Reserves', color: 'var(--c-res)' },
    // dashed, and drawn over reserves: when workers delete what they reserve
    // the two lines coincide, and both stay visible
    { key: 'del', label: 'Deletes', color: 'var(--c-del)', dash: '5 4' },
  ];
  const DEPTH = [
    { key: 'ready', label: 'Ready', color: 'var(--c-ready)' },
    { key: 'reserved', label: 'Reserved', color: 'var(--c-reserved)' },
    { key: 'delayed', label: 'Delayed', color: 'var(--c-delayed)' },
    { key: 'buried', label: 'Buried', color: 'var(--c-buried)' },
  ];
  const CHARTS = [
    { id: 'chart-throughput', legend: 'legend-throughput', series: THROUGHPUT, rate: true },
    { id: 'chart-depth', legend: 'legend-depth', series: DEPTH, rate: false, scale: true },
  ];

  function niceScale(max, integer) {
    if (!(max > 0)) return { top: integer ? 4 : 1, step: integer ? 1 : 0.25 };
    const target = 4;
    const raw = max / target;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const m = raw / p;
    let step = (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
    if (integer && step < 1) step = 1;
    return { top: Math.ceil(max / step - 1e-9) * step, step };
  }

  function chartValue(smp, key) {
    const v = smp[key];
    return v == null ? null : v;
  }

  function renderChart(def) {
    const el = document.getElementById(def.id);
    const w = el.clientWidth;
    const ht = el.clientHeight;
    if (!w || !ht) return;
    const m = { l: 46, r: 12, t: 10, b: 22 };
    const pw = w - m.l - m.r;
    const ph = ht - m.t - m.b;
    const samples = S.samples;
    const now = samples.length ? samples[samples.length - 1].t : Date.now() - S.wallOffset;
    // The window grows from one minute to WINDOW_MS as samples come in.
    const span = Math.max(MIN_SPAN_MS, Math.min(WINDOW_MS, samples.length ? now - samples[0].t : 0));
    const x0 = now - span;
    const visible = def.series.filter((s) => !S.hidden.has(s.key));

    let max = 0;
    for (const smp of samples) {
      if (smp.t < x0) continue;
      for (const s of visible) {
        const v = chartValue(smp, s.key);
        if (v != null && v > max) max = v;
      }
    }
    const X = (t) => m.l + ((t - x0) / span) * pw;
    let Y;
    const yTicks = [];
    const log = def.scale && S.scale[def.id] === 'log';
    if (log) {
      // log10(1 + v): 0 stays on the axis, and 5 buried jobs show beside 50,000 ready ones
      const exp = Math.max(1, Math.ceil(Math.log10(max + 1) - 1e-9));
      Y = (v) => m.t + ph - (Math.log10(1 + Math.max(0, v)) / Math.log10(1 + Math.pow(10, exp))) * ph;
      const every = exp > 5 ? 2 : 1;
      yTicks.push(0);
      // the tick for 1 sits a third of a decade above 0: only when there is room
      for (let k = (ph / exp) * 0.3 >= 12 ? 0 : 1; k <= exp; k += every) yTicks.push(Math.pow(10, k));
    } else {
      const { top, step } = niceScale(max, !def.rate);
      Y = (v) => m.t + ph - (v / top) * ph;
      for (let v = 0; v <= top + step / 1000; v += step) yTicks.push(v);
    }
    const f1 = (x) => x.toFixed(1);

    const out = [];
    out.push('<svg class="chart-svg" xmlns="http://www.w3.org/2000/svg" width="' + w + '" height="' + ht +
      '" viewBox="0 0 ' + w + ' ' + ht + '" role="img" aria-label="' + def.id + '">');
    out.push('<defs>');
    for (const s of visible) {
      out.push('<linearGradient id="g-' + def.id + '-' + s.key + '" x1="0" y1="0" x2="0" y2="1">' +
        '<stop offset="0" style="stop-color:' + s.color + ';stop-opacity:' + (def.rate ? 0.12 : 0.2) + '"/>' +
        '<stop offset="1" style="stop-color:' + s.color + ';stop-opacity:0"/></linearGradient>');
    }
    out.push('</defs>');

    // horizontal grid and y labels
    for (const v of yTicks) {
      const y = Math.round(Y(v)) + 0.5;
      out.push('<line class="' + (v === 0 ? 'axis' : 'gridline') + '" x1="' + m.l + '" x2="' + (w - m.r) + '" y1="' + y + '" y2="' + y + '"/>');
      out.push('<text class="tick" x="' + (m.l - 7) + '" y="' + y + '" dy="0.33em" text-anchor="end">' + fmtShort(v) + '</text>');
    }
    // vertical ticks: the smallest round step that leaves ~90 px per label
    const every = [10000, 15000, 30000, 60000, 120000, 300000].find((st) => (span / st) * 90 <= pw) || 300000;
    // (at round times of the server's clock)
    const off = S.wallOffset;
    for (let tw = Math.ceil((x0 + off) / every) * every; tw <= now + off; tw += every) {
      const x = Math.round(X(tw - off)) + 0.5;
      out.push('<line class="gridline v" x1="' + x + '" x2="' + x + '" y1="' + m.t + '" y2="' + (m.t + ph) + '"/>');
      out.push('<text class="tick" x="' + x + '" y="' + (ht - 6) + '" text-anchor="middle">' +
        (tw % 60000 === 0 ? fmtClock(tw) : fmtClockSec(tw)) + '</text>');
    }
    out.push('<line class="axis" x1="' + (m.l + 0.5) + '" x2="' + (m.l + 0.5) + '" y1="' + m.t + '" y2="' + (m.t + ph) + '"/>');

    // series: an area under each line, then the lines on top
    const lines = [];
    for (const s of visible) {
      const segs = [];
      let seg = null;
      let points = 0;
      for (const smp of samples) {
        if (smp.t < x0) continue;
        const v = chartValue(smp, s.key);
        if (v == null || (smp.gap && !def.rate)) {
          seg = null;
          if (v == null) continue;
        }
        if (!seg) { seg = []; segs.push(seg); }
        seg.push([Math.max(m.l, X(smp.t)), Y(v)]);
        points++;
      }
      let d = '';
      let area = '';
      for (const sg of segs) {
        d += 'M' + sg.map((p) => f1(p[0]) + ',' + f1(p[1])).join('L');
        if (sg.length > 1) {
          const base = f1(m.t + ph);
          area += 'M' + f1(sg[0][0]) + ',' + base + 'L' + sg.map((p) => f1(p[0]) + ',' + f1(p[1])).join('L') +
            'L' + f1(sg[sg.length - 1][0]) + ',' + base + 'Z';
        }
      }
      if (area && !def.rate && !log) out.push('<path class="area" d="' + area + '" style="fill:url(#g-' + def.id + '-' + s.key + ')"/>');
      lines.push('<path class="series" data-series="' + s.key + '" data-points="' + points + '" d="' + (d || 'M0,0') +
        '" style="stroke:' + s.color + (s.dash ? ';stroke-dasharray:' + s.dash : '') + '"/>');
      const last = segs.length ? segs[segs.length - 1] : null;
      if (last && last.length) {
        const p = last[last.length - 1];
        lines.push('<circle class="dot" cx="' + f1(p[0]) + '" cy="' + f1(p[1]) + '" r="2.5" style="fill:' + s.color + '"/>');
      }
    }
    out.push(...lines);

    // hover: crosshair and tooltip at the nearest sample
    let tip = '';
    const hx = S.hover.get(def.id);
    if (hx != null && samples.length && hx >= m.l && hx <= w - m.r) {
      const th = x0 + ((hx - m.l) / pw) * span;
      let best = null;
      for (const smp of samples) {
        if (smp.t < x0) continue;
        if (!best || Math.abs(smp.t - th) < Math.abs(best.t - th)) best = smp;
      }
      if (best) {
        const x = Math.round(X(best.t)) + 0.5;
        out.push('<line class="crosshair" x1="' + x + '" x2="' + x + '" y1="' + m.t + '" y2="' + (m.t + ph) + '"/>');
        for (const s of visible) {
          const v = chartValue(best, s.key);
          if (v != null) out.push('<circle class="hover-dot" cx="' + x + '" cy="' + f1(Y(v)) + '" r="3.5" style="stroke:' + s.color + '"/>');
        }
        const rows = visible.map((s) => {
          const v = chartValue(best, s.key);
          return '<div><i style="background:' + s.color + '"></i>' + s.label + '<b>' +
            (def.rate ? fmtRate(v) : fmtInt(v)) + '</b></div>';
        }).join('');
        const left = x > w / 2 ? 'right:' + (w - x + 10) + 'px' : 'left:' + (x + 10) + 'px';
        tip = '<div class="chart-tip" style="' + left + '"><div class="tip-time">' + fmtClockSec(best.wall) + '</div>' + rows + '</div>';
      }
    }
    out.push('</svg>');
    el.innerHTML = out.join('') + tip;
  }

  function renderLegend(def) {
    const el = document.getElementById(def.legend);
    const last = S.samples.length ? S.samples[S.samples.length - 1] : null;
    if (!el._built) {
      el._built = true;
      for (const s of def.series) {
        const item = h('button', {
          type: 'button', class: 'lg-item', title: 'Show or hide ' + s.label,
          dataset: { series: s.key, testid: 'legend-' + s.key },
          onclick: () => {
            if (S.hidden.has(s.key)) S.hidden.delete(s.key); else S.hidden.add(s.key);
            renderLegend(def);
            renderChart(def);
          },
        }, h('i', { class: s.dash ? 'dashed' : null, style: (s.dash ? 'color:' : 'background:') + s.color }),
        h('span', { class: 'lg-label', text: s.label }), h('b', { class: 'lg-value' }));
        el.append(item);
      }
    }
    for (const item of el.children) {
      const key = item.dataset.series;
      item.classList.toggle('off', S.hidden.has(key));
      let v = null;
      if (last) v = def.rate ? currentRate(key) : last[key];
      item.querySelector('.lg-value').textContent = def.rate ? fmtRate(v) : fmtInt(v);
    }
  }

  function renderCharts() {
    for (const b of document.querySelectorAll('[data-scale]')) b.classList.toggle('active', S.scale['chart-depth'] === b.dataset.scale);
    for (const def of CHARTS) {
      renderChart(def);
      renderLegend(def);
    }
  }

  // Rate of a global counter over the last RATE_WINDOW_MS.
  function currentRate(key) {
    return windowRate(S.samples, 'd' + key);
  }

  function windowRate(arr, dkey) {
    if (!arr.length) return null;
    const end = arr[arr.length - 1].t;
    let sum = 0;
    let dt = 0;
    for (let i = arr.length - 1; i >= 0; i--) {
      const s = arr[i];
      if (s.dt == null || s[dkey] == null) break;
      sum += s[dkey];
      dt += s.dt;
      if (end - s.t + s.dt * 1000 >= RATE_WINDOW_MS) break;
    }
    return dt > 0 ? sum / dt : null;
  }

  // ------------------------------------------------------------ stats

  function gapMs() {
    return Math.max(5000, 4 * (S.interval || 1000));
  }

  const GAP_MS = 5000;  // samples further apart than this (a second apart as a rule) are not joined

  function applyStats(resp) {
    const st = resp.stats || {};
    S.stats = st;
    S.draining = !!resp.draining;
    S.memory = resp.memory || null;
    S.aftHeld = resp['held-jobs'] || 0;  // --extensions: jobs no current-jobs-* counts
    S.lastPid = st.pid;
    S.lastUptime = st.uptime;
    renderHeader();
    renderKpis();
  }

  // The server's samples (GET /history), appended to those already here.
  // Rates come from the server's counters and its clock: the count moved
  // between two samples over the time between them.
  function applyHistory(resp) {
    for (const r of resp.samples || []) {
      const prev = S.samples.length ? S.samples[S.samples.length - 1] : null;
      if (prev && r.mono <= prev.t) continue;  // (already here)
      const c = { put: r.put, res: r.reserve, del: r.delete };
      const smp = {
        t: r.mono, wall: r.time, c, gap: true, dt: null, put: null, res: null, del: null, dput: null, dres: null, ddel: null,
        ready: r.ready, reserved: r.reserved, delayed: r.delayed, buried: r.buried, urgent: r.urgent,
      };
      // (a gap: the server was too busy to sample, or it restarted)
      if (prev && r.mono - prev.t < GAP_MS && c.put >= prev.c.put && c.res >= prev.c.res && c.del >= prev.c.del) {
        smp.gap = false;
        smp.dt = (r.mono - prev.t) / 1000;
        for (const k of ['put', 'res', 'del']) {
          smp['d' + k] = c[k] - prev.c[k];
          smp[k] = smp['d' + k] / smp.dt;
        }
      }
      S.samples.push(smp);
      S.wallOffset = r.time - r.mono;
    }
    const last = S.samples.length ? S.samples[S.samples.length - 1].t : 0;
    while (S.samples.length && S.samples[0].t < last - WINDOW_MS) S.samples.shift();
  }

  function renderHeader() {
    const st = S.stats;
    $('#host').textContent = st.hostname ? st.hostname + ' · ' + location.host : location.host;
    setCell($('#stat-version'), st.version, st.version == null ? '—' : String(st.version), false);
    setCell($('#stat-uptime'), st.uptime, fmtDur(st.uptime), false);
    $('#stat-uptime').title = fmtInt(st.uptime) + ' s';
    setCell($('#stat-pid'), st.pid, st.pid == null ? '—' : String(st.pid), false);
    const binlog = st['binlog-current-index'] ? 'on · file ' + st['binlog-current-index'] + ' · ' + fmtInt(st['binlog-records-written']) + ' written' : 'off';
    setCell($('#stat-binlog'), binlog, binlog, false);
    document.title = (S.draining ? '[draining] ' : '') + 'pybeanstalkd · ' + (st.hostname || location.host);

    const drainBtn = $('#btn-drain');
    drainBtn.textContent = S.draining ? 'Undrain' : 'Drain';
    drainBtn.classList.toggle('warn', S.draining);
    drainBtn.dataset.draining = S.draining ? '1' : '0';
    $('#drain-banner').hidden = !S.draining;
    document.body.classList.toggle('draining', S.draining);
    renderDrainButtons();
  }

  // A follower refuses every action (503: only the leader changes the
  // queue), so it offers no Drain or Undrain: its banner names the leader.
  // GET /cluster says which this node is; a failover shows them again.
  function renderDrainButtons() {
    const follower = !!S.cluster && S.cluster.role !== 'leader';
    $('#btn-drain').hidden = follower;
    $('#btn-undrain-banner').hidden = follower;
  }

  function renderKpis() {
    const st = S.stats;
    const set = (id, raw, text, fl) => setCell(byTest(id), raw, text, fl !== false);
    set('kpi-ready', st['current-jobs-ready'], fmtInt(st['current-jobs-ready']));
    set('kpi-urgent', st['current-jobs-urgent'], fmtInt(st['current-jobs-urgent']), false);
    set('kpi-reserved', st['current-jobs-reserved'], fmtInt(st['current-jobs-reserved']));
    set('kpi-timeouts', st['job-timeouts'], fmtInt(st['job-timeouts']), false);
    setWord(byTest('kpi-timeouts'), st['job-timeouts'], 'timeout since start', 'timeouts since start');
    set('kpi-delayed', st['current-jobs-delayed'], fmtInt(st['current-jobs-delayed']));
    set('kpi-buried', st['current-jobs-buried'], fmtInt(st['current-jobs-buried']));
    const rp = currentRate('put');
    const rr = currentRate('res');
    const rd = currentRate('del');
    set('kpi-puts-rate', rp, fmtRate(rp), false);
    set('kpi-reserves-rate', rr, fmtRate(rr), false);
    set('kpi-deletes-rate', rd, fmtRate(rd), false);
    const res = (st['cmd-reserve'] || 0) + (st['cmd-reserve-with-timeout'] || 0);
    set('kpi-puts-total', st['cmd-put'], fmtInt(st['cmd-put']), false);
    set('kpi-reserves-total', res, fmtInt(res), false);
    set('kpi-deletes-total', st['cmd-delete'], fmtInt(st['cmd-delete']), false);
    set('kpi-connections', st['current-connections'], fmtInt(st['current-connections']));
    set('kpi-producers', st['current-producers'], fmtInt(st['current-producers']), false);
    set('kpi-workers', st['current-workers'], fmtInt(st['current-workers']), false);
    set('kpi-waiting', st['current-waiting'], fmtInt(st['current-waiting']), false);
    set('kpi-tubes', st['current-tubes'], fmtInt(st['current-tubes']));
    // what the server holds now (not total-jobs: every job put since start)
    const held = heldJobs(st) + (S.aftHeld || 0);
    set('kpi-held-jobs', held, fmtInt(held), false);
    setWord(byTest('kpi-held-jobs'), held, 'job held', 'jobs held');

    const mem = S.memory;
    const card = $('#kpi-memory-card');
    const fill = $('#membar-fill');
    if (mem && mem.used != null) {
      set('kpi-memory', mem.used, fmtBytes(mem.used), false);
      if (mem.cap) {
        const pct = Math.min(100, (100 * mem.used) / mem.cap);
        set('kpi-memory-cap', mem.cap, pct.toFixed(pct < 10 ? 1 : 0) + '% of ' + fmtBytes(mem.cap), false);
        fill.style.width = pct + '%';
        card.dataset.level = pct >= 95 ? 'crit' : pct >= 80 ? 'warn' : 'ok';
      } else {
        set('kpi-memory-cap', null, 'no cap', false);
        byTest('kpi-memory-cap').title = 'no --max-memory given';
        fill.style.width = '0';
        card.dataset.level = 'none';
      }
    } else {
      set('kpi-memory', null, '—', false);
      set('kpi-memory-cap', null, 'not reported', false);
      card.dataset.level = 'none';
    }
  }

  // ------------------------------------------------------------ tubes

  const BASE_TUBE_COLS = [
    { key: 'current-jobs-ready', label: 'Ready', state: 'ready', cls: 'st-ready' },
    { key: 'current-jobs-urgent', label: 'Urgent', cls: 'st-urgent', title: 'ready jobs with priority < 1024' },
    { key: 'current-jobs-reserved', label: 'Reserved', state: 'reserved', cls: 'st-reserved' },
    { key: 'current-jobs-delayed', label: 'Delayed', state: 'delayed', cls: 'st-delayed' },
    { key: 'current-jobs-buried', label: 'Buried', state: 'buried', cls: 'st-buried' },
    { key: 'held', label: 'Held', title: 'jobs in this tube now: ready + reserved + delayed + buried (+ aft-held)' },
    { key: 'total-jobs', label: 'Put since start', cls: 'cumulative', title: 'jobs put into this tube since the server started (total-jobs)' },
    { key: 'rate-put', label: 'In/s', rate: true, title: 'jobs put into this tube per second' },
    { key: 'rate-del', label: 'Del/s', rate: true, title: 'deletes per second in this tube (cmd-delete)' },
    { key: 'current-using', label: 'Using', title: 'connections using this tube (producers)', cls: 'wide-col' },
    { key: 'current-watching', label: 'Watching', title: 'connections watching this tube' },
    { key: 'current-waiting', label: 'Waiting', title: 'connections blocked in reserve on this tube' },
  ];
  // With --extensions (put tags), after Held: what the tube JSON then has.
  const EXT_TUBE_COLS = [
    { key: 'held-jobs', label: 'Aft-held', cls: 'ext-col', title: 'aft: jobs held until their group has no job left (counted in Held, not in Delayed)' },
    { key: 'blocked-jobs', label: 'Blocked', cls: 'ext-col', title: 'ready jobs hidden from reserves while their con: key is at its limit' },
    { key: 'dedup-hits', label: 'Dedup', cls: 'ext-col wide-col', title: 'puts answered with the job already holding their idp: key, since start' },
  ];
  let TUBE_COLS = BASE_TUBE_COLS;

  // The tube table's columns, with the put tags' ones or without (the
  // server's flags may change with a restart): head, foot and rows made again.
  function setTubeExt(ext) {
    if (ext === S.tubeExt) return;
    S.tubeExt = ext;
    const at = BASE_TUBE_COLS.findIndex((c) => c.key === 'held') + 1;
    TUBE_COLS = ext ? [...BASE_TUBE_COLS.slice(0, at), ...EXT_TUBE_COLS, ...BASE_TUBE_COLS.slice(at)] : BASE_TUBE_COLS;
    if (!ext && EXT_TUBE_COLS.some((c) => c.key === S.sort.key)) S.sort = { key: 'name', dir: 1 };
    $('#tubes-head').textContent = '';
    $('#tubes-foot').textContent = '';
    for (const row of S.rows.values()) row.tr.remove();
    S.rows.clear();
    buildTubeHead();
  }

  function tubeValue(name, key) {
    if (key === 'name') return name;
    if (key === 'rate-put') return windowRate(S.tubeHist.get(name) || [], 'dput') || 0;
    if (key === 'rate-del') return windowRate(S.tubeHist.get(name) || [], 'ddel') || 0;
    if (key === 'pause') return (S.tubes.get(name) || {})['pause-time-left'] || 0;
    if (key === 'held') return heldJobs(S.tubes.get(name) || {});
    return (S.tubes.get(name) || {})[key];
  }

  // The jobs in a tube (or in the server) now, from its stats (and, with
  // --extensions, a tube's aft: jobs held by their group, in no count).
  function heldJobs(st) {
    return (st['current-jobs-ready'] || 0) + (st['current-jobs-reserved'] || 0) +
      (st['current-jobs-delayed'] || 0) + (st['current-jobs-buried'] || 0) +
      (st['held-jobs'] || 0);
  }

  // The word after a count's element (its next text node), singular or plural.
  function setWord(el, n, one, many) {
    const node = el && el.nextSibling;
    if (node && node.nodeType === Node.TEXT_NODE) node.textContent = ' ' + (n === 1 ? one : many);
  }

  // t: the server's monotonic clock when it listed the tubes (ms).
  function applyTubes(list, t) {
    if (list.length) setTubeExt('held-jobs' in list[0]);
    const seen = new Set();
    const keepHist = list.length <= MAX_TUBES_WITH_HISTORY;
    for (const tb of list) {
      seen.add(tb.name);
      S.tubes.set(tb.name, tb);
      let hist = S.tubeHist.get(tb.name);
      if (!hist) { hist = []; S.tubeHist.set(tb.name, hist); }
      const prev = hist[hist.length - 1];
      const e = {
        t, gap: true, ready: tb['current-jobs-ready'], total: tb['total-jobs'], del: tb['cmd-delete'],
        dt: null, dput: null, ddel: null,
      };
      if (prev && t - prev.t < gapMs() && t > prev.t && e.total >= prev.total && e.del >= prev.del) {
        e.gap = false;
        e.dt = (t - prev.t) / 1000;
        e.dput = e.total - prev.total;
        e.ddel = e.del - prev.del;
      }
      hist.push(e);
      const keepFrom = t - (keepHist ? WINDOW_MS : RATE_WINDOW_MS + 2000);
      while (hist.length > 2 && hist[0].t < keepFrom) hist.shift();
    }
    for (const name of [...S.tubes.keys()]) {
      if (!seen.has(name)) {
        S.tubes.delete(name);
        S.tubeHist.delete(name);
      }
    }
    S.tubeNames = list.map((x) => x.name);
    let withDelayed = 0;
    let withBuried = 0;
    for (const tb of list) {
      if (tb['current-jobs-delayed'] > 0) withDelayed++;
      if (tb['current-jobs-buried'] > 0) withBuried++;
    }
    setCell(byTest('kpi-delayed-tubes'), withDelayed, fmtInt(withDelayed), false);
    setCell(byTest('kpi-buried-tubes'), withBuried, fmtInt(withBuried), false);
    setWord(byTest('kpi-delayed-tubes'), withDelayed, 'tube', 'tubes');
    setWord(byTest('kpi-buried-tubes'), withBuried, 'tube', 'tubes');
    renderTubes();
    syncTubeSelect();
  }

  function buildTubeHead() {
    const tr = $('#tubes-head');
    const th = (key, label, cls, title) => {
      const el = h('th', { class: cls, dataset: { sort: key }, title: title || 'Sort by ' + label.toLowerCase() }, h('span', { text: label }), h('i', { class: 'sort-ind' }));
      el.addEventListener('click', () => {
        if (S.sort.key === key) S.sort.dir = -S.sort.dir;
        else { S.sort.key = key; S.sort.dir = key === 'name' ? 1 : -1; }
        renderTubes();
      });
      return el;
    };
    tr.append(th('name', 'Tube', 'name'));
    for (const c of TUBE_COLS) tr.append(th(c.key, c.label, 'num ' + (c.cls || ''), c.title));
    tr.append(th('pause', 'Paused', 'pause', 'pause / time left'));
    tr.append(h('th', { class: 'spark-h', title: 'ready jobs over the last 5 minutes' }, 'Ready, 5m'));
    tr.append(h('th', { class: 'actions-h' }, 'Actions'));
  }

  function createTubeRow(name) {
    const cells = {};
    const tr = h('tr', { dataset: { tube: name, testid: 'tube-row' } });
    const nameTd = h('td', { class: 'name', dataset: { col: 'name' } },
      h('button', { type: 'button', class: 'link', title: 'Browse the jobs of ' + name, text: name, dataset: { act: 'browse' } }));
    tr.append(nameTd);
    for (const c of TUBE_COLS) {
      const td = h('td', { class: 'num ' + (c.cls || ''), dataset: { col: c.key } });
      if (c.state) {
        td.classList.add('clickable');
        td.dataset.state = c.state;
        td.title = 'Browse ' + c.state + ' jobs';
      }
      cells[c.key] = td;
      tr.append(td);
    }
    const pause = h('td', { class: 'pause', dataset: { col: 'pause' } });
    cells.pause = pause;
    tr.append(pause);
    const spark = h('td', { class: 'spark' });
    tr.append(spark);
    const pauseBtn = h('button', { type: 'button', class: 'btn tiny', dataset: { act: 'pause', testid: 'tube-pause' } }, 'Pause');
    tr.append(h('td', { class: 'actions' },
      h('button', { type: 'button', class: 'btn tiny', dataset: { act: 'kick', testid: 'tube-kick' }, title: 'Kick buried (else delayed) jobs' }, 'Kick'),
      pauseBtn,
      h('button', { type: 'button', class: 'btn tiny danger', dataset: { act: 'flush', testid: 'tube-flush' }, title: 'Delete every job of one state' }, 'Flush')));
    const row = { tr, cells, spark, pauseBtn, name };
    S.rows.set(name, row);
    return row;
  }

  function updateTubeRow(row) {
    const tb = S.tubes.get(row.name);
    for (const c of TUBE_COLS) {
      const v = tubeValue(row.name, c.key);
      setCell(row.cells[c.key], c.rate ? Math.round(v * 10) / 10 : v, c.rate ? fmtRate(v) : fmtInt(v), !c.rate);
    }
    const paused = tb.pause > 0;
    const left = tb['pause-time-left'];
    const pc = row.cells.pause;
    const text = paused ? fmtDur(left) + ' / ' + fmtDur(tb.pause) : '';
    if (pc._text !== text) {
      pc._text = text;
      pc.dataset.value = String(left);
      pc.dataset.pause = String(tb.pause);
      pc.textContent = '';
      if (paused) pc.append(h('span', { class: 'badge paused', title: 'paused for ' + tb.pause + ' s; ' + left + ' s left' }, text));
    }
    row.tr.classList.toggle('is-paused', paused);
    row.tr.classList.toggle('selected', S.jobs.tube === row.name);
    row.pauseBtn.textContent = paused ? 'Resume' : 'Pause';
    row.pauseBtn.title = paused ? 'Unpause now' : 'Pause reserves on this tube';
    renderSpark(row);
  }

  function renderSpark(row) {
    const hist = S.tubeHist.get(row.name);
    if (!hist || S.tubes.size > MAX_TUBES_WITH_HISTORY) {
      if (row.spark.firstChild) row.spark.textContent = '';
      return;
    }
    const w = 78;
    const ht = 20;
    const now = hist[hist.length - 1].t;
    const span = Math.max(MIN_SPAN_MS, Math.min(WINDOW_MS, now - hist[0].t));
    const x0 = now - span;
    let max = -Infinity;
    let min = Infinity;
    for (const e of hist) {
      if (e.t < x0) continue;
      if (e.ready > max) max = e.ready;
      if (e.ready < min) min = e.ready;
    }
    const flat = max === min;
    const pts = [];
    for (const e of hist) {
      if (e.t < x0) continue;
      const x = ((e.t - x0) / span) * (w - 2) + 1;
      const y = flat ? (max ? ht / 2 : ht - 2) : ht - 2 - ((e.ready - min) / (max - min)) * (ht - 4);
      pts.push(x.toFixed(1) + ',' + y.toFixed(1));
    }
    if (!pts.length) return;
    const line = pts.join(' ');
    const area = pts[0].split(',')[0] + ',' + ht + ' ' + line + ' ' + pts[pts.length - 1].split(',')[0] + ',' + ht;
    row.spark.innerHTML = '<svg width="' + w + '" height="' + ht + '" viewBox="0 0 ' + w + ' ' + ht + '" aria-hidden="true">' +
      (flat ? '' : '<polygon class="spark-area" points="' + area + '"/>') +
      '<polyline class="spark-line' + (flat && !max ? ' idle' : '') + '" points="' + line + '"/></svg>';
    row.spark.title = 'ready over the last ' + fmtDur(span / 1000) + ': ' + fmtInt(min) + ' to ' + fmtInt(max) +
      ', now ' + fmtInt(hist[hist.length - 1].ready);
  }

  function sortedTubeNames() {
    const f = S.filter.trim().toLowerCase();
    let names = S.tubeNames;
    if (f) names = names.filter((n) => n.toLowerCase().includes(f));
    const { key, dir } = S.sort;
    if (key !== 'name' || dir !== 1) {
      names = names.slice().sort((a, b) => {
        if (key === 'name') return dir * (a < b ? -1 : a > b ? 1 : 0);
        const va = tubeValue(a, key) || 0;
        const vb = tubeValue(b, key) || 0;
        return va !== vb ? dir * (va - vb) : a < b ? -1 : 1;
      });
    }
    return names;
  }

  function renderTubes() {
    const tbody = $('#tubes-body');
    const all = sortedTubeNames();
    const names = all.slice(0, MAX_TUBE_ROWS);
    const keep = new Set(names);
    for (const [name, row] of S.rows) {
      if (!keep.has(name)) {
        row.tr.remove();
        S.rows.delete(name);
      }
    }
    names.forEach((name, i) => {
      let row = S.rows.get(name);
      const fresh = !row;
      if (fresh) row = createTubeRow(name);
      updateTubeRow(row);
      if (tbody.children[i] !== row.tr) tbody.insertBefore(row.tr, tbody.children[i] || null);
      if (fresh && S.tubesRendered) flash(row.tr, 1);
    });
    S.tubesRendered = true;

    for (const th of $('#tubes-head').children) {
      const k = th.dataset.sort;
      th.classList.toggle('sorted', k === S.sort.key);
      const ind = th.querySelector('.sort-ind');
      if (ind) ind.textContent = k === S.sort.key ? (S.sort.dir > 0 ? '▲' : '▼') : '';
    }

    // totals over the filtered tubes
    const foot = $('#tubes-foot');
    if (!foot.children.length) {
      foot.append(h('td', { class: 'name' }));
      for (const c of TUBE_COLS) foot.append(h('td', { class: 'num ' + (c.cls || ''), dataset: { col: c.key } }));
      foot.append(h('td', { colspan: 3 }));
    }
    foot.children[0].textContent = all.length === S.tubeNames.length ? 'All tubes' : 'Filtered (' + fmtInt(all.length) + ')';
    TUBE_COLS.forEach((c, i) => {
      let sum = 0;
      for (const n of all) sum += tubeValue(n, c.key) || 0;
      setCell(foot.children[i + 1], c.rate ? Math.round(sum * 10) / 10 : sum, c.rate ? fmtRate(sum) : fmtInt(sum), false);
    });

    $('#tubes-count').textContent = fmtInt(S.tubeNames.length) + (S.tubeNames.length === 1 ? ' tube' : ' tubes');
    const note = $('#tubes-note');
    if (all.length > names.length) {
      note.hidden = false;
      note.textContent = 'Showing ' + fmtInt(names.length) + ' of ' + fmtInt(all.length) + ' tubes: type in the filter to narrow them.';
    } else if (!all.length) {
      note.hidden = false;
      note.textContent = S.tubeNames.length ? 'No tube matches the filter.' : 'No tubes.';
    } else {
      note.hidden = true;
    }
  }

  function onTubesClick(ev) {
    const tr = ev.target.closest('tr[data-tube]');
    if (!tr) return;
    const name = tr.dataset.tube;
    const btn = ev.target.closest('[data-act]');
    const act = btn ? btn.dataset.act : null;
    if (act === 'kick') return kickTube(name);
    if (act === 'pause') return pauseTube(name);
    if (act === 'flush') return flushTube(name);
    const cell = ev.target.closest('td[data-state]');
    // the name or a count scrolls to the job browser; elsewhere the row only selects
    selectJobs(name, cell ? cell.dataset.state : null, act === 'browse' || !!cell);
  }

  // ------------------------------------------------------------ jobs

  const JOB_COLS = [
    { key: 'id', label: 'ID', fmt: fmtInt, cls: 'id' },
    { key: 'pri', label: 'Pri', fmt: fmtInt },
    { key: 'age', label: 'Age', fmt: fmtDur, still: true },
    { key: 'delay', label: 'Delay', fmt: fmtDur },
    { key: 'ttr', label: 'TTR', fmt: fmtDur },
    { key: 'time-left', label: 'Left', fmt: fmtDur, still: true, title: 'delayed: until ready; reserved: until the TTR runs out' },
    { key: 'reserves', label: 'Res', fmt: fmtInt, title: 'reserves' },
    { key: 'timeouts', label: 'T/O', fmt: fmtInt, title: 'timeouts' },
    { key: 'releases', label: 'Rel', fmt: fmtInt, title: 'releases' },
    { key: 'buries', label: 'Bur', fmt: fmtInt, title: 'buries' },
    { key: 'kicks', label: 'Kick', fmt: fmtInt, title: 'kicks' },
    { key: 'size', label: 'Size', fmt: fmtBytes, title: 'body size' },
  ];

  function buildJobsHead() {
    const tr = $('#jobs-head');
    for (const c of JOB_COLS) tr.append(h('th', { class: 'num', title: c.title || null }, c.label));
    tr.append(h('th', { class: 'body-h' }, 'Body'));
    tr.append(h('th', { class: 'actions-h' }, ''));
  }

  function jobsKey() {
    const J = S.jobs;
    return J.tube + '\u0000' + J.state + '\u0000' + J.offset + '\u0000' + J.limit;
  }

  function selectJobs(tube, state, scroll) {
    const J = S.jobs;
    const changed = tube !== J.tube || (state && state !== J.state);
    if (tube != null) J.tube = tube;
    if (state) J.state = state;
    if (changed) {
      J.offset = 0;
      J.data = null;
      J.error = null;
      J.expanded.clear();
      clearJobRows();
    }
    saveHash();
    renderJobsChrome();
    for (const row of S.rows.values()) row.tr.classList.toggle('selected', row.name === J.tube);
    refreshJobs();
    if (changed) refreshKeys();
    if (scroll) $('#jobs-panel').scrollIntoView({ behavior: 'smooth', block: 'start' });
  }

  function clearJobRows() {
    S.jobs.rows.clear();
    $('#jobs-body').textContent = '';
  }

  async function refreshJobs() {
    const J = S.jobs;
    if (!J.tube) { renderJobs(); return; }
    const key = jobsKey();
    J.loading = true;
    try {
      const d = await getJSON(tubePath(J.tube) + '/jobs?state=' + J.state + '&offset=' + J.offset + '&limit=' + J.limit);
      if (key !== jobsKey()) return;
      if (d.jobs.length === 0 && d.total > 0 && J.offset > 0) {
        J.offset = Math.max(0, Math.floor((d.total - 1) / J.limit) * J.limit);
        saveHash();
        return refreshJobs();
      }
      J.data = d;
      J.error = null;
    } catch (e) {
      if (key !== jobsKey()) return;
      J.data = null;
      J.error = e.status === 404 ? 'Tube “' + J.tube + '” does not exist (a tube goes away once it has no jobs and no client uses or watches it).' : 'Could not list jobs: ' + e.message;
    } finally {
      J.loading = false;
    }
    renderJobs();
  }

  function renderJobsChrome() {
    const J = S.jobs;
    const tb = J.tube ? S.tubes.get(J.tube) : null;
    const tabs = $('#jobs-states');
    if (!tabs.children.length) {
      for (const st of STATES) {
        tabs.append(h('button', {
          type: 'button', class: 'seg-btn st-' + st, role: 'tab', dataset: { state: st, testid: 'state-tab-' + st },
          onclick: () => selectJobs(J.tube, st),
        }, h('i', { class: 'dot' }), h('span', { text: st }), h('b', { class: 'count' })));
      }
    }
    for (const b of tabs.children) {
      const st = b.dataset.state;
      b.classList.toggle('active', st === J.state);
      b.setAttribute('aria-selected', st === J.state ? 'true' : 'false');
      const n = tb ? tb['current-jobs-' + st] : null;
      b.querySelector('.count').textContent = n == null ? '' : fmtInt(n);
    }
    for (const b of document.querySelectorAll('[data-mode]')) b.classList.toggle('active', b.dataset.mode === J.mode);
    $('#jobs-limit').value = String(J.limit);
    const sel = $('#jobs-tube');
    if (J.tube && sel.value !== J.tube && [...sel.options].some((o) => o.value === J.tube)) sel.value = J.tube;

    // toolbar: what applies to this tube and state
    const info = $('#jobs-tube-info');
    info.textContent = '';
    if (tb) {
      info.append(h('b', { text: J.tube }));
      info.append(' · ' + plural(heldJobs(tb), 'job') + ' held · ' + fmtInt(tb['total-jobs']) + ' put since start · ' +
        fmtInt(tb['current-watching']) + ' watching · ' + fmtInt(tb['current-waiting']) + ' waiting');
      if (tb.pause > 0) info.append(' · ', h('span', { class: 'badge paused' }, 'paused, ' + fmtDur(tb['pause-time-left']) + ' left'));
    } else if (J.tube) {
      info.append(h('b', { text: J.tube }), ' · not on the server');
    }
    const has = !!tb;
    $('#btn-tube-kick').disabled = !has || !(tb['current-jobs-buried'] + tb['current-jobs-delayed']);
    $('#btn-tube-pause').disabled = !has;
    $('#btn-tube-pause').textContent = has && tb.pause > 0 ? 'Resume' : 'Pause…';
    $('#btn-tube-put').disabled = !J.tube;
    const flush = $('#btn-tube-flush');
    flush.disabled = !has || J.state === 'reserved' || !tb['current-jobs-' + J.state];
    flush.textContent = J.state === 'reserved' ? 'Flush…' : 'Flush ' + J.state + '…';
    flush.title = J.state === 'reserved' ? 'Reserved jobs belong to their workers' : 'Delete every ' + J.state + ' job of this tube';
    // --extensions: the protocol's flush-tube, reserved jobs too
    const flushAll = $('#btn-tube-flush-all');
    flushAll.hidden = !S.tubeExt;
    flushAll.disabled = !has;
    flushAll.title = 'Delete every job of this tube, reserved ones too, and its idp: keys and cooldowns (flush-tube)';
  }

  function renderJobs() {
    const J = S.jobs;
    renderJobsChrome();
    const d = J.data;
    const empty = $('#jobs-empty');
    const table = $('#jobs-table');
    const range = $('#jobs-range');
    const total = d ? d.total : 0;
    const n = d ? d.jobs.length : 0;
    range.textContent = !d ? '—' : total === 0 ? '0 of 0' : fmtInt(J.offset + 1) + '–' + fmtInt(J.offset + n) + ' of ' + fmtInt(total);
    range.dataset.total = String(total);
    $('#jobs-first').disabled = $('#jobs-prev').disabled = !d || J.offset === 0;
    $('#jobs-next').disabled = $('#jobs-last').disabled = !d || J.offset + n >= total;

    if (!J.tube || J.error || (d && !n)) {
      clearJobRows();
      table.hidden = true;
      empty.hidden = false;
      empty.dataset.kind = J.error ? 'error' : 'empty';
      empty.textContent = !J.tube ? 'No tube selected.' : J.error ? J.error : 'No ' + J.state + ' jobs in “' + J.tube + '”.';
      return;
    }
    if (!d) return;
    table.hidden = false;
    empty.hidden = true;

    const tbody = $('#jobs-body');
    const keep = new Set(d.jobs.map((j) => j.id));
    for (const [id, row] of J.rows) {
      if (!keep.has(id)) {
        row.tr.remove();
        if (row.detail) row.detail.remove();
        J.rows.delete(id);
      }
    }
    let i = 0;
    for (const job of d.jobs) {
      let row = J.rows.get(job.id);
      if (!row) {
        row = createJobRow(job);
        J.rows.set(job.id, row);
      }
      updateJobRow(row, job);
      if (tbody.children[i] !== row.tr) tbody.insertBefore(row.tr, tbody.children[i] || null);
      i++;
      if (J.expanded.has(job.id)) {
        if (!row.detail) row.detail = h('tr', { class: 'detail', dataset: { detailFor: job.id } }, h('td', { colspan: JOB_COLS.length + 2 }));
        renderDetail(row, job);
        if (tbody.children[i] !== row.detail) tbody.insertBefore(row.detail, tbody.children[i] || null);
        i++;
      } else if (row.detail) {
        row.detail.remove();
        row.detail = null;
      }
    }
    while (tbody.children.length > i) tbody.lastChild.remove();
  }

  function createJobRow(job) {
    const tr = h('tr', { dataset: { jobId: job.id, testid: 'job-row' } });
    const cells = {};
    for (const c of JOB_COLS) {
      const td = h('td', { class: 'num ' + (c.cls || ''), dataset: { col: c.key } });
      cells[c.key] = td;
      tr.append(td);
    }
    const body = h('td', { class: 'body', dataset: { col: 'body' } });
    cells.body = body;
    tr.append(body);
    const actions = h('td', { class: 'actions' });
    tr.append(actions);
    return { tr, cells, actions, body, detail: null, sig: '' };
  }

  function updateJobRow(row, job) {
    for (const c of JOB_COLS) setCell(row.cells[c.key], job[c.key], c.fmt(job[c.key]), !c.still);
    row.tr.dataset.state = job.state;
    row.tr.classList.toggle('urgent', job.pri < 1024);
    row.tr.classList.toggle('expanded', S.jobs.expanded.has(job.id));
    row.cells.id.title = 'job ' + job.id + (job.file ? ' · binlog file ' + job.file : '');

    const p = job.preview || { text: null, hex: '', truncated: false };
    const mode = S.jobs.mode;
    // (no preview: --bodies-on-disk could not read the body back from its file)
    const unread = job.preview === null && job.size > 0;
    const sig = mode + '\u0000' + (p.text == null ? '' : p.text) + '\u0000' + p.hex + '\u0000' + p.truncated + unread;
    if (row.sig !== sig) {
      row.sig = sig;
      const td = row.body;
      td.textContent = '';
      if (unread) {
        td.append(h('span', { class: 'preview muted', dataset: { testid: 'job-preview' }, title: 'the server could not read this body from its binlog file (see its stderr)' }, '(unreadable)'));
      } else {
        const useHex = mode === 'hex' || p.text == null;
        td.dataset.mode = useHex ? 'hex' : 'text';
        if (p.text == null && mode === 'text') td.append(h('span', { class: 'badge bin', title: 'not UTF-8 text, shown as hex' }, 'bin'));
        const shown = useHex ? spacedHex(p.hex.slice(0, 96)) + (p.hex.length > 96 ? ' …' : '') :
          p.text.replace(/\r?\n/g, ' ↵ ').replace(/\t/g, ' ⇥ ');
        td.append(h('span', { class: 'preview', dataset: { testid: 'job-preview' } }, shown || '(empty)'));
        if (!shown) td.lastChild.classList.add('muted');
        if (p.truncated) td.append(h('span', { class: 'more', title: 'only the first 1 KiB is previewed' }, '…'));
      }
    }

    const asig = job.state;
    if (row.actions._sig !== asig) {
      row.actions._sig = asig;
      row.actions.textContent = '';
      if (job.state === 'buried' || job.state === 'delayed') {
        row.actions.append(h('button', { type: 'button', class: 'btn tiny', dataset: { act: 'kick-job', testid: 'job-kick' }, title: 'Move this job to ready' }, 'Kick'));
      }
      const reserved = job.state === 'reserved';
      row.actions.append(h('button', {
        type: 'button', class: 'btn tiny danger', dataset: { act: 'delete-job', testid: 'job-delete' },
        title: reserved ? 'Only the worker that reserved it may delete a reserved job' : 'Delete this job',
        disabled: reserved,
      }, 'Delete'));
    }
  }

  function renderDetail(row, job) {
    const p = job.preview || { text: null, hex: '', truncated: false };
    const sig = (p.text == null ? '' : p.text) + '\u0000' + p.hex + '\u0000' + job.size;
    if (row.detail._sig === sig) return;
    row.detail._sig = sig;
    const td = row.detail.firstChild;
    td.textContent = '';
    const shownBytes = p.hex.length / 2;
    td.append(h('div', { class: 'detail-grid' + (p.text == null ? ' hex-only' : '') },
      p.text == null ? null : h('div', { class: 'detail-col' },
        h('div', { class: 'detail-h' }, 'Text'),
        h('pre', { class: 'detail-pre', dataset: { testid: 'job-detail-text' } }, p.text)),
      h('div', { class: 'detail-col' },
        h('div', { class: 'detail-h' }, 'Hex'),
        h('pre', { class: 'detail-pre hex', dataset: { testid: 'job-detail-hex' } }, hexdump(p.hex)))),
      h('div', { class: 'detail-foot' }, 'job ' + job.id + ' · ' + fmtInt(job.size) + ' bytes' +
        (p.text == null ? ' · not UTF-8 text (or holds control characters): hex only' : '') +
        (p.truncated ? ' · first ' + fmtInt(shownBytes) + ' bytes shown' : '')));
  }

  function onJobsClick(ev) {
    const tr = ev.target.closest('tr[data-job-id]');
    if (!tr) return;
    const id = Number(tr.dataset.jobId);
    const btn = ev.target.closest('[data-act]');
    if (btn) {
      if (btn.disabled) return;
      if (btn.dataset.act === 'kick-job') return kickJob(id);
      if (btn.dataset.act === 'delete-job') return deleteJob(id, tr.dataset.state);
      return;
    }
    if (window.getSelection && String(window.getSelection()).length) return; // selecting text, not toggling
    const J = S.jobs;
    if (J.expanded.has(id)) J.expanded.delete(id); else J.expanded.add(id);
    renderJobs();
  }

  function syncTubeSelect() {
    const sel = $('#jobs-tube');
    const names = S.tubeNames.slice();
    const J = S.jobs;
    if (J.tube && !names.includes(J.tube)) names.push(J.tube);
    const sig = names.join('\u0000');
    if (sel._sig !== sig) {
      sel._sig = sig;
      sel.textContent = '';
      for (const n of names) sel.append(h('option', { value: n, text: n }));
    }
    if (!J.tube && names.length) {
      // the tube holding the most jobs (the first by name of equals), else "default", else the first one
      let busiest = null;
      let most = 0;
      for (const n of S.tubeNames) {
        const held = heldJobs(S.tubes.get(n) || {});
        if (held > most) { busiest = n; most = held; }
      }
      J.tube = busiest || (names.includes('default') ? 'default' : names[0]);
      // and on a state that has jobs
      const tb = S.tubes.get(J.tube);
      if (tb && !tb['current-jobs-' + J.state]) J.state = STATES.find((st) => tb['current-jobs-' + st] > 0) || J.state;
      saveHash();
    }
    if (J.tube) sel.value = J.tube;
    renderJobsChrome();
  }

  // ------------------------------------------------------------ URL hash

  function saveHash() {
    const J = S.jobs;
    const p = new URLSearchParams();
    if (J.tube) p.set('tube', J.tube);
    p.set('state', J.state);
    if (J.offset) p.set('offset', String(J.offset));
    if (J.limit !== 50) p.set('limit', String(J.limit));
    if (J.mode !== 'text') p.set('body', J.mode);
    if (S.filter) p.set('filter', S.filter);
    history.replaceState(null, '', location.pathname + location.search + '#' + p.toString());
  }

  function loadHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    const J = S.jobs;
    if (p.get('tube')) J.tube = p.get('tube');
    if (STATES.includes(p.get('state'))) J.state = p.get('state');
    const off = parseInt(p.get('offset'), 10);
    if (off > 0) J.offset = off;
    const lim = parseInt(p.get('limit'), 10);
    if ([25, 50, 100, 250].includes(lim)) J.limit = lim;
    if (p.get('body') === 'hex') J.mode = 'hex';
    if (p.get('filter')) S.filter = p.get('filter');
  }

  // ------------------------------------------------------------ modal

  let modalDone = null;

  // Resolves with the field values on confirm, null on cancel.
  function confirmDialog(opts) {
    if (modalDone) modalDone(null);
    const back = $('#modal');
    const form = $('#modal-form');
    const fieldsEl = $('#modal-fields');
    const err = $('#modal-error');
    $('#modal-title').textContent = opts.title;
    const body = $('#modal-body');
    body.textContent = '';
    for (const part of [].concat(opts.body || [])) body.append(part instanceof Node ? part : h('p', null, part));
    fieldsEl.textContent = '';
    err.hidden = true;
    const inputs = {};
    for (const f of opts.fields || []) {
      let input;
      const common = { id: 'modal-field-' + f.name, name: f.name, class: 'input', dataset: { testid: 'modal-field-' + f.name } };
      if (f.type === 'select') {
        input = h('select', common, f.options.map((o) => h('option', { value: o.value, text: o.label, disabled: o.disabled })));
        input.value = f.value;
      } else if (f.type === 'textarea') {
        input = h('textarea', Object.assign({ rows: 5, spellcheck: 'false' }, common));
        input.value = f.value || '';
      } else {
        input = h('input', Object.assign({ type: f.type || 'number', min: f.min, max: f.max, step: f.step || null, autocomplete: 'off' }, common));
        input.value = f.value == null ? '' : String(f.value);
      }
      inputs[f.name] = { input, f };
      fieldsEl.append(h('label', { class: 'field' + (f.type === 'textarea' ? ' full' : ''), for: common.id },
        h('span', { class: 'field-label' }, f.label), input, f.hint ? h('span', { class: 'field-hint' }, f.hint) : null));
    }
    const confirmBtn = $('#modal-confirm');
    confirmBtn.textContent = opts.confirm || 'Confirm';
    confirmBtn.classList.toggle('danger', !!opts.danger);
    confirmBtn.classList.toggle('primary', !opts.danger);
    back.hidden = false;
    document.body.classList.add('modal-open');
    const prevFocus = document.activeElement;
    const first = Object.values(inputs)[0];
    setTimeout(() => (first ? first.input : confirmBtn).focus(), 0);
    if (first && first.input.select) setTimeout(() => first.input.select(), 0);

    return new Promise((resolve) => {
      const finish = (val) => {
        modalDone = null;
        back.hidden = true;
        document.body.classList.remove('modal-open');
        form.onsubmit = null;
        $('#modal-cancel').onclick = null;
        back.onmousedown = null;
        document.removeEventListener('keydown', onKey, true);
        if (prevFocus && prevFocus.focus) prevFocus.focus();
        resolve(val);
      };
      const onKey = (e) => {
        if (e.key === 'Escape') { e.preventDefault(); finish(null); }
      };
      modalDone = finish;
      document.addEventListener('keydown', onKey, true);
      $('#modal-cancel').onclick = () => finish(null);
      back.onmousedown = (e) => { if (e.target === back) finish(null); };
      form.onsubmit = (e) => {
        e.preventDefault();
        const vals = {};
        for (const [name, { input, f }] of Object.entries(inputs)) {
          let v = input.value;
          if (!f.type || f.type === 'number') {
            v = v.trim() === '' ? NaN : Number(v);
            if (!Number.isInteger(v) || (f.min != null && v < f.min) || (f.max != null && v > f.max)) {
              err.hidden = false;
              err.textContent = f.label + ': a whole number' + (f.min != null ? ' ≥ ' + f.min : '') + (f.max != null ? ' and ≤ ' + fmtInt(f.max) : '') + ' is needed.';
              input.focus();
              return;
            }
          }
          vals[name] = v;
        }
        finish(vals);
      };
    });
  }

  // ------------------------------------------------------------ toasts

  function toast(kind, text) {
    const box = $('#toasts');
    const el = h('div', { class: 'toast ' + kind, role: kind === 'err' ? 'alert' : 'status', dataset: { testid: 'toast', kind } },
      h('i', { class: 'toast-icon' }, kind === 'err' ? '!' : '✓'),
      h('span', { class: 'toast-text', text }),
      h('button', { type: 'button', class: 'toast-x', title: 'Dismiss', onclick: () => el.remove() }, '×'));
    box.append(el);
    while (box.children.length > 5) box.firstChild.remove();
    setTimeout(() => {
      el.classList.add('leaving');
      setTimeout(() => el.remove(), 300);
    }, kind === 'err' ? 9000 : 5000);
  }

  async function act(what, path, body, describe) {
    try {
      const r = await postJSON(path, body);
      toast('ok', describe(r || {}));
      return r;
    } catch (e) {
      toast('err', what + ' failed: ' + e.message);
      return null;
    } finally {
      refreshNow();
    }
  }

  const plural = (n, one, many) => fmtInt(n) + ' ' + (n === 1 ? one : many || one + 's');
  const tubeLabel = (name) => h('code', { text: name });

  // ------------------------------------------------------------ actions

  async function kickTube(name) {
    const tb = S.tubes.get(name) || {};
    const buried = tb['current-jobs-buried'] || 0;
    const delayed = tb['current-jobs-delayed'] || 0;
    const what = buried ? plural(buried, 'buried job') : delayed ? plural(delayed, 'delayed job') : 'no buried or delayed jobs';
    const v = await confirmDialog({
      title: 'Kick jobs in ' + name,
      body: [h('p', null, 'Tube ', tubeLabel(name), ' has ' + what + '. Kick moves up to N jobs to ready: buried ones if there are any, otherwise delayed ones (as the protocol’s ', h('code', null, 'kick'), ').')],
      fields: [{ name: 'n', label: 'Jobs to kick (N)', value: Math.max(1, buried || delayed), min: 1, max: 1e9 }],
      confirm: 'Kick',
    });
    if (!v) return;
    await act('Kick', tubePath(name) + '/kick', { n: v.n }, (r) => 'Kicked ' + plural(r.kicked || 0, 'job') + ' in ' + name + '.');
  }

  async function pauseTube(name) {
    const tb = S.tubes.get(name) || {};
    if (tb.pause > 0) {
      const v = await confirmDialog({
        title: 'Resume ' + name,
        body: [h('p', null, 'Tube ', tubeLabel(name), ' is paused for ' + fmtDur(tb['pause-time-left']) + ' more. Resume serving its jobs now?')],
        confirm: 'Resume',
      });
      if (!v) return;
      await act('Resume', tubePath(name) + '/pause', { seconds: 0 }, () => 'Resumed ' + name + '.');
      return;
    }
    const v = await confirmDialog({
      title: 'Pause ' + name,
      body: [h('p', null, 'No job of ', tubeLabel(name), ' is reserved while the tube is paused; puts, kicks and deletes go on. 0 seconds resumes it.')],
      fields: [{ name: 'seconds', label: 'Pause for (seconds)', value: 60, min: 0, max: 4294967295 }],
      confirm: 'Pause',
    });
    if (!v) return;
    await act('Pause', tubePath(name) + '/pause', { seconds: v.seconds },
      (r) => (v.seconds ? 'Paused ' + name + ' for ' + fmtDur(r.paused != null ? r.paused : v.seconds) + '.' : 'Resumed ' + name + '.'));
  }

  // state: the one offered first; 'tube' (with --extensions): the whole
  // tube, reserved jobs too, as the protocol's flush-tube.
  async function flushTube(name, state) {
    const tb = S.tubes.get(name) || {};
    const options = ['ready', 'delayed', 'buried'].map((st) => ({
      value: st, label: st + ' (' + fmtInt(tb['current-jobs-' + st] || 0) + ')',
    }));
    const whole = !!S.tubeExt;
    if (whole) {
      const all = ['ready', 'reserved', 'delayed', 'buried'].reduce((n, st) => n + (tb['current-jobs-' + st] || 0), 0);
      options.push({ value: 'tube', label: 'whole tube, reserved too (' + fmtInt(all) + ')' });
    }
    let def = state && state !== 'reserved' && (state !== 'tube' || whole) ? state : null;
    if (!def) def = ['buried', 'delayed', 'ready'].find((st) => tb['current-jobs-' + st] > 0) || 'buried';
    const body = [h('p', null, 'Deletes every job of the chosen state in ', tubeLabel(name), '. This cannot be undone. A state’s flush never touches reserved jobs.')];
    if (whole) {
      body.push(h('p', null, h('b', null, 'Whole tube'), ' deletes every job the tube holds, reserved ones too (their workers’ deletes then find nothing), and its idp: keys and cooldowns, as the protocol’s ',
        h('code', null, 'flush-tube'), '; aft: jobs held by their group stay.'));
    }
    const v = await confirmDialog({
      title: 'Flush ' + name,
      body,
      fields: [{ name: 'state', label: 'State', type: 'select', value: def, options }],
      confirm: 'Flush',
      danger: true,
    });
    if (!v) return;
    const what = v.state === 'tube' ? 'job' : v.state + ' job';
    await act('Flush', tubePath(name) + '/flush', { state: v.state },
      (r) => 'Flushed ' + plural(r.flushed || 0, what) + ' from ' + name + (v.state === 'tube' ? ' (the whole tube).' : '.'));
  }

  async function putJob(name) {
    const v = await confirmDialog({
      title: 'Put a job into ' + name,
      fields: [
        { name: 'body', label: 'Body (UTF-8 text)', type: 'textarea', value: '' },
        { name: 'pri', label: 'Priority', value: 1024, min: 0, max: 4294967295, hint: '0 is the most urgent; < 1024 counts as urgent' },
        { name: 'delay', label: 'Delay (s)', value: 0, min: 0, max: 4294967295 },
        { name: 'ttr', label: 'TTR (s)', value: 60, min: 0, max: 4294967295 },
      ],
      confirm: 'Put',
    });
    if (!v) return;
    await act('Put', tubePath(name) + '/put', { body: v.body, pri: v.pri, delay: v.delay, ttr: v.ttr }, (r) => 'Put job ' + r.id + ' into ' + name + '.');
  }

  async function kickJob(id) {
    const v = await confirmDialog({
      title: 'Kick job ' + id,
      body: ['Move job ' + id + ' to the ready queue of its tube?'],
      confirm: 'Kick job',
    });
    if (!v) return;
    await act('Kick job ' + id, '/jobs/' + id + '/kick', {}, () => 'Kicked job ' + id + '.');
  }

  async function deleteJob(id, state) {
    const v = await confirmDialog({
      title: 'Delete job ' + id,
      body: ['Delete job ' + id + (state ? ' (' + state + ')' : '') + ' from tube ' + S.jobs.tube + '? This cannot be undone.'],
      confirm: 'Delete',
      danger: true,
    });
    if (!v) return;
    await act('Delete job ' + id, '/jobs/' + id + '/delete', {}, () => 'Deleted job ' + id + '.');
  }

  async function toggleDrain() {
    if (S.draining) {
      const v = await confirmDialog({ title: 'Undrain the server', body: ['Accept puts again?'], confirm: 'Undrain' });
      if (!v) return;
      await act('Undrain', '/undrain', {}, () => 'Undrained: puts are accepted again.');
    } else {
      const v = await confirmDialog({
        title: 'Drain the server',
        body: ['While draining, every put is refused with DRAINING (as after SIGUSR1) and /readyz answers 503. Workers keep reserving and deleting, so the queues empty out.'],
        confirm: 'Drain',
        danger: true,
      });
      if (!v) return;
      await act('Drain', '/drain', {}, () => 'Draining: puts are refused.');
    }
  }

  // ------------------------------------------------------------ cluster

  function cell(text, cls, title) {
    const td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    if (title) td.title = title;
    return td;
  }

  function renderCluster(cl) {
    S.cluster = cl;
    renderDrainButtons();
    const panel = $('#cluster-panel');
    const banner = $('#follower-banner');
    if (!cl) { panel.hidden = true; banner.hidden = true; return; }
    panel.hidden = false;
    const leads = cl.role === 'leader';
    const parts = ['"' + cl.cluster + '"', 'leader ' + (cl.leader || 'none'), 'epoch ' + fmtInt(cl.epoch),
      'ISR ' + ((cl.isr || []).join(', ') || '—')];
    if (leads) parts.push(plural(cl.seq, 'batch', 'batches') + ' shipped this epoch');
    else parts.push('seen from ' + cl.node + ', a follower: only the leader knows the lag');
    $('#cluster-sub').textContent = parts.join(' · ');
    banner.hidden = leads;
    const lead = (cl.nodes || []).find((n) => n.name === cl.leader);
    const where = $('#follower-leader');
    where.textContent = '';
    if (!leads) {
      if (lead && lead.http) {
        where.append('The leader is ' + lead.name + ': ');
        const a = document.createElement('a');
        a.href = 'http://' + lead.http + '/';
        a.textContent = lead.http;
        where.append(a, '.');
      } else {
        where.textContent = cl.leader ? 'The leader is ' + cl.leader + '.' : 'No node leads now.';
      }
    }
    const body = $('#cluster-body');
    body.textContent = '';
    for (const n of cl.nodes || []) {
      const tr = document.createElement('tr');
      tr.dataset.node = n.name;
      const isLeader = n.name === cl.leader;
      const inIsr = (cl.isr || []).includes(n.name);
      tr.append(cell(n.name, isLeader ? 'strong' : ''),
        cell(isLeader ? 'leader' : 'follower', isLeader ? 'role-leader' : ''),
        cell(inIsr ? '✓ in sync' : '✗ out', inIsr ? 'ok' : 'bad'));
      if (!leads) {
        for (let i = 0; i < 5; i++) tr.append(cell('—', 'num zero', 'only the leader knows'));
        tr.children[3].className = '';
      } else if (n.name === cl.node) {
        tr.append(cell('self', 'zero'), cell(fmtInt(n.acked_seq), 'num'),
          cell('0', 'num zero'), cell('0 B', 'num zero'), cell('0.00 s', 'num zero'));
      } else if (!n.connected) {
        tr.append(cell('down', 'bad', n.link_error ? 'no link: ' + n.link_error : ''));
        for (let i = 0; i < 4; i++) tr.append(cell('—', 'num zero'));
      } else {
        const lag = (v, text) => cell(text, 'num ' + (v ? 'warn' : 'zero'));
        tr.append(cell('up', 'ok'), cell(fmtInt(n.acked_seq), 'num'),
          lag(n.lag_batches, fmtInt(n.lag_batches)), lag(n.lag_bytes, fmtBytes(n.lag_bytes)),
          lag(n.lag_seconds, n.lag_seconds.toFixed(n.lag_seconds < 10 ? 2 : 1) + ' s'));
      }
      tr.append(cell(n.peer || '', 'mono'), cell(n.http || '', 'mono'));
      body.append(tr);
    }
    // Why a node is down, as the leader last saw it (a refused certificate...).
    const errors = $('#cluster-errors');
    errors.textContent = '';
    for (const n of cl.nodes || []) {
      if (!n.link_error) continue;
      const li = document.createElement('li');
      li.dataset.node = n.name;
      li.textContent = n.name + ': no link: ' + n.link_error;
      errors.append(li);
    }
    errors.hidden = !errors.children.length;
  }

  // ------------------------------------------------------------ groups (--extensions)

  function renderGroups(gr) {
    S.groups = gr;
    const panel = $('#groups-panel');
    const body = $('#groups-body');
    if (!gr) {
      panel.hidden = true;
      body.textContent = '';
      S.groupRows.clear();
      return;
    }
    panel.hidden = false;
    const list = gr.groups || [];
    $('#groups-sub').textContent = plural(gr.total, 'group') + (gr.truncated ? ' · the first ' + fmtInt(list.length) + ' by name' : '');
    const keep = new Set(list.map((g) => g.name));
    for (const [name, row] of S.groupRows) {
      if (!keep.has(name)) {
        row.tr.remove();
        S.groupRows.delete(name);
      }
    }
    list.forEach((g, i) => {
      let row = S.groupRows.get(g.name);
      if (!row) {
        const tr = h('tr', { dataset: { group: g.name, testid: 'group-row' } }, cell(g.name, 'name'));
        row = { tr, cells: {} };
        for (const key of ['members', 'buried', 'waiting']) {
          row.cells[key] = h('td', { class: 'num ' + key, dataset: { col: key } });
          tr.append(row.cells[key]);
        }
        S.groupRows.set(g.name, row);
      }
      for (const key of ['members', 'buried', 'waiting']) setCell(row.cells[key], g[key], fmtInt(g[key]), true);
      if (body.children[i] !== row.tr) body.insertBefore(row.tr, body.children[i] || null);
    });
    const note = $('#groups-note');
    note.hidden = list.length > 0 && !gr.truncated;
    note.textContent = !list.length ? 'No groups: a put with grp:NAME or aft:NAME makes one, until its last job is deleted.'
      : 'Showing the first ' + fmtInt(list.length) + ' groups by name' + (gr.total > list.length ? ' of ' + fmtInt(gr.total) : '') + '.';
  }

  // ------------------------------------------------------------ keys (--extensions)

  // The job browser's tube's idp: keys and cooldowns (GET /keys?tube=).
  const KEYS = { tube: null, keyRows: new Map(), coolRows: new Map() };

  async function refreshKeys() {
    const tube = S.jobs.tube;
    if (!S.tubeExt || !tube) { renderKeys(null, tube); return; }
    let d;
    try {
      d = await getJSON('/keys?tube=' + encodeURIComponent(tube));
    } catch (e) {
      // 404: no --extensions any more (a restart); else keep what is shown
      d = e.status === 404 ? null : undefined;
    }
    if (tube !== S.jobs.tube || d === undefined) return;
    renderKeys(d, tube);
  }

  // rows: key -> {tr, cells}; list: [{key, ...}]; cols: [[field, class, text(value)]]
  function keyRows(body, rows, list, cols, testid) {
    const keep = new Set(list.map((x) => x.key));
    for (const [key, row] of rows) {
      if (!keep.has(key)) {
        row.tr.remove();
        rows.delete(key);
      }
    }
    list.forEach((x, i) => {
      let row = rows.get(x.key);
      if (!row) {
        const tr = h('tr', { dataset: { key: x.key, testid } }, h('td', { class: 'key', title: x.key, text: x.key }));
        row = { tr, cells: {} };
        for (const [field, cls] of cols) {
          row.cells[field] = h('td', { class: 'num ' + cls, dataset: { col: field } });
          tr.append(row.cells[field]);
        }
        rows.set(x.key, row);
      }
      for (const [field, , text] of cols) setCell(row.cells[field], x[field], text(x[field]), field !== 'ends_in_s');
      if (body.children[i] !== row.tr) body.insertBefore(row.tr, body.children[i] || null);
    });
  }

  function renderKeys(d, tube) {
    const panel = $('#keys-panel');
    if (!d || tube !== KEYS.tube) {
      $('#keys-body').textContent = '';
      $('#cools-body').textContent = '';
      KEYS.keyRows.clear();
      KEYS.coolRows.clear();
      KEYS.tube = d ? tube : null;
    }
    if (!d) { panel.hidden = true; return; }
    panel.hidden = false;
    const keys = d.keys || [];
    const cools = d.cooldowns || [];
    const sub = $('#keys-sub');
    sub.textContent = '';
    sub.append(tubeLabel(tube), ' · ' + plural(keys.length, 'key') + ' · ' + plural(cools.length, 'cooldown'));
    keyRows($('#keys-body'), KEYS.keyRows, keys, [['job', 'job', fmtInt]], 'key-row');
    keyRows($('#cools-body'), KEYS.coolRows, cools, [['job', 'job', fmtInt], ['ends_in_s', 'ends', fmtDur]], 'cool-row');
    $('#keys-table').hidden = !keys.length;
    $('#keys-empty').hidden = keys.length > 0;
    $('#cools-table').hidden = !cools.length;
    $('#cools-empty').hidden = cools.length > 0;
    const note = $('#keys-note');
    note.hidden = !d.truncated;
    note.textContent = d.truncated ? 'Showing the first keys by name: the tube has more than are listed.' : '';
  }

  // ------------------------------------------------------------ refresh loop

  function setOnline(ok, err) {
    const el = $('#conn-status');
    if (ok) {
      S.failures = 0;
      el.dataset.state = S.interval ? 'live' : 'paused';
      el.lastChild.textContent = S.interval ? 'live' : 'paused';
      el.title = 'last update ' + new Date().toLocaleTimeString();
      $('#last-update').textContent = 'Updated ' + new Date().toLocaleTimeString();
      if (S.online === false) toast('ok', 'Connection to the server is back.');
      S.online = true;
    } else {
      S.failures++;
      el.dataset.state = 'down';
      el.lastChild.textContent = err && err.status === 401 ? 'unauthorized' : 'offline';
      el.title = (err && err.message) || 'no answer';
      if (S.online !== false) toast('err', 'Lost the server: ' + ((err && err.message) || 'no answer') + '. Retrying…');
      S.online = false;
    }
  }

  function schedule() {
    clearTimeout(S.timer);
    S.timer = null;
    if (!S.interval) return;
    // back off while the server does not answer
    const delay = S.failures ? Math.min(10000, S.interval * Math.pow(2, Math.min(S.failures, 4))) : S.interval;
    S.timer = setTimeout(refresh, delay);
  }

  async function refresh() {
    if (S.inflight) { S.again = true; return; }
    S.inflight = true;
    clearTimeout(S.timer);
    try {
      // /cluster: 404 without --cluster (then never asked again); another
      // failure leaves the panel as it was rather than failing the refresh.
      const cluster = S.cluster === false ? Promise.resolve(false)
        : getJSON('/cluster').catch((e) => (e.status === 404 ? false : undefined));
      // /groups: 404 without --extensions (asked again after a restart)
      const groups = S.groups === false ? Promise.resolve(false)
        : getJSON('/groups').catch((e) => (e.status === 404 ? false : undefined));
      // /history: the samples since the newest one here (every one at first)
      const after = S.samples.length ? '?after=' + S.samples[S.samples.length - 1].t : '';
      const pid = S.lastPid, uptime = S.lastUptime;
      let [st, tb, cl, hist, gr] = await Promise.all([getJSON('/stats'), getJSON('/tubes'), cluster, getJSON('/history' + after), groups]);
      if (pid != null && st.stats && (st.stats.pid !== pid || st.stats.uptime < uptime)) {
        // another server process (its pid may be the same one, in a
        // container; its uptime, and its clock, started again): its
        // history, from the start
        S.samples = [];
        hist = await getJSON('/history');
        if (gr === false) gr = null;  // (its flags may have changed: ask again next time)
      }
      if (cl !== undefined) renderCluster(cl);
      if (gr !== undefined) renderGroups(gr);
      applyHistory(hist);
      applyStats(st);
      applyTubes(tb.tubes || [], tb.mono != null ? tb.mono : Date.now());
      renderCharts();
      setOnline(true);
      await Promise.all([refreshJobs(), refreshKeys()]);
    } catch (e) {
      setOnline(false, e);
    } finally {
      S.inflight = false;
      if (S.again) { S.again = false; refresh(); } else schedule();
    }
  }

  function refreshNow() {
    refresh();
  }

  // ------------------------------------------------------------ wiring

  function setTheme(theme) {
    document.documentElement.dataset.theme = theme;
    try { localStorage.setItem('pybeanstalkd-theme', theme); } catch (_) { /* private mode */ }
    renderCharts();
  }

  function init() {
    let theme = params.get('theme');
    if (!theme) { try { theme = localStorage.getItem('pybeanstalkd-theme'); } catch (_) { theme = null; } }
    document.documentElement.dataset.theme = theme === 'light' ? 'light' : 'dark';

    const wanted = parseInt(params.get('refresh'), 10);
    const sel = $('#refresh-interval');
    if (wanted >= 200) {
      S.interval = wanted;
      if (![...sel.options].some((o) => o.value === String(wanted))) sel.append(h('option', { value: String(wanted), text: wanted + ' ms' }));
    }
    sel.value = String(S.interval);
    sel.addEventListener('change', () => {
      S.interval = parseInt(sel.value, 10) || 0;
      if (S.interval) refreshNow(); else { clearTimeout(S.timer); setOnline(true); }
    });

    loadHash();
    buildTubeHead();
    buildJobsHead();
    $('#host').textContent = location.host;

    const filter = $('#tube-filter');
    filter.value = S.filter;
    filter.addEventListener('input', () => { S.filter = filter.value; saveHash(); renderTubes(); });
    $('#tubes-body').addEventListener('click', onTubesClick);
    $('#jobs-body').addEventListener('click', onJobsClick);
    $('#jobs-tube').addEventListener('change', (e) => selectJobs(e.target.value, null));
    $('#jobs-limit').addEventListener('change', (e) => {
      S.jobs.limit = parseInt(e.target.value, 10) || 50;
      S.jobs.offset = 0;
      saveHash();
      refreshJobs();
    });
    for (const b of document.querySelectorAll('[data-mode]')) {
      b.addEventListener('click', () => {
        S.jobs.mode = b.dataset.mode;
        saveHash();
        renderJobs();
      });
    }
    const page = (to) => {
      const J = S.jobs;
      const total = J.data ? J.data.total : 0;
      const last = total ? Math.floor((total - 1) / J.limit) * J.limit : 0;
      const off = to === 'first' ? 0 : to === 'prev' ? J.offset - J.limit : to === 'next' ? J.offset + J.limit : last;
      J.offset = Math.max(0, Math.min(last, off));
      saveHash();
      refreshJobs();
    };
    for (const to of ['first', 'prev', 'next', 'last']) $('#jobs-' + to).addEventListener('click', () => page(to));

    $('#btn-tube-kick').addEventListener('click', () => S.jobs.tube && kickTube(S.jobs.tube));
    $('#btn-tube-pause').addEventListener('click', () => S.jobs.tube && pauseTube(S.jobs.tube));
    $('#btn-tube-flush').addEventListener('click', () => S.jobs.tube && flushTube(S.jobs.tube, S.jobs.state));
    $('#btn-tube-flush-all').addEventListener('click', () => S.jobs.tube && flushTube(S.jobs.tube, 'tube'));
    $('#btn-tube-put').addEventListener('click', () => S.jobs.tube && putJob(S.jobs.tube));
    $('#btn-drain').addEventListener('click', toggleDrain);
    $('#btn-undrain-banner').addEventListener('click', toggleDrain);
    $('#btn-theme').addEventListener('click', () => setTheme(document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark'));

    try {
      const saved = localStorage.getItem('pybeanstalkd-depth-scale');
      if (saved === 'lin' || saved === 'log') S.scale['chart-depth'] = saved;
    } catch (_) { /* private mode */ }
    for (const b of document.querySelectorAll('[data-scale]')) {
      b.addEventListener('click', () => {
        S.scale['chart-depth'] = b.dataset.scale;
        try { localStorage.setItem('pybeanstalkd-depth-scale', b.dataset.scale); } catch (_) { /* private mode */ }
        renderCharts();
      });
    }
    for (const def of CHARTS) {
      const el = document.getElementById(def.id);
      el.addEventListener('mousemove', (e) => {
        S.hover.set(def.id, e.clientX - el.getBoundingClientRect().left);
        renderChart(def);
      });
      el.addEventListener('mouseleave', () => { S.hover.delete(def.id); renderChart(def); });
    }
    if (window.ResizeObserver) {
      let pending = false;
      const ro = new ResizeObserver(() => {
        if (pending) return;
        pending = true;
        requestAnimationFrame(() => { pending = false; renderCharts(); });
      });
      for (const def of CHARTS) ro.observe(document.getElementById(def.id));
    }

    document.addEventListener('keydown', (e) => {
      if (modalDone || e.ctrlKey || e.metaKey || e.altKey) return;
      const tag = (e.target.tagName || '').toLowerCase();
      if (tag === 'input' || tag === 'textarea' || tag === 'select') {
        if (e.key === 'Escape' && e.target === filter) { filter.value = ''; S.filter = ''; saveHash(); renderTubes(); filter.blur(); }
        return;
      }
      if (e.key === '/') { e.preventDefault(); filter.focus(); }
      else if (e.key === 'r') refreshNow();
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshNow(); });

    renderJobsChrome();
    refresh();
  }

  // Exposed for tests and the console: read-only views of the page's state.
  window.pybeanstalkdDashboard = {
    refresh: refreshNow,
    samples: () => S.samples.length,
    // the oldest and newest samples drawn: the server's clocks, in ms
    span: () => (S.samples.length ? { first: S.samples[0].t, last: S.samples[S.samples.length - 1].t,
      firstWall: S.samples[0].wall, lastWall: S.samples[S.samples.length - 1].wall } : null),
    jobs: () => ({ tube: S.jobs.tube, state: S.jobs.state, offset: S.jobs.offset, limit: S.jobs.limit, mode: S.jobs.mode }),
  };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
