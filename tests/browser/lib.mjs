// What the browser suites share: a tether/1 client for the control socket, and waiting
// on a condition (never on a fixed sleep).

import net from 'node:net';

/** A tether/1 connection to the control socket. */
export class Client {
  /** A client for the control socket at `socketPath` (connect before use). */
  constructor(socketPath) { this.socketPath = socketPath; this.buf = ''; this.waiting = new Map(); this.events = []; this.nextId = 1; }
  connect() {
    return new Promise((resolve, reject) => {
      this.sock = net.createConnection(this.socketPath, resolve);
      this.sock.on('error', reject);
      this.sock.on('data', (d) => {
        this.buf += d;
        let i;
        while ((i = this.buf.indexOf('\n')) >= 0) {
          const m = JSON.parse(this.buf.slice(0, i));
          this.buf = this.buf.slice(i + 1);
          if (m.event) this.events.push(m);
          else if (this.waiting.has(m.id)) { this.waiting.get(m.id)(m); this.waiting.delete(m.id); }
        }
      });
    });
  }
  /** Sends; the promise is the whole answer ({ok, result|error}). */
  send(method, params = {}) {
    const id = this.nextId++;
    const p = new Promise((resolve) => this.waiting.set(id, resolve));
    this.sock.write(JSON.stringify({ id, method, ...params }) + '\n');
    return p;
  }
  async call(method, params = {}) {
    const r = await this.send(method, params);
    if (!r.ok) throw new Error(`${method}: ${r.error.code}: ${r.error.message}`);
    return r.result;
  }
  close() { this.sock.destroy(); }
}

/** Waits until `predicate()` is truthy; its value, or an error naming `what`. */
export async function waitFor(what, predicate, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await predicate();
      if (last) return last;
    } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
