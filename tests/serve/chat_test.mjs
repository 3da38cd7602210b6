// recur serve's POST /v1/chat/completions through the official openai client: a small random
// model (from `recur make-model`) beside a tokenizer.json and a tokenizer_config.json with a
// ChatML template written here. Checks the reply (streamed and not: the delta shape, the same
// text), usage and cached_tokens of a continued conversation, a continued conversation's bytes
// against the same conversation sent whole, an edited history starting fresh, the 400s for bad
// messages, the API key, a conversation continued on another replica through Redis, a model
// without a template refused with 400, an RWKV model with the world vocabulary chatting in
// RWKV's world format, and a head of 65,536 rows beside that vocabulary's 3,002 ids whose padding
// rows would win: no reply, token id or logprob names an id past the vocabulary.
// Usage: node chat_test.mjs path/to/recur
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { IM_END, writeChatTokenizer } from "./chat_fixture.mjs";
import { check, finish, sleep, startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const KEY = "sk-recur-chat-test";
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-chat-serve-"));

const chatDir = path.join(tmp, "chatml");
const plainDir = path.join(tmp, "plain");
for (const dir of [chatDir, plainDir])
  execFileSync(recur, ["make-model", dir, "--seed", "5", "--vocab", "131", "--hidden", "64", "--layers", "2"],
               { stdio: ["ignore", "ignore", "inherit"] });
writeChatTokenizer(chatDir, true);
writeChatTokenizer(plainDir, false);

// No prompt index: a conversation sent whole here is the reference, prefilled from scratch (a
// resend found by its ids is turns_test's).
const server = await startServe(recur, ["-m", chatDir, "--threads", "2", "--keep-alive", "1", "--api-key", KEY,
                                        "--prompt-index", "0"]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
const greedy = { model: "chatml", temperature: 0, max_tokens: 24, return_token_ids: true };
const SYSTEM = { role: "system", content: "You are a test." };

// What ChatML makes of `messages`, as the template above writes it.
const chatml = (messages) =>
  messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n";

async function status(fn) {
  try {
    await fn();
  } catch (e) {
    return { status: e.status, message: e.error?.message ?? e.message };
  }
  return { status: 200 };
}

await check("the server found the template's end of turn (<|im_end|>) beside the eos", async () => {
  assert.match(server.log(), /chat: .*a turn ends at <\|endoftext\|> \(130\), <\|im_end\|> \(129\)/);
});

await check("a reply's prompt is the template's rendering, and its usage adds up", async () => {
  const messages = [SYSTEM, { role: "user", content: "Say something." }];
  const r = await client.chat.completions.create({ ...greedy, messages });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(typeof r.choices[0].message.content, "string");
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  // The prompt tokens are the bytes of the rendered text (one token a byte, the special ones one
  // each), which /v1/completions with the same text confirms.
  const plain = await client.completions.create({ model: "chatml", prompt: chatml(messages), max_tokens: 24,
                                                  temperature: 0, return_token_ids: true });
  assert.deepEqual(r.prompt_token_ids, plain.prompt_token_ids);
  assert.deepEqual(r.choices[0].token_ids, plain.choices[0].token_ids);
  assert.equal(r.choices[0].message.content, plain.choices[0].text);
  assert.equal(r.usage.prompt_tokens, plain.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, r.choices[0].token_ids.length);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
});

await check("a streamed reply: the role first, content deltas, the finish reason last, the same text", async () => {
  const messages = [SYSTEM, { role: "user", content: "Stream it." }];
  const whole = await client.chat.completions.create({ ...greedy, messages });
  const chunks = [];
  const stream = await client.chat.completions.create({ ...greedy, messages, stream: true,
                                                         stream_options: { include_usage: true } });
  for await (const c of stream) chunks.push(c);
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  for (const c of chunks) {
    assert.equal(c.object, "chat.completion.chunk");
    assert.equal(c.id, chunks[0].id);
  }
  const usage = chunks.pop();
  assert.deepEqual(usage.choices, []);
  assert.deepEqual(usage.usage, { ...whole.usage });
  assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "" });
  const last = chunks.at(-1).choices[0];
  assert.deepEqual(last.delta, {});
  assert.equal(last.finish_reason, whole.choices[0].finish_reason);
  let text = "";
  for (const c of chunks.slice(1, -1)) {
    assert.equal(c.choices[0].finish_reason, null);
    assert.equal(c.choices[0].delta.role, undefined);
    text += c.choices[0].delta.content;
  }
  assert.equal(text, whole.choices[0].message.content);
});

