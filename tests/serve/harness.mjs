// What the serve tests share: named checks that report and count failures.
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
