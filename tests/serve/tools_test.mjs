// recur serve's tool calls and reasoning through the official openai client, with Qwen3.5's own
// template (tests/fixtures/published/qwen3.5-4b) and a small random model.
//
// A random model writes no tool call by itself, so its vocabulary holds one: the chat tests'
// byte-level tokenizer (chat_fixture.mjs) plus one added token, id 131, whose text is a whole
// call in Qwen3.5's XML. The test then looks for a seed with which the model samples that token
// first: the call is written by the model, sampled as any token is, and everything after that (the reply read into tool_calls, the deltas of a
// stream, finish_reason) is the server's own work. With thinking on, the prompt opens a thought
// and the reply is reasoning_content. The prompt tokens are bytes, so the prompt the template
// rendered is read back from prompt_token_ids: tools, an assistant message's calls (arguments
// sent as a JSON string) and a tool result render as Qwen3.5's template writes them.
// Usage: node tools_test.mjs path/to/recur path/to/tests/fixtures
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { writeChatTokenizer } from "./chat_fixture.mjs";
import { check, finish, startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const fixtures = path.resolve(process.argv[3] ?? "tests/fixtures");
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-tools-serve-"));
const dir = path.join(tmp, "qwen");

const CALL = "<tool_call>\n<function=search>\n<parameter=q>\nfjord\n</parameter>\n<parameter=n>\n3\n</parameter>\n" +
             "</function>\n</tool_call>";
const CALL_ID = 131;
const SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"];
execFileSync(recur, ["make-model", dir, "--seed", "7", "--vocab", "132", "--hidden", "64", "--layers", "2"],
             { stdio: ["ignore", "ignore", "inherit"] });
writeChatTokenizer(dir, false);
const tokenizer = JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
tokenizer.added_tokens.push({ id: CALL_ID, content: CALL, single_word: false, lstrip: false, rstrip: false,
                              normalized: false, special: false });
writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizer));
copyFileSync(path.join(fixtures, "published/qwen3.5-4b/chat_template.jinja"), path.join(dir, "chat_template.jinja"));
writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|im_end|>", bos_token: null }));

// The text of ids: one byte each below 128, then the special tokens and the call.
const text = (ids) => ids.map((id) => id < 128 ? String.fromCharCode(id) : id === CALL_ID ? CALL : SPECIAL[id - 128])
                         .join("");

