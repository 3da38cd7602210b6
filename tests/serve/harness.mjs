// What the serve tests share: named checks that report and count failures, and starting
// recur serve on a free port.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";

let failures = 0;

export async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}\n${e.stack ?? e}`);
  }
}

export function fail(message) {
  failures++;
  console.log(`FAIL ${message}`);
}

// Exits 1 after the checks if any failed.
export function finish(what) {
  if (failures) {
    console.log(`${failures} check(s) failed`);
    process.exit(1);
  }
  console.log(`${what}: every check passed`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `recur serve ARGS --port 0` and resolves, once it says where it listens, to the child
// process with `url` and `exited` (a promise of its exit code, or its signal's name). Its
// standard error is kept for the message if it exits first or does not start within 30 s.
export function startServe(recur, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(recur, ["serve", ...args, "--port", "0"], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    const timer = setTimeout(() => reject(new Error(`recur serve did not start:\n${log}`)), 30000);
    child.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on (http:\/\/[^ ]+)/);
      if (m && !child.url) {
        clearTimeout(timer);
        child.url = m[1];
        resolve(child);
      }
    });
    child.log = () => log;  // what it wrote to standard error so far
    child.exited = new Promise((r) => child.on("exit", (code, sig) => r(code ?? sig)));
    // A server that exits before it listens has said why: no need to wait out the 30 s.
    // ("close" comes after its standard error has been read to the end.)
    child.on("close", (code, sig) => {
      if (child.url) return;
      clearTimeout(timer);
      reject(new Error(`recur serve exited (${code ?? sig}) before it listened:\n${log}`));
    });
    child.on("error", reject);
  });
}

// A counter of the server's /metrics (Bearer `key`).
export async function metric(url, key, name) {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${key}` } })).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
  assert.ok(m, `metric ${name} missing`);
  return Number(m[1]);
}

// What a completion's bytes are: its text, token ids and logprobs.
export const outcome = (r) => JSON.stringify({ text: r.choices[0].text, ids: r.choices[0].token_ids,
                                               logprobs: r.choices[0].logprobs });

// Sends the requests one at a time, then all at once: the server must batch them (more than 4
// rows a step) and give each the bytes it got alone.
export async function sameBytesBatched(client, url, key, requests) {
  const alone = [];
  for (const r of requests) alone.push(await client.completions.create(r));
  const rows0 = await metric(url, key, "recur_batch_rows_total"), steps0 = await metric(url, key, "recur_batch_steps_total");
  const together = await Promise.all(requests.map((r) => client.completions.create(r)));
  const rows = (await metric(url, key, "recur_batch_rows_total")) - rows0;
  const steps = (await metric(url, key, "recur_batch_steps_total")) - steps0;
  assert.ok(rows / steps > 4, `the requests were batched (${rows} rows in ${steps} steps)`);
  for (let i = 0; i < requests.length; i++) assert.equal(outcome(together[i]), outcome(alone[i]), `request ${i}`);
}
