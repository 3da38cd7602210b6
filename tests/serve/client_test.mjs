// recur serve against the official OpenAI client (npm's `openai`) and raw HTTP: completions,
// streams, continued conversations, errors, batch invariance, limits, disconnects, SIGTERM and
// restart. Usage: node client_test.mjs path/to/recur
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { check, finish, sleep } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const MODEL = "recur-kjv";
// Every server here requires a key, sent as OpenAI's clients send theirs (Authorization: Bearer);
// tests/serve/hostile_test.mjs checks what happens without one.
const KEY = "sk-recur-client-test-5e1b9a7c3d";
const auth = { authorization: `Bearer ${KEY}` };

// Starts `recur serve` on a free port; resolves once it listens.
function serve(args = []) {
  return new Promise((resolve, reject) => {
    // A short keep-alive: each stop waits for the client's idle connections that long.
    const child = spawn(recur, ["serve", "--port", "0", "--threads", "2", "--keep-alive", "1", "--api-key", KEY, ...args],
                        { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    const timer = setTimeout(() => reject(new Error(`recur serve did not start:\n${log}`)), 30000);
    child.stderr.on("data", (d) => {
      log += d;
      const m = log.match(/listening on (http:\/\/[^ ]+)/);
      if (m && !child.url) {
        clearTimeout(timer);
        child.url = m[1];
        child.client = new OpenAI({ baseURL: `${m[1]}/v1`, apiKey: KEY, maxRetries: 0 });
        resolve(child);
      }
    });
    child.exitCode_ = new Promise((r) => child.on("exit", (code, sig) => r(code ?? sig)));
    child.on("error", reject);
    child.log = () => log;
  });
}

async function stop(server) {
  server.kill("SIGTERM");
  return server.exitCode_;
}

async function post(server, body, init = {}) {
  return fetch(`${server.url}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json", ...auth },
    body: typeof body === "string" ? body : JSON.stringify(body), ...init });
}

async function metric(server, name) {
  const text = await (await fetch(`${server.url}/metrics`, { headers: auth })).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
  assert.ok(m, `metric ${name} missing`);
  return Number(m[1]);
}


async function until(what, fn, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await fn()) return;
    await sleep(50);
  }
  throw new Error(`timed out waiting until ${what}`);
}

// What a request produced, for byte-for-byte comparisons.
const outcome = (r) => JSON.stringify({ text: r.choices[0].text, ids: r.choices[0].token_ids,
                                        logprobs: r.choices[0].logprobs,
                                        finish: r.choices[0].finish_reason });

const server = await serve(["--max-batch", "16", "--max-body", "64K", "--read-timeout", "1"]);
const client = server.client;

await check("a completion: the text of `recur generate --greedy`, usage and logprobs", async () => {
  const r = await client.completions.create({ model: MODEL, prompt: "And it came to pass",
                                              max_tokens: 12, temperature: 0, logprobs: 2 });
  const generated = execFileSync(recur, ["generate", "--greedy", "-n", "12", "-p", "And it came to pass"],
                                 { stdio: ["ignore", "pipe", "ignore"] }).toString();
  assert.equal("And it came to pass" + r.choices[0].text + "\n", generated);
  assert.equal(r.object, "text_completion");
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, 12);
  assert.equal(lp.tokens.join(""), r.choices[0].text);
  for (let i = 0; i < 12; i++) {
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 2);
    // Greedy: the chosen token is the most likely one.
    assert.equal(lp.token_logprobs[i], Math.max(...Object.values(lp.top_logprobs[i])));
    assert.ok(lp.token_logprobs[i] < 0);
  }
});

await check("a streamed completion gives the same text in chunks, then usage and [DONE]", async () => {
  const params = { model: MODEL, prompt: "In the beginning", max_tokens: 20, temperature: 0.8, seed: 3 };
  const whole = await client.completions.create(params);
  const stream = await client.completions.create({ ...params, stream: true,
                                                   stream_options: { include_usage: true } });
  let text = "", chunks = 0, finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    if (!chunk.choices.length) continue;
    chunks++;
    text += chunk.choices[0].text;
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].text);
  assert.ok(chunks >= 5, `${chunks} chunks`);
  assert.equal(finish, "length");
  assert.deepEqual(usage, whole.usage);
});

// The reference for a continued conversation: one request whose prompt is every id so far.
let turn1, turn2, reference2;
const continuation = { model: MODEL, max_tokens: 15, temperature: 0.9, seed: 11, return_token_ids: true,
                       logprobs: 1 };
await check("a continued conversation equals one request over all its tokens", async () => {
  turn1 = await client.completions.create({ ...continuation, prompt: "And God said" });
  turn2 = await client.completions.create({ ...continuation, prompt: ", Let there",
                                            previous_response_id: turn1.id });
  const c1 = turn1.choices[0], c2 = turn2.choices[0];
  const all = [...c1.prompt_token_ids, ...c1.token_ids, ...c2.prompt_token_ids];
  reference2 = await client.completions.create({ ...continuation, prompt: all });
  assert.equal(outcome(turn2), outcome(reference2));
  assert.equal(turn2.usage.prompt_tokens, c2.prompt_token_ids.length);  // only the new tokens
  // A third turn continues the second.
  const turn3 = await client.completions.create({ ...continuation, prompt: " be light",
                                                  previous_response_id: turn2.id });
  assert.equal(turn3.choices[0].token_ids.length, 15);
});

await check("a stop sequence ends the text before it, streamed or not; max_tokens 0 keeps the prompt's state", async () => {
  const base = { model: MODEL, prompt: "And it came to pass", max_tokens: 20, temperature: 0 };
  const free = (await client.completions.create(base)).choices[0].text;
  const at = free.indexOf(" said");
  assert.ok(at > 0, free);
  const stopped = await client.completions.create({ ...base, stop: [" said", "zzz"] });
  assert.equal(stopped.choices[0].text, free.slice(0, at));
  assert.equal(stopped.choices[0].finish_reason, "stop");
  const stream = await client.completions.create({ ...base, stop: " said", stream: true });
  let text = "", finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, free.slice(0, at));
  assert.equal(finish, "stop");
  // max_tokens 0: nothing generated, the prompt's state kept; continuing it with no prompt
  // equals the free run.
  const empty = await client.completions.create({ ...base, max_tokens: 0 });
  assert.equal(empty.choices[0].text, "");
  const resumed = await client.completions.create({ model: MODEL, max_tokens: 20, temperature: 0,
                                                    previous_response_id: empty.id });
  assert.equal(resumed.choices[0].text, free);
});

await check("errors: OpenAI's error objects with the right status and a message that says why", async () => {
  await assert.rejects(client.completions.create({ model: MODEL, prompt: "x", max_tokens: -5 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /max_tokens/.test(e.message) &&
           e.error?.param === "max_tokens");
  await assert.rejects(client.completions.create({ model: "gpt-4o", prompt: "x" }),
    (e) => e instanceof OpenAI.NotFoundError && /gpt-4o/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt: "x", previous_response_id: "cmpl-nosuch" }),
    (e) => e.status === 404 && /no such conversation/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt: "x", temperature: "hot" }),
    (e) => e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt: "x", frequency_penalty: 1 }),
    (e) => e.status === 400 && /frequency_penalty/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt: "x", n: 3 }),
    (e) => e.status === 400 && /'n' must be 1/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL, prompt: [1, 99999] }),
    (e) => e.status === 400 && /prompt\[1\] is 99999/.test(e.message));
  const raw = await post(server, "{not json");
  assert.equal(raw.status, 400);
  assert.match((await raw.json()).error.message, /not valid JSON/);
  const big = await post(server, JSON.stringify({ prompt: "x".repeat(70000) }));
  assert.equal(big.status, 413);
  assert.match((await big.json()).error.message, /max-body/);
  const nowhere = await fetch(`${server.url}/v1/embeddings`, { method: "POST", body: "{}", headers: auth });
  assert.equal(nowhere.status, 404);
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
});

await check("16 requests at once get the bytes each gets alone (greedy and seeded, with logprobs)", async () => {
  const prompts = ["And it came to pass", "In the beginning", "The LORD is my shepherd", "Blessed are",
                   "And Moses said", "Thus saith the LORD", "Now the serpent", "Let there be"];
  const requests = [];
  for (let i = 0; i < 16; i++)
    requests.push({ model: MODEL, prompt: prompts[i % 8], max_tokens: 10 + (i * 7) % 23,
                    temperature: i % 2 ? 0.9 : 0, seed: 100 + i, logprobs: 3, return_token_ids: true,
                    ignore_eos: true });
  const alone = [];
  for (const r of requests) alone.push(await client.completions.create(r));
  const rows0 = await metric(server, "recur_batch_rows_total"), steps0 = await metric(server, "recur_batch_steps_total");
  const together = await Promise.all(requests.map((r) => client.completions.create(r)));
  const rows = (await metric(server, "recur_batch_rows_total")) - rows0;
  const steps = (await metric(server, "recur_batch_steps_total")) - steps0;
  assert.ok(rows / steps > 4, `the requests were batched (${rows} rows in ${steps} steps)`);
  for (let i = 0; i < 16; i++) assert.equal(outcome(together[i]), outcome(alone[i]), `request ${i}`);
});

await check("a client that disconnects mid-stream frees its slot at once", async () => {
  const cancelled0 = await metric(server, "recur_requests_cancelled_total");
  const abort = new AbortController();
  const res = await post(server, { prompt: "And", max_tokens: 100000, ignore_eos: true, stream: true },
                         { signal: abort.signal });
  const reader = res.body.getReader();
  for (let i = 0; i < 3; i++) await reader.read();
  abort.abort();
  await until("the request is cancelled", async () =>
    (await metric(server, "recur_requests_cancelled_total")) === cancelled0 + 1 &&
    (await metric(server, "recur_requests_running")) === 0);
});

await check("a client that sends half a request is answered 400 after --read-timeout", async () => {
  const { port, hostname } = new URL(server.url);
  const [ms, answer] = await new Promise((resolve) => {
    const s = net.connect(Number(port), hostname, () => s.write("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"));
    const t0 = Date.now();
    let got = "";
    s.on("data", (d) => {
      got += d;
      const head = got.indexOf("\r\n\r\n"), length = /Content-Length: (\d+)/i.exec(got);
      if (head >= 0 && length && got.length >= head + 4 + Number(length[1])) {
        resolve([Date.now() - t0, got]);
        s.destroy();
      }
    });
    s.on("error", () => {});
    setTimeout(() => { resolve([-1, ""]); s.destroy(); }, 8000);
  });
  assert.ok(ms >= 900 && ms < 5000, `answered after ${ms} ms`);
  assert.match(answer, /^HTTP\/1.1 400/);
  assert.match(answer, /read-timeout/);
});

assert.equal(await stop(server), 0, "SIGTERM: exit 0");

await check("a full queue answers 429 with Retry-After", async () => {
  const small = await serve(["--max-batch", "1", "--queue", "1"]);
  try {
    const body = { prompt: "And", max_tokens: 300, ignore_eos: true };
    const answers = await Promise.all([0, 1, 2, 3].map(async (i) => {
      await sleep(i * 30);
      const r = await post(small, body);
      return { status: r.status, retry: r.headers.get("retry-after"), body: await r.json() };
    }));
    const statuses = answers.map((a) => a.status).sort();
    assert.ok(statuses.includes(429), `statuses ${statuses}`);
    assert.ok(statuses.includes(200), `statuses ${statuses}`);
    for (const a of answers.filter((a) => a.status === 429)) {
      assert.equal(a.retry, "1");
      assert.equal(a.body.error.type, "rate_limit_error");
    }
  } finally {
    assert.equal(await stop(small), 0);
  }
});

await check("SIGTERM finishes the running stream, saves the conversations, and a restart continues them", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "recur-serve-"));
  try {
    let s = await serve(["--state-dir", dir]);
    const t1 = await s.client.completions.create({ ...continuation, prompt: "And God said" });
    assert.equal(outcome(t1), outcome(turn1));
    // A stream in flight when the signal comes still ends normally.
    const res = await post(s, { prompt: "And", max_tokens: 40, stream: true, ignore_eos: true });
    const reader = res.body.getReader();
    await reader.read();
    s.kill("SIGTERM");
    let body = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      body += new TextDecoder().decode(value);
    }
    assert.match(body, /"finish_reason":"length"/);
    assert.match(body, /data: \[DONE\]/);
    assert.equal(await s.exitCode_, 0);
    assert.ok(readdirSync(dir).includes(`${t1.id}.state`), `${readdirSync(dir)}`);
    s = await serve(["--state-dir", dir]);
    const t2 = await s.client.completions.create({ ...continuation, prompt: ", Let there",
                                                   previous_response_id: t1.id });
    assert.equal(outcome(t2), outcome(reference2));
    assert.equal(await stop(s), 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

await check("past --memory, conversations go to --state-dir and continue from there; without it they are gone", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "recur-serve-"));
  try {
    const s = await serve(["--memory", "1", "--state-dir", dir]);  // memory holds only the newest
    const a = await s.client.completions.create({ ...continuation, prompt: "And God said" });
    await s.client.completions.create({ ...continuation, prompt: "In the beginning" });
    assert.ok(readdirSync(dir).includes(`${a.id}.state`), "the older conversation was spilled");
    const next = await s.client.completions.create({ ...continuation, prompt: ", Let there",
                                                     previous_response_id: a.id });
    assert.equal(outcome(next), outcome(reference2));
    assert.equal(await stop(s), 0);
    const forgetful = await serve(["--memory", "1"]);
    const b = await forgetful.client.completions.create({ ...continuation, prompt: "And God said" });
    await forgetful.client.completions.create({ ...continuation, prompt: "In the beginning" });
    await assert.rejects(forgetful.client.completions.create({ ...continuation, prompt: "x", previous_response_id: b.id }),
      (e) => e.status === 404 && /no such conversation/.test(e.message));
    assert.equal(await metric(forgetful, "recur_conversations_dropped_total"), 1);
    assert.equal(await stop(forgetful), 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

finish("recur serve");
