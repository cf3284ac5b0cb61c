// The live picture: a `video_open` ticket, the `/api/video` WebSocket (CDV1 messages, one
// ack each, a keyframe request after a gap), decoding in a Worker, drawing on a canvas
// cropped to the phone's screen. An MJPEG capture handed on as is arrives as CDJ1 (one
// JPEG per message), decoded by the browser's image decoder (newest picture only). Where
// WebCodecs is missing, a preview picture polled instead, with the reason shown.

import { socketUrl } from './api.js';

const CDV1 = 0x43445631;
const CDJ1 = 0x43444A31;
const HEADER = 24;

/** Why live video cannot be decoded here, or null. */
export function noWebCodecsReason() {
  if (!window.isSecureContext) return 'this page is not a secure context (open the console over HTTPS)';
  if (typeof VideoDecoder === 'undefined') return 'this browser has no WebCodecs (VideoDecoder)';
  if (typeof Worker === 'undefined') return 'this browser has no Workers';
  return null;
}

export class VideoView {
  /**
   * @param control the Control socket
   * @param canvas where to draw
   * @param geometry () => {crop:{x,y,width,height}, sourceWidth} of the phone in the capture
   * @param onStats (stats) => void, about once a second
   * @param onNote (text) => void, what the view is doing or why it fell back
   */
  constructor(control, canvas, geometry, onStats, onNote) {
    Object.assign(this, { control, canvas, geometry, onStats, onNote });
    this.ctx = canvas.getContext('2d');
    this.stopped = false;
    this.frames = 0;
    this.bytes = 0;
    this.latencies = [];
    this.lastSeq = null;
    this.lastKeyRequest = 0;
    this.statsTimer = setInterval(() => this.report(), 1000);
    this.mode = noWebCodecsReason() ? 'preview' : 'video';
  }

  start() {
    if (this.mode === 'preview') {
      this.onNote(`Live video is off: ${noWebCodecsReason()}. Showing still pictures instead.`);
      this.pollPreview();
    } else {
      this.worker = new Worker('/video-worker.js');
      this.worker.onmessage = (ev) => this.fromWorker(ev.data);
      this.open();
    }
  }

  stop() {
    this.stopped = true;
    clearInterval(this.statsTimer);
    clearTimeout(this.retry);
    if (this.ws) this.ws.close(1000);
    if (this.worker) this.worker.terminate();
  }

  /** The picture's size changed (a new geometry): resize the canvas, reconfigure. */
  configure() {
    const g = this.geometry();
    if (!g) return;
    this.canvas.width = g.crop.width;
    this.canvas.height = g.crop.height;
    if (this.worker && this.codec && this.protocol !== 'jpeg/1') {
      this.worker.postMessage({ type: 'configure', codec: this.codec, crop: g.crop, sourceWidth: g.sourceWidth,
        width: this.canvas.width, height: this.canvas.height });
    }
  }

