// The live phone: the picture, and input on it. Every gesture goes the agents' way: a
// fresh small screenshot gives an observation, and the action's coordinates are pixels of
// that observation (the same geometry path, the same refusals).

import { el, explain, operationId } from './api.js';
import { VideoView } from './video.js';

const LONG_PRESS_MS = 600;
const MOVE_SLOP_PX = 8;
const OBSERVATION_EDGE = 256;

export function livePage(app) {
  const { control } = app;
  const drive = control.may('action');
  const canvas = el('canvas', { id: 'screen', class: 'screen', tabindex: '0', width: '2', height: '2',
    'aria-label': drive ? 'The phone. Click or tap to tap, drag to swipe, hold to long-press, type to type.' : 'The phone.' });
  const stats = el('div', { id: 'stats', class: 'stats', 'aria-live': 'off' }, 'connecting…');
  const note = el('p', { id: 'note', class: 'note', role: 'status' });
  const problem = el('p', { id: 'problem', class: 'problem', role: 'alert', hidden: true });
  const task = taskBar(app);
  const phone = el('div', { class: 'phone' }, canvas);
  // The numbers go under the picture, not on it: on the phone they would hide its clock.
  const frame = el('div', { class: 'phone-frame' }, phone, stats);
  let geometry = null;

  const say = (text) => { note.textContent = text; };
  const refuse = (e) => {
    problem.hidden = false;
    // Refused because a task's agent drives: point at the Take over button here (or
    // say who may press it).
    problem.textContent = e.code === 'TASK_RUNNING' && !task.mayControl
      ? `A task is running: its agent drives, and your login may not take over. (${e.code}: ${e.message})`
      : explain(e);
    if (e.code === 'TASK_RUNNING') task.node.classList.add('attention');
    clearTimeout(refuse.timer);
    refuse.timer = setTimeout(() => { problem.hidden = true; }, 8000);
  };

  // Input runs one gesture at a time, in order.
  let queue = Promise.resolve();
  const act = (build) => {
    queue = queue.then(async () => {
      try {
        const obs = build.needsObservation ? await observe() : null;
        const action = build(obs);
        // A person watches the video: answer once the input is sent, without waiting for
        // the screen to settle (act-and-verify is for agents).
        const params = { operation_id: operationId(), action, verify: false };
        if (obs) params.observation_id = obs.observation_id;
        const r = await control.call('action', params);
        canvas.dataset.actions = String((Number(canvas.dataset.actions) || 0) + 1);
        problem.hidden = true;
        return r;
      } catch (e) {
        refuse(e);
      }
      return null;
    });
    return queue;
  };
  const pointer = (fn) => Object.assign(fn, { needsObservation: true });

  async function observe() {
    const shot = await control.call('screenshot', { max_edge: OBSERVATION_EDGE });
    const m = shot.metadata;
    setGeometry(m);
    return { observation_id: m.observation_id, width: m.image_size.width, height: m.image_size.height };
  }

  function setGeometry(m) {
    const crop = m.source_rect;
    const changed = !geometry || ['x', 'y', 'width', 'height'].some((k) => geometry.crop[k] !== crop[k]);
    geometry = { crop, sourceWidth: m.source_size.width };
    if (changed) {
      phone.style.setProperty('--aspect', `${crop.width} / ${crop.height}`);
      video.configure();
    }
  }

  // A point of the canvas as a fraction of the phone's screen.
  const fraction = (ev) => {
    const r = canvas.getBoundingClientRect();
    return { fx: Math.min(1, Math.max(0, (ev.clientX - r.left) / r.width)),
      fy: Math.min(1, Math.max(0, (ev.clientY - r.top) / r.height)) };
  };
  const at = (obs, p) => ({ x: p.fx * obs.width, y: p.fy * obs.height });

  const video = new VideoView(control, canvas, () => geometry, (s) => {
    stats.textContent = s.mode === 'video'
      ? `${s.fps} fps · ${s.latencyMs === null ? '–' : `≈${Math.round(s.latencyMs)} ms`} · ${s.kbps} kbit/s`
      : `${s.fps} pictures/s (preview)`;
    stats.dataset.fps = String(s.fps);
  }, say);

  if (drive) {
    let down = null;
    canvas.addEventListener('pointerdown', (ev) => {
      if (ev.button !== 0) return;
      canvas.focus();
      canvas.setPointerCapture(ev.pointerId);
      down = { t: performance.now(), x: ev.clientX, y: ev.clientY, path: [fraction(ev)], moved: false };
      ev.preventDefault();
    });
    canvas.addEventListener('pointermove', (ev) => {
      if (!down) return;
      if (Math.hypot(ev.clientX - down.x, ev.clientY - down.y) > MOVE_SLOP_PX) down.moved = true;
      if (down.moved && down.path.length < 120) down.path.push(fraction(ev));
    });
    const finish = (ev, cancelled) => {
      if (!down) return;
      const d = down;
      down = null;
      if (cancelled) return;
      const held = performance.now() - d.t;
      if (d.moved) {
        d.path.push(fraction(ev));
        const duration = Math.min(5000, Math.max(100, Math.round(held)));
        act(pointer((obs) => ({ type: 'drag', path: thin(d.path, 64).map((p) => at(obs, p)), duration_ms: duration })));
      } else if (held >= LONG_PRESS_MS) {
        act(pointer((obs) => ({ type: 'long_press', ...at(obs, d.path[0]) })));
      } else {
        act(pointer((obs) => ({ type: 'tap', ...at(obs, d.path[0]) })));
      }
    };
    canvas.addEventListener('pointerup', (ev) => finish(ev, false));
    canvas.addEventListener('pointercancel', (ev) => finish(ev, true));
    canvas.addEventListener('contextmenu', (ev) => ev.preventDefault());

    let wheel = null;
    canvas.addEventListener('wheel', (ev) => {
      ev.preventDefault();
      if (!wheel) wheel = { dx: 0, dy: 0, p: fraction(ev) };
      wheel.dx += ev.deltaX;
      wheel.dy += ev.deltaY;
      clearTimeout(wheel.timer);
      wheel.timer = setTimeout(() => {
        const w = wheel;
        wheel = null;
        const vertical = Math.abs(w.dy) >= Math.abs(w.dx);
        const direction = vertical ? (w.dy > 0 ? 'down' : 'up') : (w.dx > 0 ? 'right' : 'left');
        act(pointer((obs) => ({ type: 'scroll', ...at(obs, w.p), direction })));
      }, 150);
    }, { passive: false });

    // Typing while the canvas has focus: characters are sent in runs, keys by name,
    // Cmd/Ctrl chords as hotkeys (Cmd+H home, Cmd+Space Spotlight…).
    let typed = '';
    let typeTimer = null;
    const flush = () => {
      clearTimeout(typeTimer);
      if (!typed) return;
      const text = typed;
      typed = '';
      act(() => ({ type: 'type_text', text }));
    };
    const NAMED = { Enter: 'enter', Backspace: 'backspace', Tab: 'tab', Escape: 'escape', Delete: 'delete',
      ArrowUp: 'up', ArrowDown: 'down', ArrowLeft: 'left', ArrowRight: 'right', ' ': 'space' };
    canvas.addEventListener('keydown', (ev) => {
      if (ev.metaKey || ev.ctrlKey) {
        if (['Meta', 'Control', 'Shift', 'Alt'].includes(ev.key)) return;
        ev.preventDefault();
        flush();
        const key = NAMED[ev.key] || ev.key.toLowerCase();
        const keys = ['cmd', ...(ev.shiftKey ? ['shift'] : []), ...(ev.altKey ? ['alt'] : []), key];
        act(() => ({ type: 'hotkey', keys }));
      } else if (ev.key.length === 1) {
        ev.preventDefault();
        typed += ev.key;
        clearTimeout(typeTimer);
        typeTimer = setTimeout(flush, 120);
      } else if (NAMED[ev.key]) {
        ev.preventDefault();
        flush();
        act(() => ({ type: 'key_press', key: NAMED[ev.key] }));
      }
    });
  }

  const button = (label, action, title) => el('button', { type: 'button', title, 'data-control': true,
    onclick: () => act(() => action) }, label);
  const keys = drive ? el('div', { class: 'keys', role: 'group', 'aria-label': 'Phone buttons' },
    button('Home', { type: 'home' }, 'Cmd+H'),
    button('Apps', { type: 'app_switcher' }, 'The app switcher'),
    button('Search', { type: 'spotlight' }, 'Spotlight (Cmd+Space)'),
    button('Back', { type: 'back' }, 'Cmd+['),
    button('Vol −', { type: 'consumer', key: 'volume_down' }, 'Volume down'),
    button('Vol +', { type: 'consumer', key: 'volume_up' }, 'Volume up'),
  ) : el('p', { class: 'note' }, 'View only: your login may watch, not drive.');

  const typeField = el('input', { type: 'text', id: 'type-text', placeholder: 'Text to type on the phone', autocomplete: 'off' });
  const typeForm = drive ? el('form', { class: 'type', onsubmit: (ev) => {
    ev.preventDefault();
    const text = typeField.value;
    if (!text) return;
    typeField.value = '';
    act(() => ({ type: 'type_text', text }));
  } }, typeField, el('button', { type: 'submit', 'data-control': true }, 'Type')) : null;

  const page = el('section', { class: 'live' }, frame, el('div', { class: 'side' }, task.node, keys, typeForm, problem, note));
  // The first observation sets the geometry; the video follows it.
  observe().catch((e) => {
    // A view login may still look: it is the picture we need, not the observation.
    say(explain(e));
  }).finally(() => video.start());
  // A new video generation (a new resolution) means a new geometry.
  const watch = setInterval(() => observe().catch(() => {}), 10000);
  return { node: page, stop: () => { video.stop(); clearInterval(watch); task.stop(); } };
}