await check("logprobs come in the chat shape, and top_logprobs needs logprobs", async () => {
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 4, logprobs: true, top_logprobs: 3,
                                                   messages: [{ role: "user", content: "Hi" }] });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.choices[0].token_ids.filter((id) => id !== IM_END && id !== 130).length);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.logprob <= 0);
    // Greedy: the chosen token is the most likely one.
    assert.equal(t.logprob, t.top_logprobs[0].logprob);
  }
  const e = await status(() => client.chat.completions.create({ ...greedy, top_logprobs: 3,
                                                                messages: [{ role: "user", content: "Hi" }] }));
  assert.equal(e.status, 400);
  assert.match(e.message, /top_logprobs/);
});

// Four turns continued from the kept state, each against the same conversation sent whole.
await check("a continued conversation costs its new tokens (cached_tokens) and equals it sent whole", async () => {
  const messages = [SYSTEM];
  let previous = null, keptTokens = 0;
  for (const question of ["First question?", "Second one.", "A third\nwith two lines.", "Last."]) {
    messages.push({ role: "user", content: question });
    const cont = await client.chat.completions.create({ ...greedy, messages,
                                                        ...(previous ? { previous_response_id: previous } : {}) });
    const whole = await client.chat.completions.create({ ...greedy, messages });
    assert.equal(cont.choices[0].message.content, whole.choices[0].message.content);
    assert.deepEqual(cont.choices[0].token_ids, whole.choices[0].token_ids);
    assert.deepEqual(cont.prompt_token_ids, whole.prompt_token_ids);
    assert.equal(cont.usage.prompt_tokens, whole.usage.prompt_tokens);
    assert.equal(whole.usage.prompt_tokens_details.cached_tokens, 0);
    // The kept state holds the last prompt and every token the model wrote after it.
    assert.equal(cont.usage.prompt_tokens_details.cached_tokens, keptTokens);
    if (previous) assert.ok(keptTokens > 0 && keptTokens < cont.usage.prompt_tokens);
    keptTokens = cont.usage.prompt_tokens + cont.usage.completion_tokens;
    previous = cont.id;
    messages.push({ role: "assistant", content: cont.choices[0].message.content });
  }
});

await check("a history that does not extend the kept conversation continues from the checkpoint before the reply, or starts fresh (cached_tokens 0)", async () => {
  const first = await client.chat.completions.create({ ...greedy, messages: [SYSTEM, { role: "user", content: "One" }] });
  const edited = [SYSTEM, { role: "user", content: "One" }, { role: "assistant", content: "not what it said" },
                  { role: "user", content: "Two" }];
  const cont = await client.chat.completions.create({ ...greedy, messages: edited, previous_response_id: first.id });
  const whole = await client.chat.completions.create({ ...greedy, messages: edited });
  // The reply was edited: the checkpoint at the end of the first prompt's last message (before
  // its generation prompt, "<|im_start|>assistant\n": 11 byte-level ids) serves.
  assert.equal(cont.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens - 11);
  assert.deepEqual(cont.choices[0].token_ids, whole.choices[0].token_ids);
  // The user's message edited: nothing kept begins the prompt.
  const rewritten = [SYSTEM, { role: "user", content: "Uno" }];
  const fresh = await client.chat.completions.create({ ...greedy, messages: rewritten, previous_response_id: first.id });
  assert.equal(fresh.usage.prompt_tokens_details.cached_tokens, 0);
  assert.deepEqual(fresh.choices[0].token_ids,
                   (await client.chat.completions.create({ ...greedy, messages: rewritten })).choices[0].token_ids);
  // A conversation the completions API kept holds no tokens to compare: fresh too.
  const plain = await client.completions.create({ model: "chatml", prompt: "x", max_tokens: 2 });
  const after = await client.chat.completions.create({ ...greedy, messages: edited, previous_response_id: plain.id });
  assert.equal(after.usage.prompt_tokens_details.cached_tokens, 0);
  assert.deepEqual(after.choices[0].token_ids, whole.choices[0].token_ids);
});

