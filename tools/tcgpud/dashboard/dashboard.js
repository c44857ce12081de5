/*
 * tcgpud's dashboard: reads /api/state every two seconds and draws it
 * (docs/tcgpud.md, "Dashboard"). Read-only; every value from the state is
 * put into the page as text (textContent, SVG attributes), never as markup.
 */
'use strict';

const POLL_MS = 2000;
const MiB = 1048576;
const PALETTE = [210, 25, 130, 280, 50, 340, 175, 0, 95, 245];   /* hues, one per project */

let projectHue = {};
let lastOk = 0;

function el(tag, attrs, text) {
  const svg = ['svg', 'path', 'line', 'text', 'g', 'title', 'rect'].includes(tag);
  const e = svg ? document.createElementNS('http://www.w3.org/2000/svg', tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {}))
    e.setAttribute(k, String(v));
  if (text !== undefined)
    e.textContent = String(text);
  return e;
}

function mib(b) { return Math.round(b / MiB) + ' MiB'; }

function clock(ms) {
  const d = new Date(ms);
  const p = (n, w) => String(n).padStart(w || 2, '0');
  return p(d.getHours()) + ':' + p(d.getMinutes()) + ':' + p(d.getSeconds()) + '.' + p(d.getMilliseconds(), 3);
}

function duration(ms) {
  if (ms < 1000) return ms.toFixed(0) + ' ms';
  if (ms < 120000) return (ms / 1000).toFixed(1) + ' s';
  return (ms / 60000).toFixed(1) + ' min';
}

function hueOf(project) {
  if (!(project in projectHue))
    projectHue[project] = PALETTE[Object.keys(projectHue).length % PALETTE.length];
  return projectHue[project];
}

/* The colour of a job: its project's hue, a lightness of its own. */
function colour(project, k) { return 'hsl(' + hueOf(project) + ', 62%, ' + (42 + (k * 11) % 34) + '%)'; }

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function row(cells, attrs) {
  const tr = el('tr', attrs);
  for (const c of cells)
    tr.append(c instanceof Node ? el('td').appendChild(c).parentNode : el('td', {}, c));
  return tr;
}

function badge(state) { return el('span', { class: 'state state-' + state }, state); }

/* ---- memory over time, one chart per GPU ---------------------------------- */

