// Getting in: a token typed into a form, or the pairing landing (`/pair#code=…&fp=…` from
// a QR code), which redeems the code, drops it from the address bar and, on iPhone and
// iPad, explains how to trust the appliance's certificate (Safari refuses the console's
// secure WebSockets otherwise).

import { el, explain, http } from './api.js';

function isAppleTouch() {
  return /iPhone|iPad|iPod/.test(navigator.userAgent)
    || (navigator.userAgent.includes('Macintosh') && navigator.maxTouchPoints > 1);
}

export function loginPage(onIn, reason) {
  const token = el('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'current-password',
    placeholder: 'tt_…', required: true, 'aria-describedby': 'login-help' });
  const problem = el('p', { class: 'problem', role: 'alert', hidden: !reason }, reason || '');
  const form = el('form', { class: 'login', onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      await http('POST', '/login', { token: token.value.trim() });
      onIn();
    } catch (e) {
      problem.hidden = false;
      problem.textContent = e.code === 'UNAUTHORIZED' ? 'That token is not valid.' : explain(e);
    }
  } },
  el('h1', {}, 'tether'),
  el('label', { for: 'token' }, 'Token'), token,
  el('p', { id: 'login-help', class: 'note' }, 'Paste a token (`tether token add NAME` on the appliance), or scan a pairing QR code (`tether pair`).'),
  el('button', { type: 'submit' }, 'Log in'), problem);
  return el('section', { class: 'center' }, form);
}

export async function pairingPage(onIn) {
  const params = new URLSearchParams(location.hash.slice(1));
  const code = params.get('code');
  // The code is single-use and secret: out of the address bar and history at once.
  history.replaceState(null, '', '/pair');
  const box = el('section', { class: 'center' }, el('h1', {}, 'Pairing…'));
  if (!code) {
    box.replaceChildren(el('h1', {}, 'No pairing code'), el('p', {}, 'Open the whole link from the QR code, or log in with a token.'),
      el('a', { href: '/', class: 'button' }, 'Log in'));
    return box;
  }
  try {
    const r = await http('POST', '/api/pair', { code });
    const steps = isAppleTouch() ? el('div', { class: 'ios-trust', id: 'ios-trust' },
      el('h2', {}, 'One more step on iPhone and iPad'),
      el('p', {}, 'Safari needs to trust this appliance for live video:'),
      el('ol', {},
        el('li', {}, el('a', { href: '/ca.mobileconfig' }, 'Download the appliance’s profile'), ' and allow it.'),
        el('li', {}, 'Settings → General → VPN & Device Management: install “tether”.'),
        el('li', {}, 'Settings → General → About → Certificate Trust Settings: turn on full trust for it.'),
        el('li', {}, 'Come back here and continue.'))) : null;
    // (replaceChildren, unlike el, would print a missing node as the text "null".)
    box.replaceChildren(...[el('h1', {}, 'Paired'),
      el('p', { id: 'paired' }, `This browser is logged in as “${r.name}” (${r.role}).`),
      el('p', { class: 'note fingerprint' }, 'Certificate fingerprint: ', el('code', { id: 'fingerprint' }, r.fingerprint)),
      steps, el('button', { type: 'button', onclick: () => { history.replaceState(null, '', '/live'); onIn(); } }, 'Continue')]
      .filter(Boolean));
  } catch (e) {
    box.replaceChildren(el('h1', {}, 'Pairing failed'),
      el('p', { class: 'problem', role: 'alert' }, e.code === 'PAIRING_INVALID'
        ? 'This pairing code was already used or has expired. Make a new one on the appliance (`tether pair`).' : explain(e)),
      el('a', { href: '/', class: 'button' }, 'Log in with a token'));
  }
  return box;
}
