/**
 * The console's one stylesheet, served as a file (`/console/assets/console.css`): the CSP allows styles from this
 * origin only, never inline. No framework: a laptop gets tables, a phone gets each row as a card.
 */
export const CONSOLE_CSS = `
:root {
  --bg: #f6f7f9; --surface: #ffffff; --text: #1b1f24; --muted: #57606a; --border: #d0d7de;
  --accent: #0b57d0; --accent-text: #ffffff; --ok: #1a7f37; --warn: #8a5a00; --bad: #c1121f; --idle: #6e7781;
  --ok-bg: #dafbe1; --warn-bg: #fff1c2; --bad-bg: #ffe2e0; --idle-bg: #eaeef2; --focus: #0b57d0;
  --chart-1: #0b57d0; --chart-2: #8250df; --grid: #e3e7ec;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  font-size: 16px; line-height: 1.45; color: var(--text); background: var(--bg);
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0d1117; --surface: #161b22; --text: #e6edf3; --muted: #9da7b3; --border: #30363d;
    --accent: #4c8dff; --accent-text: #0d1117; --ok: #3fb950; --warn: #d29922; --bad: #ff7b72; --idle: #8b949e;
    --ok-bg: #12361f; --warn-bg: #3b2e05; --bad-bg: #4a1216; --idle-bg: #21262d; --focus: #79b8ff;
    --chart-1: #79b8ff; --chart-2: #d2a8ff; --grid: #262c36;
  }
}
* { box-sizing: border-box; }
body { margin: 0; min-height: 100vh; display: flex; flex-direction: column; }
a { color: var(--accent); }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; border-radius: 2px; }
.vh { position: absolute; width: 1px; height: 1px; margin: -1px; padding: 0; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; border: 0; }
.skip { position: absolute; left: -9999px; top: 0; background: var(--surface); padding: .5rem 1rem; z-index: 10; }
.skip:focus { left: .5rem; top: .5rem; }
.banner { display: flex; flex-wrap: wrap; align-items: center; gap: .5rem 1.5rem; padding: .6rem 1.25rem;
  background: var(--surface); border-bottom: 1px solid var(--border); }
.brand { font-weight: 700; font-size: 1.1rem; color: var(--text); text-decoration: none; white-space: nowrap; }
.nav { display: flex; gap: .25rem; list-style: none; margin: 0; padding: 0; overflow-x: auto; }
.nav a { display: block; padding: .45rem .7rem; border-radius: 6px; color: var(--text); text-decoration: none; white-space: nowrap; }
.nav a:hover { background: var(--idle-bg); }
.nav a[aria-current="page"] { background: var(--accent); color: var(--accent-text); font-weight: 600; }
.who { margin-left: auto; display: flex; align-items: center; gap: .75rem; }
.role { font-size: .8rem; text-transform: uppercase; letter-spacing: .04em; padding: .15rem .5rem; border-radius: 999px;
  background: var(--idle-bg); color: var(--muted); font-weight: 600; }
main { flex: 1; width: 100%; max-width: 1280px; margin: 0 auto; padding: 1rem 1.25rem 2rem; }
main:focus { outline: none; }
h1 { font-size: 1.5rem; margin: .5rem 0 .25rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 .5rem; }
h3 { font-size: 1rem; margin: 1rem 0 .4rem; }
.lede { color: var(--muted); margin: 0 0 1rem; }
.muted { color: var(--muted); }
.small { font-size: .875rem; }
.mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: .875em; }
.footer { padding: .5rem 1.25rem; border-top: 1px solid var(--border); background: var(--surface); }
.live { margin: 0; font-size: .85rem; color: var(--muted); }
.notice { padding: .6rem .9rem; border-radius: 6px; background: var(--ok-bg); border: 1px solid var(--ok); margin: .75rem 0; }
.notice-error { background: var(--bad-bg); border-color: var(--bad); }
.summary { display: flex; flex-wrap: wrap; gap: .5rem 1.25rem; margin: .5rem 0 1rem; padding: 0; list-style: none; }
.summary li { background: var(--surface); border: 1px solid var(--border); border-radius: 8px; padding: .5rem .9rem; }
.summary strong { font-size: 1.25rem; display: block; }

/* Tables: a grid on a laptop, one card per row on a phone (each cell names its column through data-label). */
.table-wrap { overflow-x: auto; background: var(--surface); border: 1px solid var(--border); border-radius: 8px; }
table.grid { width: 100%; border-collapse: collapse; font-size: .925rem; }
table.grid caption { text-align: left; padding: .6rem .75rem; font-weight: 600; }
table.grid th, table.grid td { text-align: left; vertical-align: top; padding: .55rem .75rem; border-top: 1px solid var(--border); }
table.grid thead th { border-top: none; color: var(--muted); font-weight: 600; font-size: .8rem; text-transform: uppercase; letter-spacing: .03em; }
table.grid td.num, table.grid th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.grid time { white-space: nowrap; }
.wrap { overflow-wrap: anywhere; min-width: 12rem; }
ul.plain { list-style: none; margin: 0; padding: 0; }
ul.plain li + li { margin-top: .2rem; }
@media (max-width: 720px) {
  html { font-size: 15px; }
  main { padding: .75rem; }
  .banner { padding: .5rem .75rem; }
  .nav { flex-wrap: wrap; overflow-x: visible; }
  .who { margin-left: 0; }
  .table-wrap { background: none; border: none; overflow-x: visible; }
  table.grid, table.grid tbody, table.grid tr { display: block; width: 100%; }
  table.grid caption { display: block; padding: 0 0 .5rem; }
  table.grid thead { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); }
  table.grid tr { background: var(--surface); border: 1px solid var(--border); border-radius: 8px; margin-bottom: .75rem; }
  table.grid th[scope="row"] { display: block; border-top: none; font-size: 1.05rem; text-align: left; }
  /* Each cell on a line of its own, its column's name in a gutter on the left. */
  table.grid td { display: block; position: relative; padding-left: 9rem; min-height: 2.4rem; text-align: left; }
  table.grid td::before { content: attr(data-label); position: absolute; left: .75rem; top: .6rem; width: 7.75rem;
    color: var(--muted); font-size: .75rem; text-transform: uppercase; letter-spacing: .03em; }
  table.grid td.num { text-align: left; }
  table.grid th, table.grid td, .mono { overflow-wrap: anywhere; }
  progress { width: 100%; }
}

/* States. */
.badge { display: inline-block; font-size: .78rem; font-weight: 600; padding: .1rem .5rem; border-radius: 999px;
  background: var(--idle-bg); color: var(--idle); border: 1px solid transparent; white-space: nowrap; }
.badge + .badge { margin-left: .25rem; }
.state-ready, .state-serving, .state-complete, .state-running, .state-completed { background: var(--ok-bg); color: var(--ok); border-color: var(--ok); }
.state-stale, .state-starting, .state-preparing, .state-pulling, .state-ready-to-start, .state-progressing, .state-degraded, .state-cordoned, .state-draining
  { background: var(--warn-bg); color: var(--warn); border-color: var(--warn); }
.state-down, .state-failed, .state-revoked, .state-unplaceable { background: var(--bad-bg); color: var(--bad); border-color: var(--bad); }
.state-drained, .state-pending, .state-stopped, .state-retiring { background: var(--idle-bg); color: var(--idle); border-color: var(--idle); }

/* Forms and buttons. */
form.inline { display: inline; }
.actions { display: flex; flex-wrap: wrap; gap: .4rem; }
button, .btn { font: inherit; font-size: .9rem; padding: .4rem .85rem; min-height: 2.25rem; border-radius: 6px; cursor: pointer;
  border: 1px solid var(--border); background: var(--surface); color: var(--text); }
button:hover, a.btn:hover { border-color: var(--accent); }
a.btn { display: inline-flex; align-items: center; text-decoration: none; }
button.primary { background: var(--accent); color: var(--accent-text); border-color: var(--accent); font-weight: 600; }
button.danger { color: var(--bad); border-color: var(--bad); }
button.link { background: none; border: none; color: var(--accent); text-decoration: underline; padding: .25rem; min-height: 0; }
label { display: block; font-weight: 600; margin: .75rem 0 .25rem; }
.field-hint { color: var(--muted); font-size: .85rem; margin: .2rem 0 0; }
input[type="text"], input[type="password"], input[type="number"], input[type="date"], select {
  font: inherit; padding: .45rem .6rem; border: 1px solid var(--border); border-radius: 6px; background: var(--surface); color: var(--text);
  width: 100%; max-width: 32rem; }
input[type="number"] { width: 6.5rem; }
.row input[type="text"], .row input[type="date"], .row select { width: auto; }
.row { display: flex; flex-wrap: wrap; align-items: end; gap: .5rem; }
.row label { margin: 0 0 .25rem; }
fieldset { border: 1px solid var(--border); border-radius: 8px; padding: .5rem 1rem 1rem; margin: 1rem 0; background: var(--surface); }
legend { font-weight: 600; padding: 0 .25rem; }
.panel { background: var(--surface); border: 1px solid var(--border); border-radius: 8px; padding: 1rem 1.25rem; margin: 1rem 0; }
.sign-in { max-width: 30rem; margin: 3rem auto; }
.secret { display: block; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; word-break: break-all; padding: .6rem;
  background: var(--bg); border: 1px dashed var(--warn); border-radius: 6px; user-select: all; }

/* Deployments. */
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 36rem), 1fr)); gap: 1rem; }
.card { background: var(--surface); border: 1px solid var(--border); border-radius: 8px; padding: 1rem 1.25rem; }
.card h2, .panel > h2:first-child, .panel > h1:first-child { margin-top: 0; }
.card .table-wrap { border: none; }
.counts { display: flex; flex-wrap: wrap; gap: .3rem 1rem; margin: .25rem 0 .5rem; padding: 0; list-style: none; }
progress { width: 12rem; max-width: 100%; height: .8rem; accent-color: var(--ok); vertical-align: middle; }
.reasons { margin: .25rem 0; padding-left: 1.25rem; color: var(--bad); }
.events { margin: 0; padding-left: 1.1rem; font-size: .875rem; max-height: 14rem; overflow-y: auto; }
details > summary { cursor: pointer; padding: .25rem 0; }

/* Charts: inline SVG drawn by the server; colours from here. */
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 26rem), 1fr)); gap: 1rem; }
figure.chart { margin: 0; background: var(--surface); border: 1px solid var(--border); border-radius: 8px; padding: .75rem 1rem; }
figure.chart figcaption { font-weight: 600; margin-bottom: .25rem; }
figure.chart svg { width: 100%; height: auto; display: block; }
.chart .gridline { stroke: var(--grid); stroke-width: 1; }
.chart .axis { fill: var(--muted); font-size: 11px; font-family: inherit; }
.chart .line { fill: none; stroke-width: 2; stroke-linejoin: round; }
.chart .s1 .line { stroke: var(--chart-1); }
.chart .s1 .dot { fill: var(--chart-1); }
.chart .s2 .line { stroke: var(--chart-2); }
.chart .s2 .dot { fill: var(--chart-2); }
.chart .empty { fill: var(--muted); font-size: 14px; }
.stats { display: flex; flex-wrap: wrap; gap: .25rem 1rem; margin: .35rem 0 0; padding: 0; list-style: none; font-size: .85rem; color: var(--muted); }
@media (prefers-reduced-motion: no-preference) { .updated { animation: flash 1s ease-out; } }
@keyframes flash { from { background: var(--warn-bg); } to { background: transparent; } }
`;