const server = await startServe(recur, ["-m", dir, "--threads", "2"]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
const TOOLS = [{ type: "function", function: { name: "search", description: "Search the web",
  parameters: { type: "object", properties: { q: { type: "string" }, n: { type: "integer" } }, required: ["q"] } } }];
const NO_THINK = { chat_template_kwargs: { enable_thinking: false } };
const base = { model: "qwen", temperature: 0, tools: TOOLS, return_token_ids: true };

async function status(fn) {
  try {
    await fn();
  } catch (e) {
    return { status: e.status, param: e.error?.param, message: e.error?.message ?? e.message };
  }
  return { status: 200 };
}

async function streamed(request) {
  const chunks = [];
  for await (const c of await client.chat.completions.create({ ...request, stream: true })) chunks.push(c);
  const message = { content: "", reasoning_content: "", tool_calls: [] };
  assert.deepEqual(chunks[0].choices[0].delta, { role: "assistant", content: "" });
  for (const c of chunks.slice(1)) {
    const d = c.choices[0].delta;
    message.content += d.content ?? "";
    message.reasoning_content += d.reasoning_content ?? "";
    for (const t of d.tool_calls ?? []) {
      assert.equal(t.index, message.tool_calls.length);
      message.tool_calls.push({ id: t.id, type: t.type, function: t.function });
    }
  }
  return { message, finish_reason: chunks.at(-1).choices[0].finish_reason };
}

await check("the server reads Qwen3.5's template's calls as its XML form", async () => {
  assert.match(server.log(), /tool calls read as qwen-xml/);
});

// A seed with which the model samples the call first (at a high temperature, about one seed in
// 132), and the turn then ends (at the model's own end, or at a stop sequence made of the next
// token's text, which the call's text does not hold). A seeded request samples the same tokens
// every time, streamed or not.
const messages = [{ role: "user", content: "Look up fjords." }];
let found = null;
await check("a seed is found with which the model writes the call", async () => {
  for (let seed = 0; seed < 5000 && !found; seed++) {
    const sampling = { temperature: 50, seed };
    const r = await client.chat.completions.create({ ...base, ...NO_THINK, ...sampling, messages, max_tokens: 2 });
    const ids = r.choices[0].token_ids;
    if (ids[0] !== CALL_ID) continue;
    if (ids.length < 2 || ids[1] >= 128) found = { sampling, stop: undefined };
    else if (!CALL.includes(text([ids[1]])) && text([ids[1]]).trim()) found = { sampling, stop: [text([ids[1]])] };
  }
  assert.ok(found, "no seed in 5000 gives the call first");
});

await check("the call is message.tool_calls, with finish_reason tool_calls, and a stream's deltas add up to it", async () => {
  const request = { ...base, ...NO_THINK, ...found.sampling, messages, max_tokens: 8, stop: found.stop };
  const r = await client.chat.completions.create(request);
  const m = r.choices[0].message;
  assert.equal(m.content, null);
  assert.equal(m.tool_calls.length, 1);
  const call = m.tool_calls[0];
  assert.equal(call.type, "function");
  assert.equal(call.function.name, "search");
  assert.deepEqual(JSON.parse(call.function.arguments), { q: "fjord", n: 3 });  // n typed by the schema
  assert.equal(call.id, `call_${r.id.slice(r.id.indexOf("-") + 1)}_0`);
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  const s = await streamed(request);
  assert.equal(s.finish_reason, "tool_calls");
  assert.equal(s.message.content, "");
  assert.equal(s.message.tool_calls.length, 1);
  assert.deepEqual(s.message.tool_calls[0].function, call.function);
  // tool_choice none: the same reply is text; parallel_tool_calls false keeps the one call.
  const none = await client.chat.completions.create({ ...request, tool_choice: "none" });
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.ok(none.choices[0].message.content.startsWith(CALL));
  assert.equal(none.choices[0].finish_reason, "stop");
  const one = await client.chat.completions.create({ ...request, tool_choice: "auto", parallel_tool_calls: false });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
});

await check("with thinking on, the prompt opens the thought: the reply is reasoning_content, streamed the same", async () => {
  const request = { ...base, messages, max_tokens: 24 };
  const r = await client.chat.completions.create(request);
  assert.ok(text(r.choices[0].prompt_token_ids).endsWith("<|im_start|>assistant\n<think>\n"));
  const m = r.choices[0].message;
  const reply = text(r.choices[0].token_ids.filter((id) => id < 129 || id === CALL_ID));
  if (!reply.includes("</think>")) {
    assert.equal(m.reasoning_content, reply.trim());
    assert.equal(m.content, "");
  }
  const s = await streamed(request);
  assert.equal(s.message.reasoning_content, m.reasoning_content);
  assert.equal(s.message.content, m.content);
  assert.equal(s.finish_reason, r.choices[0].finish_reason);
  // enable_thinking false reached the template: its prompt closes an empty thought.
  const off = await client.chat.completions.create({ ...request, ...NO_THINK, max_tokens: 1 });
  assert.ok(text(off.choices[0].prompt_token_ids).endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
});

await check("a tool round trip renders as Qwen3.5's template writes it: the call's arguments sent as a string", async () => {
  const turns = [...messages,
    { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function",
      function: { name: "search", arguments: JSON.stringify({ q: "fjord", n: 3 }) } }] },
    { role: "tool", tool_call_id: "call_1", content: "Fjords are long, narrow inlets." }];
  const r = await client.chat.completions.create({ ...base, ...NO_THINK, messages: turns, max_tokens: 4 });
  const prompt = text(r.choices[0].prompt_token_ids);
  assert.ok(prompt.includes(`<tools>\n{"type": "function", "function": {"name": "search"`), prompt);
  assert.ok(prompt.includes("<|im_start|>assistant\n<think>\n\n</think>\n\n" + CALL + "<|im_end|>\n"), prompt);
  assert.ok(prompt.includes("<|im_start|>user\n<tool_response>\nFjords are long, narrow inlets.\n</tool_response><|im_end|>\n"));
  const s = await streamed({ ...base, ...NO_THINK, messages: turns, max_tokens: 4 });
  assert.equal(s.message.content, r.choices[0].message.content ?? "");
});

await check("what cannot be honoured is a 400 naming the field", async () => {
  for (const [body, param, pattern] of [
    [{ tool_choice: { type: "function", function: { name: "fly" } } }, "tool_choice", /not in 'tools'/],
    [{ tool_choice: "sometimes" }, "tool_choice", /must be/],
    [{ tools: [{ type: "function", function: {} }] }, "tools", /tools\[0\] must be/],
    [{ tools: { search: 1 } }, "tools", /must be a list/],
    [{ parallel_tool_calls: "yes" }, "parallel_tool_calls", /true or false/],
    [{ chat_template_kwargs: [] }, "chat_template_kwargs", /must be an object/],
    [{ chat_template_kwargs: { messages: [] } }, "chat_template_kwargs", /cannot set 'messages'/],
    [{ reasoning_effort: "max" }, "reasoning_effort", /must be/],
  ]) {
    const e = await status(() => client.chat.completions.create({ ...base, messages, max_tokens: 1, ...body }));
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.equal(e.param, param);
    assert.match(e.message, pattern);
  }
  const bad = [{ role: "user", content: "x" }, { role: "assistant", content: null,
    tool_calls: [{ id: "c", type: "function", function: { name: "search", arguments: "{not json" } }] }];
  const e = await status(() => client.chat.completions.create({ ...base, messages: bad, max_tokens: 1 }));
  assert.equal(e.status, 400);
  assert.match(e.message, /tool_calls\[0\]\.function\.arguments is not JSON/);
  const ok = await status(() => client.chat.completions.create({ ...base, messages, max_tokens: 1, reasoning_effort: "low" }));
  assert.equal(ok.status, 200);
});

server.kill("SIGTERM");
await server.exited;
rmSync(tmp, { recursive: true, force: true });
finish("tools_test");
