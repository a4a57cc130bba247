/**
 * The console's one script, served as a file (`/console/assets/console.js`; the CSP runs no inline script). Pages
 * work without it (plain links and forms); with it a page subscribes to `GET /console/events?view=…` and swaps in
 * the HTML fragments the server renders with the same functions as the page (`shared/contracts/console.ts`).
 */
export const CONSOLE_JS = `'use strict';
(function () {
  var VERSION = 1;
  function ready(fn) { if (document.readyState !== 'loading') fn(); else document.addEventListener('DOMContentLoaded', fn); }

  // A form that asks first (drain, revoke): the question is in its data-confirm attribute.
  document.addEventListener('submit', function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });

  ready(function () {
    var view = document.body.dataset.live;
    var status = document.getElementById('live-status');
    if (!view || !('EventSource' in window)) return;
    var said = '';
    function say(text) { if (status && text !== said) { said = text; status.textContent = text; } }
    var pending = {};
    var applied = 0;

    // Between pressing and releasing a button no section is touched: a click must land on what was pressed.
    var pressing = false;
    function editing(el) {
      var active = document.activeElement;
      return pressing || (!!active && el.contains(active) && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName));
    }
    // Makes the children of 'into' equal to those of 'from', keeping every node that is already right: a row whose
    // heartbeat age changed keeps its buttons (and their focus), only the changed text is rewritten.
    function morph(into, from) {
      var i = 0;
      for (; i < from.childNodes.length; i += 1) {
        var next = from.childNodes[i];
        var have = into.childNodes[i];
        if (!have) { into.appendChild(next.cloneNode(true)); continue; }
        if (have.nodeType !== next.nodeType || have.nodeName !== next.nodeName || (next.nodeType === 1 && have.id !== next.id)) {
          into.replaceChild(next.cloneNode(true), have);
          continue;
        }
        if (next.nodeType !== 1) { if (have.nodeValue !== next.nodeValue) have.nodeValue = next.nodeValue; continue; }
        // A <details> stays as its reader left it, open or closed.
        var names = { open: next.nodeName === 'DETAILS' };
        for (var a = 0; a < next.attributes.length; a += 1) {
          var attr = next.attributes[a];
          if (attr.name === 'open' && next.nodeName === 'DETAILS') continue;
          names[attr.name] = true;
          if (have.getAttribute(attr.name) !== attr.value) have.setAttribute(attr.name, attr.value);
        }
        for (var b = have.attributes.length - 1; b >= 0; b -= 1) if (!names[have.attributes[b].name]) have.removeAttribute(have.attributes[b].name);
        morph(have, next);
      }
      while (into.childNodes.length > from.childNodes.length) into.removeChild(into.lastChild);
    }
    function apply(target, markup) {
      var el = document.getElementById(target);
      if (!el) return;
      // Never change a section under someone typing in it or pressing a button: the fragment waits.
      if (editing(el)) { pending[target] = markup; return; }
      delete pending[target];
      var active = document.activeElement;
      var focusId = active && active !== document.body && el.contains(active) ? active.id : '';
      var fresh = document.createElement(el.tagName);
      fresh.innerHTML = markup;
      morph(el, fresh);
      // A control that was replaced (its row changed shape) hands its focus to the new one of the same id.
      if (focusId && document.activeElement !== active) { var again = document.getElementById(focusId); if (again) again.focus(); }
      applied += 1;
      document.body.dataset.updates = String(applied);
    }
    function flush() {
      setTimeout(function () { Object.keys(pending).forEach(function (t) { apply(t, pending[t]); }); }, 0);
    }
    document.addEventListener('pointerdown', function () { pressing = true; }, true);
    ['click', 'pointercancel', 'dragend'].forEach(function (name) {
      document.addEventListener(name, function () { pressing = false; flush(); }, true);
    });
    document.addEventListener('focusout', flush);

    var source = new EventSource('/console/events?view=' + encodeURIComponent(view));
    source.addEventListener('hello', function (event) {
      var hello = JSON.parse(event.data);
      if (hello.v !== VERSION) { location.reload(); return; }
      say('Live updates on.');
    });
    source.addEventListener('fragment', function (event) {
      var data = JSON.parse(event.data);
      apply(data.target, data.html);
    });
    source.addEventListener('status', function (event) {
      var data = JSON.parse(event.data);
      say(data.ok ? 'Live updates on.' : 'Live updates paused: ' + data.message);
    });
    source.addEventListener('session', function () {
      source.close();
      location.assign('/console/sign-in?ended=1');
    });
    source.addEventListener('error', function () {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (the session ended between two rounds, or the control plane restarted): the page itself tells.
        say('Live updates stopped: reloading…');
        setTimeout(function () { location.reload(); }, 3000);
      } else {
        say('Live updates interrupted: reconnecting…');
      }
    });
    window.addEventListener('pagehide', function () { source.close(); });
  });
})();
`;
