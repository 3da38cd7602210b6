// Replicas of recur serve behind nginx, sharing conversations through Redis, started exactly as
// deploy/start.sh starts them (on loopback, free ports), under two different forced instruction
// sets. Checks: a conversation whose turns alternate between the replicas gives the bytes of
// the same conversation on one replica; a replica killed mid-conversation loses nothing that
// was acknowledged; while Redis is down, continuing a conversation the replica does not hold is
// a 503 that says so, new conversations still run, and everything recovers when Redis is back;
// a corrupt or truncated state in Redis is refused. Usage: node replicas_test.mjs path/to/recur
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { createHmac } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { check, fail, finish, sleep } from "./harness.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const MODEL = "recur-kjv";

// A free base port with the next few free too.
async function freePorts(n) {
  for (;;) {
    const base = 20000 + Math.floor(Math.random() * 30000);
    const ok = await Promise.all([...Array(n).keys()].map((i) => new Promise((resolve) => {
      const s = net.createServer();
      s.once("error", () => resolve(false));
      s.listen(base + i, "127.0.0.1", () => s.close(() => resolve(true)));
    })));
    if (ok.every(Boolean)) return base;
  }
}

// Two instruction sets: AVX2 and the baseline on x86-64 when the CPU has AVX2, else the best one
// and the baseline.
const isas = execFileSync(recur, ["isa", "--available"]).toString().trim().split(/\s+/);
const pair = isas.includes("avx2") ? ["avx2", "scalar"] : [isas[0], "scalar"];

await check("Redis down at start: a clear error, exit 1; a bad address: exit 2", async () => {
  const closed = await freePorts(1);
  const down = spawnSync(recur, ["serve", "--port", "0", "--store", `redis://127.0.0.1:${closed}/0`], { encoding: "utf8" });
  assert.equal(down.status, 1);
  assert.match(down.stderr, new RegExp(`Redis at redis://127.0.0.1:${closed}/0 cannot be reached: Connection refused`));
  const bad = spawnSync(recur, ["serve", "--port", "0", "--store", "http://127.0.0.1:6379"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--store 'http:\/\/127.0.0.1:6379': not a redis:\/\/ address/);
});

const dir = mkdtempSync(path.join(os.tmpdir(), "recur-replicas-"));
// The replicas require a key, given to each by deploy/start.sh.
const KEY = "sk-recur-replicas-3f9d0c2b7a";
writeFileSync(path.join(dir, "keys"), `${KEY}\n`);
const base = await freePorts(3);
const redisPort = await freePorts(1);
const start = spawnSync("bash", [path.join(root, "deploy/start.sh"), dir, "--replicas", "2", "--port", String(base),
                                 "--redis-port", String(redisPort), "--recur", recur,
                                 "--replica-env", `RECUR_ISA=${pair[0]}`, "--replica-env", `RECUR_ISA=${pair[1]}`,
                                 "--api-key-file", path.join(dir, "keys"),
                                 "--", "--keep-alive", "1"],
                        { encoding: "utf8" });
if (start.status !== 0) {
  console.log(`deploy/start.sh failed:\n${start.stdout}${start.stderr}`);
  process.exit(1);
}
console.log(start.stdout.trim(), `(replica-1 ${pair[0]}, replica-2 ${pair[1]})`);
const client = (port) => new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: KEY, maxRetries: 0 });
const lb = client(base), one = client(base + 1), two = client(base + 2);
const redis = (...args) => execFileSync("redis-cli", ["-p", String(redisPort), ...args]).toString().trim();
const pid = (name) => Number(readFileSync(path.join(dir, `${name}.pid`), "utf8"));

const params = { model: MODEL, max_tokens: 12, temperature: 0.9, seed: 5, logprobs: 2, return_token_ids: true };
const outcome = (r) => JSON.stringify({ text: r.choices[0].text, ids: r.choices[0].token_ids,
                                        logprobs: r.choices[0].logprobs });
const turns = ["And God said", ", Let there", " be light", ": and there", " was light"];

// One conversation through `c` (or through `pick(i)` per turn), with each turn's instance.
async function conversation(pick, upTo = turns.length) {
  const out = [];
  let previous;
  for (let i = 0; i < upTo; i++) {
    const { data, response } = await pick(i).completions.create(
      { ...params, prompt: turns[i], ...(previous ? { previous_response_id: previous } : {}) }).withResponse();
    out.push({ outcome: outcome(data), instance: response.headers.get("x-recur-instance"), id: data.id });
    previous = data.id;
  }
  return out;
}

