// Access (admin): pair a phone, tablet or laptop with a one-time code shown as a QR code,
// and the named tokens with their last use, revocable.

import { el, explain } from './api.js';

export function accessPage(app) {
  const { control } = app;
  const problem = el('p', { class: 'problem', role: 'alert', hidden: true });
  const fail = (e) => { problem.hidden = false; problem.textContent = explain(e); };
  const tokens = el('tbody', { id: 'tokens' });
  const pairing = el('div', { class: 'pairing', id: 'pairing' });

  const role = el('select', { id: 'pair-role', name: 'role' },
    el('option', { value: 'operate' }, 'operate: drive and run tasks'),
    el('option', { value: 'view' }, 'view: watch only'),
    el('option', { value: 'admin' }, 'admin: everything'));
  const name = el('input', { id: 'pair-name', name: 'name', type: 'text', placeholder: 'e.g. alice-ipad', pattern: '[A-Za-z0-9._\\-]{1,64}' });
  const ttl = el('input', { id: 'pair-ttl', name: 'ttl', type: 'number', min: '1', max: '1440', value: '10' });
  const form = el('form', { class: 'pair-form', onsubmit: async (ev) => {
    ev.preventDefault();
    problem.hidden = true;
    const params = { role: role.value, ttl_ms: Math.round(Number(ttl.value) * 60000) };
    if (name.value) params.name = name.value;
    try {
      const p = await control.call('pair', params);
      const img = p.qr_svg ? el('img', { class: 'qr', alt: 'Pairing QR code', width: '256', height: '256',
        src: `data:image/svg+xml;base64,${btoa(p.qr_svg)}` }) : null;
      pairing.replaceChildren(...[img, el('p', {}, 'Scan with the phone or tablet, or open on the laptop (one use, until ',
        new Date(p.expires_ms).toLocaleTimeString(), '):'),
      el('input', { type: 'text', readonly: true, value: p.url || p.code, id: 'pair-url', class: 'url' }),
      el('p', { class: 'note' }, `Role ${p.role}, token name ${p.name}.`)].filter(Boolean));
      load();
    } catch (e) { fail(e); }
  } },
  el('label', {}, 'Role ', role), el('label', {}, 'Name ', name), el('label', {}, 'Valid for (minutes) ', ttl),
  el('button', { type: 'submit', 'data-control': true }, 'Make a pairing code'));

  async function load() {
    try {
      const r = await control.call('token', { action: 'list' });
      tokens.replaceChildren(...r.tokens.map((t) => el('tr', { dataset: { token: t.name } },
        el('td', {}, t.name), el('td', {}, t.role),
        el('td', {}, t.last_used_ms ? new Date(t.last_used_ms).toLocaleString() : 'never'),
        el('td', {}, el('button', { type: 'button', class: 'danger', 'data-control': true, onclick: async () => {
          if (!window.confirm(`Revoke ${t.name}? Its programs and browser sessions stop working.`)) return;
          try { await control.call('token', { action: 'revoke', name: t.name }); load(); } catch (e) { fail(e); }
        } }, 'Revoke')))));
    } catch (e) { fail(e); }
  }
  load();
  return { node: el('section', { class: 'access' }, el('h2', {}, 'Pair a device'), form, pairing, problem,
    el('h2', {}, 'Tokens'), el('table', { class: 'tokens' },
      el('thead', {}, el('tr', {}, el('th', {}, 'Name'), el('th', {}, 'Role'), el('th', {}, 'Last used'), el('th', {}, ''))),
      tokens)), stop: () => {} };
}
