// Shared by the CDP client scripts the Go e2e tests and the bench run
// (test/e2e/cdp_test.go, bench/cdp.go). A script talks to its Go driver
// in lines: "STEP name {json}" when it reached a point, "RESULT {json}" at
// the end; at a sync point it waits for a line on stdin before going on.
import { createInterface } from 'node:readline';

const lines = createInterface({ input: process.stdin });
const waiting = [];
const queued = [];
lines.on('line', (l) => {
  const w = waiting.shift();
  if (w) w(l);
  else queued.push(l);
});

// step reports a point reached, with data.
export function step(name, data = {}) {
  process.stdout.write(`STEP ${name} ${JSON.stringify(data)}\n`);
}

// sync reports a point and waits until the driver says to go on.
export async function sync(name, data = {}) {
  step(name, data);
  const q = queued.shift();
  if (q !== undefined) return q;
  return new Promise((resolve) => waiting.push(resolve));
}

export function result(data) {
  process.stdout.write(`RESULT ${JSON.stringify(data)}\n`);
}

// attempt runs fn and reports its outcome instead of throwing.
export async function attempt(fn) {
  try {
    return { ok: true, value: await fn() };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e).slice(0, 500) };
  }
}

export function env(name) {
  const v = process.env[name];
  if (!v) {
    process.stderr.write(`missing ${name}\n`);
    process.exit(2);
  }
  return v;
}

// done ends the process: the client's socket closes with it, which is
// what a script that ends does to the appliance.
export function done(code = 0) {
  lines.close();
  process.exit(code);
}