await check("invalid messages are refused with 400 and the reason", async () => {
  const cases = [
    [{ messages: [] }, /empty/],
    [{}, /'messages' is required/],
    [{ messages: "hello" }, /must be a list/],
    [{ messages: [{ role: "robot", content: "hi" }] }, /role 'robot'/],
    [{ messages: [{ role: "user", content: 3 }] }, /content must be a string or a list of text parts/],
    [{ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, /messages\[0\]\.content\[0\] is of type 'image_url'/],
    [{ messages: [{ role: "user", content: "hi" }, { role: "user", content: [{ type: "text", text: "hear" },
      { type: "input_audio", input_audio: { data: "", format: "wav" } }] }] }, /messages\[1\]\.content\[1\] is of type 'input_audio'/],
    [{ messages: [{ role: "user", content: [{ text: "no type" }] }] }, /messages\[0\]\.content\[0\] must be a text part/],
    [{ messages: [{ content: "hi" }] }, /role must be a string/],
    [{ messages: [{ role: "tool", content: "42", tool_call_id: "a" }] }, /this template has no tool turns/],
    [{ messages: [{ role: "user", content: "hi" }], n: 2 }, /'n' must be 1/],
    [{ messages: [{ role: "user", content: "hi" }], functions: [] }, /unrecognized request argument 'functions'/],
    [{ messages: [{ role: "user", content: "hi" }], max_tokens: 2, max_completion_tokens: 2 }, /not both/],
  ];
  for (const [body, why] of cases) {
    const e = await status(() => client.chat.completions.create({ model: "chatml", ...body }));
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.match(e.message, why, JSON.stringify(body));
  }
  // Text parts reach a template that walks them as the list: this one writes them one after the
  // other, as a string content "ab" (a template that does not walk parts would get "a\nb").
  const parts = await client.chat.completions.create({ ...greedy, messages: [{ role: "user", content: [
    { type: "text", text: "a" }, { type: "text", text: "b" }] }] });
  const string = await client.chat.completions.create({ ...greedy, messages: [{ role: "user", content: "ab" }] });
  assert.deepEqual(parts.prompt_token_ids, string.prompt_token_ids);
  // max_completion_tokens bounds the reply as max_tokens does.
  const short = await client.chat.completions.create({ model: "chatml", temperature: 0, max_completion_tokens: 1,
                                                       ignore_eos: true, messages: [{ role: "user", content: "hi" }] });
  assert.equal(short.usage.completion_tokens, 1);
});

await check("the API key is required", async () => {
  const other = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "sk-wrong", maxRetries: 0 });
  const e = await status(() => other.chat.completions.create({ ...greedy, messages: [{ role: "user", content: "hi" }] }));
  assert.equal(e.status, 401);
  const res = await fetch(`${server.url}/v1/chat/completions`, { method: "POST", body: "{}" });
  assert.equal(res.status, 401);
});

server.kill("SIGTERM");
assert.equal(await server.exited, 0);

await check("a model without a chat template answers 400 naming what is missing", async () => {
  const plain = await startServe(recur, ["-m", plainDir, "--threads", "1", "--keep-alive", "1"]);
  const c = new OpenAI({ baseURL: `${plain.url}/v1`, apiKey: "none", maxRetries: 0 });
  const e = await status(() => c.chat.completions.create({ messages: [{ role: "user", content: "hi" }] }));
  assert.equal(e.status, 400);
  assert.match(e.message, /no chat template/);
  // The completions API still works.
  const r = await c.completions.create({ prompt: "hi", max_tokens: 2, ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 2);
  plain.kill("SIGTERM");
  assert.equal(await plain.exited, 0);
});

async function freePort() {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 30000);
    if (await new Promise((resolve) => {
      const s = net.createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    })) return port;
  }
}

