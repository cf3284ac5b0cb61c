// The console's shell: who is logged in, the control socket, the pages, and the approval
// banner that follows a waiting question on every page.

import { Control, UNAUTHORIZED, el, explain, http } from './api.js';
import { accessPage } from './access.js';
import { devicePage } from './device.js';
import { livePage } from './live.js';
import { loginPage, pairingPage } from './login.js';
import { tasksPage } from './tasks.js';
import { updatePage } from './update.js';

const PAGES = { live: livePage, tasks: tasksPage, access: accessPage, device: devicePage, update: updatePage };
const main = document.getElementById('main');
const bar = document.getElementById('bar');
// `app.onStatus(fn)`: pages hear each `status` the shell polls (the running task, its
// question); `app.refreshStatus()` polls at once (after a task control, say).
const statusListeners = new Set();
const app = {
  control: null, page: null, statusTimer: null, status: null,
  onStatus(fn) {
    statusListeners.add(fn);
    if (app.status) fn(app.status);
    return () => statusListeners.delete(fn);
  },
  refreshStatus: async () => {},
};

function pageName() {
  const name = location.pathname.replace(/^\//, '');
  return PAGES[name] ? name : 'live';
}

function show(name) {
  if (app.page) app.page.stop();
  const make = PAGES[name] || livePage;
  app.page = make(app);
  main.replaceChildren(app.page.node);
  for (const a of document.querySelectorAll('#nav a')) {
    a.toggleAttribute('aria-current', a.dataset.page === name);
    if (a.getAttribute('aria-current') !== null) a.setAttribute('aria-current', 'page');
  }
}

function navigate(path) {
  history.pushState(null, '', path);
  show(pageName());
}

function loggedOut(reason) {
  if (app.control) app.control.close();
  app.control = null;
  clearInterval(app.statusTimer);
  app.status = null;
  if (app.page) app.page.stop();
  app.page = null;
  bar.hidden = true;
  document.getElementById('approval').hidden = true;
  document.title = 'tether';
  if (location.pathname !== '/') history.replaceState(null, '', '/');
  main.replaceChildren(loginPage(start, reason));
}

async function start() {
  try {
    const session = await http('GET', '/api/session');
    if (!session.logged_in) {
      loggedOut(session.expired ? 'Your session ended; log in again.' : undefined);
      return;
    }
  } catch (e) {
    main.replaceChildren(el('p', { class: 'problem', role: 'alert' }, explain(e)));
    return;
  }
  const control = new Control();
  app.control = control;
  control.on('close', async () => {
    // Closed because the session ended? Then back to login; else it reconnects itself.
    try {
      const session = await http('GET', '/api/session');
      if (!session.logged_in && app.control === control) loggedOut('Your session ended; log in again.');
    } catch { /* the appliance is away: the socket keeps retrying */ }
  });
  try {
    await control.connect();
  } catch (e) {
    main.replaceChildren(el('p', { class: 'problem', role: 'alert' }, explain(e)));
    return;
  }
  const role = control.role;
  document.body.dataset.role = role;
  // Who is logged in: the token's name, its role beside it.
  const who = document.getElementById('who');
  who.replaceChildren(...[control.name && el('span', { id: 'who-name', class: 'who-name' }, control.name),
    el('span', { id: 'who-role', class: 'role' }, role)].filter(Boolean));
  who.title = `Logged in as ${control.name || 'this browser'}, role ${role}`;
  for (const node of document.querySelectorAll('[data-role]')) {
    node.hidden = node.dataset.role === 'admin' && role !== 'admin';
  }
  bar.hidden = false;
  if (location.pathname === '/' || location.pathname === '/pair') history.replaceState(null, '', '/live');
  show(pageName());
  watchApproval();
}

// A question waiting for a person shows on every page, with a badge in the title and a
// short sound (where the browser allows one).
function watchApproval() {
  const banner = document.getElementById('approval');
  const text = document.getElementById('approval-text');
  let asked = null;
  const answer = async (action) => {
    if (!asked) return;
    try {
      await app.control.call('task_control', { task: asked.task, action, question: asked.id });
      banner.hidden = true;
    } catch (e) { text.textContent = explain(e); }
  };
  document.getElementById('approval-yes').onclick = () => answer('approve');
  document.getElementById('approval-no').onclick = () => answer('reject');
  const canAnswer = app.control.may('task_control');
  const tick = async () => {
    if (!app.control) return;
    let s;
    try { s = await app.control.call('status'); } catch { return; }
    app.status = s;
    for (const fn of statusListeners) {
      try { fn(s); } catch (e) { console.warn('status listener failed', e); }
    }
    const q = s.task && s.task.question;
    if (q && (!asked || asked.id !== q.id)) {
      asked = { id: q.id, task: s.task.id };
      text.textContent = `Task #${s.task.id} asks: ${q.text}`;
      banner.hidden = false;
      for (const b of banner.querySelectorAll('button')) b.hidden = !canAnswer;
      document.title = '(!) approval waiting — tether';
      beep();
    } else if (!q && asked) {
      asked = null;
      banner.hidden = true;
      document.title = 'tether';
    }
  };
  app.refreshStatus = tick;
  clearInterval(app.statusTimer);
  app.statusTimer = setInterval(tick, 1000);
  tick();
}

function beep() {
  try {
    const ctx = new AudioContext();
    const osc = ctx.createOscillator();
    osc.frequency.value = 880;
    osc.connect(ctx.destination);
    osc.start();
    osc.stop(ctx.currentTime + 0.15);
    osc.onended = () => ctx.close();
  } catch { /* no sound: the title badge remains */ }
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[data-nav]');
  if (!a || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', () => { if (app.control) show(pageName()); });
window.addEventListener(UNAUTHORIZED, () => loggedOut('Your session ended; log in again.'));
document.getElementById('logout').addEventListener('click', async () => {
  try { await http('POST', '/logout'); } catch { /* gone either way */ }
  loggedOut();
});

if (location.pathname === '/pair') {
  pairingPage(start).then((node) => main.replaceChildren(node));
} else {
  start();
}