try {
  let reference;
  await check(`turns alternating between the replicas (${pair.join(" and ")}) give the bytes of one replica`, async () => {
    reference = await conversation(() => one);
    assert.ok(reference.every((t) => t.instance === "replica-1"));
    const alternating = await conversation(() => lb);
    const instances = alternating.map((t) => t.instance);
    for (let i = 1; i < instances.length; i++) assert.notEqual(instances[i], instances[i - 1], `round robin: ${instances}`);
    for (let i = 0; i < turns.length; i++) assert.equal(alternating[i].outcome, reference[i].outcome, `turn ${i + 1}`);
    // And on replica 2 alone, the other instruction set.
    const other = await conversation(() => two);
    for (let i = 0; i < turns.length; i++) assert.equal(other[i].outcome, reference[i].outcome, `turn ${i + 1} on replica 2`);
  });

  await check("a corrupt or truncated state in Redis, or another model's, is refused, never loaded", async () => {
    const good = redis("--raw", "STRLEN", `recur:conversation:${reference[0].id}`);
    assert.ok(Number(good) > 1000, `state of ${good} bytes`);
    // Under the key's owner tag (store.h's header), so that the replica gets as far as the state.
    const tag = createHmac("sha256", "recur serve conversation owner v1").update(KEY).digest();
    execFileSync("redis-cli", ["-p", String(redisPort), "-x", "SET", "recur:conversation:cmpl-corrupt"],
                 { input: Buffer.concat([Buffer.from("recurcv1"), Buffer.from([tag.length]), tag, Buffer.from("not a state at all")]) });
    await assert.rejects(one.completions.create({ ...params, prompt: "x", previous_response_id: "cmpl-corrupt" }),
      (e) => e.status === 409 && /not a recur state/.test(e.message));
    // The real state cut short, under another id: read by the other replica, which has not cached it.
    execFileSync("bash", ["-c", `redis-cli -p ${redisPort} --raw GETRANGE recur:conversation:${reference[0].id} 0 999 | head -c 1000 | redis-cli -p ${redisPort} -x SET recur:conversation:cmpl-truncated`]);
    await assert.rejects(two.completions.create({ ...params, prompt: "x", previous_response_id: "cmpl-truncated" }),
      (e) => e.status === 409 && /truncated|too short|bytes/.test(e.message));
    // A replica of another model on the same Redis refuses this model's conversations.
    const stranger = spawn(recur, ["serve", "--port", "0", "--random-model", "--threads", "1",
                                   "--store", `redis://127.0.0.1:${redisPort}/0`, "--api-key", KEY],
                           { stdio: ["ignore", "ignore", "pipe"] });
    try {
      const url = await new Promise((resolve, reject) => {
        let log = "";
        stranger.stderr.on("data", (d) => {
          log += d;
          const m = log.match(/listening on (http:\/\/[^ ]+)/);
          if (m) resolve(m[1]);
        });
        stranger.on("exit", () => reject(new Error(log)));
      });
      const other = new OpenAI({ baseURL: `${url}/v1`, apiKey: KEY, maxRetries: 0 });
      await assert.rejects(other.completions.create({ prompt: "x", max_tokens: 2, previous_response_id: reference[0].id }),
        (e) => e.status === 409 && /saved from another model/.test(e.message));
    } finally {
      stranger.kill("SIGTERM");
    }
  });

  await check("Redis down: a 503 that says so for a conversation the replica does not hold, new ones run, then recovery", async () => {
    const first = await one.completions.create({ ...params, prompt: "In the beginning" });  // in Redis and in replica 1
    redis("SHUTDOWN");  // the append-only file keeps what was written
    await sleep(200);
    await assert.rejects(two.completions.create({ ...params, prompt: " God", previous_response_id: first.id }),
      (e) => e.status === 503 && /cannot be continued now/.test(e.message) && /Redis/.test(e.message));
    const fresh = await two.completions.create({ ...params, prompt: "Blessed are" });  // runs; its state waits
    assert.equal(fresh.choices[0].token_ids.length, 12);
    const local = await one.completions.create({ ...params, prompt: " God", previous_response_id: first.id });
    assert.equal(local.choices[0].token_ids.length, 12);  // replica 1 holds it in memory
    execFileSync("redis-server", ["--bind", "127.0.0.1", "--port", String(redisPort), "--dir", path.join(dir, "redis"),
                                  "--appendonly", "yes", "--save", "", "--daemonize", "yes",
                                  "--pidfile", path.join(dir, "redis.pid"), "--logfile", path.join(dir, "redis.log")]);
    // Recovery by itself: the state written while Redis was down reaches it, and replica 2 reads
    // the one it could not.
    let recovered = false;
    for (let i = 0; i < 50 && !recovered; i++) {
      await sleep(200);
      recovered = redis("EXISTS", `recur:conversation:${fresh.id}`) === "1";
    }
    assert.ok(recovered, "the waiting state was written after Redis came back");
    const again = await two.completions.create({ ...params, prompt: " God", previous_response_id: first.id });
    assert.equal(outcome(again), outcome(local));
    const other = await one.completions.create({ ...params, prompt: " the poor", previous_response_id: fresh.id });
    assert.equal(other.choices[0].token_ids.length, 12);
  });

  await check("a replica killed mid-conversation loses nothing acknowledged: the next turn runs on the other", async () => {
    const before = await conversation(() => lb, 3);
    const victim = before[2].instance;  // the replica that acknowledged the last turn
    process.kill(pid(victim), "SIGKILL");
    await sleep(100);
    let previous = before[2].id;
    for (let i = 3; i < turns.length; i++) {
      const { data, response } = await lb.completions.create(
        { ...params, prompt: turns[i], previous_response_id: previous }).withResponse();
      assert.notEqual(response.headers.get("x-recur-instance"), victim);
      assert.equal(outcome(data), reference[i].outcome, `turn ${i + 1} after the kill`);
      previous = data.id;
    }
  });
} finally {
  const stop = spawnSync("bash", [path.join(root, "deploy/stop.sh"), dir], { encoding: "utf8" });
  if (stop.status !== 0) fail(`deploy/stop.sh: ${stop.stdout}${stop.stderr}`);
  rmSync(dir, { recursive: true, force: true });
}
finish("recur serve replicas");