await check("a conversation continues on another replica from the state it kept in Redis", async () => {
  const redisPort = await freePort();
  mkdirSync(path.join(tmp, "redis"));
  execFileSync("redis-server", ["--bind", "127.0.0.1", "--port", String(redisPort), "--dir", path.join(tmp, "redis"),
                                "--save", "", "--appendonly", "no", "--daemonize", "yes",
                                "--pidfile", path.join(tmp, "redis.pid"), "--logfile", path.join(tmp, "redis.log")]);
  const redis = (...args) => execFileSync("redis-cli", ["-p", String(redisPort), ...args]).toString().trim();
  for (let i = 0; i < 100 && (() => { try { return redis("ping") !== "PONG"; } catch { return true; } })(); i++) await sleep(100);
  // No memory: every state goes through Redis.
  const flags = ["-m", chatDir, "--threads", "1", "--keep-alive", "1", "--memory", "0",
                 "--store", `redis://127.0.0.1:${redisPort}/0`];
  const [a, b] = await Promise.all([startServe(recur, flags), startServe(recur, flags)]);
  const ca = new OpenAI({ baseURL: `${a.url}/v1`, apiKey: "none", maxRetries: 0 });
  const cb = new OpenAI({ baseURL: `${b.url}/v1`, apiKey: "none", maxRetries: 0 });
  const messages = [SYSTEM, { role: "user", content: "On the first server." }];
  const first = await ca.chat.completions.create({ ...greedy, messages });
  messages.push({ role: "assistant", content: first.choices[0].message.content },
                { role: "user", content: "And on the second." });
  const cont = await cb.chat.completions.create({ ...greedy, messages, previous_response_id: first.id });
  const whole = await ca.chat.completions.create({ ...greedy, messages });
  assert.equal(cont.usage.prompt_tokens_details.cached_tokens, first.usage.total_tokens);
  assert.deepEqual(cont.choices[0].token_ids, whole.choices[0].token_ids);
  assert.equal(cont.choices[0].message.content, whole.choices[0].message.content);
  for (const server of [a, b]) {
    server.kill("SIGTERM");
    assert.equal(await server.exited, 0);
  }
  try { redis("shutdown", "nosave"); } catch {}
});

