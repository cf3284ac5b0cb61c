// The console's acceptance suite: Playwright + Debian's Chromium against a real
// `tether serve --sim` over HTTPS. What the page did is checked against the sim's own
// state (`sim_state` over the control socket), never against the page alone.

import { spawn, execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import { Client as SocketClient, waitFor } from './lib.mjs';
import os from 'node:os';
import path from 'node:path';

const require = createRequire(path.join(process.env.TETHER_NODE_MODULES, 'x.js'));
const { chromium } = require('playwright-core');

const TETHER = process.env.TETHER_BIN;
const OUT = process.env.TETHER_BROWSER_OUT;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tether-browser-'));
const socketPath = path.join(dir, 'control.sock');
const results = [];
const consoleErrors = [];
// Errors the suite causes on purpose (a reused pairing code, a forged request) are not the
// page's: each expected one is struck off once.
const expectedErrors = [];
let applianceWasAway = false;

// ---------------------------------------------------------------- helpers

/** A tether/1 connection to this suite's control socket. */
class Client extends SocketClient {
  constructor() { super(socketPath); }
}

async function call(method, params = {}) {
  const c = new Client();
  await c.connect();
  try { return await c.call(method, params); } finally { c.close(); }
}

const sim = () => call('sim_state');
const element = async (id) => (await sim()).elements.find((e) => e.id === id);


function cli(...args) {
  return execFileSync(TETHER, args, { env: { ...process.env, TETHER_SOCKET: socketPath }, encoding: 'utf8' });
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push({ name, ok: true });
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.push({ name, ok: false });
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: true });
}

function watchConsole(page, label) {
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(`${label}: ${m.text()}`); });
  page.on('pageerror', (e) => consoleErrors.push(`${label}: ${e.message}`));
}

const DESKTOP = { viewport: { width: 1280, height: 900 } };

/** A fresh browser context logged in with `token` through the login form: {ctx, p}. */
async function loggedIn(label, token, options = DESKTOP, setup = async () => {}) {
  const ctx = await browser.newContext({ ignoreHTTPSErrors: true, ...options });
  await setup(ctx);
  const p = await ctx.newPage();
  watchConsole(p, label);
  await p.goto(base);
  await p.locator('#token').fill(token);
  await p.getByRole('button', { name: 'Log in' }).click();
  return { ctx, p };
}

