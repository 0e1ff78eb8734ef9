// Input fenced with the people: under a person's exclusive control a
// click waits until it is released, or fails with human_in_control at the
// input deadline; a button the client holds is released when it goes.
// Env: CDP_URL, TOKEN, PAGE. Sync points: the driver takes and releases
// control, and at "down" kills this process.
import { chromium } from 'playwright-core';
import { step, sync, result, attempt, env, done } from './lib.mjs';

const browser = await chromium.connectOverCDP(env('CDP_URL'), { headers: { Authorization: `Bearer ${env('TOKEN')}` }, timeout: 30000 });
const page = browser.contexts()[0].pages()[0];
await page.goto(env('PAGE') + '/hold');
const out = {};

// 1. The driver has taken control: the click waits for the release.
await sync('ready-wait');
let t0 = Date.now();
step('clicking');
out.waited = await attempt(() => page.mouse.click(200, 200));
out.waitedMs = Date.now() - t0;
step('clicked', out);

// 2. The driver has taken control again and keeps it: the click fails at
// the input deadline.
await sync('ready-deadline');
t0 = Date.now();
out.deadline = await attempt(() => page.mouse.click(200, 200));
out.deadlineMs = Date.now() - t0;
step('deadline', out);

// 3. Control is free: hold the button down and let the driver kill us.
await sync('ready-hold');
await page.mouse.move(200, 200);
await page.mouse.down();
result(out);
await sync('down');
done();
