// Playwright attaches to one session over the appliance's CDP endpoint
// (connectOverCDP with a Bearer header) and runs the e2e flow: goto, fill,
// click, waitForSelector, screenshot, evaluate, page.route continuing one
// request and aborting another, a popup and the navigation policy. (The
// session's scope and the refused methods are checked from Go on the raw
// socket: test/e2e/cdp_test.go.)
// Env: CDP_URL (https://host/api/v1/sessions/ID/cdp), TOKEN, PAGE (the
// fixture server), DENIED (a URL the policy refuses).
import { chromium } from 'playwright-core';
import { step, sync, result, attempt, env, done } from './lib.mjs';

const out = {};
const browser = await chromium.connectOverCDP(env('CDP_URL'), {
  headers: { Authorization: `Bearer ${env('TOKEN')}` },
  timeout: 30000,
});
const contexts = browser.contexts();
const ctx = contexts[0];
const page = ctx.pages()[0];
out.contexts = contexts.length;
out.pagesAtConnect = ctx.pages().map((p) => p.url());
step('connected', out);

const PAGE = env('PAGE');
await page.route('**/ok.js', (r) => r.continue());
await page.route('**/blocked.js', (r) => r.abort());
await page.goto(PAGE + '/cdp-form');
await page.fill('#name', 'ada');
out.filled = await page.inputValue('#name');
// The Go viewer waits for a still picture before the click.
await sync('before-click');
await page.click('#go');
step('clicked');
await page.waitForSelector('#done', { timeout: 10000 });
const shot = await page.screenshot();
out.screenshotBytes = shot.length;
out.screenshotPNG = shot.subarray(1, 4).toString() === 'PNG';
out.page = await page.evaluate(() => ({
  done: document.getElementById('done').textContent,
  ok: window.okLoaded,
  blocked: window.blockedLoaded,
}));

// A popup the page opens: in context.pages() and in the session's tabs.
const popped = ctx.waitForEvent('page', { timeout: 20000 });
await page.click('#pop');
step('pop-clicked');
const popup = await popped;
step('popup-event', { url: popup.url() });
await popup.waitForURL('**/solid?c=aa3300', { waitUntil: 'commit', timeout: 20000 });
// Reported, not required: whether Playwright saw the popup's load event.
out.popupLoad = await attempt(() => popup.waitForLoadState('load', { timeout: 5000 }));
out.popup = { url: popup.url(), pages: ctx.pages().length };
await sync('popup', out.popup);
await popup.close();

// The navigation policy holds for goto and for a route continuing a
// request to a refused address.
out.deniedGoto = await attempt(async () => (await page.goto(env('DENIED')))?.status() ?? null);
await page.route('**/via-route', (r) => r.continue({ url: env('DENIED') }));
out.deniedRoute = await attempt(async () => (await page.goto(PAGE + '/via-route'))?.status() ?? null);

// The page is usable after the refusals.
// (A refused navigation may send the page back to where it was: a goto
// racing that is interrupted, and is tried again.)
out.alive = await attempt(async () => {
  for (let i = 0; ; i++) {
    try {
      await page.goto(PAGE + '/solid?c=123456');
      break;
    } catch (e) {
      if (i >= 3 || !String(e.message).includes('interrupted')) throw e;
      await new Promise((r) => setTimeout(r, 500));
    }
  }
  return page.evaluate(() => 40 + 2);
});
result(out);
done();
