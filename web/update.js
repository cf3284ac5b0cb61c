// Update (admin): which slot runs which version, what boots next, the last update's verdict
// (a rollback and its reason), and installing a signed bundle (flash.sh bundle) with an
// upload bar, RAUC's progress, the reboot and the new slot's trial. docs/updates.md.

import { el, explain } from './api.js';

const SLOT_STATE = { good: 'good', try: 'on trial', bad: 'not bootable' };

function slotText(s) {
  const tries = s.state === 'try' ? ` (${s.tries_left} tries left)` : '';
  return `${SLOT_STATE[s.state] || s.state}${tries}, version ${s.version || 'unknown'}${s.booted ? ', running' : ''}`;
}

export function updatePage(app) {
  const { control } = app;
  const problem = el('p', { class: 'problem', role: 'alert', hidden: true });
  const facts = el('dl', { class: 'facts', id: 'update-facts' });
  const rolled = el('p', { class: 'problem', id: 'rolled-back', role: 'alert', hidden: true });
  const phase = el('p', { class: 'note', id: 'update-phase', role: 'status' });
  const bar = el('progress', { id: 'update-progress', max: '100', value: '0', hidden: true });
  const file = el('input', { type: 'file', id: 'update-file', accept: '.raucb', 'aria-label': 'Update bundle' });
  const force = el('input', { type: 'checkbox', id: 'update-force' });
  const install = el('button', { type: 'submit', id: 'update-install', 'data-control': true }, 'Install and reboot');
  let rebooting = false;
  let lastStatus = null;

  function show(s) {
    lastStatus = s;
    problem.hidden = true;
    if (!s.image) {
      facts.replaceChildren(el('dt', {}, 'Updates'), el('dd', {}, `unavailable: ${s.problem || 'unknown'}`));
    } else {
      const rows = [
        ['Image', `${s.image.id} ${s.image.version}`],
        ['Running slot', `${s.booted.slot} (booted by ${s.booted.loader})`],
        ...s.slots.map((x) => [`Slot ${x.slot}`, slotText(x)]),
        ['Next boot', `slot ${s.next_boot}`],
        ['Last update', s.trial ? `slot ${s.trial.slot} version ${s.trial.version || 'unknown'}: ${s.trial.outcome}` : 'none'],
      ];
      if (s.problem) rows.push(['Updater', s.problem]);
      facts.replaceChildren(...rows.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
    }
    rolled.hidden = !s.rolled_back;
    if (s.rolled_back) {
      rolled.textContent = `The update to ${s.rolled_back.version || 'a new version'} in slot ${s.rolled_back.slot} was rolled back: ${s.rolled_back.reason}`;
    }
    const i = s.install || {};
    if (i.phase === 'installing') {
      bar.hidden = false; bar.value = i.percent;
      phase.textContent = `Installing: ${i.percent}% ${i.message}`;
    } else if (i.phase === 'installed') {
      bar.hidden = false; bar.value = 100;
      phase.textContent = i.message;
      rebooting = i.reboot_requested;
    } else if (i.phase === 'failed') {
      bar.hidden = true;
      phase.textContent = `Not installed: ${i.error}`;
    } else if (!rebooting) {
      bar.hidden = true;
    }
    install.disabled = !s.available || i.phase === 'installing';
  }

  async function load() {
    try {
      show(await control.call('update_status'));
    } catch (e) {
      if (rebooting) { phase.textContent = 'The appliance is rebooting into the new slot; this page reconnects by itself.'; return; }
      problem.hidden = false; problem.textContent = explain(e);
    }
  }

  // XMLHttpRequest, not fetch: only it reports upload progress. The session cookie
  // authenticates it; the answer comes once RAUC has started.
  function upload(f) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open('POST', `/api/update${force.checked ? '?force=1' : ''}`);
      xhr.withCredentials = true;
      xhr.upload.onprogress = (ev) => {
        if (!ev.lengthComputable) return;
        bar.hidden = false; bar.value = Math.round((ev.loaded / ev.total) * 100);
        phase.textContent = `Uploading ${(ev.loaded / 1048576).toFixed(1)} of ${(ev.total / 1048576).toFixed(1)} MiB`;
      };
      xhr.onload = () => {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
        if (xhr.status >= 200 && xhr.status < 300) resolve(body);
        else reject(new Error((body && body.error && `${body.error.code}: ${body.error.message}`) || `HTTP ${xhr.status}`));
      };
      xhr.onerror = () => reject(new Error('the upload broke off (the appliance cannot be reached)'));
      xhr.send(f);
    });
  }

  const form = el('form', { class: 'update-form', onsubmit: async (ev) => {
    ev.preventDefault();
    problem.hidden = true;
    const f = file.files && file.files[0];
    if (!f) { problem.hidden = false; problem.textContent = 'Choose a bundle (.raucb) made by flash.sh bundle.'; return; }
    install.disabled = true;
    try {
      const r = await upload(f);
      phase.textContent = `RAUC is installing into slot ${r.target}…`;
      load();
    } catch (e) {
      problem.hidden = false; problem.textContent = e.message;
      install.disabled = !(lastStatus && lastStatus.available);
    }
  } },
  el('label', { for: 'update-file' }, 'Bundle '), file,
  el('label', { class: 'inline' }, force, ' even while a task runs'),
  install);

  load();
  const timer = setInterval(load, 1500);
  return {
    node: el('section', { class: 'update' }, el('h2', {}, 'Update'), problem, rolled, facts, form, bar, phase),
    stop: () => clearInterval(timer),
  };
}
