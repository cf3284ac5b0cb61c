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
        const obs = build.observationId ? { observation_id: build.observationId }
          : build.needsObservation ? await observe() : null;
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

  // Text on the screen: a search whose matches are highlighted on the picture; a click on
  // one taps exactly that box, in the observation its text was read from.
  const finder = control.may('find_text') ? textFinder({
    control, phone, canvas, drive,
    geometry: () => geometry,
    refreshGeometry: observe,
    tap: (observationId, p) => act(Object.assign(() => ({ type: 'tap', x: p.x, y: p.y }), { observationId })),
  }) : null;

  const page = el('section', { class: 'live' }, frame,
    el('div', { class: 'side' }, task.node, keys, typeForm, finder && finder.node, problem, note));
  // The first observation sets the geometry; the video follows it.
  observe().catch((e) => {
    // A view login may still look: it is the picture we need, not the observation.
    say(explain(e));
  }).finally(() => video.start());
  // A new video generation (a new resolution) means a new geometry.
  const watch = setInterval(() => observe().catch(() => {}), 10000);
  return { node: page, stop: () => { video.stop(); clearInterval(watch); task.stop(); if (finder) finder.stop(); } };
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

// ---------------------------------------------------------------- text on the screen

// How long highlights stay when nothing under them changes. A highlight is a box of the
// observation `find_text` read, and a click taps that observation's pixels: the daemon keeps
// an observation 30 s, so past that a click could not hit "exactly the highlighted box".
// Clearing a little earlier than the daemon forgets it leaves room for the click's trip.
const HIGHLIGHT_MS = 25000;
// Whether the picture under a highlight changed: checked on the canvas every so often, as
// the mean luma difference (0..255) of the box against what it showed when the highlights
// appeared. Video of a still screen decodes to the same pixels (skipped blocks), so a
// small bound suffices; text that moved, scrolled or went away differs by far more.
const HIGHLIGHT_CHECK_MS = 250;
const HIGHLIGHT_CHANGED = 10;
// Matches listed as buttons under the field (all of them are highlighted on the picture).
const MAX_LISTED = 8;
// Nearest texts a "not found" names.
const MAX_NEAREST = 5;

/**
 * "Find text on screen": `find_text` on a fresh read of the phone, each match highlighted
 * over the live picture and listed as a button (the keyboard's way to the same tap).
 *
 * Highlights go away when the query is cleared, on the next search, when the picture under
 * any of them changes, and after HIGHLIGHT_MS. "The picture under them" is judged here, on
 * the canvas, rather than with `wait_for_change`: the sim's status bar clock changes every
 * second and each `wait_for_change` answer is a new observation, and observations are few
 * (32) and shared with the agents; a change elsewhere on the screen (a clock, a spinner)
 * leaves the highlighted text where it was, so the highlights stay.
 *
 * Clicking a highlight sends a `tap` at its centre with the `observation_id` of the read, so
 * the tap lands on exactly the box shown, through the same admission as every other input
 * on this page (`act`): only a login that may act gets clickable highlights, and while a
 * task's agent drives the daemon refuses and the page says so (pointing at Take over), as
 * for a click on the picture.
 */
