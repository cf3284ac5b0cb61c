// A task's report in a real browser, as a person opens it from a CI artifact: a file on
// disk, offline. Playwright + Debian's Chromium against the report `tether task report`
// wrote for a recorded task of `tether serve --sim`. Fails on any console error, any
// request that is not the file itself, its inline pictures or its recording, a step of the
// journal missing from the page, or a video that does not load or lasts otherwise than
// the task.

import { spawn, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { Client, waitFor } from './lib.mjs';

const require = createRequire(path.join(process.env.TETHER_NODE_MODULES, 'x.js'));
const { chromium } = require('playwright-core');

const TETHER = process.env.TETHER_BIN;
const OUT = process.env.TETHER_BROWSER_OUT;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tether-report-'));
const socketPath = path.join(dir, 'control.sock');

const config = path.join(dir, 'tether.toml');
fs.writeFileSync(config, '[sim_phone]\ncapture_width = 1280\ncapture_height = 720\n');
const log = fs.openSync(path.join(dir, 'daemon.log'), 'a');
const daemon = spawn(TETHER, ['serve', '--sim', '--config', config, '--socket', socketPath, '--data-dir',
  path.join(dir, 'data'), '--listen', '127.0.0.1:0'], { stdio: ['ignore', log, log] });
let browser;
let failed = false;
try {
  await waitFor('the control socket', () => fs.existsSync(socketPath), 30000);
  // A recorded task: two taps with its token (steps with pictures), a note, a refusal of
  // a tap off the screen, and a failed end.
  const lease = new Client(socketPath);
  await lease.connect();
  const task = await lease.call('task_open', { title: 'report <in> "a browser"', events: false, record: true });
  const agent = new Client(socketPath);
  await agent.connect();
  const shot = await agent.call('screenshot', { task_token: task.token });
  const obs = shot.metadata.observation_id;
  await agent.call('action', { task_token: task.token, operation_id: 'r1', observation_id: obs,
    action: { type: 'tap', x: 100, y: 150 }, expect: 'any' });
  await agent.call('task_note', { task_token: task.token, text: '<b>not bold</b> & fine' });
  await agent.call('action', { task_token: task.token, operation_id: 'r2',
    action: { type: 'home' }, expect: 'any' }).catch(() => {});
  await lease.call('task_finish', { task: task.id, ok: false, summary: 'failed on purpose' });
  agent.close();
  lease.close();
  const report = path.join(dir, 'report');
  execFileSync(TETHER, ['task', 'report', String(task.id), '-o', report, '--socket', socketPath],
    { stdio: ['ignore', 'inherit', 'inherit'] });
  const events = execFileSync(TETHER, ['task', 'events', String(task.id), '--socket', socketPath, '--json'],
    { encoding: 'utf8' }).trim().split('\n').map((l) => JSON.parse(l));
  const steps = events.filter((e) => e.kind === 'step').length;
  const junit = fs.readFileSync(path.join(report, 'junit.xml'), 'utf8');
  const taskSeconds = Number(/<testcase [^>]*time="([0-9.]+)"/.exec(junit)[1]);

  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync',
      '--no-first-run', '--autoplay-policy=no-user-gesture-required'],
  });
  const page = await (await browser.newContext({ viewport: { width: 1000, height: 1400 } })).newPage();
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  const url = `file://${path.join(report, 'report.html')}`;
  await page.goto(url);
  await page.waitForFunction(() => document.querySelector('video')?.readyState >= 1, null, { timeout: 30000 });
  const duration = await page.evaluate(() => document.querySelector('video').duration);
  const shown = await page.locator('section.step').count();
  const pictures = await page.locator('section.step img').count();
  const title = await page.locator('h1').innerText();
  await page.screenshot({ path: path.join(OUT, 'report.png'), fullPage: true });

  const checks = [
    ['no console error or page error', problems.length === 0, problems.join('\n')],
    ['no request but the file and its recording',
      requests.includes(url) && requests.every((u) => u === url || u === `file://${path.join(report, 'recording.mp4')}` || u.startsWith('data:')),
      requests.join('\n')],
    ['every step of the journal is shown', shown === steps && steps >= 2, `${shown} of ${steps}`],
    ['steps have their pictures', pictures >= 2, `${pictures} pictures`],
    ['the title is text, not markup', title.includes('report <in> "a browser"'), title],
    ['the recording plays as long as the task (within 1 s)', Math.abs(duration - taskSeconds) < 1,
      `video ${duration} s, task ${taskSeconds} s`],
    ['the note is text', (await page.locator('section.note pre').innerText()).includes('<b>not bold</b>'), ''],
  ];
  for (const [name, ok, detail] of checks) {
    console.log(`${ok ? 'ok  ' : 'FAIL'} report: ${name}${ok ? '' : `: ${detail}`}`);
    if (!ok) failed = true;
  }
} catch (e) {
  failed = true;
  console.log(`FAIL report: ${e.stack || e}`);
} finally {
  if (browser) await browser.close();
  daemon.kill('SIGTERM');
}
if (failed) {
  console.log(`daemon log: ${path.join(dir, 'daemon.log')}`);
  process.exit(1);
}
console.log(`report: ok; screenshot ${path.join(OUT, 'report.png')}`);
fs.rmSync(dir, { recursive: true, force: true });
