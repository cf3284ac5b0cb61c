// The console's two ways to the appliance: plain HTTPS requests (login, pairing, status)
// and the control WebSocket `/api/ws` (tether/1 messages: every call the console makes,
// and the events of an attached task). Both authenticate with the session cookie.

/** An error answer: the stable code, the server's message, and whether a retry may help. */
export class ApiError extends Error {
  constructor(code, message, extra = {}) {
    super(message);
    this.code = code;
    this.retryable = !!extra.retryable;
    this.status = extra.status;
    this.details = extra;
  }
}

/** Fired on `window` when the session is gone (401): the console returns to login. */
export const UNAUTHORIZED = 'tether:unauthorized';

/** One HTTPS request; the parsed JSON answer, or an ApiError. */
export async function http(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new ApiError('NETWORK', `the appliance cannot be reached (${e.message})`, { retryable: true });
  }
  const text = await response.text();
  let value = null;
  try { value = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (response.status === 401 && path !== '/login') {
    window.dispatchEvent(new Event(UNAUTHORIZED));
  }
  if (!response.ok) {
    const e = (value && value.error) || { code: `HTTP_${response.status}`, message: text.slice(0, 200) };
    throw new ApiError(e.code, e.message, { ...e, status: response.status });
  }
  return value;
}

/** The WebSocket URL of a path on this appliance. */
export function socketUrl(path) {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
}

/** A random idempotency key for an action. */
export function operationId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return 'console-' + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

/**
 * The control socket: `call(method, params)` answers with the result or throws an
 * ApiError; `on('event', fn)` gets events; it reconnects by itself (`on('open', fn)` runs
 * after each connect, so pages re-attach and resume by seq).
 */
export class Control {
  constructor() {
    this.nextId = 1;
    this.pending = new Map();
    this.listeners = { event: [], open: [], close: [] };
    this.hello = null;
    this.stopped = false;
    this.backoff = 500;
    this.ready = null;
  }

  on(kind, fn) {
    this.listeners[kind].push(fn);
    return () => { this.listeners[kind] = this.listeners[kind].filter((f) => f !== fn); };
  }

  emit(kind, value) {
    for (const fn of this.listeners[kind]) {
      try { fn(value); } catch (e) { console.warn('listener failed', e); }
    }
  }

  /** Connects (again); resolves with hello's answer. */
  connect() {
    this.ready = new Promise((resolve, reject) => {
      const ws = new WebSocket(socketUrl('/api/ws'));
      this.ws = ws;
      let opened = false;
      ws.onopen = async () => {
        opened = true;
        this.backoff = 500;
        try {
          this.hello = await this.send('hello', { protocol: 'tether/1', client: 'console', kind: 'console' });
          resolve(this.hello);
          this.emit('open', this.hello);
        } catch (e) {
          reject(e);
        }
      };
      ws.onmessage = (m) => this.receive(m.data);
      ws.onclose = (ev) => {
        for (const [, p] of this.pending) {
          p.reject(new ApiError('DISCONNECTED', 'the connection to the appliance closed; retrying', { retryable: true }));
        }
        this.pending.clear();
        if (!opened) reject(new ApiError('DISCONNECTED', `cannot open the control socket (${ev.code})`, { retryable: true }));
        this.emit('close', ev);
        if (!this.stopped) {
          setTimeout(() => { if (!this.stopped) this.connect().catch(() => {}); }, this.backoff);
          this.backoff = Math.min(this.backoff * 2, 10000);
        }
      };
    });
    return this.ready;
  }

  close() {
    this.stopped = true;
    if (this.ws) this.ws.close(1000);
  }

  receive(data) {
    let m;
    try { m = JSON.parse(data); } catch { return; }
    if (m.event !== undefined) {
      this.emit('event', m);
      return;
    }
    const p = this.pending.get(m.id);
    if (!p) return;
    this.pending.delete(m.id);
    if (m.ok) p.resolve(m.result);
    else p.reject(new ApiError(m.error.code, m.error.message, m.error));
  }

  send(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      if (!this.ws || this.ws.readyState !== WebSocket.OPEN) {
        reject(new ApiError('DISCONNECTED', 'not connected to the appliance; retrying', { retryable: true }));
        return;
      }
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ id, method, ...params }));
    });
  }

  /** Calls `method` once connected. */
  async call(method, params = {}) {
    if (this.ready) await this.ready.catch(() => {});
    return this.send(method, params);
  }

  /** Whether hello allowed this caller `method`. */
  may(method) {
    const methods = this.hello && this.hello.capabilities && this.hello.capabilities.methods;
    return !!(methods && methods.includes(method));
  }

  get role() {
    return this.hello && this.hello.caller ? this.hello.caller.role : null;
  }

  /** Whom this login acts as: the token's name (`uid:N` for a Unix user), or null. */
  get name() {
    const p = this.hello && this.hello.caller && this.hello.caller.principal;
    if (!p) return null;
    if (p.kind === 'token') return p.name;
    return p.kind === 'uid' ? `uid:${p.uid}` : null;
  }
}

/** What a person should read for an error. */
export function explain(e) {
  const why = {
    TASK_RUNNING: 'A task is running: its agent drives. Press Take over to drive yourself.',
    PERMISSION_DENIED: 'Your login may not do that.',
    STALE_OBSERVATION: 'The screen changed; try again.',
    BUSY: 'The phone is busy; try again.',
    HOST_NOT_CONNECTED: 'The phone is not connected.',
    STORAGE_FAILED: 'The appliance could not save this (its disk is full); nothing changed.',
    DISCONNECTED: 'Reconnecting to the appliance…',
  }[e.code];
  return why ? `${why} (${e.code}: ${e.message})` : `${e.code || 'ERROR'}: ${e.message}`;
}

/** A tiny element builder: el('button', {class: 'x', onclick: f}, 'text', child…). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'class') node.className = v;
    else if (k === 'dataset') Object.assign(node.dataset, v);
    else if (v === true) node.setAttribute(k, '');
    else node.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