function textFinder({ control, phone, canvas, drive, geometry, refreshGeometry, tap }) {
  const field = el('input', { type: 'search', id: 'find-text', name: 'find-text', autocomplete: 'off',
    spellcheck: 'false', enterkeyhint: 'search', placeholder: 'e.g. Settings', 'aria-describedby': 'find-text-result' });
  const submit = el('button', { type: 'submit', id: 'find-text-go' }, 'Find');
  const result = el('p', { id: 'find-text-result', class: 'find-result', role: 'status' });
  const list = el('ol', { id: 'find-text-matches', class: drive ? 'find-matches drive' : 'find-matches', 'aria-label': 'Matches' });
  const form = el('form', { class: 'find', role: 'search', 'aria-label': 'Find text on screen' },
    el('label', { for: 'find-text' }, 'Find text on screen'),
    el('div', { class: 'find-row' }, field, submit));
  const node = el('div', { id: 'find', class: 'find-text' }, form, result, list);
  // Over the picture, exactly where the canvas draws it; its children are in % of it.
  const layer = el('div', { id: 'highlights', class: 'highlights' });
  phone.append(layer);

  let available = false;
  let searches = 0; // the newest search wins; older answers are dropped
  let shown = null; // {observationId, matches, hits, samples, timers}
  let helloTimer = null;
  let helloWait = 2000;

  const say = (text, kind = '') => {
    result.textContent = text;
    result.dataset.kind = kind;
  };

  // Whether text can be read: `hello`'s capabilities.text. A reader that is still starting
  // says so (available: false), so while unavailable we ask again, less and less often.
  const setCapability = (t) => {
    clearTimeout(helloTimer);
    available = !!(t && t.available);
    field.disabled = !available;
    submit.disabled = !available;
    node.dataset.available = String(available);
    if (!available) {
      clear();
      const why = (t && t.problem) || 'this appliance does not say why';
      say(`Reading text is not available: ${why}`, 'unavailable');
      helloTimer = setTimeout(askAgain, helloWait);
      helloWait = Math.min(helloWait * 2, 10000);
    } else {
      helloWait = 2000;
      if (result.dataset.kind === 'unavailable') say('');
    }
  };
  const askAgain = async () => {
    try {
      const h = await control.call('hello', {});
      setCapability(h.capabilities && h.capabilities.text);
    } catch {
      helloTimer = setTimeout(askAgain, helloWait);
    }
  };
  const capability = (h) => setCapability(h && h.capabilities && h.capabilities.text);
  capability(control.hello);
  const offOpen = control.on('open', capability);

  // Where the canvas's picture is, in the phone's box: all of the canvas with the default
  // object-fit (fill); the letterboxed part of it with contain/scale-down.
  const place = () => {
    const bw = canvas.clientWidth;
    const bh = canvas.clientHeight;
    let w = bw;
    let h = bh;
    const fit = getComputedStyle(canvas).objectFit;
    if ((fit === 'contain' || fit === 'scale-down') && canvas.width > 2 && canvas.height > 2) {
      const k = Math.min(bw / canvas.width, bh / canvas.height, fit === 'scale-down' ? 1 : Infinity);
      w = canvas.width * k;
      h = canvas.height * k;
    }
    Object.assign(layer.style, { left: `${canvas.offsetLeft + (bw - w) / 2}px`, top: `${canvas.offsetTop + (bh - h) / 2}px`,
      width: `${w}px`, height: `${h}px` });
  };
  const resized = new ResizeObserver(place);
  resized.observe(canvas);

  function clear(why) {
    if (shown) {
      clearInterval(shown.checker);
      clearTimeout(shown.expiry);
      shown = null;
    }
    layer.replaceChildren();
    list.replaceChildren();
    delete layer.dataset.observation;
    if (why !== undefined) say(why);
  }

  // A box of the read (its image pixels) in canvas pixels.
  const onCanvas = (box, size) => {
    const sx = canvas.width / size.width;
    const sy = canvas.height / size.height;
    const x = Math.max(0, Math.floor(box.x * sx));
    const y = Math.max(0, Math.floor(box.y * sy));
    return { x, y, w: Math.max(1, Math.min(canvas.width - x, Math.ceil(box.width * sx))),
      h: Math.max(1, Math.min(canvas.height - y, Math.ceil(box.height * sy))) };
  };
  // Read through a small canvas of its own (made for reading back), not the picture's: the
  // picture's canvas stays the GPU's, the comparison costs at most 96 px across per box.
  const scratch = document.createElement('canvas');
  const scratchCtx = scratch.getContext('2d', { willReadFrequently: true });
  const luma = (r, source = canvas) => {
    const w = Math.min(r.w, 96);
    const h = Math.max(1, Math.round((r.h * w) / r.w));
    if (scratch.width !== w || scratch.height !== h) Object.assign(scratch, { width: w, height: h });
    scratchCtx.drawImage(source, r.x, r.y, r.w, r.h, 0, 0, w, h);
    const d = scratchCtx.getImageData(0, 0, w, h).data;
    const out = new Uint8Array(d.length / 4);
    for (let i = 0, j = 0; i < d.length; i += 4, j++) out[j] = (d[i] * 77 + d[i + 1] * 150 + d[i + 2] * 29) >> 8;
    return out;
  };
  const moved = (a, b) => {
    if (a.length !== b.length) return true;
    let sum = 0;
    for (let i = 0; i < a.length; i++) sum += Math.abs(a[i] - b[i]);
    return sum / a.length > HIGHLIGHT_CHANGED;
  };

  // The picture the read came from and the picture shown are the phone's active rectangle
  // both (find_text reads the whole of it; the canvas shows the crop of the last
  // observation): same shape, or the geometry changed between them.
  const sameShape = (size) => {
    const g = geometry();
    if (!g) return false;
    return Math.abs(size.width / size.height - g.crop.width / g.crop.height) < 0.01 * (g.crop.width / g.crop.height);
  };

  async function search() {
    const text = field.value.trim();
    clear();
    if (!text || !available) return;
    const mine = ++searches;
    node.setAttribute('aria-busy', 'true');
    say(`Reading the screen for “${text}”…`, 'busy');
    // The picture as the read starts: when the matches' boxes show the same in it and once
    // the answer is in, the read saw what the highlights are drawn over.
    const start = canvas.width > 2 ? await createImageBitmap(canvas).catch(() => null) : null;
    try {
      const r = await control.call('find_text', { text });
      if (mine === searches && !sameShape(r.image_size)) await refreshGeometry();
      if (mine !== searches) return;
      if (!sameShape(r.image_size)) {
        say('The phone\'s picture changed shape while it was read; search again.', 'problem');
      } else {
        show(text, r, start);
      }
    } catch (e) {
      if (mine !== searches) return;
      if (e.code === 'OCR_UNAVAILABLE') {
        setCapability({ available: false, problem: e.message });
      } else if (e.code === 'OCR_FAILED') {
        say(`Reading the screen failed; try again. (${e.code}: ${e.message})`, 'problem');
      } else {
        say(explain(e), 'problem');
      }
    } finally {
      if (mine === searches) node.removeAttribute('aria-busy');
      if (start) start.close();
    }
  }

  function show(text, r, start) {
    const size = r.image_size;
    const matches = r.matches || [];
    layer.dataset.observation = r.observation_id;
    if (!matches.length) {
      const near = (r.nearest || []).slice(0, MAX_NEAREST).map((n) => `“${n.text}”`);
      say(near.length ? `Not found: “${text}” — nearest: ${near.join(', ')}.`
        : `Not found: “${text}” — no text was read on the screen.`, 'none');
      return;
    }
    const boxes = matches.map((m) => onCanvas(m.box, size));
    const before = boxes.map((b) => luma(b));
    if (start && (start.width !== canvas.width || start.height !== canvas.height
      || boxes.some((b, i) => moved(luma(b, start), before[i])))) {
      say('The screen changed while it was read; search again.', 'problem');
      return;
    }
    place();
    const hits = matches.map((m, i) => {
      // For the pointer; the keyboard's (and a screen reader's) way is the list of buttons.
      const hit = el('div', { class: drive ? 'hit tappable' : 'hit', 'data-index': String(i), 'data-text': m.text,
        'aria-hidden': 'true', title: drive ? `Tap “${m.text}”` : m.text });
      if (matches.length > 1) hit.dataset.n = String(i + 1);
      Object.assign(hit.style, { left: `${(100 * m.box.x) / size.width}%`, top: `${(100 * m.box.y) / size.height}%`,
        width: `${(100 * m.box.width) / size.width}%`, height: `${(100 * m.box.height) / size.height}%` });
      if (drive) hit.addEventListener('click', () => press(i));
      return hit;
    });
    layer.replaceChildren(...hits);
    const items = matches.slice(0, MAX_LISTED).map((m, i) => {
      const label = `${matches.length > 1 ? `${i + 1} ` : ''}“${m.text}”`;
      if (!drive) return el('li', {}, label);
      const b = el('button', { type: 'button', 'data-control': true, 'data-index': String(i),
        'aria-label': `Tap “${m.text}” on the phone (match ${i + 1} of ${matches.length})`,
        onclick: () => press(i),
        onfocus: () => hits[i].classList.add('current'), onblur: () => hits[i].classList.remove('current'),
        onmouseenter: () => hits[i].classList.add('current'), onmouseleave: () => hits[i].classList.remove('current') }, label);
      return el('li', {}, b);
    });
    if (matches.length > MAX_LISTED) items.push(el('li', { class: 'more' }, `and ${matches.length - MAX_LISTED} more on the picture`));
    list.replaceChildren(...items);
    const count = r.count > matches.length ? `${r.count} matches (${matches.length} shown)`
      : matches.length === 1 ? '1 match' : `${matches.length} matches`;
    say(`${count} for “${text}”${drive ? ': click a highlight (or a button below) to tap it.' : '.'}`, 'found');
    const checker = setInterval(() => {
      if (boxes.some((b, i) => moved(before[i], luma(b)))) clear('The screen changed under the highlights; search again.');
    }, HIGHLIGHT_CHECK_MS);
    const expiry = setTimeout(() => clear(`Highlights cleared after ${HIGHLIGHT_MS / 1000} s (the read they come from expires); search again.`), HIGHLIGHT_MS);
    shown = { observationId: r.observation_id, matches, checker, expiry };
  }

  async function press(i) {
    if (!shown) return;
    const { observationId, matches } = shown;
    const m = matches[i];
    // The tap changes the screen: the highlights would be stale the moment it lands.
    clear(`Tapping “${m.text}”…`);
    const at = searches;
    const done = await tap(observationId, m.center);
    if (at === searches && !shown && result.dataset.kind !== 'unavailable') {
      say(done ? `Tapped “${m.text}”.` : `“${m.text}” was not tapped (see why below).`, done ? 'tapped' : 'problem');
    }
    field.focus();
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    search();
  });
  // An emptied field (Escape in a search field, or deleting the text) takes the highlights away.
  field.addEventListener('input', () => {
    if (field.value.trim()) return;
    searches += 1;
    node.removeAttribute('aria-busy');
    clear(available ? '' : undefined);
  });

  return {
    node,
    stop: () => {
      searches += 1;
      clear();
      clearTimeout(helloTimer);
      resized.disconnect();
      offOpen();
    },
  };
}
