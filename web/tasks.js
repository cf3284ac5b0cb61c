// Tasks: the running one (live journal, controls, questions, messages to its agent) and
// recent ones (their journals). The running task's events come live over the control
// socket (`attach`); after a reconnect `attach` + `mailbox_flush` from the last seq seen
// gives every event once.

import { el, explain } from './api.js';

const ACTIVE = ['running', 'paused', 'taken_over', 'waiting'];

export function tasksPage(app) {
  const { control } = app;
  const list = el('ul', { id: 'task-list', class: 'task-list' });
  const detail = el('div', { id: 'task-detail', class: 'task-detail' }, el('p', { class: 'note' }, 'Choose a task.'));
  const problem = el('p', { class: 'problem', role: 'alert', hidden: true });
  const page = el('section', { class: 'tasks' }, el('div', { class: 'task-col' }, el('h2', {}, 'Tasks'), list),
    el('div', { class: 'task-main' }, problem, detail));
  let shown = null; // {id, lastSeq, log, attached}
  let stopped = false;

  const fail = (e) => { problem.hidden = false; problem.textContent = explain(e); };

  async function refreshList() {
    try {
      const { tasks } = await control.call('task_list', { limit: 20 });
      list.replaceChildren(...tasks.map((t) => el('li', {},
        el('button', { type: 'button', class: `task-item ${t.state}`, dataset: { task: String(t.id) },
          'aria-current': shown && shown.id === t.id ? 'true' : null, onclick: () => show(t.id) },
        el('span', { class: 'task-title' }, `#${t.id} ${t.title}`), el('span', { class: `state ${t.state}` }, t.state)))));
      if (!tasks.length) list.replaceChildren(el('li', { class: 'note' }, 'No tasks yet.'));
      // The list is polled: if the shown task moved on without its event reaching us (a
      // reconnect, a replaced mirror), read the journal from the last seq we have.
      const mine = shown && tasks.find((t) => t.id === shown.id);
      if (mine && mine.state !== shown.state) catchUp(shown);
      if (!shown && tasks.length) {
        const active = tasks.find((t) => ACTIVE.includes(t.state));
        if (active) show(active.id);
      }
      return tasks;
    } catch (e) {
      fail(e);
      return [];
    }
  }

  function line(ev) {
    const d = ev.data || {};
    const when = new Date(ev.at_ms).toLocaleTimeString();
    let what;
    switch (ev.kind) {
      case 'state': what = `→ ${d.state}${d.detail && typeof d.detail === 'string' ? ` (${d.detail})` : ''}`; break;
      case 'step': {
        const args = d.args && d.args.action ? d.args.action : d.args || {};
        const kind = args.type || d.tool;
        const ok = d.result && d.result.ok === false ? ` ✗ ${d.result.error.code}` : '';
        const where = args.x !== undefined ? ` at ${Math.round(args.x)},${Math.round(args.y)}` : '';
        what = `${d.tool === 'action' ? kind : d.tool}${where}${args.text ? ` “${args.text}”` : ''}${ok}`;
        break;
      }
      case 'note': what = `note: ${d.text}`; break;
      case 'message': case 'user_message': what = `message to the agent: ${d.text}`; break;
      case 'refused': what = `refused: ${d.code || ''} ${d.method || ''}${d.count > 1 ? ` ×${d.count}` : ''}`; break;
      default: what = ev.kind;
    }
    // The screenshot a step acted on, small, loaded when scrolled into view.
    const thumb = ev.kind === 'step' && d.thumbnail && shown
      ? el('img', { class: 'thumb', alt: `what step ${ev.seq} saw`, loading: 'lazy',
        src: `/api/tasks/${shown.id}/steps/${ev.seq}/thumbnail` }) : null;
    return el('li', { class: `ev ev-${ev.kind}`, dataset: { seq: String(ev.seq), kind: ev.kind } },
      el('span', { class: 'seq' }, `${ev.seq}`), el('time', {}, when), ' ', what, thumb);
  }

  function append(events) {
    if (!shown) return;
    for (const ev of events) {
      if (ev.seq <= shown.lastSeq) continue;
      shown.lastSeq = ev.seq;
      shown.log.append(line(ev));
      if (ev.kind === 'state' && ev.data) shown.setState(ev.data.state);
    }
  }

  async function show(id) {
    if (shown && shown.attached) control.call('detach').catch(() => {});
    const log = el('ol', { class: 'journal', id: 'journal' });
    const state = el('span', { class: 'state', id: 'task-state' });
    const title = el('h2', {});
    const controls = el('div', { class: 'controls', role: 'group', 'aria-label': 'Task controls' });
    const message = el('form', { class: 'type', onsubmit: async (ev) => {
      ev.preventDefault();
      const input = message.querySelector('input');
      try {
        await control.call('user_message', { text: input.value });
        input.value = '';
      } catch (e) { fail(e); }
    } }, el('input', { type: 'text', placeholder: 'Message to the agent', id: 'agent-message' }),
    el('button', { type: 'submit', 'data-control': true }, 'Send'));
    const me = { id, lastSeq: 0, log, attached: false, state: null };
    me.setState = (s) => {
      me.state = s;
      state.textContent = s;
      state.className = `state ${s}`;
      renderControls(s);
    };
    shown = me;
    const renderControls = (s) => {
      const b = (label, action, cls) => el('button', { type: 'button', class: cls, 'data-control': true, dataset: { action },
        onclick: async () => {
          try {
            await control.call('task_control', { task: id, action });
            problem.hidden = true;
          } catch (e) { fail(e); }
        } }, label);
      const buttons = [];
      if (control.may('task_control') && ACTIVE.includes(s)) {
        if (s === 'running' || s === 'waiting') buttons.push(b('Pause', 'pause'));
        if (s === 'paused') buttons.push(b('Resume', 'resume'));
        if (s !== 'taken_over') buttons.push(b('Take over', 'takeover'));
        if (s === 'taken_over') buttons.push(b('Hand back', 'handback'));
        buttons.push(b('Stop', 'stop', 'danger'));
      }
      controls.replaceChildren(...buttons);
      message.hidden = !(control.may('user_message') && ACTIVE.includes(s));
    };
    detail.replaceChildren(el('header', { class: 'task-head' }, title, state), controls, message, log);
    try {
      const j = await control.call('task_events', { task: id });
      title.textContent = `#${id} ${j.task.title}`;
      shown.setState(j.task.state);
      append(j.events);
      if (ACTIVE.includes(j.task.state)) await attach();
    } catch (e) { fail(e); }
    refreshList();
  }

  async function catchUp(which) {
    try {
      const j = await control.call('task_events', { task: which.id, after_seq: which.lastSeq });
      if (shown === which) append(j.events);
      if (shown === which) which.setState(j.task.state);
    } catch (e) { /* the next poll tries again */ }
  }

  async function attach() {
    if (!shown) return;
    try {
      await control.call('attach', { task: shown.id });
      shown.attached = true;
      // Whatever happened between the journal we read and the live stream.
      for (;;) {
        const f = await control.call('mailbox_flush', { after_seq: shown.lastSeq });
        append(f.events);
        if (!f.more) break;
      }
    } catch (e) {
      if (e.code !== 'TASK_ENDED' && e.code !== 'NO_SUCH_TASK') fail(e);
    }
  }

  const offEvent = control.on('event', (m) => {
    if (m.event === 'task' && shown && m.task === shown.id) append([m]);
    if (m.event === 'task' && m.kind === 'state') refreshList();
  });
  const offOpen = control.on('open', () => { if (shown) attach(); refreshList(); });
  // A task opened elsewhere shows up within a couple of seconds.
  const poll = setInterval(() => { if (!stopped) refreshList(); }, 2000);
  refreshList();
  return { node: page, stop: () => {
    stopped = true;
    clearInterval(poll);
    offEvent();
    offOpen();
    if (shown && shown.attached) control.call('detach').catch(() => {});
  } };
}