/** Whether boxes `a` and `b` ({x, y, width, height}) overlap. */
function intersects(a, b) {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

/**
 * The pairing landing, as a person reads it: no stray "null" (a missing node printed as
 * text) and the whole fingerprint inside its card, found by its text whatever the markup.
 */
async function checkPairingPage(page, fingerprint) {
  const seen = await page.evaluate((fp) => {
    const card = document.querySelector('#main .center');
    const walker = document.createTreeWalker(card, NodeFilter.SHOW_TEXT);
    let node;
    while ((node = walker.nextNode()) && !node.data.includes(fp)) { /* next */ }
    if (!node) return { text: card.innerText, missing: true };
    const range = document.createRange();
    const start = node.data.indexOf(fp);
    range.setStart(node, start);
    range.setEnd(node, start + fp.length);
    const r = range.getBoundingClientRect();
    const c = card.getBoundingClientRect();
    return { text: card.innerText, fp: { left: r.left, right: r.right }, card: { left: c.left, right: c.right },
      pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth };
  }, fingerprint);
  if (seen.missing) throw new Error(`no fingerprint on the pairing page: ${seen.text}`);
  // (The names and the hex fingerprint this suite uses never contain "null".)
  if (seen.text.includes('null')) throw new Error(`the pairing page says "null": ${JSON.stringify(seen.text)}`);
  if (seen.fp.left < seen.card.left || seen.fp.right > seen.card.right + 0.5) {
    throw new Error(`the fingerprint runs out of its card: ${JSON.stringify(seen)}`);
  }
  if (seen.pageWidth > seen.viewport) throw new Error(`the page scrolls sideways: ${JSON.stringify(seen)}`);
}

/** The fps line must leave the phone's status bar (its clock) uncovered. */
async function checkStatsClearOfStatusBar(page) {
  const stats = await page.locator('#stats').boundingBox();
  const canvas = await page.locator('#screen').boundingBox();
  if (!stats || !canvas) throw new Error(`no box: stats ${JSON.stringify(stats)}, canvas ${JSON.stringify(canvas)}`);
  // An iPhone's status bar is its top ~7% (54 of 844 points); 10% to be safe.
  const band = { x: canvas.x, y: canvas.y, width: canvas.width, height: canvas.height * 0.1 };
  if (intersects(stats, band)) {
    throw new Error(`the fps overlay ${JSON.stringify(stats)} covers the status bar ${JSON.stringify(band)}`);
  }
}

/** The page position of a sim element's centre, through the canvas's box. */
async function onCanvas(page, id) {
  const s = await sim();
  const e = s.elements.find((x) => x.id === id);
  if (!e) throw new Error(`no element ${id} on the ${s.screen} screen`);
  const [w, h] = s.screen_size;
  const box = await page.locator('#screen').boundingBox();
  return { x: box.x + ((e.rect.x + e.rect.w / 2) / w) * box.width, y: box.y + ((e.rect.y + e.rect.h / 2) / h) * box.height, e };
}

async function framesDrawn(page, n) {
  await waitFor(`${n} decoded frames on the canvas`, async () =>
    Number(await page.locator('#screen').getAttribute('data-frames')) >= n, 30000);
}

async function actionsDone(page) {
  return Number(await page.locator('#screen').getAttribute('data-actions')) || 0;
}

// ---------------------------------------------------------------- the daemon

function startDaemon(listen, extra = []) {
  const log = fs.openSync(path.join(dir, 'daemon.log'), 'a');
  return spawn(TETHER, ['serve', '--sim', '--socket', socketPath, '--data-dir', dir, '--listen', listen, ...extra],
    { stdio: ['ignore', log, log] });
}
let daemon = startDaemon('127.0.0.1:0');
let browser;
let base;
try {
  await waitFor('the control socket', () => fs.existsSync(socketPath));
  const status = await waitFor('status', () => call('status'));
  base = `https://localhost:${status.https.port}`;
  const operate = cli('token', 'add', 'browser-op', '--role', 'operate').trim();
  const viewer = cli('token', 'add', 'browser-view', '--role', 'view').trim();
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--no-first-run', '--disable-quic'],
  });

  // ------------------------------------------------------------ desktop, operate
  const desk = await browser.newContext({ ignoreHTTPSErrors: true, ...DESKTOP });
  const page = await desk.newPage();
  watchConsole(page, 'desktop');

  await step('log in through a pairing URL made by tether pair', async () => {
    const pairing = JSON.parse(cli('pair', '--role', 'operate', '--name', 'browser-pair', '--host', 'localhost', '--json'));
    await page.goto(pairing.url);
    await page.locator('#paired').waitFor();
    if (page.url().includes('code=')) throw new Error(`the code stayed in the address bar: ${page.url()}`);
    // Chromium on Linux: not an Apple device, so no trust steps (and no "null" in their place).
    if (await page.locator('#ios-trust').count()) throw new Error('iOS trust steps shown to Chromium on Linux');
    await checkPairingPage(page, status.https.fingerprint);
    await shot(page, 'page-pair');
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.locator('#screen').waitFor();
    // The header names the login (the token's name), its role beside it.
    await page.locator('#who').filter({ hasText: 'browser-pair' }).filter({ hasText: 'operate' }).waitFor({ timeout: 5000 });
    expectedErrors.push('desktop: Failed to load resource: the server responded with a status of 410');
    const again = await page.evaluate(async (code) => (await fetch('/api/pair', { method: 'POST',
      headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ code }) })).status,
    new URL(pairing.url).hash.match(/code=([^&]+)/)[1]);
    if (again !== 410) throw new Error(`a used pairing code answered ${again}`);
  });

  await step('at 390 px the pairing page fits (Android and iPhone)', async () => {
    const phones = [
      ['android', 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Mobile Safari/537.36', false],
      ['iphone', 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1', true],
    ];
    for (const [name, userAgent, apple] of phones) {
      const pairing = JSON.parse(cli('pair', '--role', 'view', '--name', `pair-${name}`, '--host', 'localhost', '--json'));
      const ctx = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 390, height: 844 },
        hasTouch: true, isMobile: true, deviceScaleFactor: 3, userAgent });
      const p = await ctx.newPage();
      watchConsole(p, `pair-${name}`);
      await p.goto(pairing.url);
      await p.locator('#paired').waitFor();
      if ((await p.locator('#ios-trust').count() > 0) !== apple) throw new Error(`${name}: trust steps shown: ${!apple}`);
      await checkPairingPage(p, status.https.fingerprint);
      await shot(p, `page-pair-390-${name}`);
      await ctx.close();
    }
  });

  await step('the canvas shows the sim at >= 20 fps and matches a screenshot', async () => {
    await framesDrawn(page, 30);
    const fps = await waitFor('the overlay to report >= 20 fps', async () => {
      const v = Number(await page.locator('#stats').getAttribute('data-fps'));
      return v >= 20 ? v : false;
    }, 30000);
    await checkStatsClearOfStatusBar(page);
    await shot(page, 'page-phone');
    const diff = await page.evaluate(async () => {
      const canvas = document.getElementById('screen');
      const shotPng = await (await fetch('/api/screenshot?max_edge=256')).blob();
      const img = await createImageBitmap(shotPng);
      const read = (source) => {
        const c = new OffscreenCanvas(img.width, img.height);
        const g = c.getContext('2d');
        g.drawImage(source, 0, 0, img.width, img.height);
        return g.getImageData(0, 0, img.width, img.height).data;
      };
      const a = read(canvas);
      const b = read(img);
      let sum = 0;
      for (let i = 0; i < a.length; i += 4) sum += Math.abs(a[i] - b[i]) + Math.abs(a[i + 1] - b[i + 1]) + Math.abs(a[i + 2] - b[i + 2]);
      return sum / ((a.length / 4) * 3);
    });
    console.log(`     overlay ${fps} fps; canvas vs screenshot: mean difference ${diff.toFixed(2)}/255`);
    if (!(diff < 12)) throw new Error(`the canvas differs from the screenshot by ${diff}/255 on average`);
  });

  await step('a click opens the demo app and toggles a switch', async () => {
    const icon = await onCanvas(page, 'app0');
    await page.mouse.click(icon.x, icon.y);
    // A person waits for the app to finish opening (it takes no touches meanwhile, as on iOS).
    await waitFor('the demo app', async () => { const s = await sim(); return s.screen === 'app' && !s.animating; });
    const before = (await element('toggle0')).on;
    const t = await onCanvas(page, 'toggle0');
    await page.mouse.click(t.x, t.y);
    await waitFor('toggle0 to flip', async () => (await element('toggle0')).on === !before);
    await shot(page, '03-app');
  });

  await step('typing reaches the text field', async () => {
    const f = await onCanvas(page, 'text_field');
    await page.mouse.click(f.x, f.y);
    await waitFor('the field to take focus', async () => (await element('text_field')).focused);
    const was = (await element('text_field')).text;
    await page.locator('#screen').focus();
    await page.keyboard.type('hello web', { delay: 20 });
    await waitFor('the text', async () => (await element('text_field')).text === `${was}hello web`);
  });

  await step('a drag scrolls the list', async () => {
    const list = (await sim()).elements.find((e) => e.scroll_offset !== undefined && e.scroll_offset !== null);
    if (!list) throw new Error('no scrollable list on the screen');
    const s = await sim();
    const [w, h] = s.screen_size;
    const box = await page.locator('#screen').boundingBox();
    const x = box.x + ((list.rect.x + list.rect.w / 2) / w) * box.width;
    const y0 = box.y + ((list.rect.y + list.rect.h * 0.8) / h) * box.height;
    const y1 = box.y + ((list.rect.y + list.rect.h * 0.2) / h) * box.height;
    await page.mouse.move(x, y0);
    await page.mouse.down();
    for (let i = 1; i <= 12; i++) await page.mouse.move(x, y0 + ((y1 - y0) * i) / 12);
    await page.mouse.up();
    await waitFor('the list to scroll', async () => {
      const now = (await sim()).elements.find((e) => e.id === list.id);
      return now.scroll_offset > list.scroll_offset;
    });
    await shot(page, '04-scrolled');
  });

  await step('the wheel scrolls the list', async () => {
    const list = await element('list');
    const at = await onCanvas(page, 'list');
    await page.mouse.move(at.x, at.y);
    await page.mouse.wheel(0, 300);
    await waitFor('the list to scroll', async () => (await element('list')).scroll_offset > list.scroll_offset);
  });

  await step('the home button returns home', async () => {
    await page.getByRole('button', { name: 'Home', exact: true }).click();
    await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
  });

  await step('holding the pointer long-presses (a context menu opens)', async () => {
    const icon = await onCanvas(page, 'app1');
    await page.mouse.move(icon.x, icon.y);
    await page.mouse.down();
    await new Promise((r) => setTimeout(r, 800)); // the hold is the gesture under test
    await page.mouse.up();
    await waitFor('the context menu', async () => (await sim()).elements.some((e) => e.kind === 'context_menu'));
    await shot(page, '05-long-press');
    await page.mouse.click(icon.x, icon.y); // a tap dismisses it
    await waitFor('the menu to close', async () => !(await sim()).elements.some((e) => e.kind === 'context_menu'));
  });

  await step('on the iOS-like sim: Settings from its labelled icon, a switch, Spotlight finds Notes', async () => {
    const home = await sim();
    const settings = home.elements.find((e) => e.kind === 'app_icon' && e.label === 'Settings');
    if (!settings) throw new Error(`no icon labelled Settings: ${JSON.stringify(home.elements.map((e) => e.label))}`);
    const icon = await onCanvas(page, settings.id);
    await page.mouse.click(icon.x, icon.y);
    await waitFor('Settings in front', async () => { const s = await sim(); return s.app === 'Settings' && !s.animating; });
    const sw = (await sim()).elements.find((e) => e.kind === 'toggle');
    if (!sw) throw new Error('Settings shows no switch');
    const at = await onCanvas(page, sw.id);
    await page.mouse.click(at.x, at.y);
    await waitFor(`${sw.label} to flip`, async () => (await element(sw.id)).on === !sw.on);
    await framesDrawn(page, Number(await page.locator('#screen').getAttribute('data-frames')) + 5);
    await shot(page, '06-settings');
    // Spotlight from the page's Search button, the name typed on the canvas, Return.
    await page.getByRole('button', { name: 'Search', exact: true }).click();
    await waitFor('Spotlight', async () => (await sim()).screen === 'spotlight');
    await page.locator('#screen').focus();
    await page.keyboard.type('Not', { delay: 20 });
    await waitFor('Notes listed', async () => (await sim()).elements.some((e) => e.kind === 'search_result' && e.label === 'Notes'));
    // The picture catches up with the phone a few frames later.
    await framesDrawn(page, Number(await page.locator('#screen').getAttribute('data-frames')) + 5);
    await shot(page, '07-spotlight');
    await page.keyboard.press('Enter');
    await waitFor('Notes in front', async () => { const s = await sim(); return s.app === 'Notes' && !s.animating; });
    await page.getByRole('button', { name: 'Home', exact: true }).click();
    await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
  });

  await step('Find text on screen: one highlight over the Settings label, a click taps it; NoSuchText names the nearest', async () => {
    await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
    // The text reader starts beside the daemon (hello says "starting" meanwhile); the page
    // asks hello again and enables the field once it reads.
    const reader = await waitFor('the text reader to start', async () => {
      const t = (await call('hello')).capabilities.text;
      return (t.available || !/starting/.test(t.problem || '')) && t;
    }, 30000);
    if (!reader.available) throw new Error(`this daemon cannot read text: ${reader.problem}`);
    const field = page.locator('#find-text');
    const line = page.locator('#find-text-result');
    await page.locator('#find-text:enabled').waitFor({ timeout: 15000 })
      .catch(async () => { throw new Error(`the search stayed disabled: ${await line.textContent()}`); });
    const find = async (text, kind) => {
      await field.fill(text);
      await field.press('Enter');
      await page.locator(`#find-text-result[data-kind="${kind}"]`).waitFor({ timeout: 20000 })
        .catch(async () => { throw new Error(`searching "${text}": ${await line.textContent()}`); });
    };
    // Where the sim draws the Settings label, in page pixels: its line of text as sim_state
    // lists it (`texts`), or else the band under the icon (the element's rect is the icon).
    const home = await sim();
    const icon = home.elements.find((e) => e.kind === 'app_icon' && e.label === 'Settings');
    if (!icon) throw new Error(`no icon labelled Settings: ${JSON.stringify(home.elements.map((e) => e.label))}`);
    const [w, h] = home.screen_size;
    const drawn = (home.texts || []).find((t) => t.text === 'Settings');
    const labelBand = drawn ? { x: drawn.rect.x, y: drawn.rect.y, width: drawn.rect.w, height: drawn.rect.h }
      : { x: icon.rect.x, y: icon.rect.y + icon.rect.h, width: icon.rect.w, height: icon.rect.h / 2 };
    const toPage = (r, box) => ({ x: box.x + (r.x / w) * box.width, y: box.y + (r.y / h) * box.height,
      width: (r.width / w) * box.width, height: (r.height / h) * box.height });
    const inside = (p, r) => p.x >= r.x && p.x <= r.x + r.width && p.y >= r.y && p.y <= r.y + r.height;
    const centre = (b) => ({ x: b.x + b.width / 2, y: b.y + b.height / 2 });

    await find('Settings', 'found');
    const hits = page.locator('#highlights .hit');
    const n = await hits.count();
    if (n !== 1) throw new Error(`${n} highlights for Settings: ${await line.textContent()}`);
    const canvasBox = await page.locator('#screen').boundingBox();
    const band = toPage(labelBand, canvasBox);
    const hitBox = await hits.first().boundingBox();
    if (!inside(centre(hitBox), band)) {
      throw new Error(`the highlight ${JSON.stringify(hitBox)} is not over the Settings label ${JSON.stringify(band)}`);
    }
    if (!(await line.textContent()).includes('1 match')) throw new Error(`the line says: ${await line.textContent()}`);
    await shot(page, '09-find-text');

    await find('NoSuchText', 'none');
    const none = await line.textContent();
    // The nearest texts are named, quoted: at least one of the home screen's labels.
    const named = [...none.matchAll(/“([^”]+)”/g)].map((m) => m[1]).filter((t) => t !== 'NoSuchText');
    if (!/nearest:/.test(none) || named.length === 0) throw new Error(`the not-found line names nothing near: ${none}`);
    if (await hits.count() !== 0) throw new Error('highlights stayed after a search that found nothing');
    await shot(page, '10-find-text-none');

    // A click on the highlight taps its centre in the read's observation: the sim's touch
    // lands inside the highlighted box.
    await find('Settings', 'found');
    const box = await hits.first().boundingBox();
    const touchesBefore = (await sim()).touches.length ? (await sim()).touches.at(-1).seq : 0;
    const done = await actionsDone(page);
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await waitFor('the page to count the tap', async () => (await actionsDone(page)) > done);
    const touch = await waitFor('the tap on the sim', async () => (await sim()).touches.find((t) => t.seq > touchesBefore));
    const at = { x: canvasBox.x + (touch.down[0] / w) * canvasBox.width, y: canvasBox.y + (touch.down[1] / h) * canvasBox.height };
    if (touch.kind !== 'tap' || !inside(at, box)) {
      throw new Error(`the tap ${JSON.stringify(touch)} (page ${JSON.stringify(at)}) is outside the highlight ${JSON.stringify(box)}`);
    }
    if (await hits.count() !== 0) throw new Error('the highlight stayed after its tap');
    await page.locator('#find-text-result[data-kind="tapped"]').waitFor();
    // Settings opens when the sim takes a touch on an icon's label as one on its icon.
    if (touch.target === icon.id) {
      await waitFor('Settings in front', async () => { const s = await sim(); return s.app === 'Settings' && !s.animating; });
      await page.getByRole('button', { name: 'Home', exact: true }).click();
      await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
    } else {
      console.log(`     the tap landed on the Settings label, which the sim does not count as its icon (target ${touch.target}): Settings not opened`);
    }
    await field.fill('');
  });

  await step('a task shows with its steps; approval and pause from the page', async () => {
    const lease = new Client();
    await lease.connect();
    let opened;
    await waitFor('a task to open', async () => {
      const r = await lease.send('task_open', { title: 'browser task', events: false });
      if (r.ok) opened = r.result;
      else if (r.error.code !== 'TASK_ACTIVE') throw new Error(r.error.message);
      return r.ok;
    });
    const agent = (method, params = {}) => lease.send(method, { task_token: opened.token, ...params });
    await page.getByRole('link', { name: 'Tasks' }).click();
    await page.locator(`[data-task="${opened.id}"]`).waitFor();
    await page.locator(`[data-task="${opened.id}"]`).click();
    await page.locator('#task-state').filter({ hasText: 'running' }).waitFor();
    // Home on the home screen: done, not an error (its default expect is `any`), and the
    // journal shows it without a ✗.
    const home = await agent('action', { operation_id: 'agent-1', action: { type: 'home' } });
    if (!home.ok) throw new Error(JSON.stringify(home));
    await page.locator('#journal li[data-kind="step"]').first().waitFor();
    const homeLine = await page.locator('#journal li[data-kind="step"]').first().textContent();
    if (!homeLine.includes('home') || homeLine.includes('✗')) throw new Error(`home at home journalled as ${homeLine}`);
    // A step that acted on a screenshot shows it: a tap on an empty spot of the home screen.
    const seen = await agent('screenshot', { max_edge: 400 });
    if (!seen.ok) throw new Error(JSON.stringify(seen));
    const size = seen.result.metadata.image_size;
    const tap = await agent('action', { operation_id: 'agent-tap', expect: 'any', observation_id: seen.result.metadata.observation_id,
      action: { type: 'tap', x: size.width / 2, y: size.height * 0.95 } });
    if (!tap.ok) throw new Error(JSON.stringify(tap));
    await waitFor('the step thumbnail to load', () => page.evaluate(() => {
      const img = document.querySelector('#journal img.thumb');
      return !!img && img.complete && img.naturalWidth > 0;
    }));
    // A message from the page reaches the agent's inbox.
    await page.locator('#agent-message').fill('use the blue button');
    await page.getByRole('button', { name: 'Send' }).click();
    await waitFor('the agent to read the message', async () => {
      const r = await agent('task_messages', { after_seq: 0 });
      return r.ok && JSON.stringify(r.result).includes('use the blue button');
    });
    // The person's input is refused while the agent drives; the page says why and points
    // at the Take over button beside the phone.
    await page.getByRole('link', { name: 'Phone' }).click();
    await framesDrawn(page, 1);
    const takeOver = page.locator('#task-bar [data-action="takeover"]');
    await takeOver.waitFor();
    const box = await page.locator('#screen').boundingBox();
    await page.mouse.click(box.x + box.width / 2, box.y + box.height / 2);
    await page.locator('#problem').filter({ hasText: 'Take over' }).waitFor();
    await shot(page, '06-refused');
    // A question: the banner shows over the page without moving the phone, Approve answers it.
    const asked = agent('task_confirm', { question: 'delete the album?' });
    await page.locator('#approval').filter({ hasText: 'delete the album?' }).waitFor();
    if (!(await page.title()).includes('approval')) throw new Error(`no title badge: ${await page.title()}`);
    const moved = await page.locator('#screen').boundingBox();
    if (['x', 'y', 'width', 'height'].some((k) => Math.abs(moved[k] - box[k]) > 0.5)) {
      throw new Error(`the approval banner moved the phone from ${JSON.stringify(box)} to ${JSON.stringify(moved)}`);
    }
    const banner = await page.locator('#approval').boundingBox();
    if (intersects(banner, moved)) throw new Error(`the banner ${JSON.stringify(banner)} covers the phone ${JSON.stringify(moved)}`);
    await shot(page, 'page-approval');
    await page.locator('#approval-yes').click();
    const answer = await asked;
    if (!answer.ok || !JSON.stringify(answer.result).includes('approved')) throw new Error(JSON.stringify(answer));
    // Take over from the Phone page: the person's clicks now drive; Hand back returns it.
    await waitFor('running again', async () => (await call('status')).task.state === 'running');
    await takeOver.click();
    await waitFor('taken over', async () => (await call('status')).task.state === 'taken_over');
    await page.locator('#task-bar[data-state="taken_over"] [data-action="handback"]').waitFor();
    const icon = await onCanvas(page, 'app0');
    await page.mouse.click(icon.x, icon.y);
    await waitFor('the demo app, opened by the person', async () => { const s = await sim(); return s.screen === 'app' && !s.animating; });
    await shot(page, 'phone-taken-over');
    await page.getByRole('button', { name: 'Home', exact: true }).click();
    await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
    await page.locator('#task-bar [data-action="handback"]').click();
    await waitFor('handed back', async () => (await call('status')).task.state === 'running');
    await page.locator('#task-bar[data-state="running"] [data-action="takeover"]').waitFor();
    // The phone changed under the agent: it looks again before it acts.
    const looked = await agent('screenshot', { max_edge: 256 });
    if (!looked.ok) throw new Error(JSON.stringify(looked));
    await page.getByRole('link', { name: 'Tasks' }).click();
    await page.locator(`[data-task="${opened.id}"]`).click();
    await page.locator('#journal li[data-kind="step"]').first().waitFor();
    await shot(page, 'page-tasks');
    // Pause in the page: the agent's next action waits until resume.
    await page.locator('[data-action="pause"]').click();
    await waitFor('paused', async () => (await call('status')).task.state === 'paused');
    await page.locator('#task-state').filter({ hasText: 'paused' }).waitFor();
    let answered = false;
    const waiting = agent('action', { operation_id: 'agent-2', expect: 'any', action: { type: 'home' } }).then((r) => { answered = true; return r; });
    // What is under test is that nothing happens: give the paused action time to (wrongly) run.
    await new Promise((r) => setTimeout(r, 1000));
    if (answered) throw new Error(`the action ran while paused: ${JSON.stringify(await waiting)}`);
    await shot(page, '08-paused');
    const steps = await page.locator('#journal li[data-kind="step"]').count();
    await page.locator('[data-action="resume"]').click();
    const done = await waiting;
    if (!done.ok) throw new Error(`after resume: ${JSON.stringify(done)}`);
    await page.locator('#journal li[data-kind="step"]').nth(steps).waitFor();
    lease.close();
    await page.locator('#task-state').filter({ hasText: 'abandoned' }).waitFor();
  });

  await step('the access page pairs a device and lists tokens', async () => {
    // (An operate login has no Access page: log in as admin in a second context.)
    const admin = cli('token', 'rotate', 'admin').trim();
    const { ctx, p } = await loggedIn('admin', admin);
    await p.getByRole('link', { name: 'Access' }).click();
    await p.locator('[data-token="browser-view"]').waitFor();
    await p.locator('#pair-name').fill('tablet');
    await p.getByRole('button', { name: 'Make a pairing code' }).click();
    await p.locator('#pairing img.qr').waitFor();
    const url = await p.locator('#pair-url').inputValue();
    if (!url.includes('/pair#code=')) throw new Error(url);
    await shot(p, 'page-access');
    await p.getByRole('link', { name: 'Device' }).click();
    await p.locator('#facts').filter({ hasText: status.https.fingerprint }).waitFor();
    await shot(p, 'page-device');
    await ctx.close();
  });

  // ------------------------------------------------------------ view only
  await step('a view-only login shows no controls and its forged input is refused', async () => {
    const { ctx, p } = await loggedIn('view', viewer);
    await p.locator('#screen').waitFor();
    await framesDrawn(p, 5);
    const controls = await p.locator('[data-control]:visible').count();
    if (controls !== 0) throw new Error(`${controls} controls visible to a viewer`);
    if (await p.getByRole('link', { name: 'Access' }).isVisible()) throw new Error('Access shown to a viewer');
    await shot(p, '11-view-only');
    // A viewer may look for text (find_text is observing) but its highlights tap nothing.
    if ((await call('hello')).capabilities.text.available) {
      await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
      await p.locator('#find-text:enabled').waitFor({ timeout: 15000 });
      await p.locator('#find-text').fill('Settings');
      await p.locator('#find-text').press('Enter');
      await p.locator('#find-text-result[data-kind="found"]').waitFor({ timeout: 20000 });
      const hits = await p.locator('#highlights .hit').count();
      const tappable = await p.locator('#highlights .hit.tappable, #find-text-matches button').count();
      if (hits !== 1 || tappable !== 0) throw new Error(`a viewer's search: ${hits} highlights, ${tappable} tappable`);
    }
    const before = (await sim()).input.reports;
    expectedErrors.push('view: Failed to load resource: the server responded with a status of 403');
    const forged = await p.evaluate(async () => {
      const r = await fetch('/api/action', { method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ operation_id: 'forged', action: { type: 'home' } }) });
      return { status: r.status, body: await r.json() };
    });
    if (forged.status !== 403 || forged.body.error.code !== 'PERMISSION_DENIED') throw new Error(JSON.stringify(forged));
    if ((await sim()).input.reports !== before) throw new Error('the forged input reached the phone');
    await ctx.close();
  });

  // ------------------------------------------------------------ a phone's browser
  await step('at a 390x844 touch viewport a tap reaches the sim', async () => {
    const { ctx, p } = await loggedIn('touch', operate,
      { viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true, deviceScaleFactor: 3 });
    await p.locator('#screen').waitFor();
    await framesDrawn(p, 5);
    await waitFor('home', async () => { const s = await sim(); return s.screen === 'home' && !s.animating; });
    const icon = await onCanvas(p, 'app0');
    const done = await actionsDone(p);
    await p.touchscreen.tap(icon.x, icon.y);
    await waitFor('the demo app', async () => (await sim()).screen === 'app');
    await waitFor('the page to count the action', async () => (await actionsDone(p)) > done);
    await checkStatsClearOfStatusBar(p);
    await shot(p, 'page-phone-390');
    await ctx.close();
  });

  await step('without WebCodecs the page shows still pictures and says why', async () => {
    const { ctx, p } = await loggedIn('fallback', operate, DESKTOP,
      (c) => c.addInitScript(() => { delete window.VideoDecoder; }));
    await p.locator('#note').filter({ hasText: 'no WebCodecs' }).waitFor();
    await framesDrawn(p, 3);
    await shot(p, '13-fallback');
    await ctx.close();
  });

  await step('after the appliance restarts, the page reconnects and the picture comes back', async () => {
    await page.getByRole('link', { name: 'Phone' }).click();
    await framesDrawn(page, 1);
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
    const before = Number(await page.locator('#screen').getAttribute('data-frames'));
    daemon = startDaemon(`127.0.0.1:${status.https.port}`);
    await waitFor('the daemon again', () => call('status'), 30000);
    // The control socket reconnects by itself (backoff up to 10 s), then a fresh ticket.
    await waitFor('new frames on the canvas', async () =>
      Number(await page.locator('#screen').getAttribute('data-frames')) > before + 10, 60000);
    // While the appliance was away the browser logged refused connections (struck off
    // at the end: only this step takes the appliance away).
    applianceWasAway = true;
    await shot(page, '14-reconnected');
  });

  await step('an MJPEG capture handed on as is (CDJ1) is drawn from its JPEGs', async () => {
    // A recorded MJPEG capture (Debian's ffmpeg, testsrc) played as the capture device.
    const recording = path.join(dir, 'testsrc.mjpeg');
    execFileSync('ffmpeg', ['-hide_banner', '-loglevel', 'error', '-y', '-f', 'lavfi', '-i',
      'testsrc=size=640x360:rate=30', '-frames:v', '60', '-pix_fmt', 'yuvj420p', '-c:v', 'mjpeg', '-f', 'mjpeg',
      recording]);
    const config = path.join(dir, 'replay.toml');
    fs.writeFileSync(config, `video = "replay"\n[replay]\npath = "${recording}"\nfps = 30\n`);
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
    daemon = startDaemon(`127.0.0.1:${status.https.port}`, ['--config', config]);
    await waitFor('the daemon with the recording', async () => (await call('status')).video.capture === 'mjpeg', 30000);
    const { ctx, p } = await loggedIn('mjpeg', operate);
    await p.getByRole('link', { name: 'Phone' }).click();
    await framesDrawn(p, 20);
    const v = (await call('status')).video;
    if (v.paths.viewers !== 'passthrough' || v.viewers.viewers < 1) {
      throw new Error(`${JSON.stringify(v)}; the page says: ${await p.locator('#note').textContent()}`);
    }
    // testsrc's bars on the canvas: many colours, not a blank or a single grey.
    const colours = await p.evaluate(() => {
      const c = document.querySelector('#screen');
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      const seen = new Set();
      for (let i = 0; i < d.length; i += 4 * 97) seen.add(`${d[i] >> 4},${d[i + 1] >> 4},${d[i + 2] >> 4}`);
      return seen.size;
    });
    if (colours < 12) throw new Error(`the canvas shows ${colours} colours, not testsrc`);
    await shot(p, '15-mjpeg-passthrough');
    await ctx.close();
  });

  await step('the update page installs a bundle as an admin, with an upload bar', async () => {
    // A fake appliance for the daemon's [update] paths: an image version, a device-tree
    // command line naming slot a booted by U-Boot, the boot state, and a `rauc` that keeps
    // the bundle it gets (the real RAUC, U-Boot and reboot are in tests/vm/update.sh).
    const fake = path.join(dir, 'appliance');
    fs.mkdirSync(path.join(fake, 'boot'), { recursive: true });
    fs.writeFileSync(path.join(fake, 'os-release'), 'ID=debian\nIMAGE_ID=tether-rpi4\nIMAGE_VERSION=lab-1\n');
    fs.writeFileSync(path.join(fake, 'bootargs'), 'root=PARTUUID=74657468-02 ro tether.slot=a tether.boot=u-boot\0');
    fs.writeFileSync(path.join(fake, 'boot', 'tether.env'),
      'tether_order=a b\ntether_a_state=good\ntether_a_left=0\ntether_b_state=bad\ntether_b_left=0\n');
    const raucStatus = JSON.stringify({ compatible: 'tether-rpi4', booted: 'a', slots: [
      { 'rootfs.0': { bootname: 'a', state: 'booted', boot_status: 'good' } },
      { 'rootfs.1': { bootname: 'b', state: 'inactive', boot_status: 'bad' } }] });
    fs.writeFileSync(path.join(fake, 'rauc'), `#!/bin/sh\ncase "$1" in\nstatus) echo '${raucStatus}' ;;\n` +
      `install) cp "$2" "${fake}/installed"; echo ' 40% Copying image to rootfs.1'; echo '100% Installing done.' ;;\nesac\n`,
    { mode: 0o755 });
    const config = path.join(dir, 'update.toml');
    fs.writeFileSync(config, `[update]\nboot_dir = "${fake}/boot"\nos_release = "${fake}/os-release"\n` +
      `cmdline = ["${fake}/bootargs"]\nrauc = "${fake}/rauc"\n`);
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
    daemon = startDaemon(`127.0.0.1:${status.https.port}`, ['--config', config]);
    await waitFor('the daemon on the fake appliance', async () => (await call('status')).update, 30000);
    const bundle = path.join(dir, 'tether-rpi4-lab-2.raucb');
    fs.writeFileSync(bundle, crypto.randomBytes(3 * 1024 * 1024));
    const admin = cli('token', 'rotate', 'admin').trim();
    const { ctx, p } = await loggedIn('update', admin);
    await p.getByRole('link', { name: 'Update' }).click();
    await p.locator('#update-facts').filter({ hasText: 'tether-rpi4 lab-1' }).waitFor();
    await p.locator('#update-facts').filter({ hasText: 'not bootable' }).waitFor();
    await p.locator('#update-file').setInputFiles(bundle);
    await p.getByRole('button', { name: 'Install and reboot' }).click();
    await p.locator('#update-phase').filter({ hasText: 'rebooting to try it' }).waitFor({ timeout: 60000 });
    if (Number(await p.locator('#update-progress').getAttribute('value')) !== 100) throw new Error('the bar is not full');
    const got = fs.readFileSync(path.join(fake, 'installed'));
    if (!got.equals(fs.readFileSync(bundle))) throw new Error(`rauc got ${got.length} bytes, not the bundle`);
    if (!fs.readFileSync(path.join(path.dirname(socketPath), 'reboot'), 'utf8').includes('slot b')) {
      throw new Error('no reboot request');
    }
    await shot(p, 'page-update');
    await ctx.close();
  });

  await step('a revoked login returns to the login form', async () => {
    cli('token', 'revoke', 'browser-pair');
    await page.reload();
    await page.locator('#token').waitFor();
    await page.locator('.problem').filter({ hasText: 'session ended' }).waitFor();
    await shot(page, 'page-login');
  });

  await step('no errors in the browser console', async () => {
    const refused = /ERR_CONNECTION_REFUSED|WebSocket connection to .* failed/;
    const left = consoleErrors.filter((e) => !(applianceWasAway && refused.test(e)));
    for (const expected of expectedErrors) {
      const i = left.findIndex((e) => e.startsWith(expected));
      if (i >= 0) left.splice(i, 1);
    }
    if (left.length) throw new Error(left.join('\n'));
  });
} catch (e) {
  results.push({ name: 'setup', ok: false });
  console.log(`FAIL setup: ${e.stack || e}`);
} finally {
  if (browser) await browser.close();
  daemon.kill('SIGTERM');
}
const failed = results.filter((r) => !r.ok);
console.log(`\nbrowser: ${results.length - failed.length} passed, ${failed.length} failed; screenshots in ${OUT}`);
if (failed.length) {
  console.log(`daemon log: ${path.join(dir, 'daemon.log')}`);
  process.exit(1);
}
fs.rmSync(dir, { recursive: true, force: true });
