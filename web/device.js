// What the appliance knows of itself: the phone's connection, the capture, codecs, the
// certificate to pin, versions; and pointer calibration.

import { el, explain } from './api.js';

function calibrationText(c) {
  if (!c) return '–';
  const done = ['portrait', 'landscape'].filter((o) => c[o]);
  return done.length ? `calibrated: ${done.join(', ')}` : 'not calibrated (the linear mapping)';
}

export function devicePage(app) {
  const { control } = app;
  const table = el('dl', { class: 'facts', id: 'facts' });
  const problem = el('p', { class: 'problem', role: 'alert', hidden: true });
  const note = el('p', { class: 'note', role: 'status' });
  const calibrate = control.may('calibrate') ? el('button', { type: 'button', 'data-control': true, onclick: async () => {
    note.textContent = 'Calibrating: the pointer moves over a grid…';
    try {
      const r = await control.call('calibrate', {});
      note.textContent = `Calibrated (${r.orientation || 'this orientation'}).`;
      load();
    } catch (e) { note.textContent = ''; problem.hidden = false; problem.textContent = explain(e); }
  } }, 'Calibrate the pointer') : null;

  async function load() {
    try {
      const s = await control.call('status');
      const h = control.hello || {};
      const caps = h.capabilities || {};
      const v = s.video || {};
      const rows = [
        ['Phone (USB host)', s.hid ? `${s.hid.host} (${s.hid.backend}${s.hid.bound ? ', gadget bound' : ''})` : '–'],
        ['Capture', `${v.backend || '–'}: ${v.signal || '–'}${v.source_size ? `, ${v.source_size.width}×${v.source_size.height}` : ''}`],
        ['Video generation', v.generation],
        ['Latest frame', v.frame_age_ms === undefined ? '–' : `${v.frame_age_ms} ms ago`],
        ['Decoder / encoder', `${v.decoder || '–'} / ${v.encoder || '–'}`],
        ['Viewers', v.viewers ? v.viewers.viewers : 0],
        ['Input', s.input && s.input.busy ? 'busy' : 'idle'],
        ['Task', s.task ? `#${s.task.id} ${s.task.title} (${s.task.state})` : 'none'],
        ['Certificate fingerprint (SHA-256)', s.https ? s.https.fingerprint : '–'],
        ['Names', s.https ? s.https.hosts.join(', ') : '–'],
        ['Version', `${h.version || (s.daemon && s.daemon.version) || '–'}${caps.sim ? ' (simulated phone)' : ''}`],
        ['Uptime', s.daemon ? `${Math.round(s.daemon.uptime_ms / 1000)} s` : '–'],
        ['Calibration', calibrationText(s.calibration)],
      ];
      table.replaceChildren(...rows.flatMap(([k, val]) => [el('dt', {}, k), el('dd', {}, String(val ?? '–'))]));
    } catch (e) { problem.hidden = false; problem.textContent = explain(e); }
  }
  load();
  const timer = setInterval(load, 3000);
  return { node: el('section', { class: 'device' }, el('h2', {}, 'Device'), problem, table, calibrate, note),
    stop: () => clearInterval(timer) };
}
