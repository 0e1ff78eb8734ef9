// The CDP bench's script (bench/cdp.go): goto, N clicks, N fills and
// SHOTS screenshots, each step timed in this process. MODE=tabcast attaches to a
// session through the appliance's endpoint (CDP_URL, TOKEN); MODE=floor
// to the appliance's Chromium's own DevTools socket (CDP_URL, a ws://
// URL), on a page of its own in a context of its own. PACE_MS is an
// untimed gap between two timed steps (the same in both modes).
import { chromium } from 'playwright-core';
import { result, env, done } from './lib.mjs';

const mode = env('MODE');
const n = Number(process.env.N || 50);
const pace = Number(process.env.PACE_MS || 0);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t = async (fn) => {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
};

const c0 = performance.now();
let page;
let browser;
if (mode === 'tabcast') {
  browser = await chromium.connectOverCDP(env('CDP_URL'), { headers: { Authorization: `Bearer ${env('TOKEN')}` }, timeout: 30000 });
  page = browser.contexts()[0].pages()[0];
} else {
  browser = await chromium.connectOverCDP(env('CDP_URL'), { timeout: 30000 });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 720 } });
  page = await ctx.newPage();
}
const out = { connect: performance.now() - c0, goto: [], click: [], fill: [], screenshot: [] };
out.goto.push(await t(() => page.goto(env('PAGE') + '/bench')));
for (let i = 0; i < n; i++) {
  await sleep(pace);
  out.click.push(await t(() => page.click('#inc')));
}
for (let i = 0; i < n; i++) {
  await sleep(pace);
  out.fill.push(await t(() => page.fill('#note', 'note ' + i)));
}
let bytes = 0;
for (let i = 0; i < Number(process.env.SHOTS || 1); i++) {
  await sleep(pace);
  out.screenshot.push(await t(async () => { bytes = (await page.screenshot()).length; }));
}
out.screenshotBytes = bytes;
out.count = await page.evaluate(() => Number(document.getElementById('n').textContent));
result(out);
done();