function chart(dev, st) {
  const W = 1000, H = 220, L = 70, R = 10, T = 10, B = 24;
  const samples = st.history.samples;
  /* from the first sample (at least a minute, at most the ten minutes kept) to now */
  const now = st.time_ms;
  const t0 = Math.max(now - 10 * 60000, Math.min(now - 60000, samples.length ? samples[0].time_ms : now));
  const x = t => L + (W - L - R) * (t - t0) / Math.max(1, now - t0);
  const cap = Math.max(dev.capacity, 1);
  const y = b => H - B - (H - T - B) * Math.min(b, cap) / cap;

  /* the jobs seen on this GPU, holding memory, grouped by project */
  const seen = new Map();
  for (const s of samples)
    for (const [pid, d, mem, state, project] of s.jobs)
      if (d === dev.id && !seen.has(pid))
        seen.set(pid, project);
  const series = [...seen.entries()].sort((a, b) => a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : a[0] - b[0]);

  const svg = el('svg', { viewBox: '0 0 ' + W + ' ' + H, preserveAspectRatio: 'none', 'data-device': dev.id });
  for (const f of [0, 0.5, 1]) {
    svg.append(el('line', { class: 'grid', x1: L, x2: W - R, y1: y(cap * f), y2: y(cap * f) }));
    svg.append(el('text', { x: 4, y: y(cap * f) + 4 }, mib(cap * f)));
  }
  for (const t of [t0, (t0 + now) / 2, now])
    svg.append(el('text', { x: Math.min(x(t), W - 80), y: H - 6 }, clock(t).slice(0, 8)));
  /* steps, not slopes: a job holds what a sample saw until the next sample;
   * a suspended job holds nothing (its bytes are what it needs back) */
  const shown = samples.filter(s => s.time_ms >= t0);
  const below = shown.map(() => 0);
  series.forEach(([pid, project], k) => {
    const top = [], bottom = [];
    let most = 0;
    shown.forEach((s, i) => {
      const j = s.jobs.find(v => v[0] === pid && v[1] === dev.id);
      const held = j && j[3] !== 'suspended' ? j[2] : 0;
      most = Math.max(most, held);
      const x0 = x(s.time_ms), x1 = x(i + 1 < shown.length ? shown[i + 1].time_ms : now);
      bottom.push([x0, y(below[i])], [x1, y(below[i])]);
      below[i] += held;
      top.push([x0, y(below[i])], [x1, y(below[i])]);
    });
    if (!top.length)
      return;
    const d = 'M' + top.map(p => p.join(',')).join('L') + 'L' +
              bottom.reverse().map(p => p.join(',')).join('L') + 'Z';
    const path = el('path', { d: d, fill: colour(project, k), 'fill-opacity': 0.85,
                              'data-pid': pid, 'data-project': project, 'data-most': most });
    path.append(el('title', {}, 'pid ' + pid + ' (' + project + ')'));
    svg.append(path);
  });
  for (const p of st.projects)
    for (const r of p.reservation)
      if (r.device === dev.id) {
        const line = el('line', { class: 'reservation', x1: L, x2: W - R, y1: y(r.bytes), y2: y(r.bytes),
                                  stroke: colour(p.name, 0), 'data-reservation': p.name });
        line.append(el('title', {}, p.name + ' reserves ' + mib(r.bytes)));
        svg.append(line);
      }
  svg.append(el('line', { class: 'capacity', x1: L, x2: W - R, y1: y(cap), y2: y(cap) }));

  const box = el('div', { class: 'chart' });
  box.append(el('div', { class: 'title' }, 'GPU ' + dev.id + ': ' + mib(dev.used) + ' used of ' +
                mib(dev.capacity) + ' by running jobs (' + series.length +
                (series.length === 1 ? ' job' : ' jobs') + ' in the last minutes)'));
  box.append(svg);
  return box;
}

function legend(st) {
  const items = st.projects.map(p => {
    const s = el('span'), swatch = el('i');
    swatch.style.background = colour(p.name, 0);   /* CSSOM: the CSP allows no style attribute */
    s.append(swatch, p.name + ' (priority ' + p.priority + ')');
    return s;
  });
  const dash = el('span', {}, '- - - a project\'s reservation; solid line: the GPU\'s capacity');
  document.getElementById('legend').replaceChildren(...items, dash);
}

/* ---- tables ------------------------------------------------------------------ */

function projects(st) {
  const rows = st.projects.map(p => row([
    p.name, p.priority,
    p.reservation.length ? p.reservation.map(r => mib(r.bytes) + ' on GPU ' + r.device).join(', ') : 'none',
    p.used.length ? p.used.map(r => mib(r.bytes) + ' on GPU ' + r.device).join(', ') : '0 MiB',
    mib(p.borrowed_bytes), p.may_borrow ? 'yes' : 'no',
    p.jobs.running, p.jobs.waiting, p.jobs.suspended + p.jobs.suspending,
  ], { 'data-project': p.name }));
  fill(document.querySelector('#projects tbody'), rows);
}

/* The last event of one of these types for pid, newest first. */
function lastEvent(st, pid, types) {
  for (let i = st.events.length - 1; i >= 0; i--)
    if (st.events[i].pid === pid && types.includes(st.events[i].type))
      return st.events[i];
  return null;
}

function jobById(st, pid) { return st.jobs.find(j => j.pid === pid); }

/* "policy, for pid 4243 (alice, prod)" or "hand: uid 1000" */
function suspendedBy(st, j) {
  if (j.suspended_by === 'policy') {
    const f = jobById(st, j.for);
    return 'policy, for pid ' + j.for + (f ? ' (' + f.user + ', ' + f.project + ')' : '');
  }
  const m = lastEvent(st, j.pid, ['manual-suspend']);
  const ev = lastEvent(st, j.pid, ['suspended']);
  if (m) return 'hand: uid ' + m.by_uid;
  if (ev && ev.by === 'outside') return 'hand, outside tcgpud';
  return 'hand';
}