const ACTIVE = ['running', 'paused', 'waiting', 'taken_over'];

/**
 * The task on the phone, beside the picture: who drives, and (for a login that may) Take
 * over, Hand back and Resume, so a person can drive without going to the Tasks page.
 */
function taskBar(app) {
  const { control } = app;
  const mayControl = control.may('task_control');
  const text = el('span', { id: 'task-bar-text' });
  const buttons = el('span', { class: 'controls', role: 'group', 'aria-label': 'Task controls' });
  const problem = el('span', { class: 'problem', role: 'alert', hidden: true });
  const node = el('div', { id: 'task-bar', class: 'task-bar', role: 'status', hidden: true }, text, buttons, problem);
  let shown = '';
  const render = (s) => {
    const t = s.task && ACTIVE.includes(s.task.state) ? s.task : null;
    const key = t ? `${t.id}/${t.state}` : '';
    if (key === shown) return;
    shown = key;
    node.hidden = !t;
    node.classList.remove('attention');
    problem.hidden = true;
    if (!t) { buttons.replaceChildren(); return; }
    node.dataset.state = t.state;
    text.textContent = {
      running: `Task #${t.id} “${t.title}” is running: its agent drives.`,
      waiting: `Task #${t.id} “${t.title}” waits for an answer.`,
      paused: `Task #${t.id} “${t.title}” is paused.`,
      taken_over: `Task #${t.id} “${t.title}” is taken over: people drive, its agent waits.`,
    }[t.state];
    const b = (label, action, title) => el('button', { type: 'button', 'data-control': true, dataset: { action }, title,
      onclick: async () => {
        try {
          await control.call('task_control', { task: t.id, action });
          problem.hidden = true;
        } catch (e) {
          problem.hidden = false;
          problem.textContent = explain(e);
        }
        app.refreshStatus();
      } }, label);
    const list = [];
    if (mayControl) {
      if (t.state !== 'taken_over') list.push(b('Take over', 'takeover', 'Drive the phone yourself; the agent waits'));
      if (t.state === 'taken_over') list.push(b('Hand back', 'handback', 'Give the phone back to the agent'));
      if (t.state === 'paused') list.push(b('Resume', 'resume', 'Let the agent carry on'));
    }
    buttons.replaceChildren(...list);
  };
  const off = app.onStatus(render);
  return { node, mayControl, stop: off };
}

/** At most `n` points of `path`, first and last kept. */
function thin(path, n) {
  if (path.length <= n) return path;
  const out = [];
  for (let i = 0; i < n; i++) out.push(path[Math.round((i * (path.length - 1)) / (n - 1))]);
  return out;
}
