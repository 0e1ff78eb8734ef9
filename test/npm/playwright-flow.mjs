// Playwright attaches to one session over the appliance's CDP endpoint
// (connectOverCDP with a Bearer header) and runs the e2e flow: goto, fill,
// click, waitForSelector, screenshot, evaluate, page.route continuing one
// request and aborting another, a popup, the navigation policy, the
// session's scope (other sessions' targets) and the refused methods.
// Env: CDP_URL (https://host/api/v1/sessions/ID/cdp), TOKEN, PAGE (the
// fixture server), DENIED (a URL the policy refuses), OTHER_TARGETS
// (comma-separated target ids of other sessions).
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
const [popup] = await Promise.all([ctx.waitForEvent('page', { timeout: 15000 }), page.click('#pop')]);
await popup.waitForLoadState();
out.popup = { url: popup.url(), pages: ctx.pages().length };
await sync('popup', out.popup);
await popup.close();

// The navigation policy holds for goto and for a route continuing a
// request to a refused address.
out.deniedGoto = await attempt(async () => (await page.goto(env('DENIED')))?.status() ?? null);
await page.route('**/via-route', (r) => r.continue({ url: env('DENIED') }));
out.deniedRoute = await attempt(async () => (await page.goto(PAGE + '/via-route'))?.status() ?? null);

// The client sees one session.
const cdp = await browser.newBrowserCDPSession();
const seen = new Set();
cdp.on('Target.targetCreated', (e) => seen.add(e.targetInfo.targetId));
cdp.on('Target.targetInfoChanged', (e) => seen.add(e.targetInfo.targetId));
await cdp.send('Target.setDiscoverTargets', { discover: true });
out.targets = (await cdp.send('Target.getTargets')).targetInfos.map((t) => ({ id: t.targetId, type: t.type, url: t.url }));
// The driver makes the other sessions' pages change now.
await sync('discovering');
await new Promise((r) => setTimeout(r, 1500));
out.eventTargets = [...seen];
out.attachOther = [];
for (const id of (process.env.OTHER_TARGETS || '').split(',').filter(Boolean)) {
  out.attachOther.push(await attempt(() => cdp.send('Target.attachToTarget', { targetId: id, flatten: true })));
}
const refused = [
  ['Browser.close', {}],
  ['Browser.crash', {}],
  ['Browser.crashGpuProcess', {}],
  ['Target.createBrowserContext', {}],
  ['Target.disposeBrowserContext', { browserContextId: 'ABCDEF' }],
  ['Target.exposeDevToolsProtocol', { targetId: out.targets[0]?.id ?? 'x' }],
  ['SystemInfo.getInfo', {}],
  ['Tethering.bind', { port: 9333 }],
  ['Nonexistent.method', {}],
];
out.refused = {};
for (const [m, params] of refused) out.refused[m] = await attempt(() => cdp.send(m, params));
out.alive = await attempt(() => page.evaluate(() => 40 + 2));
result(out);
done();