await check("an RWKV world-vocabulary model chats in the world format, a turn ending at a blank line", async () => {
  const dir = path.join(tmp, "world");
  execFileSync(recur, ["make-model", dir, "--arch", "rwkv7", "--vocab", "3002", "--hidden", "64", "--layers", "2",
                       "--seed", "3"], { stdio: ["ignore", "ignore", "inherit"] });
  copyFileSync(new URL("../world/rwkv_vocab_v20230424.txt", import.meta.url), path.join(dir, "rwkv_vocab_v20230424.txt"));
  const world = await startServe(recur, ["-m", dir, "--threads", "2", "--keep-alive", "1"]);
  assert.match(world.log(), /chat: RWKV's world format/);
  const c = new OpenAI({ baseURL: `${world.url}/v1`, apiKey: "none", maxRetries: 0 });
  const messages = [{ role: "system", content: " Be brief. " },
                    { role: "user", content: "Hello\n\n\nthere\r\n\r\nfriend" },
                    { role: "assistant", content: "Hi." }, { role: "user", content: "Again" }];
  // The format as RWKV publishes it, written here apart from the server's code.
  const tidy = (t) => t.replace(/\r\n/g, "\n").replace(/\n+/g, "\n").trim();
  const label = { system: "System", user: "User", assistant: "Assistant" };
  const prompt = messages.map((m) => `${label[m.role]}: ${tidy(m.content)}\n\n`).join("") + "Assistant:";
  const body = { temperature: 0, max_tokens: 12, return_token_ids: true };
  const chat = await c.chat.completions.create({ ...body, messages });
  const plain = await c.completions.create({ ...body, prompt, stop: ["\n\n"] });
  assert.deepEqual(chat.prompt_token_ids, plain.prompt_token_ids);
  assert.deepEqual(chat.choices[0].token_ids, plain.choices[0].token_ids);
  assert.equal(chat.choices[0].message.content, plain.choices[0].text);
  assert.equal(chat.choices[0].finish_reason, plain.choices[0].finish_reason);
  const e = await status(() => c.chat.completions.create({ messages: [{ role: "developer", content: "x" }] }));
  assert.equal(e.status, 400);
  assert.match(e.message, /role 'developer'/);
  // enable_thinking: RWKV7-G1's think mode, the prompt ending in "Assistant: <think"; the reply
  // (a random model's, no </think>) is all reasoning. Other variables are refused.
  const think = await c.chat.completions.create({ ...body, messages, chat_template_kwargs: { enable_thinking: true } });
  const thinkPlain = await c.completions.create({ ...body, prompt: prompt + " <think", stop: ["\n\n"] });
  assert.deepEqual(think.prompt_token_ids, thinkPlain.prompt_token_ids);
  assert.equal(think.choices[0].message.content, "");
  assert.ok(think.choices[0].message.reasoning_content.length > 0, JSON.stringify(think.choices[0].message));
  const off = await c.chat.completions.create({ ...body, messages, chat_template_kwargs: { enable_thinking: false } });
  assert.deepEqual(off.prompt_token_ids, plain.prompt_token_ids);
  const e2 = await status(() => c.chat.completions.create({ ...body, messages, chat_template_kwargs: { x: 1 } }));
  assert.equal(e2.status, 400);
  assert.match(e2.message, /only variable is enable_thinking/);
  world.kill("SIGTERM");
  assert.equal(await world.exited, 0);
});

await check("a head of 65,536 rows beside the world vocabulary's 3,002 ids: no reply or logprob names an id past them", async () => {
  // The rows of the vocabulary's ids scaled down, so that unmasked the rows past it hold the
  // highest logits.
  const dir = path.join(tmp, "wide");
  execFileSync(recur, ["make-model", dir, "--arch", "rwkv7", "--vocab", "65536", "--hidden", "64", "--layers", "1",
                       "--heads", "2", "--lora-ranks", "4,3,2,8", "--seed", "3"], { stdio: ["ignore", "ignore", "inherit"] });
  const file = path.join(dir, "model.safetensors");
  const bytes = readFileSync(file);
  const n = Number(bytes.readBigUInt64LE(0));
  const head = JSON.parse(bytes.subarray(8, 8 + n).toString())["lm_head.weight"];
  assert.equal(head.dtype, "F32");
  const cols = head.shape[1];
  for (let i = 8 + n + head.data_offsets[0]; i < 8 + n + head.data_offsets[0] + 3002 * cols * 4; i += 4)
    bytes.writeFloatLE(bytes.readFloatLE(i) / 50, i);
  writeFileSync(file, bytes);
  const ask = async (server, body) => {
    const res = await fetch(`${server.url}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
                                                              body: JSON.stringify(body) });
    assert.equal(res.status, 200, await res.clone().text());
    return res.json();
  };
  // The control: without a tokenizer (recur generate, ids in and out), greedy ids are padding rows.
  const ids = path.join(tmp, "wide-ids");
  writeFileSync(ids, "1\n2\n3\n");
  const control = execFileSync(recur, ["generate", "-m", dir, "--prompt-ids", ids, "--ids", "--greedy", "-n", "8",
                                       "--ignore-eos"], { stdio: ["ignore", "pipe", "ignore"] }).toString();
  assert.ok(control.split("\n").some((id) => Number(id) >= 3002), control);
  copyFileSync(new URL("../world/rwkv_vocab_v20230424.txt", import.meta.url), path.join(dir, "rwkv_vocab_v20230424.txt"));
  const wide = await startServe(recur, ["-m", dir, "--threads", "1", "--keep-alive", "1"]);
  for (const sampling of [{ temperature: 0 }, { temperature: 1, top_p: 1, seed: 4 }, { temperature: 2, top_k: 7, seed: 5 }]) {
    const r = await ask(wide, { prompt: [1, 2, 3], max_tokens: 16, ignore_eos: true, return_token_ids: true, logprobs: 20, ...sampling });
    const ids = r.choices[0].token_ids;
    assert.equal(ids.length, 16);
    assert.ok(ids.every((id) => id < 3002), JSON.stringify(ids));
    for (const top of r.choices[0].logprobs.top_logprobs) {
      const names = Object.keys(top);
      assert.ok(names.every((t) => !/^<\|[0-9]+\|>$/.test(t)), names.join(" "));
      const mass = Object.values(top).reduce((a, lp) => a + Math.exp(lp), 0);
      assert.ok(mass <= 1 + 1e-9, `top_logprobs' mass ${mass}`);
    }
  }
  const chat = await new OpenAI({ baseURL: `${wide.url}/v1`, apiKey: "none", maxRetries: 0 }).chat.completions.create(
    { messages: [{ role: "user", content: "Hello" }], max_tokens: 8, temperature: 1, logprobs: true, top_logprobs: 5 });
  for (const t of chat.choices[0].logprobs.content)
    assert.ok([t, ...t.top_logprobs].every((x) => !/^<\|[0-9]+\|>$/.test(x.token)), JSON.stringify(t));
  wide.kill("SIGTERM");
  assert.equal(await wide.exited, 0);
});

rmSync(tmp, { recursive: true, force: true });
finish("recur serve chat");
