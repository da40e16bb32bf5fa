// GRID dashboard: plain JavaScript, no libraries. Every byte of data comes
// from the controller's API with the token the user signed in with
// (Authorization: Bearer); the token lives in sessionStorage, so it is gone
// when the tab closes. Data is written into the page with textContent only.
'use strict';

(function () {
  const TOKEN_KEY = 'grid.token';
  const NEXT_KEY = 'grid.next';
  // The API is served from the same origin, at the path the UI is mounted
  // under with "/ui/…" taken off (a proxy may add a prefix).
  const BASE = location.pathname.replace(/\/ui\/.*$/, '');
  const REFRESH_MS = 2000;
  const GRID_PAGE = 100;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else e.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  };

  // ---- auth and API ------------------------------------------------------

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  class AuthError extends Error {}
  class APIError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }

  async function errorText(res) {
    const text = await res.text().catch(() => '');
    try {
      const j = JSON.parse(text);
      if (j && j.error) return j.error;
    } catch (_) { /* not JSON */ }
    return text.trim() || (res.status + ' ' + res.statusText);
  }

  // api fetches a route. A 401 (no or unknown token), or a 403 on a read
  // (the token may not view), signs the user out with the server's message.
  // A 403 on a change (cancel) is the caller's to show: the token may view
  // but not act.
  async function api(path, opts = {}) {
    const res = await fetch(BASE + path, {
      method: opts.method || 'GET',
      headers: Object.assign({ 'Authorization': 'Bearer ' + token(), 'Accept': opts.accept || 'application/json' },
        opts.body === undefined ? {} : { 'Content-Type': 'application/json' }),
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      signal: opts.signal,
      cache: 'no-store',
    });
    const change = (opts.method || 'GET') !== 'GET';
    // opts.soft: a read the page can do without or whose refusal it shows
    // (an admin-only part of a view, the audit); its 403 is the caller's,
    // not a sign-out.
    if (res.status === 401 || (res.status === 403 && !change && !opts.soft)) {
      const msg = await errorText(res);
      signOut((res.status === 401 ? 'Sign-in needed: ' : 'Not allowed: ') + msg);
      throw new AuthError(msg);
    }
    if (!res.ok) throw new APIError(res.status, await errorText(res));
    return opts.raw ? res : res.json();
  }

  function signOut(msg) {
    sessionStorage.removeItem(TOKEN_KEY);
    me = null;
    $('nav-launch').hidden = true;
    const h = location.hash;
    if (h && !h.startsWith('#/signin')) sessionStorage.setItem(NEXT_KEY, h);
    signinMessage = msg || '';
    if (location.hash === '#/signin') route(); else location.hash = '#/signin';
  }

  // ---- small formatting helpers -----------------------------------------

  function ago(iso, now) {
    if (!iso) return '';
    const t = Date.parse(iso);
    if (!t || t < 0) return '';
    let s = Math.max(0, Math.round(((now || Date.now()) - t) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return Math.floor(s / 86400) + ' d ago';
  }
  // human writes a span of milliseconds for people: "0.1 ms", "840 ms",
  // "2.3 s", "1 m 12 s", "3 h 5 m".
  function human(ms) {
    if (!(ms >= 0)) return '';
    if (ms < 10) return (Math.round(ms * 10) / 10) + ' ms';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (Math.round(ms / 100) / 10) + ' s';
    const s = Math.round(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + ' m' + (s % 60 ? ' ' + (s % 60) + ' s' : '');
    const m = Math.round(s / 60);
    if (m < 1440) return Math.floor(m / 60) + ' h' + (m % 60 ? ' ' + (m % 60) + ' m' : '');
    return Math.floor(m / 1440) + ' d' + (Math.floor(m / 60) % 24 ? ' ' + (Math.floor(m / 60) % 24) + ' h' : '');
  }
  // goMs reads a Go duration ("110.685µs", "1m12.5s") as milliseconds, or
  // NaN when it is not one.
  const GO_UNIT = { ns: 1e-6, us: 1e-3, 'µs': 1e-3, 'μs': 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };
  function goMs(d) {
    if (typeof d === 'number') return d / 1e6;
    const t = String(d || '').trim();
    if (t === '0' || t === '0s') return 0;
    if (!/^(\d+(\.\d+)?(ns|us|µs|μs|ms|s|m|h))+$/.test(t)) return NaN;
    let ms = 0;
    for (const m of t.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|μs|ms|s|m|h)/g)) ms += Number(m[1]) * GO_UNIT[m[2]];
    return ms;
  }
  const goDuration = (d) => { const ms = goMs(d); return isNaN(ms) ? String(d || '') : human(ms); };
  function took(a, b) {
    if (!a) return '';
    return human((b ? Date.parse(b) : Date.now()) - Date.parse(a));
  }
  const stamp = (iso) => iso ? new Date(iso).toLocaleString() : '';
  const label = (s) => String(s || 'none').replace(/_/g, ' ');
  const badge = (s) => el('span', { class: 'st st-' + (s || 'none'), text: label(s) });
  const target = (t) => t ? (t.value ? t.scope + ':' + t.value : t.scope) : '';
  const nodeLink = (id) => el('a', { href: '#/node/' + encodeURIComponent(id), class: 'nodelink', text: id });
  const num = (n) => Number(n || 0).toLocaleString('en-US');
  function showMsg(id, msg, info) {
    const p = $(id);
    p.textContent = msg || '';
    p.hidden = !msg;
    p.classList.toggle('info', !!info);
  }
  function qs(params) {
    const u = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== '' && v !== undefined && v !== null) u.set(k, v);
    return u.toString();
  }

  // ---- routing -----------------------------------------------------------

  // view holds what the shown view runs (timers, a stream); leaving the
  // view stops it.
  let view = null;
  let signinMessage = '';

  function leave() {
    if (view) {
      view.stopped = true;
      if (view.abort) view.abort.abort();
      clearTimeout(view.timer);
      view = null;
    }
  }

  function show(name, heading) {
    for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + name;
    for (const a of document.querySelectorAll('.top nav a')) {
      const on = ({ job: 'jobs', node: 'fleet' }[name] || name) === a.id.slice(4);
      if (on) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    $('signout').hidden = name === 'signin';
    document.title = heading + ' · GRID';
    // Move focus to the new view's heading so keyboard and screen reader
    // users start there, unless the user is typing in a field.
    const h = $(name + '-h');
    if (h && !(document.activeElement && /INPUT|SELECT/.test(document.activeElement.tagName))) h.focus();
  }

  function route() {
    leave();
    const h = location.hash || '#/overview';
    if (!token() && !h.startsWith('#/signin')) {
      sessionStorage.setItem(NEXT_KEY, h);
      location.hash = '#/signin';
      return;
    }
    view = { stopped: false, abort: new AbortController(), timer: 0 };
    if (!h.startsWith('#/signin')) loadMe();
    let m;
    if (h.startsWith('#/signin')) signinView();
    else if ((m = /^#\/job\/([^/?#]+)/.exec(h))) jobView(decodeURIComponent(m[1]), view);
    else if ((m = /^#\/node\/([^/?#]+)/.exec(h))) nodeView(decodeURIComponent(m[1]), view);
    else if (h.startsWith('#/launch')) launchView(view);
    else if (h.startsWith('#/jobs')) jobsView(view);
    else if (h.startsWith('#/schedules')) schedulesView(view);
    else if (h.startsWith('#/audit')) auditView(view);
    else if (h.startsWith('#/fleet')) fleetView(view);
    else overviewView(view);
  }

  // me is who the token is (GET /whoami): the launcher is offered only to
  // a role that may submit (the controller checks every request anyway).
  let me = null;
  let meFor = '';
  async function loadMe() {
    const t = token();
    if (me && meFor === t) return me;
    try {
      const m = await api('/whoami');
      if (token() !== t) return null;
      me = m; meFor = t;
      $('nav-launch').hidden = !m.submit;
      return m;
    } catch (_) {
      return null;
    }
  }

  // ---- sign in -----------------------------------------------------------

  function signinView() {
    show('signin', 'Sign in');
    showMsg('signin-msg', signinMessage);
    $('token').value = '';
    $('token').focus();
  }

  $('signin-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    if (!t) { showMsg('signin-msg', 'Paste a token first.'); return; }
    sessionStorage.setItem(TOKEN_KEY, t);
    $('signin-submit').disabled = true;
    try {
      // A read route proves the token before the views start.
      await api('/status');
      signinMessage = '';
      const next = sessionStorage.getItem(NEXT_KEY) || '#/overview';
      sessionStorage.removeItem(NEXT_KEY);
      location.hash = next.startsWith('#/signin') ? '#/overview' : next;
    } catch (e) {
      if (!(e instanceof AuthError)) {
        sessionStorage.removeItem(TOKEN_KEY);
        showMsg('signin-msg', 'Could not reach the controller: ' + e.message);
      }
    } finally {
      $('signin-submit').disabled = false;
    }
  });

  $('signout').addEventListener('click', () => signOut('Signed out.'));

  // ---- overview ----------------------------------------------------------

  // The landing page: the fleet's counts and the cluster's health (GET
  // /status, GET /controllers) and the jobs of the last hour and day (GET
  // /jobs/stats), drawn as bar charts in inline SVG.
  const OUTCOMES = ['completed', 'partial_failure', 'failed', 'cancelled'];
  // The charts' <svg> roots are in the page; their parts are made in the
  // namespace the HTML parser gave those roots.
  const SVG = $('ov-hour').namespaceURI;
  const svg = (tag, attrs, ...kids) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const k of kids) e.append(k);
    return e;
  };

  function overviewView(v) {
    show('overview', 'Overview');
    loadOverview(v);
  }

  async function loadOverview(v) {
    if (v.stopped) return;
    clearTimeout(v.timer);
    const t0 = performance.now();
    const seq = (v.seq = (v.seq || 0) + 1);
    try {
      const o = { signal: v.abort.signal };
      const [st, ctls, hour, day] = await Promise.all([api('/status', o), api('/controllers', o),
        api('/jobs/stats?window=1h', o), api('/jobs/stats?window=24h', o)]);
      if (v.stopped || seq !== v.seq) return;
      showMsg('overview-msg', '');
      renderOverview(st, ctls || [], hour, day);
      requestAnimationFrame(() => setTimeout(() => {
        document.body.dataset.overviewRenderMs = String(Math.round(performance.now() - t0));
        document.body.dataset.overviewRenders = String(Number(document.body.dataset.overviewRenders || 0) + 1);
      }, 0));
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('overview-msg', 'Could not load the overview: ' + e.message + ' (retrying)');
    }
    if (!v.stopped && seq === v.seq) v.timer = setTimeout(() => loadOverview(v), REFRESH_MS);
  }

  function renderOverview(st, ctls, hour, day) {
    $('ov-nodes').textContent = num(st.nodes.total);
    $('ov-online').textContent = num(st.nodes.online);
    $('ov-offline').textContent = num(st.nodes.offline);
    $('ov-controllers').textContent = num(st.controllers);
    $('ov-active').textContent = num(hour.active);
    const cr = ctls.slice().sort((a, b) => a.id.localeCompare(b.id)).map((c) => el('tr', { 'data-controller': c.id },
      el('th', { scope: 'row', class: 'mono', text: c.id }),
      el('td', null, badge(c.status)),
      el('td', { class: 'num', text: num(c.running || 0) }),
      el('td', { title: c.last_seen, text: ago(c.last_seen) })));
    if (!cr.length) cr.push(el('tr', null, el('td', { colspan: '4', class: 'muted', text: 'No controller registered.' })));
    $('ov-ctl-table').tBodies[0].replaceChildren(...cr);
    $('ov-replicas').textContent = st.replicas ? '(' + st.replicas + (st.replicas === 1 ? ' replica' : ' replicas') + ' configured)' : '';
    const sr = (st.streams || []).map((s) => {
      const ok = !s.error && s.has_leader && s.current_replicas >= s.replicas;
      return el('tr', { 'data-stream': s.name },
        el('th', { scope: 'row', class: 'mono', text: s.name + (s.bucket ? ' (bucket)' : '') }),
        el('td', { class: 'num', text: (s.error ? '?' : s.current_replicas) + ' / ' + s.replicas }),
        el('td', { class: 'mono', text: s.has_leader ? (s.leader || 'yes') : 'none' }),
        el('td', { title: s.error || '' }, badge(ok ? 'healthy' : (s.error ? 'unknown' : 'degraded'))));
    });
    if (!sr.length) sr.push(el('tr', null, el('td', { colspan: '4', class: 'muted', text: 'No stream health reported.' })));
    $('ov-streams').tBodies[0].replaceChildren(...sr);
    renderWindow('ov-hour', hour, 'minute');
    renderWindow('ov-day', day, '15 minutes');
    const fr = (day.recent_failures || []).map((f) => el('tr', { 'data-job': f.id },
      el('th', { scope: 'row' }, el('a', { href: '#/job/' + encodeURIComponent(f.id), class: 'mono', text: f.id })),
      el('td', null, badge(f.status)),
      el('td', { title: f.finished_at, text: ago(f.finished_at) }),
      el('td', { text: f.target || '—' }),
      el('td', { class: 'mono', text: (f.tasks || []).join(', ') || '—' }),
      el('td', { class: 'err', text: f.error || '—' })));
    if (!fr.length) fr.push(el('tr', null, el('td', { colspan: '6', class: 'muted', text: 'No job failed in the last day.' })));
    $('ov-failures').tBodies[0].replaceChildren(...fr);
  }

  const pct = (n, of) => of ? (Math.round(1000 * n / of) / 10) + '%' : '–';

  // renderWindow writes one window's rates and draws its chart: a bar per
  // bucket, stacked by outcome, and the jobs submitted as a line.
  function renderWindow(id, s, per) {
    const t = s.totals;
    const ended = OUTCOMES.reduce((a, k) => a + t[k], 0);
    const minutes = (s.buckets.length * s.bucket_seconds) / 60;
    $(id + '-rates').replaceChildren(
      el('span', { 'data-k': 'submitted', text: num(t.submitted) + ' submitted (' + (Math.round(10 * t.submitted / minutes) / 10) + ' a minute)' }), ' · ',
      el('span', { 'data-k': 'ended', text: num(ended) + ' ended' }), ': ',
      ...OUTCOMES.flatMap((k, i) => [i ? ', ' : '', el('span', { 'data-k': k, text: label(k) + ' ' + num(t[k]) + ' (' + pct(t[k], ended) + ')' })]));
    const W = 720, H = 160, L = 34, B = 20;
    const n = s.buckets.length, bw = (W - L) / n;
    const top = Math.max(1, ...s.buckets.map((b) => Math.max(b.submitted, OUTCOMES.reduce((a, k) => a + b[k], 0))));
    const y = (v) => H - B - (v / top) * (H - B - 8);
    const g = svg('g');
    s.buckets.forEach((b, i) => {
      let base = 0;
      for (const k of OUTCOMES) {
        if (!b[k]) continue;
        const r = svg('rect', { x: (L + i * bw + 0.5).toFixed(1), y: y(base + b[k]).toFixed(1), width: Math.max(1, bw - 1).toFixed(1),
          height: (y(base) - y(base + b[k])).toFixed(1), class: 'b-' + k, 'data-bucket': i });
        r.append(svg('title', {}, new Date(b.start).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) + ': ' + b[k] + ' ' + label(k)));
        g.append(r);
        base += b[k];
      }
    });
    const line = s.buckets.map((b, i) => (L + (i + 0.5) * bw).toFixed(1) + ',' + y(b.submitted).toFixed(1)).join(' ');
    const axis = svg('g', { class: 'axis' },
      svg('line', { x1: L, y1: H - B, x2: W, y2: H - B }),
      svg('text', { x: L - 4, y: y(top) + 4, 'text-anchor': 'end' }, String(top)),
      svg('text', { x: L - 4, y: H - B, 'text-anchor': 'end' }, '0'),
      svg('text', { x: L, y: H - 4 }, new Date(s.from).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })),
      svg('text', { x: W, y: H - 4, 'text-anchor': 'end' }, 'now'));
    $(id).setAttribute('aria-label', 'Jobs ended per ' + per + ', by outcome: ' + $(id + '-rates').textContent);
    $(id).replaceChildren(axis, g, svg('polyline', { points: line, class: 'submitted' }));
  }

  // ---- fleet -------------------------------------------------------------

  const fleet = { offset: 0, limit: 100, matched: 0 };

  function fleetView(v) {
    show('fleet', 'Fleet');
    loadFleet(v);
  }

  function fleetFilters() {
    return { q: $('fleet-q').value.trim(), group: $('fleet-group').value, site: $('fleet-site').value, status: $('fleet-status').value, backend: $('fleet-backend').value };
  }

  async function loadFleet(v) {
    if (v.stopped) return;
    clearTimeout(v.timer);
    const t0 = performance.now();
    const seq = (v.seq = (v.seq || 0) + 1);
    try {
      const p = await api('/fleet?' + qs({ ...fleetFilters(), limit: fleet.limit, offset: fleet.offset }), { signal: v.abort.signal });
      if (v.stopped || seq !== v.seq) return;
      showMsg('fleet-msg', '');
      renderFleet(p);
      // Rendered once the browser has laid the page out and painted.
      requestAnimationFrame(() => setTimeout(() => {
        const ms = Math.round(performance.now() - t0);
        document.body.dataset.fleetRenderMs = String(ms);
        document.body.dataset.fleetRenders = String(Number(document.body.dataset.fleetRenders || 0) + 1);
      }, 0));
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('fleet-msg', 'Could not load the fleet: ' + e.message + ' (retrying)');
    }
    if (!v.stopped && seq === v.seq) v.timer = setTimeout(() => loadFleet(v), REFRESH_MS);
  }

  function fillSelect(sel, values, allLabel) {
    const cur = sel.value;
    const want = [''].concat(values.map((x) => x.value));
    const have = Array.from(sel.options).map((o) => o.value + '\u0000' + o.textContent);
    const next = [allLabel].concat(values.map((x) => x.label));
    if (have.join('|') === want.map((w, i) => w + '\u0000' + next[i]).join('|')) return;
    sel.replaceChildren(...want.map((w, i) => el('option', { value: w, text: next[i] })));
    // Keep the chosen filter even if nothing has it any more.
    if (cur && !want.includes(cur)) sel.append(el('option', { value: cur, text: cur }));
    sel.value = cur;
  }

  function renderFleet(p) {
    const now = Date.parse(p.time) || Date.now();
    $('fleet-total').textContent = num(p.total);
    $('fleet-online').textContent = num(p.online);
    $('fleet-offline').textContent = num(p.offline);
    const groups = p.groups || [];
    fillSelect($('fleet-group'), groups.map((g) => ({ value: g.group, label: g.group + ' (' + num(g.total) + ')' })), 'All groups');
    fillSelect($('fleet-site'), (p.sites || []).map((s) => ({ value: s.name, label: s.name + ' (' + num(s.nodes) + ')' })), 'All sites');
    fillSelect($('fleet-backend'), (p.backends || []).map((b) => ({ value: b.name, label: b.name + ' (' + num(b.nodes) + ')' })), 'Any');

    const gb = document.createDocumentFragment();
    for (const g of groups) {
      const depth = g.group.split('.').length - 1;
      const btn = el('button', { type: 'button', class: 'group-btn', 'data-group': g.group, text: g.group,
        'aria-label': 'Show group ' + g.group });
      btn.style.marginLeft = depth + 'em';
      gb.append(el('tr', null, el('td', null, btn), el('td', { class: 'num', text: num(g.online) }),
        el('td', { class: 'num', text: num(g.offline) })));
    }
    $('groups-table').tBodies[0].replaceChildren(gb);
    $('versions').replaceChildren(...(p.versions || []).map((x) => el('li', { text: (x.name || 'unknown') + ': ' + num(x.nodes) })));

    const rows = document.createDocumentFragment();
    for (const n of p.nodes) {
      rows.append(el('tr', { 'data-node': n.id },
        el('th', { scope: 'row', class: 'mono' }, nodeLink(n.id)),
        el('td', { class: 'status' }, badge(n.status)),
        el('td', { class: 'site', text: n.site || 'default' }),
        el('td', { text: (n.groups || []).join(', ') }),
        el('td', { text: (n.backends || []).join(', ') }),
        el('td', { text: n.version || '' }),
        el('td', { title: n.last_seen, text: ago(n.last_seen, now) })));
    }
    if (!p.nodes.length) rows.append(el('tr', null, el('td', { colspan: '7', class: 'muted', text: 'No node matches.' })));
    $('fleet-table').tBodies[0].replaceChildren(rows);
    fleet.matched = p.matched;
    if (p.offset >= p.matched && p.matched > 0) { fleet.offset = 0; }
    const end = Math.min(p.offset + p.nodes.length, p.matched);
    $('fleet-count').textContent = p.matched ? (num(p.offset + 1) + '–' + num(end) + ' of ' + num(p.matched) + ' nodes') : '0 nodes';
    $('fleet-prev').disabled = p.offset <= 0;
    $('fleet-next').disabled = end >= p.matched;
  }

  function refilterFleet() { fleet.offset = 0; if (view) loadFleet(view); }
  let fleetTyping = 0;
  $('fleet-q').addEventListener('input', () => { clearTimeout(fleetTyping); fleetTyping = setTimeout(refilterFleet, 200); });
  $('fleet-filters').addEventListener('submit', (e) => { e.preventDefault(); refilterFleet(); });
  for (const id of ['fleet-group', 'fleet-site', 'fleet-status', 'fleet-backend']) $(id).addEventListener('change', refilterFleet);
  $('groups-table').addEventListener('click', (e) => {
    const b = e.target.closest('button[data-group]');
    if (!b) return;
    $('fleet-group').value = b.dataset.group;
    refilterFleet();
  });
  $('fleet-prev').addEventListener('click', () => { fleet.offset = Math.max(0, fleet.offset - fleet.limit); loadFleet(view); });
  $('fleet-next').addEventListener('click', () => { fleet.offset += fleet.limit; loadFleet(view); });

  // ---- jobs --------------------------------------------------------------

  const jobs = { offset: 0, limit: 50 };
  const JOB_STATES = ['pending', 'running', 'completed', 'partial_failure', 'failed', 'cancelled'];

  function jobsView(v) {
    show('jobs', 'Jobs');
    loadJobs(v);
  }

  async function loadJobs(v) {
    if (v.stopped) return;
    clearTimeout(v.timer);
    const seq = (v.seq = (v.seq || 0) + 1);
    try {
      const p = await api('/jobs/page?' + qs({ q: $('jobs-q').value.trim(), status: $('jobs-status').value, limit: jobs.limit, offset: jobs.offset }),
        { signal: v.abort.signal });
      if (v.stopped || seq !== v.seq) return;
      showMsg('jobs-msg', '');
      renderJobs(p);
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('jobs-msg', 'Could not load jobs: ' + e.message + ' (retrying)');
    }
    if (!v.stopped && seq === v.seq) v.timer = setTimeout(() => loadJobs(v), REFRESH_MS);
  }

  function renderJobs(p) {
    const states = JOB_STATES.concat(Object.keys(p.counts || {}).filter((s) => !JOB_STATES.includes(s)));
    fillSelect($('jobs-status'), states.map((s) => ({ value: s, label: label(s) + ' (' + num((p.counts || {})[s]) + ')' })), 'Any (' + num(p.total) + ')');
    const rows = document.createDocumentFragment();
    for (const j of p.jobs) {
      const tasks = j.tasks || [];
      rows.append(el('tr', { 'data-job': j.id },
        el('th', { scope: 'row', class: 'mono' }, el('a', { href: '#/job/' + encodeURIComponent(j.id), text: j.id })),
        el('td', { class: 'status' }, badge(j.status)),
        el('td', { text: target(j.target) }),
        el('td', { text: tasks.slice(0, 3).join(', ') + (tasks.length > 3 ? ' +' + (tasks.length - 3) : '') }),
        el('td', { class: 'num', text: num(j.nodes) }),
        el('td', { class: 'submitter', text: j.submitted_by || '—' }),
        el('td', { title: j.created_at, text: ago(j.created_at) }),
        el('td', { text: took(j.started_at, j.finished_at) })));
    }
    if (!p.jobs.length) rows.append(el('tr', null, el('td', { colspan: '8', class: 'muted', text: 'No job matches.' })));
    $('jobs-table').tBodies[0].replaceChildren(rows);
    const end = Math.min(p.offset + p.jobs.length, p.matched);
    $('jobs-count').textContent = p.matched ? (num(p.offset + 1) + '–' + num(end) + ' of ' + num(p.matched) + ' jobs') : '0 jobs';
    $('jobs-prev').disabled = p.offset <= 0;
    $('jobs-next').disabled = end >= p.matched;
  }

  function refilterJobs() { jobs.offset = 0; if (view) loadJobs(view); }
  let jobsTyping = 0;
  $('jobs-q').addEventListener('input', () => { clearTimeout(jobsTyping); jobsTyping = setTimeout(refilterJobs, 200); });
  $('jobs-filters').addEventListener('submit', (e) => { e.preventDefault(); refilterJobs(); });
  $('jobs-status').addEventListener('change', refilterJobs);
  $('jobs-prev').addEventListener('click', () => { jobs.offset = Math.max(0, jobs.offset - jobs.limit); loadJobs(view); });
  $('jobs-next').addEventListener('click', () => { jobs.offset += jobs.limit; loadJobs(view); });

  // ---- one job, live -----------------------------------------------------

  // The job view keeps the job as streamed and patches only the grid cells
  // whose result changed, at most once a frame, so a job over 1,000 nodes
  // stays responsive.
  let jv = null;

  // node-2 before node-10.
  const byName = new Intl.Collator('en', { numeric: true }).compare;

  function flatten(phases) {
    return phaseGroups(phases).flatMap((g) => g.leaves.map((l) => l.name));
  }

  // phaseGroups reads a job's top-level phases as the grid's column groups:
  // a leaf is a barrier step (every node finishes it before the next
  // starts); a nested tasks list is a pipeline (each node runs its steps
  // on its own). Each carries its condition (empty means always).
  function phaseGroups(phases) {
    return (phases || []).map((p) => {
      const cond = p.condition || 'always';
      if (p.tasks && p.tasks.length) {
        const leaves = [];
        const walk = (ps) => { for (const q of ps) { if (q.tasks && q.tasks.length) walk(q.tasks); else leaves.push({ name: q.backend + '.' + q.action, cond: q.condition || 'always' }); } };
        walk(p.tasks);
        return { kind: 'pipeline', cond, leaves };
      }
      return { kind: 'barrier', cond, leaves: [{ name: p.backend + '.' + p.action, cond }] };
    });
  }

  function jobView(id, v) {
    show('job', 'Job ' + id);
    $('job-h').textContent = 'Job ' + id;
    showMsg('job-msg', '');
    $('job-meta').replaceChildren();
    $('job-summary').textContent = '';
    $('job-grid').tHead.replaceChildren();
    $('job-grid').tBodies[0].replaceChildren();
    $('cell').hidden = true;
    $('job-spec').textContent = '';
    $('job-status').replaceChildren(badge('pending'));
    cancelArmed(false);
    $('job-cancel').hidden = true;
    $('job-retry').hidden = true;
    $('job-retry-failed').hidden = true;
    jv = { id, v, job: null, steps: [], nodes: [], cells: new Map(), dirty: new Set(), frame: 0, page: 0, selected: null, ended: false };
    stream(jv, 0);
  }

  // stream reads GET /job/{id}/events with fetch: EventSource cannot send
  // the Authorization header.
  async function stream(s, attempt) {
    if (s.v.stopped) return;
    $('job-live').textContent = attempt ? 'Reconnecting…' : 'Connecting…';
    let res;
    try {
      res = await api('/job/' + encodeURIComponent(s.id) + '/events', { signal: s.v.abort.signal, raw: true, accept: 'text/event-stream' });
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      if (e.status === 404) { showMsg('job-msg', e.message); $('job-live').textContent = ''; return; }
      return retryStream(s, attempt, e.message);
    }
    $('job-live').textContent = 'Live';
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const t0 = performance.now();
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = 'message';
          const data = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) event = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          }
          if (data.length) onEvent(s, event, JSON.parse(data.join('\n')));
        }
        busy(t0);
      }
    } catch (e) {
      if (e.name === 'AbortError' || s.v.stopped) return;
    }
    if (s.ended || s.v.stopped) return;
    retryStream(s, attempt, 'the stream closed');
  }

  function retryStream(s, attempt, why) {
    const wait = Math.min(10000, 500 * Math.pow(2, attempt));
    $('job-live').textContent = 'Disconnected (' + why + '); reconnecting…';
    s.v.timer = setTimeout(() => stream(s, attempt + 1), wait);
  }

  function onEvent(s, event, data) {
    if (event === 'job') {
      s.job = data;
      s.job.results = s.job.results || {};
      layoutGrid(s);
    } else if (event === 'update') {
      if (data.job) {
        const results = s.job.results;
        const grew = (data.job.expected || []).length !== (s.job.expected || []).length;
        // Once the job ends, cells without a result read "not run".
        const ended = !TERMINAL.includes(s.job.status) && TERMINAL.includes(data.job.status);
        s.job = Object.assign(data.job, { results });
        if (grew || ended) { s.relayout = true; }
      }
      for (const [step, nodes] of Object.entries(data.results || {})) {
        const row = s.job.results[step] || (s.job.results[step] = {});
        for (const [node, r] of Object.entries(nodes)) {
          row[node] = r;
          if (!s.nodeSet.has(node)) { s.nodeSet.add(node); s.relayout = true; }
          s.dirty.add(step + '|' + node);
        }
      }
      if (s.relayout) { s.relayout = false; layoutGrid(s); }
    } else if (event === 'end') {
      s.ended = true;
      $('job-live').textContent = 'Finished';
      document.body.dataset.jobEnded = s.id;
    }
    schedule(s);
  }

  function schedule(s) {
    if (s.frame) return;
    s.frame = requestAnimationFrame(() => { s.frame = 0; paint(s); });
  }

  function layoutGrid(s) {
    const j = s.job;
    s.steps = flatten(j.tasks);
    $('job-spec').textContent = yaml(specOf(j));
    const names = new Set(s.nodeSet || []);
    for (const n of j.expected || []) names.add(n);
    for (const nodes of Object.values(j.results || {})) for (const n of Object.keys(nodes)) names.add(n);
    s.nodes = Array.from(names).sort(byName);
    s.nodeSet = names;
    // Two header rows: the top-level phases (barrier or pipeline, and
    // their condition) over the steps they hold.
    const groups = phaseGroups(j.tasks);
    const top = el('tr', null, el('td', { class: 'corner' }));
    const cols = el('tr', null, el('th', { scope: 'col', text: 'Node' }));
    let i = 0;
    groups.forEach((g, gi) => {
      const first = i + 1;
      const last = i + g.leaves.length;
      top.append(el('th', { scope: 'colgroup', colspan: String(g.leaves.length), class: 'phase phase-' + g.kind,
        'data-phase': String(gi), 'data-kind': g.kind, 'data-condition': g.cond,
        text: (first === last ? 'Step ' + first : 'Steps ' + first + '–' + last) + ' · ' + g.kind + ' · ' + label(g.cond) }));
      for (const l of g.leaves) {
        i++;
        const th = el('th', { scope: 'col', 'data-step': String(i - 1), 'data-condition': l.cond }, i + '. ' + l.name);
        if (g.kind === 'pipeline' && l.cond !== 'always') th.append(el('span', { class: 'cond', text: label(l.cond) }));
        cols.append(th);
      }
    });
    $('job-grid').tHead.replaceChildren(top, cols);
    renderRows(s);
  }

  function cellText(r, j) {
    const st = statusOf(r, j);
    if (!r) return st === 'not_run' ? 'not run' : '—';
    let t = label(st);
    if (r.status === 'running' && r.progress != null) t += ' ' + r.progress + '%';
    if (r.attempts > 1) t += ' ×' + r.attempts;
    if (r.changed) t += ' (changed)';
    return t;
  }

  function visibleNodes(s) {
    const q = $('grid-q').value.trim().toLowerCase();
    const show = $('grid-show').value;
    const res = s.job.results || {};
    return s.nodes.filter((n) => {
      if (q && !n.toLowerCase().includes(q)) return false;
      if (!show) return true;
      const rs = s.steps.map((_, i) => (res[i] || {})[n]);
      if (show === 'failed') return rs.some((r) => r && r.status === 'failed');
      if (show === 'changed') return rs.some((r) => r && r.changed);
      return rs.some((r) => !r || !['success', 'failed', 'skipped', 'cancelled'].includes(r.status));
    });
  }

  function renderRows(s) {
    const nodes = visibleNodes(s);
    const pages = Math.max(1, Math.ceil(nodes.length / GRID_PAGE));
    if (s.page >= pages) s.page = pages - 1;
    const slice = nodes.slice(s.page * GRID_PAGE, (s.page + 1) * GRID_PAGE);
    s.cells = new Map();
    const res = s.job.results || {};
    const frag = document.createDocumentFragment();
    for (const n of slice) {
      // A node of another site than the controllers' own is named node@site.
      const site = (s.job.node_sites || {})[n];
      const th = el('th', { scope: 'row', class: 'mono' }, nodeLink(n));
      if (site) th.append(el('span', { class: 'muted site', text: '@' + site }));
      const tr = el('tr', { 'data-node': n }, th);
      s.steps.forEach((name, i) => {
        const r = (res[i] || {})[n];
        const b = el('button', { type: 'button', class: 'cellbtn st st-' + (r ? statusOf(r, s.job) : noResult(s.job) === 'not_run' ? 'not_run' : 'none'), 'data-step': String(i), 'data-node': n,
          'aria-label': n + ', step ' + (i + 1) + ' ' + name + ': ' + cellText(r, s.job),
          'aria-pressed': s.selected && s.selected.node === n && s.selected.step === i ? 'true' : 'false', text: cellText(r, s.job) });
        s.cells.set(i + '|' + n, b);
        tr.append(el('td', null, b));
      });
      frag.append(tr);
    }
    if (!slice.length) frag.append(el('tr', null, el('td', { colspan: String(s.steps.length + 1), class: 'muted',
      text: s.nodes.length ? 'No node matches.' : 'No node yet: the job has not started.' })));
    $('job-grid').tBodies[0].replaceChildren(frag);
    const end = Math.min((s.page + 1) * GRID_PAGE, nodes.length);
    $('grid-count').textContent = nodes.length ? (num(s.page * GRID_PAGE + 1) + '–' + num(end) + ' of ' + num(nodes.length) + ' nodes') : '';
    $('grid-prev').disabled = s.page <= 0;
    $('grid-next').disabled = end >= nodes.length;
    s.dirty.clear();
    paintHead(s);
  }

  // busy records the longest the page spent on the stream's events or on
  // painting them (in the page's data-job-busy-ms): the figure that shows
  // whether a big job freezes it.
  function busy(t0) {
    const ms = performance.now() - t0;
    if (ms > Number(document.body.dataset.jobBusyMs || 0)) document.body.dataset.jobBusyMs = ms.toFixed(1);
  }

  function paint(s) {
    if (!s.job) return;
    const t0 = performance.now();
    const res = s.job.results;
    for (const key of s.dirty) {
      const b = s.cells.get(key);
      if (!b) continue;
      const [step, node] = [Number(key.slice(0, key.indexOf('|'))), key.slice(key.indexOf('|') + 1)];
      const r = (res[step] || {})[node];
      b.className = 'cellbtn st st-' + (r ? statusOf(r, s.job) : noResult(s.job) === 'not_run' ? 'not_run' : 'none');
      b.textContent = cellText(r, s.job);
      b.setAttribute('aria-label', node + ', step ' + (step + 1) + ' ' + s.steps[step] + ': ' + cellText(r, s.job));
    }
    if (s.selected && s.dirty.has(s.selected.step + '|' + s.selected.node)) renderCell(s);
    s.dirty.clear();
    paintHead(s);
    busy(t0);
  }

  const TERMINAL = ['completed', 'failed', 'cancelled', 'partial_failure'];
  // What a cell without a result is: waiting while the job runs, and not
  // run once it has ended.
  function noResult(j) {
    return TERMINAL.includes(j.status) ? 'not_run' : 'waiting';
  }
  // statusOf is a cell's status as shown: a step still pending or waiting
  // on a node when the job ended never ran there.
  function statusOf(r, j) {
    if (!r) return noResult(j);
    if (TERMINAL.includes(j.status) && ['pending', 'waiting'].includes(r.status)) return 'not_run';
    return r.status;
  }

  // specOf is what was submitted, out of the job record: the fields of
  // api.JobSpec, in its order (the status and results are left out).
  const SPEC_FIELDS = ['target', 'nodes', 'strategy', 'timeout', 'check_mode', 'max_concurrency', 'max_errors', 'priority', 'not_before', 'tasks'];
  function specOf(j) {
    const out = {};
    for (const k of SPEC_FIELDS) if (j[k] !== undefined && j[k] !== null && j[k] !== '' && !(Array.isArray(j[k]) && !j[k].length)) out[k] = j[k];
    return out;
  }

  // yaml writes a JSON value as YAML (block style), quoting strings that
  // YAML would read as something else.
  function yamlScalar(v) {
    if (v === null || v === undefined) return 'null';
    if (typeof v !== 'string') return String(v);
    if (v === '' || /^[\s]|[\s]$|^[-?:,[\]{}#&*!|>'"%@`]|: | #|^(true|false|yes|no|on|off|null|~)$|^[-+.\d]/i.test(v) || /[\n\t]/.test(v)) return JSON.stringify(v);
    return v;
  }
  function yaml(v, ind = '') {
    const lines = [];
    const isObj = (x) => x && typeof x === 'object';
    const empty = (x) => (Array.isArray(x) ? !x.length : !Object.keys(x).length);
    const item = (prefix, x, childInd) => {
      if (isObj(x) && !empty(x)) {
        lines.push(prefix, yaml(x, childInd));
      } else lines.push(prefix + ' ' + (isObj(x) ? (Array.isArray(x) ? '[]' : '{}') : yamlScalar(x)));
    };
    if (Array.isArray(v)) {
      for (const x of v) {
        if (isObj(x) && !Array.isArray(x) && !empty(x)) {
          // "- key: value", the rest of the map indented under it.
          const sub = yaml(x, ind + '  ').split('\n');
          lines.push(ind + '- ' + sub[0].slice(ind.length + 2), ...sub.slice(1));
        } else item(ind + '-', x, ind + '  ');
      }
    } else {
      for (const [k, x] of Object.entries(v)) item(ind + yamlScalar(k) + ':', x, ind + '  ');
    }
    return lines.join('\n');
  }

  function paintHead(s) {
    const j = s.job;
    $('job-status').replaceChildren(badge(j.status));
    document.body.dataset.jobStatus = j.status;
    const terminal = ['completed', 'failed', 'cancelled', 'partial_failure'].includes(j.status);
    $('job-cancel').hidden = terminal;
    if (terminal) { cancelArmed(false); $('job-cancel-keep').hidden = true; }
    // A finished job can be run again; one that did not complete also on
    // the nodes that failed, were cancelled or unreachable alone.
    $('job-retry').hidden = !terminal;
    $('job-retry-failed').hidden = !terminal || j.status === 'completed';
    const meta = [['Target', target(j.target)], ['Submitted by', j.submitted_by || '—'], ['Strategy', j.strategy || 'fail-fast'],
      ['Created', stamp(j.created_at)], ['Started', stamp(j.started_at)], ['Finished', stamp(j.finished_at)],
      ['Took', took(j.started_at, j.finished_at)], ['Controller', j.owner || '']];
    if (j.check_mode) meta.push(['Check mode', 'yes (nothing is changed)']);
    if (j.retry_of) meta.push(['Retry of', el('a', { href: '#/job/' + encodeURIComponent(j.retry_of), class: 'mono', id: 'job-retry-of', text: j.retry_of })]);
    if (j.schedule_id) meta.push(['Schedule', el('a', { href: '#/schedules', id: 'job-schedule', text: j.schedule_id })]);
    if (j.error) meta.push(['Error', j.error]);
    $('job-meta').replaceChildren(...meta.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', null, v || '—')]));
    const counts = {};
    let cells = 0;
    for (let i = 0; i < s.steps.length; i++) {
      const row = j.results[i] || {};
      for (const n of s.nodes) {
        const r = row[n];
        const st = statusOf(r, j);
        counts[st] = (counts[st] || 0) + 1;
        cells++;
      }
    }
    const parts = Object.entries(counts).sort().map(([k, v]) => num(v) + ' ' + label(k));
    $('job-summary').textContent = num(s.nodes.length) + ' nodes × ' + s.steps.length + ' steps' + (cells ? ': ' + parts.join(', ') : '');
  }

  function renderCell(s) {
    const { step, node } = s.selected;
    const r = (s.job.results[step] || {})[node];
    $('cell').hidden = false;
    $('cell-h').textContent = node + ' · step ' + (step + 1) + ' ' + s.steps[step];
    const meta = [['Status', label(statusOf(r, s.job))], ['Changed', r && r.changed ? 'yes' : 'no'],
      ['Attempts', r && r.attempts ? String(r.attempts) : '—'], ['Duration', (r && r.duration) ? goDuration(r.duration) : '—']];
    if (r && r.progress != null) meta.push(['Progress', r.progress + '%']);
    $('cell-meta').replaceChildren(...meta.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { class: 'cell-' + k.toLowerCase(), text: v })]));
    $('cell-output').textContent = (r && r.output) || '(none)';
    $('cell-error').textContent = (r && r.error) || '(none)';
    const evs = (r && r.events) || [];
    $('cell-events').replaceChildren(...(evs.length ? evs.map((e) => el('li', null,
      el('time', { datetime: e.time, text: new Date(e.time).toLocaleTimeString() }), ' ', badge(e.status),
      e.attempt ? ' attempt ' + e.attempt : '', e.message ? ' — ' + e.message : '')) : [el('li', { class: 'muted', text: 'No event yet.' })]));
  }

  $('job-grid').addEventListener('click', (e) => {
    const b = e.target.closest('button.cellbtn');
    if (!b || !jv) return;
    for (const x of $('job-grid').querySelectorAll('button[aria-pressed="true"]')) x.setAttribute('aria-pressed', 'false');
    b.setAttribute('aria-pressed', 'true');
    jv.selected = { step: Number(b.dataset.step), node: b.dataset.node };
    renderCell(jv);
    // The panel sits under the grid: bring it into view (at 1400×900 it
    // would open below the fold), keeping focus on the cell.
    $('cell').scrollIntoView({ block: 'nearest' });
  });
  const regrid = () => { if (jv && jv.job) { jv.page = 0; renderRows(jv); } };
  let gridTyping = 0;
  $('grid-q').addEventListener('input', () => { clearTimeout(gridTyping); gridTyping = setTimeout(regrid, 150); });
  $('grid-show').addEventListener('change', regrid);
  $('grid-filters').addEventListener('submit', (e) => { e.preventDefault(); regrid(); });
  $('grid-prev').addEventListener('click', () => { if (jv) { jv.page = Math.max(0, jv.page - 1); renderRows(jv); } });
  $('grid-next').addEventListener('click', () => { if (jv) { jv.page++; renderRows(jv); } });

  // Cancel asks once more before it acts. A token whose role may not
  // cancel gets the server's 403 message here; it stays signed in to view.
  let armTimer = 0;
  function cancelArmed(on) {
    clearTimeout(armTimer);
    $('job-cancel').textContent = on ? 'Confirm cancel' : 'Cancel job';
    $('job-cancel').dataset.armed = on ? '1' : '';
    $('job-cancel-keep').hidden = !on;
    if (on) armTimer = setTimeout(() => cancelArmed(false), 10000);
  }
  $('job-cancel-keep').addEventListener('click', () => { cancelArmed(false); $('job-cancel').focus(); });
  $('job-cancel').addEventListener('click', async () => {
    if (!jv) return;
    if (!$('job-cancel').dataset.armed) { cancelArmed(true); return; }
    cancelArmed(false);
    $('job-cancel').disabled = true;
    try {
      await api('/job/' + encodeURIComponent(jv.id) + '/cancel', { method: 'POST' });
      showMsg('job-msg', 'Cancel requested.', true);
    } catch (e) {
      if (e instanceof AuthError) return;
      showMsg('job-msg', (e.status === 403 ? 'Not allowed to cancel: ' : 'Cancel failed: ') + e.message);
    } finally {
      $('job-cancel').disabled = false;
    }
  });

  // Retry submits the finished job's spec as a new job (operator role) and
  // opens it; the server's refusal (a role too weak, no failed nodes, a
  // sensitive param whose value is gone) is shown here.
  async function retry(failedOnly) {
    if (!jv) return;
    const b = $(failedOnly ? 'job-retry-failed' : 'job-retry');
    b.disabled = true;
    try {
      const j = await api('/job/' + encodeURIComponent(jv.id) + '/retry', { method: 'POST', body: { failed_only: failedOnly } });
      location.hash = '#/job/' + encodeURIComponent(j.id);
    } catch (e) {
      if (e instanceof AuthError) return;
      showMsg('job-msg', (e.status === 403 ? 'Not allowed to retry: ' : 'Retry failed: ') + e.message);
    } finally {
      b.disabled = false;
    }
  }
  $('job-retry').addEventListener('click', () => retry(false));
  $('job-retry-failed').addEventListener('click', () => retry(true));

  // ---- schedules ---------------------------------------------------------

  function schedulesView(v) {
    show('schedules', 'Schedules');
    loadSchedules(v);
  }

  async function loadSchedules(v) {
    if (v.stopped) return;
    clearTimeout(v.timer);
    const seq = (v.seq = (v.seq || 0) + 1);
    try {
      const list = await api('/schedules/page', { signal: v.abort.signal });
      if (v.stopped || seq !== v.seq) return;
      // Rows are rebuilt only when something changed (or a minute passed,
      // for the "ago" column), so a button is not swapped under the
      // pointer.
      const key = JSON.stringify(list) + Math.floor(Date.now() / 60000);
      if (key !== v.shown) { v.shown = key; renderSchedules(list || []); }
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('schedules-msg', 'Could not load schedules: ' + e.message + ' (retrying)');
    }
    if (!v.stopped && seq === v.seq) v.timer = setTimeout(() => loadSchedules(v), REFRESH_MS);
  }

  // LOCAL_TZ is the browser's time zone, named beside the times shown in it.
  const LOCAL_TZ = Intl.DateTimeFormat().resolvedOptions().timeZone || 'local';

  // zoned writes an instant as "2026-11-25 03:00" in a time zone.
  function zoned(iso, tz) {
    try {
      const parts = Object.fromEntries(new Intl.DateTimeFormat('en-US', { timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit',
        hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).formatToParts(new Date(iso)).map((p) => [p.type, p.value]));
      return parts.year + '-' + parts.month + '-' + parts.day + ' ' + parts.hour + ':' + parts.minute;
    } catch (_) {
      return stamp(iso);
    }
  }

  // nextRun shows a schedule's next tick in its own zone, named, and in
  // the browser's, named, so "03:00 Europe/Berlin" is not read as 02:00.
  function nextRun(s) {
    if (!s.next_run) return '—';
    const tz = s.time_zone || 'UTC';
    const td = el('td', { class: 'next', title: s.next_run },
      el('span', { class: 'zoned', text: zoned(s.next_run, tz) + ' ' + tz }));
    if (tz !== LOCAL_TZ) td.append(el('span', { class: 'local muted', text: zoned(s.next_run, LOCAL_TZ) + ' your time (' + LOCAL_TZ + ')' }));
    return td;
  }

  function renderSchedules(list) {
    const rows = document.createDocumentFragment();
    for (const s of list) {
      const state = s.paused ? 'paused' : 'active';
      rows.append(el('tr', { 'data-schedule': s.id },
        el('th', { scope: 'row', class: 'mono', text: s.id }),
        el('td', { class: 'mono', text: s.cron }),
        el('td', { text: s.time_zone || 'UTC' }),
        el('td', { class: 'state' }, badge(state)),
        s.next_run ? nextRun(s) : el('td', { class: 'next', text: '—' }),
        el('td', { class: 'target', text: target((s.job || {}).target) }),
        el('td', { title: s.last_run || '', text: s.last_run ? ago(s.last_run) : '—' }),
        el('td', { class: 'lastjob' }, s.last_job_id ? el('a', { href: '#/job/' + encodeURIComponent(s.last_job_id), class: 'mono', text: s.last_job_id }) : '—',
          s.last_job ? ' ' : null, s.last_job ? badge(s.last_job.status) : null),
        el('td', { class: 'num', text: num(s.fired) }),
        el('td', { class: 'num', text: num(s.skipped) }),
        el('td', { text: s.last_skip_reason || '—' }),
        el('td', null, el('button', { type: 'button', 'data-id': s.id, 'data-act': s.paused ? 'resume' : 'pause',
          'aria-label': (s.paused ? 'Resume ' : 'Pause ') + s.id, text: s.paused ? 'Resume' : 'Pause' }))));
    }
    if (!list.length) rows.append(el('tr', null, el('td', { colspan: '12', class: 'muted', text: 'No schedule yet.' })));
    $('schedules-table').tBodies[0].replaceChildren(rows);
    $('schedules-count').textContent = num(list.length) + (list.length === 1 ? ' schedule' : ' schedules');
  }

  $('schedules-table').addEventListener('click', async (e) => {
    const b = e.target.closest('button[data-act]');
    if (!b) return;
    b.disabled = true;
    try {
      await api('/schedule/' + encodeURIComponent(b.dataset.id) + '/' + b.dataset.act, { method: 'POST' });
      showMsg('schedules-msg', '');
      if (view) loadSchedules(view);
    } catch (err) {
      if (err instanceof AuthError) return;
      showMsg('schedules-msg', (err.status === 403 ? 'Not allowed to ' + b.dataset.act + ': ' : b.dataset.act + ' failed: ') + err.message);
      b.disabled = false;
    }
  });

  // ---- audit -------------------------------------------------------------

  // Paged by the API's cursor (a record's seq); not refreshed on a timer:
  // Apply or First page reads it again.
  const audit = { cursor: 0, next: 0, limit: 100 };
  const AUDIT_ACTIONS = ['job.submit', 'job.cancel', 'job.retry', 'job.delete', 'job.start', 'job.end', 'node.enroll',
    'node.approve', 'node.revoke', 'node.remove', 'token.create', 'token.revoke', 'join_token.create', 'join_token.revoke',
    'schedule.create', 'schedule.update', 'schedule.pause', 'schedule.resume', 'schedule.delete', 'schedule.tick',
    'schedule.tick_skipped', 'dlq.replay', 'dlq.drop', 'auth.denied', 'auth.failed'];
  $('audit-actions').replaceChildren(...AUDIT_ACTIONS.map((a) => el('option', { value: a })));

  function auditView(v) {
    show('audit', 'Audit');
    audit.cursor = 0;
    loadAudit(v);
  }

  async function loadAudit(v) {
    if (!v || v.stopped) return;
    const seq = (v.seq = (v.seq || 0) + 1);
    const hours = $('audit-since').value;
    const since = hours ? new Date(Date.now() - Number(hours) * 3600e3).toISOString() : '';
    try {
      const p = await api('/audit?' + qs({ actor: $('audit-actor').value.trim(), action: $('audit-action').value.trim(),
        job: $('audit-job').value.trim(), node: $('audit-node').value.trim(), since: audit.cursor ? '' : since,
        cursor: audit.cursor || '', limit: audit.limit }), { signal: v.abort.signal, soft: true });
      if (v.stopped || seq !== v.seq) return;
      showMsg('audit-msg', '');
      renderAudit(p);
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('audit-msg', (e.status === 403 ? 'Not allowed: ' : 'Could not load the audit: ') + e.message);
      $('audit-table').tBodies[0].replaceChildren();
    }
  }

  function renderAudit(p) {
    const recs = p.records || [];
    const rows = document.createDocumentFragment();
    for (const r of recs) {
      rows.append(el('tr', { 'data-seq': String(r.seq) },
        el('td', { class: 'num', text: String(r.seq) }),
        el('td', { title: r.time, text: stamp(r.time) }),
        el('td', { class: 'actor', text: r.actor || '—' }),
        el('td', { class: 'mono action', text: r.action }),
        el('td', { class: 'mono' }, r.job ? el('a', { href: '#/job/' + encodeURIComponent(r.job), text: r.resource || r.job }) : (r.resource || '—')),
        el('td', { class: 'num', text: r.outcome ? String(r.outcome) : '—' }),
        el('td', { text: r.detail || (r.params ? JSON.stringify(r.params) : '') })));
    }
    if (!recs.length) rows.append(el('tr', null, el('td', { colspan: '7', class: 'muted', text: 'No record matches.' })));
    $('audit-table').tBodies[0].replaceChildren(rows);
    audit.next = p.next || 0;
    $('audit-count').textContent = num(recs.length) + (recs.length === 1 ? ' record' : ' records') + (audit.next ? ', more after' : '');
    $('audit-first').disabled = !audit.cursor;
    $('audit-next').disabled = !audit.next;
  }

  $('audit-filters').addEventListener('submit', (e) => { e.preventDefault(); audit.cursor = 0; loadAudit(view); });
  $('audit-since').addEventListener('change', () => { audit.cursor = 0; loadAudit(view); });
  $('audit-first').addEventListener('click', () => { audit.cursor = 0; loadAudit(view); });
  $('audit-next').addEventListener('click', () => { audit.cursor = audit.next; loadAudit(view); });

  // ---- one node ----------------------------------------------------------

  // The node view reads the node's record (GET /node/{id}), the jobs that
  // touched it (GET /node/{id}/jobs) and, for an admin, its enrollment
  // (GET /enrollments?node=): a token that may not read that sees no
  // admin actions.
  function nodeView(id, v) {
    show('node', 'Node ' + id);
    $('node-h').textContent = 'Node ' + id;
    showMsg('node-msg', '');
    for (const t of ['node-backends', 'node-jobs']) $(t).tBodies[0].replaceChildren();
    $('node-meta').replaceChildren();
    $('node-jobs-count').textContent = '';
    $('node-status').replaceChildren();
    $('node-admin').hidden = true;
    v.node = id;
    loadNode(v);
  }

  async function loadNode(v) {
    if (v.stopped) return;
    clearTimeout(v.timer);
    const seq = (v.seq = (v.seq || 0) + 1);
    const id = v.node;
    const path = '/node/' + encodeURIComponent(id);
    const opts = { signal: v.abort.signal };
    const t0 = performance.now();
    try {
      const [node, jobs, enr] = await Promise.all([
        api(path, opts).catch((e) => { if (e.status === 404) return null; throw e; }),
        api(path + '/jobs?limit=20', opts),
        api('/enrollments?' + qs({ node: id }), { signal: v.abort.signal, soft: true })
          .then((l) => ({ admin: true, rec: (l || [])[0] || null }))
          .catch((e) => { if (e instanceof AuthError || e.name === 'AbortError') throw e; return { admin: false, why: e.status === 403 ? 'admin role needed to see it' : e.message }; }),
      ]);
      if (v.stopped || seq !== v.seq) return;
      if (!v.acted) showMsg('node-msg', node ? '' : 'Node ' + id + ' is not in the registry (removed, revoked, or never seen).');
      renderNode(v, node, jobs, enr);
      // Its three reads and the render, for the scale test.
      document.body.dataset.nodeRenderMs = String(Math.round(performance.now() - t0));
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('node-msg', 'Could not load the node: ' + e.message + ' (retrying)');
    }
    if (!v.stopped && seq === v.seq) v.timer = setTimeout(() => loadNode(v), REFRESH_MS);
  }

  function renderNode(v, n, page, enr) {
    document.body.dataset.nodeRenders = String(Number(document.body.dataset.nodeRenders || 0) + 1);
    $('node-status').replaceChildren(badge(n ? n.status : 'unknown'));
    const e = enr.rec;
    const meta = [['Hostname', n ? n.hostname : ''], ['Site', n ? n.site || 'default' : ''], ['Groups', n ? (n.groups || []).join(', ') : ''], ['Version', n ? n.version : ''],
      ['Online since', n && n.status === 'online' ? stamp(n.online_since) : ''], ['Last seen', n ? stamp(n.last_seen) + ' (' + ago(n.last_seen) + ')' : ''],
      ['Heartbeat', n && n.heartbeat_interval ? 'every ' + goDuration(n.heartbeat_interval) : ''],
      ['Enrollment', enr.admin ? (e ? el('span', { id: 'node-enrollment' }, badge(e.status), e.decided_at ? ' since ' + stamp(e.decided_at) : ' requested ' + stamp(e.requested_at)) :
        el('span', { id: 'node-enrollment', text: 'no enrollment record' })) : el('span', { id: 'node-enrollment', class: 'muted', text: 'not shown (' + enr.why + ')' })]];
    $('node-meta').replaceChildren(...meta.flatMap(([k, x]) => [el('dt', { text: k }), el('dd', null, x || '—')]));
    $('node-admin').hidden = !enr.admin;
    $('node-approve').hidden = !e || e.status === 'admitted';
    $('node-revoke').hidden = !e || e.status === 'revoked';

    const rows = document.createDocumentFragment();
    const off = (b) => (b.off || []).map((o) => o.name + (o.dangerous ? ' (dangerous)' : ''));
    for (const b of (n && n.schemas) || []) {
      rows.append(el('tr', { 'data-backend': b.name },
        el('th', { scope: 'row', title: b.description || '', text: b.name }),
        el('td', null, el('ul', { class: 'actions' }, ...(b.actions || []).map((a) => el('li', { 'data-action': a.name, title: a.description || '' }, a.name,
          a.dangerous ? el('span', { class: 'flag dangerous', text: 'dangerous' }) : null,
          a.read_only ? el('span', { class: 'flag', text: 'read-only' }) : null,
          a.check_mode ? el('span', { class: 'flag', text: 'check mode' }) : null)))),
        el('td', { text: off(b).join(', ') || '—' })));
    }
    if (n && !(n.schemas || []).length) for (const b of n.backends || []) rows.append(el('tr', { 'data-backend': b }, el('th', { scope: 'row', text: b }), el('td', { text: '—' }), el('td', { text: '—' })));
    if (!rows.childNodes.length) rows.append(el('tr', null, el('td', { colspan: '3', class: 'muted', text: 'No backend known.' })));
    $('node-backends').tBodies[0].replaceChildren(rows);

    const jr = document.createDocumentFragment();
    for (const j of page.jobs) {
      const outcome = j.outcome ? badge(j.outcome) : el('span', { class: 'muted', text: 'in progress' });
      jr.append(el('tr', { 'data-job': j.id },
        el('th', { scope: 'row', class: 'mono' }, el('a', { href: '#/job/' + encodeURIComponent(j.id), text: j.id })),
        el('td', { class: 'outcome' }, outcome, j.changed ? ' (changed)' : ''),
        el('td', { class: 'status' }, badge(j.status)),
        el('td', { text: j.target }),
        el('td', { text: j.tasks.slice(0, 3).join(', ') + (j.tasks.length > 3 ? ' +' + (j.tasks.length - 3) : '') }),
        el('td', { title: j.created_at, text: ago(j.created_at) })));
    }
    if (!page.jobs.length) jr.append(el('tr', null, el('td', { colspan: '6', class: 'muted', text: 'No job has run on this node.' })));
    $('node-jobs').tBodies[0].replaceChildren(jr);
    $('node-jobs-count').textContent = page.total > page.jobs.length ? 'The newest ' + num(page.jobs.length) + ' of ' + num(page.total) + ' jobs.' : num(page.total) + (page.total === 1 ? ' job.' : ' jobs.');
  }

  // confirmAction asks in a modal dialog; it resolves true on Confirm.
  function confirmAction(text, ok) {
    const d = $('confirm');
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = ok;
    return new Promise((resolve) => {
      const done = (yes) => { d.close(); cleanup(); resolve(yes); };
      const onOk = () => done(true);
      const onCancel = () => done(false);
      // Escape closes the dialog: a "no". The close event is queued, so
      // that of an earlier question can arrive after this one opened:
      // only a closed dialog counts.
      const onClose = () => { if (d.open) return; cleanup(); resolve(false); };
      const cleanup = () => {
        $('confirm-ok').removeEventListener('click', onOk);
        $('confirm-cancel').removeEventListener('click', onCancel);
        d.removeEventListener('close', onClose);
      };
      $('confirm-ok').addEventListener('click', onOk);
      $('confirm-cancel').addEventListener('click', onCancel);
      d.addEventListener('close', onClose);
      d.showModal();
      $('confirm-cancel').focus();
    });
  }

  const NODE_ACTIONS = {
    'node-approve': { verb: 'approve', ok: 'Approve', ask: (id) => 'Approve node ' + id + '? Its agent may then connect and run jobs.',
      call: (id) => api('/enrollments/' + encodeURIComponent(id) + '/approve', { method: 'POST' }), done: 'approved' },
    'node-revoke': { verb: 'revoke', ok: 'Revoke', ask: (id) => 'Revoke node ' + id + '? Its agent is disconnected and its key refused for good; it must enroll again under a new key.',
      call: (id) => api('/enrollments/' + encodeURIComponent(id) + '/revoke', { method: 'POST' }), done: 'revoked' },
    'node-remove': { verb: 'remove', ok: 'Remove', ask: (id) => 'Remove node ' + id + ' from the registry? Only an offline node can be removed; an agent that comes back registers again.',
      call: (id) => api('/node/' + encodeURIComponent(id), { method: 'DELETE' }), done: 'removed' },
  };
  for (const [bid, a] of Object.entries(NODE_ACTIONS)) {
    $(bid).addEventListener('click', async () => {
      const v = view;
      if (!v || !v.node) return;
      const id = v.node;
      if (!(await confirmAction(a.ask(id), a.ok))) { $(bid).focus(); return; }
      $(bid).disabled = true;
      try {
        await a.call(id);
        v.acted = true;
        showMsg('node-msg', 'Node ' + id + ' ' + a.done + '.', true);
      } catch (e) {
        if (e instanceof AuthError) return;
        v.acted = true;
        showMsg('node-msg', (e.status === 403 ? 'Not allowed to ' + a.verb + ': ' : 'Could not ' + a.verb + ' ' + id + ': ') + e.message);
      } finally {
        $(bid).disabled = false;
      }
      if (view === v) loadNode(v);
    });
  }

  // ---- launch a job ------------------------------------------------------

  // The launcher builds one backend action's job from the catalog's schema
  // (GET /backends), shows how many nodes the target matches now, runs it
  // in check mode first, then for real.
  const launch = { catalog: null, action: null, previewed: '', countSeq: 0 };

  async function launchView(v) {
    show('launch', 'Launch a job');
    showMsg('launch-msg', '');
    const m = await loadMe();
    if (v.stopped) return;
    if (m && !m.submit) {
      showMsg('launch-msg', 'Token "' + m.name + '" has role ' + m.role + ', which may not submit jobs (operator or admin may).');
      $('launch-form').hidden = true;
      return;
    }
    $('launch-form').hidden = false;
    try {
      launch.catalog = await api('/backends', { signal: v.abort.signal });
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      showMsg('launch-msg', 'Could not load the backends: ' + e.message);
      return;
    }
    if (v.stopped) return;
    const sel = $('launch-action');
    const cur = sel.value;
    const groups = (launch.catalog.backends || []).map((b) => el('optgroup', { label: b.name + ' (' + num((launch.catalog.nodes || {})[b.name]) + ' nodes)' },
      ...(b.actions || []).map((a) => el('option', { value: b.name + '.' + a.name, text: b.name + '.' + a.name + (a.dangerous ? ' — dangerous' : '') })),
      ...(b.off || []).map((o) => el('option', { value: b.name + '.' + o.name, disabled: true, text: b.name + '.' + o.name + ' — not enabled' }))));
    sel.replaceChildren(el('option', { value: '', text: 'Choose…' }), ...groups);
    sel.value = cur;
    renderParams();
    countTarget(v);
  }

  function findAction(key) {
    for (const b of (launch.catalog && launch.catalog.backends) || []) {
      for (const a of b.actions || []) if (b.name + '.' + a.name === key) return { backend: b.name, a };
    }
    return null;
  }

  function renderParams() {
    const f = findAction($('launch-action').value);
    launch.action = f;
    $('launch-action-help').textContent = f ? (f.a.description || '') + (f.a.read_only ? ' (read-only)' : '') : '';
    $('launch-danger').hidden = !(f && f.a.dangerous);
    const box = $('launch-params');
    box.replaceChildren();
    for (const p of (f && f.a.params) || []) {
      const id = 'param-' + p.name;
      let input;
      if (p.enum && p.enum.length) {
        input = el('select', { id }, el('option', { value: '', text: p.default ? 'default (' + p.default + ')' : '—' }), ...p.enum.map((x) => el('option', { value: x, text: x })));
      } else if (p.type === 'bool') {
        input = el('select', { id }, el('option', { value: '', text: p.default ? 'default (' + p.default + ')' : '—' }), el('option', { value: 'true', text: 'true' }), el('option', { value: 'false', text: 'false' }));
      } else {
        input = el('input', { id, type: p.sensitive ? 'password' : 'text', autocomplete: 'off', spellcheck: 'false',
          placeholder: p.default ? p.default : ({ int: 'a whole number', duration: 'e.g. 30s, 5m', list: 'comma-separated' }[p.type] || '') });
      }
      input.dataset.param = p.name;
      if (p.required) input.setAttribute('aria-required', 'true');
      input.setAttribute('aria-describedby', id + '-help ' + id + '-err');
      const help = [p.description, p.type !== 'string' ? 'type ' + p.type : '', p.default ? 'default ' + p.default : '', p.pattern ? 'pattern ' + p.pattern : '',
        p.sensitive ? 'sensitive: never stored or shown in clear' : ''].filter(Boolean).join(' · ');
      box.append(el('div', { class: 'param' },
        el('label', { for: id }, p.name, p.required ? el('span', { class: 'req', 'aria-hidden': 'true', text: ' *' }) : null, p.required ? el('span', { class: 'sr-only', text: ' (required)' }) : null),
        input, el('p', { id: id + '-help', class: 'help', text: help }), el('p', { id: id + '-err', class: 'err', role: 'alert' })));
    }
  }

  // paramError says what is wrong with one value, or ''.
  function paramError(p, val) {
    if (val === '') return p.required && !p.default ? 'required' : '';
    if (p.type === 'int' && !/^-?\d+$/.test(val)) return 'must be a whole number';
    if (p.type === 'duration' && isNaN(goMs(val))) return 'must be a duration such as 30s or 5m';
    if (p.type === 'bool' && !['true', 'false'].includes(val)) return 'must be true or false';
    if (p.enum && p.enum.length && !p.enum.includes(val)) return 'must be one of ' + p.enum.join(', ');
    if (p.pattern) {
      try { if (!new RegExp('^(?:' + p.pattern + ')$').test(val)) return 'must match ' + p.pattern; } catch (_) { /* a pattern JS cannot read: the controller checks */ }
    }
    return '';
  }

  // launchSpec reads the form into a job spec, or null (errors shown).
  function launchSpec(check) {
    const f = launch.action;
    if (!f) { showMsg('launch-msg', 'Choose a backend action first.'); $('launch-action').focus(); return null; }
    const params = {};
    let bad = null;
    for (const p of f.a.params || []) {
      const input = $('param-' + p.name);
      const val = input.value.trim();
      const err = paramError(p, val);
      $('param-' + p.name + '-err').textContent = err ? p.name + ' ' + err : '';
      input.setAttribute('aria-invalid', err ? 'true' : 'false');
      if (err && !bad) bad = input;
      if (val !== '') params[p.name] = input.value;
    }
    const scope = $('launch-scope').value;
    const value = $('launch-value').value.trim();
    if (scope !== 'all' && !value) { showMsg('launch-msg', 'Name the ' + scope + ' to run on.'); $('launch-value').focus(); return null; }
    if (bad) { showMsg('launch-msg', 'Some parameters need a fix.'); bad.focus(); return null; }
    showMsg('launch-msg', '');
    const limit = (s) => { s = s.trim(); return s === '' ? undefined : /^\d+$/.test(s) ? Number(s) : s; };
    const spec = { target: scope === 'all' ? { scope } : { scope, value }, strategy: $('launch-strategy').value,
      tasks: [{ backend: f.backend, action: f.a.name, params }] };
    const maxConc = limit($('launch-maxc').value), maxErr = limit($('launch-maxe').value);
    if (maxConc !== undefined) spec.max_concurrency = maxConc;
    if (maxErr !== undefined) spec.max_errors = maxErr;
    if (check) spec.check_mode = true;
    return spec;
  }

  // countTarget shows how many nodes the target matches now.
  let countTimer = 0;
  async function countTarget(v) {
    const seq = ++launch.countSeq;
    const scope = $('launch-scope').value;
    const value = $('launch-value').value.trim();
    $('launch-value').disabled = scope === 'all';
    let text = '';
    try {
      if (scope === 'node') {
        const p = await api('/fleet?' + qs({ q: value, limit: 50 }), { signal: v.abort.signal });
        $('launch-values').replaceChildren(...p.nodes.map((n) => el('option', { value: n.id })));
        const n = p.nodes.find((x) => x.id === value);
        text = !value ? 'Name a node.' : n ? '1 node (' + n.status + ')' : 'No node ' + value + '.';
      } else {
        // A group or a site filters the fleet by that name; all does not.
        const by = scope === 'all' ? {} : { [scope]: value };
        const p = await api('/fleet?' + qs({ ...by, limit: 1 }), { signal: v.abort.signal });
        if (scope === 'group') $('launch-values').replaceChildren(...(p.groups || []).map((g) => el('option', { value: g.group })));
        if (scope === 'site') $('launch-values').replaceChildren(...(p.sites || []).map((x) => el('option', { value: x.name })));
        if (scope !== 'all' && !value) text = 'Name a ' + scope + '.';
        else {
          const on = scope === 'all' ? p.online : p.matched - (await api('/fleet?' + qs({ ...by, status: 'offline', limit: 1 }), { signal: v.abort.signal })).matched;
          const off = scope === 'all' ? 0 : p.matched - on;
          text = num(on) + (on === 1 ? ' node' : ' nodes') + ' online now' + (off ? ', ' + num(off) + ' offline (skipped as unreachable)' : '');
        }
      }
    } catch (e) {
      if (e instanceof AuthError || e.name === 'AbortError') return;
      text = 'Could not count: ' + e.message;
    }
    if (seq === launch.countSeq && !v.stopped) $('launch-count').textContent = text;
  }
  const recount = () => { clearTimeout(countTimer); countTimer = setTimeout(() => { if (view) countTarget(view); }, 200); };
  $('launch-scope').addEventListener('change', () => {
    $('launch-value').value = '';
    $('launch-value').disabled = $('launch-scope').value === 'all';
    recount();
  });
  $('launch-value').addEventListener('input', recount);
  $('launch-action').addEventListener('change', renderParams);
  // Any change after a preview asks for a new one before Run.
  $('launch-form').addEventListener('input', () => { $('launch-run').disabled = true; });
  $('launch-form').addEventListener('change', () => { $('launch-run').disabled = true; });

  $('launch-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const v = view;
    const spec = launchSpec(true);
    if (!spec || !v) return;
    $('launch-preview').disabled = true;
    $('launch-run').disabled = true;
    $('launch-preview-result').replaceChildren();
    $('launch-state').textContent = 'Running in check mode…';
    try {
      let j = await api('/job', { method: 'POST', body: spec });
      const id = j.id;
      while (!TERMINAL.includes(j.status)) {
        await new Promise((r) => setTimeout(r, 400));
        if (v.stopped) return;
        j = await api('/job/' + encodeURIComponent(id), { signal: v.abort.signal });
      }
      const nodes = new Set(j.expected || []);
      let changed = 0, failed = 0;
      for (const n of nodes) {
        const rs = Object.values(j.results || {}).map((row) => row[n]).filter(Boolean);
        if (rs.some((r) => r.changed)) changed++;
        if (rs.some((r) => r.status === 'failed')) failed++;
      }
      $('launch-preview-result').replaceChildren('Check mode ', badge(j.status), ' on ' + num(nodes.size) + (nodes.size === 1 ? ' node: ' : ' nodes: ') +
        num(changed) + ' would change, ' + num(failed) + ' failed' + ((j.unreachable || []).length ? ', ' + num(j.unreachable.length) + ' unreachable' : '') + '. ',
        el('a', { href: '#/job/' + encodeURIComponent(id), id: 'launch-preview-job', text: 'See the preview' }));
      $('launch-state').textContent = '';
      launch.previewed = JSON.stringify(launchSpec(false));
      $('launch-run').disabled = false;
      $('launch-run').focus();
    } catch (err) {
      if (err instanceof AuthError) return;
      $('launch-state').textContent = '';
      showMsg('launch-msg', (err.status === 403 ? 'Not allowed: ' : 'The controller refused the job: ') + err.message);
    } finally {
      $('launch-preview').disabled = false;
    }
  });

  $('launch-run').addEventListener('click', async () => {
    const spec = launchSpec(false);
    if (!spec || JSON.stringify(spec) !== launch.previewed) { $('launch-run').disabled = true; return; }
    $('launch-run').disabled = true;
    try {
      const j = await api('/job', { method: 'POST', body: spec });
      location.hash = '#/job/' + encodeURIComponent(j.id);
    } catch (err) {
      if (err instanceof AuthError) return;
      showMsg('launch-msg', (err.status === 403 ? 'Not allowed: ' : 'The controller refused the job: ') + err.message);
      $('launch-run').disabled = false;
    }
  });

  window.addEventListener('hashchange', route);
  route();
})();