function note(st, j) {
  if (j.state === 'suspended' || j.state === 'suspending')
    return j.suspended_by === 'policy' ? 'by policy for ' + j.for + ' (' + j.why + ')' :
           'by hand' + (j.auto_resume ? ', auto-resume' : '');
  return j.borrowing ? 'borrowing' : '';
}

function suspended(st) {
  const rows = st.jobs.filter(j => j.state === 'suspended' || j.state === 'suspending').map(j => {
    const since = lastEvent(st, j.pid, ['suspending', 'manual-suspend', 'suspended']);
    return row([
      j.pid, j.user, j.project, suspendedBy(st, j), j.why || '', since ? clock(since.time_ms) : '?',
      mib(j.mem), j.auto_resume ? 'by itself, when its memory fits' : 'by hand (gpuckpt resume)',
    ], { 'data-pid': j.pid, 'data-state': j.state });
  });
  fill(document.querySelector('#suspended tbody'), rows);
  document.getElementById('none-suspended').hidden = rows.length > 0;
}

function jobs(st) {
  const rows = st.jobs.map(j => row([
    j.pid, j.user, j.project, j.priority, badge(j.state), j.device, j.mem ? mib(j.mem) : '-',
    j.limit ? mib(j.limit) : 'none', duration(j.runtime_ms), j.preemptions, note(st, j),
  ], { 'data-pid': j.pid, 'data-state': j.state }));
  fill(document.querySelector('#jobs tbody'), rows);
}

/* What an event says, in words, as gpuckpt events shows it. */
function what(e) {
  const parts = [];
  if (e.why) parts.push('why ' + e.why);
  if (e.for) parts.push('for pid ' + e.for);
  if (e.bytes !== undefined) parts.push(mib(e.bytes));
  if (e.limit !== undefined) parts.push('limit ' + (e.limit ? mib(e.limit) : 'none'));
  if (e.gpu_bytes !== undefined) parts.push('gpu memory now ' + mib(e.gpu_bytes));
  if (e.by_uid !== undefined) parts.push('by uid ' + e.by_uid);
  if (e.by) parts.push('by ' + e.by);
  if (e.how) parts.push(e.how);
  if (e.what) parts.push(e.what + ' from uid ' + e.uid);
  if (e.error) parts.push(e.error);
  if (e.text) parts.push('"' + e.text + '"');
  return parts.join(', ');
}

function events(st) {
  const rows = st.events.slice(-60).reverse().map(e => row([
    clock(e.time_ms), e.type, e.pid ? e.pid + ' (' + e.project + ')' : '', what(e),
    e.latency_ms !== undefined ? e.latency_ms.toFixed(1) + ' ms' :
      e.wait_ms !== undefined ? 'waited ' + e.wait_ms.toFixed(1) + ' ms' : '',
  ], { class: 'ev-' + e.type, 'data-type': e.type, 'data-pid': e.pid || '' }));
  fill(document.querySelector('#events tbody'), rows);
}

/* ---- the loop ------------------------------------------------------------------ */

function render(st) {
  document.getElementById('node').textContent = st.node + ' - tcgpud ' + st.version;
  document.getElementById('updated').textContent = 'updated ' + clock(st.time_ms);
  for (const p of st.projects) hueOf(p.name);
  document.getElementById('charts').replaceChildren(...st.devices.map(d => chart(d, st)));
  legend(st);
  projects(st);
  suspended(st);
  jobs(st);
  events(st);
  document.body.dataset.rendered = String(st.time_ms);
}

function setStatus() {
  const s = document.getElementById('status');
  const live = lastOk && Date.now() - lastOk < 3 * POLL_MS;
  s.textContent = live ? 'live' : lastOk ? 'disconnected since ' + clock(lastOk) : 'connecting';
  s.className = 'status ' + (live ? 'live' : 'stale');
}

async function poll() {
  try {
    const r = await fetch('/api/state', { cache: 'no-store' });
    if (r.ok) {
      render(await r.json());
      lastOk = Date.now();
    }
  } catch (e) {
    /* tcgpud went away: say so and keep trying */
  }
  setStatus();
  setTimeout(poll, POLL_MS);
}

poll();
