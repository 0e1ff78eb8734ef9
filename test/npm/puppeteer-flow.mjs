// Puppeteer attaches with a ticket URL (what a client that only takes a
// URL gets) and runs the same flow as playwright-flow.mjs: goto, type,
// request interception continuing one request and aborting another,
// click, waitForSelector, screenshot, evaluate.
// Env: WS_URL (wss://host/api/v1/sessions/ID/cdp?ticket=…), PAGE.
import puppeteer from 'puppeteer-core';
import { step, result, attempt, env, done } from './lib.mjs';

const out = {};
// defaultViewport null: Puppeteer would otherwise resize the streamed
// page to 800x600 for everyone watching.
const browser = await puppeteer.connect({ browserWSEndpoint: env('WS_URL'), defaultViewport: null, protocolTimeout: 30000 });
const pages = await browser.pages();
out.pagesAtConnect = pages.map((p) => p.url());
const page = pages.find((p) => p.url().startsWith('http')) || pages[0];
step('connected', out);
await page.setRequestInterception(true);
page.on('request', (r) => {
  if (r.url().endsWith('/blocked.js')) r.abort();
  else r.continue();
});
await page.goto(env('PAGE') + '/cdp-form');
await page.type('#name', 'grace');
await page.click('#go');
await page.waitForSelector('#done', { timeout: 10000 });
const shot = await page.screenshot();
out.screenshotBytes = shot.length;
out.page = await page.evaluate(() => ({
  done: document.getElementById('done').textContent,
  ok: window.okLoaded,
  blocked: window.blockedLoaded,
}));
out.alive = await attempt(() => page.evaluate(() => 40 + 2));
await browser.disconnect();
result(out);
done();
