// What the serve tests share: named checks that report and count failures, and starting
// recur serve on a free port.
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
// standard error is kept for the message if it does not start within 30 s.
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
    child.exited = new Promise((r) => child.on("exit", (code, sig) => r(code ?? sig)));
    child.on("error", reject);
  });
}