  async open() {
    if (this.stopped) return;
    let grant;
    try {
      grant = await this.control.call('video_open');
    } catch (e) {
      this.onNote(`No video: ${e.code}: ${e.message}`);
      this.retry = setTimeout(() => this.open(), 2000);
      return;
    }
    this.codec = grant.codec;
    this.protocol = grant.protocol;
    const ws = new WebSocket(socketUrl(grant.path || '/api/video'));
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    this.lastSeq = null;
    ws.onopen = () => ws.send(JSON.stringify({ ticket: grant.ticket }));
    ws.onmessage = (m) => {
      if (typeof m.data === 'string') this.onText(JSON.parse(m.data));
      else this.onPicture(m.data);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws || this.stopped) return;
      // 4003: a new video generation (resolution, signal): open again at once.
      const wait = ev.code === 4003 ? 0 : 1000;
      this.onNote(ev.code === 4003 ? 'The picture changed; reconnecting…' : `Video closed (${ev.code} ${ev.reason}); reconnecting…`);
      if (this.worker) this.worker.postMessage({ type: 'reset' });
      this.retry = setTimeout(() => this.open(), wait);
    };
  }

  onText(m) {
    if (m.type === 'ready') {
      this.codec = m.codec || this.codec;
      this.protocol = m.protocol || this.protocol;
      // The appliance's clock against ours: latency is arrival minus capture, in our clock.
      this.clockOffsetMs = performance.now() - m.now_us / 1000;
      this.configure();
      this.onNote('');
    }
  }

  onPicture(buf) {
    if (buf.byteLength < HEADER) return;
    const v = new DataView(buf);
    const magic = v.getUint32(0);
    if (magic !== CDV1 && magic !== CDJ1) return;
    const generation = v.getUint32(4);
    const sequence = v.getUint32(8);
    const captureUs = Number(v.getBigUint64(12));
    const key = (v.getUint32(20) & 1) === 1;
    this.ws.send(JSON.stringify({ type: 'ack', generation, sequence }));
    if (this.lastSeq !== null && sequence !== this.lastSeq + 1 && !key) {
      // A gap: pictures were skipped; decoding resumes at the next IDR.
      this.askKeyframe();
      this.worker.postMessage({ type: 'reset' });
    }
    this.lastSeq = sequence;
    this.bytes += buf.byteLength;
    if (this.clockOffsetMs !== undefined) {
      this.latencies.push(performance.now() - (captureUs / 1000 + this.clockOffsetMs));
    }
    const data = buf.slice(HEADER);
    if (magic === CDJ1) this.drawJpeg(data);
    else this.worker.postMessage({ type: 'chunk', key, timestamp: captureUs, data }, [data]);
  }

  /** One JPEG of the capture: decoded off the main thread, cropped to the phone, drawn.
   *  While one decodes, only the newest of those arriving meanwhile waits. */
  async drawJpeg(data) {
    if (this.jpegBusy) {
      this.jpegNext = data;
      return;
    }
    this.jpegBusy = true;
    try {
      for (let next = data; next; next = this.jpegNext, this.jpegNext = null) {
        const g = this.geometry();
        const blob = new Blob([next], { type: 'image/jpeg' });
        const bitmap = g
          ? await createImageBitmap(blob, g.crop.x, g.crop.y, g.crop.width, g.crop.height,
            { resizeWidth: this.canvas.width, resizeHeight: this.canvas.height, resizeQuality: 'medium' })
          : await createImageBitmap(blob);
        this.fromWorker({ type: 'frame', bitmap });
      }
    } catch (e) {
      this.onNote(`a JPEG from the capture could not be drawn: ${e.message}`);
    } finally {
      this.jpegBusy = false;
    }
  }

  askKeyframe() {
    const now = performance.now();
    if (now - this.lastKeyRequest < 1000 || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    this.lastKeyRequest = now;
    this.ws.send(JSON.stringify({ type: 'keyframe' }));
  }

  fromWorker(m) {
    if (m.type === 'frame') {
      this.ctx.drawImage(m.bitmap, 0, 0, this.canvas.width, this.canvas.height);
      m.bitmap.close();
      this.frames += 1;
      this.canvas.dataset.frames = String((Number(this.canvas.dataset.frames) || 0) + 1);
    } else if (m.type === 'needkey') {
      this.askKeyframe();
    } else if (m.type === 'error') {
      this.onNote(m.message);
      if (/no WebCodecs|cannot decode/.test(m.message) && this.mode === 'video') {
        this.mode = 'preview';
        if (this.ws) this.ws.close(1000);
        this.stopped = false;
        this.onNote(`Live video is off: ${m.message}. Showing still pictures instead.`);
        this.pollPreview();
      }
    }
  }

  async pollPreview() {
    let after;
    while (!this.stopped && this.mode === 'preview') {
      try {
        const params = { max_edge: 480 };
        if (after !== undefined) Object.assign(params, { after_frame_id: after, timeout_ms: 1000 });
        const p = await this.control.call('preview', params);
        if (!p.unchanged) {
          after = p.metadata.frame_id;
          const bytes = Uint8Array.from(atob(p.data), (c) => c.charCodeAt(0));
          const bitmap = await createImageBitmap(new Blob([bytes], { type: p.mime_type }));
          if (this.canvas.width < 2) this.configure();
          this.ctx.drawImage(bitmap, 0, 0, this.canvas.width, this.canvas.height);
          bitmap.close();
          this.frames += 1;
          this.bytes += bytes.length;
          this.canvas.dataset.frames = String((Number(this.canvas.dataset.frames) || 0) + 1);
        } else {
          after = p.frame_id;
        }
      } catch (e) {
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }

  report() {
    const l = this.latencies.sort((a, b) => a - b);
    const latency = l.length ? l[Math.floor(l.length / 2)] : null;
    this.onStats({ mode: this.mode, fps: this.frames, kbps: Math.round((this.bytes * 8) / 1000), latencyMs: latency });
    this.frames = 0;
    this.bytes = 0;
    this.latencies = [];
  }
}
