// tool_choice "required" and a named function in recur serve, through the official openai
// client: a random model's reply is held to one call in the template's own format, so that it
// always comes back as tool_calls with finish_reason "tool_calls", to an allowed tool, with
// arguments that validate against the tool's parameters (python3-jsonschema,
// tests/grammar/validate.py). Qwen3.5's template (XML calls; with thinking on, the thought runs
// first) and Qwen3's (JSON inside <tool_call>), the chat tests' byte-level tokenizer, a few dozen
// seeds each; the same bytes alone and in a batch; a named function not in tools is a 400.
// Usage: node tool_choice_test.mjs path/to/recur path/to/tests/fixtures
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { writeChatTokenizer } from "./chat_fixture.mjs";
import { check, finish, startServe } from "./harness.mjs";

try {
  execFileSync("/usr/bin/python3", ["-c", "import jsonschema"], { stdio: "ignore" });
} catch {
  console.log("python3 with jsonschema is missing (apt-get install python3-jsonschema)");
  process.exit(process.env.RECUR_REQUIRE_ALL_TESTS ? 1 : 77);
}

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const fixtures = path.resolve(process.argv[3] ?? "tests/fixtures");
const here = path.dirname(fileURLToPath(import.meta.url));
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-tool-choice-"));

function makeModel(name, template) {
  const dir = path.join(tmp, name);
  execFileSync(recur, ["make-model", dir, "--seed", "5", "--vocab", "131", "--hidden", "64", "--layers", "2"],
               { stdio: ["ignore", "ignore", "inherit"] });
  writeChatTokenizer(dir, false);
  copyFileSync(template, path.join(dir, "chat_template.jinja"));
  writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|im_end|>", bos_token: null }));
  return dir;
}
const qwen35 = makeModel("qwen35", path.join(fixtures, "published/qwen3.5-4b/chat_template.jinja"));
const qwen3 = makeModel("qwen3", path.join(fixtures, "templates/llama.cpp/Qwen-Qwen3-0.6B.jinja"));
// One server per model (serve holds one), both started up front.
const servers = { qwen35: await startServe(recur, ["-m", qwen35, "--threads", "1"]),
                  qwen3: await startServe(recur, ["-m", qwen3, "--threads", "1"]) };
const clients = Object.fromEntries(Object.entries(servers).map(([name, s]) =>
  [name, new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 })]));
const create = (request) => clients[request.model].chat.completions.create(request);

const TOOLS = [
  { type: "function", function: { name: "search", description: "Search the web", parameters: {
    type: "object", properties: { q: { type: "string" }, n: { type: "integer" }, safe: { type: "boolean" } },
    required: ["q", "n"] } } },
  { type: "function", function: { name: "weather", parameters: {
    type: "object",
    properties: { unit: { type: "string", enum: ["celsius", "fahrenheit"] }, city: { type: "string" },
                  at: { type: "object", properties: { lat: { type: "number" }, lon: { type: "number" } },
                        required: ["lat", "lon"], additionalProperties: false },
                  days: { type: "array", items: { type: "integer" }, maxItems: 3 } },
    required: ["city", "unit", "at", "days"] } } },
  { type: "function", function: { name: "now" } },
];
const messages = [{ role: "user", content: "What's the weather in Oslo?" }];
const SEEDS = 24;

function validate(cases) {
  const out = execFileSync("/usr/bin/python3", [path.join(here, "../grammar/validate.py")],
                           { input: JSON.stringify(cases), encoding: "utf8" });
  return out.trim().split("\n").pop();
}

async function replies(request, seeds) {
  const out = [];
  for (let i = 0; i < seeds.length; i += 12)  // 12 at a time: they share the engine's batches
    out.push(...await Promise.all(seeds.slice(i, i + 12).map((seed) =>
      create({ messages, tools: TOOLS, temperature: 1.0, max_tokens: 240 + (seed % 40), ...request, seed }))));
  return out;
}

// Every reply is one call to an allowed tool whose arguments validate; returns how many had a thought.
function expectCalls(rs, allowed, cases) {
  let thoughts = 0;
  for (const [k, r] of rs.entries()) {
    const c = r.choices[0];
    const shown = JSON.stringify(c.message);
    assert.equal(c.finish_reason, "tool_calls", `seed ${k}: ${shown}`);
    assert.equal(c.message.tool_calls?.length, 1, `seed ${k}: ${shown}`);
    assert.ok(!c.message.content, `seed ${k}: ${shown}`);
    const call = c.message.tool_calls[0];
    assert.ok(allowed.includes(call.function.name), `seed ${k}: ${shown}`);
    const tool = TOOLS.find((t) => t.function.name === call.function.name);
    cases.push({ schema: tool.function.parameters ?? { type: "object", additionalProperties: false },
                 text: call.function.arguments, seed: k });
    if (c.message.reasoning_content) thoughts++;
  }
  return thoughts;
}

const seeds = [...Array(SEEDS).keys()];
const NO_THINK = { chat_template_kwargs: { enable_thinking: false } };
for (const [model, label, variants] of [
  ["qwen35", "Qwen3.5's XML calls", [["thinking", {}], ["no thinking", NO_THINK]]],
  ["qwen3", "Qwen3's JSON in <tool_call>", [["", NO_THINK]]],
]) {
  await check(`${label}: every reply of ${SEEDS} seeds is one valid call, "required" and named`, async () => {
    const cases = [];
    let thoughts = 0, names = new Set();
    for (const [what, extra] of variants) {
      const required = await replies({ model, tool_choice: "required", ...extra }, seeds);
      thoughts += expectCalls(required, ["search", "weather", "now"], cases);
      for (const r of required) names.add(r.choices[0].message.tool_calls[0].function.name);
      const named = await replies({ model, tool_choice: { type: "function", function: { name: "weather" } }, ...extra },
                                  seeds);
      thoughts += expectCalls(named, ["weather"], cases);
      if (what) console.log(`     ${what}: ${JSON.stringify(named[0].choices[0].message)}`);
    }
    const summary = validate(cases);
    console.log(`     ${summary}; tools called: ${[...names].join(", ")}; ${thoughts} with a thought`);
    assert.match(summary, / 0 invalid$/);
    assert.ok(names.size > 1, "required picks among the tools");
    if (model === "qwen35") assert.ok(thoughts > 0, "with thinking on, the thought comes first");
  });
}

await check("a call has the same bytes alone and in a batch", async () => {
  for (const model of ["qwen35", "qwen3"]) {
    const request = { model, tool_choice: "required", ...(model === "qwen3" ? NO_THINK : {}) };
    const batched = await replies(request, [201, 202, 203, 204, 205, 206]);
    for (const i of [0, 3, 5]) {
      const alone = await create({ messages, tools: TOOLS, temperature: 1.0,
                                                           max_tokens: 240 + ((201 + i) % 40), ...request, seed: 201 + i });
      // The call's id names the request; everything else is the same.
      const strip = (m) => JSON.stringify({ ...m, tool_calls: m.tool_calls.map((t) => ({ ...t, id: undefined })) });
      assert.equal(strip(alone.choices[0].message), strip(batched[i].choices[0].message));
    }
  }
});

await check("what cannot be honoured is a 400 naming the field", async () => {
  for (const [body, param, pattern] of [
    [{ tool_choice: { type: "function", function: { name: "fly" } } }, "tool_choice", /'fly', which is not in 'tools'/],
    [{ tool_choice: "required", tools: undefined }, "tool_choice", /needs 'tools'/],
    [{ tool_choice: "required", response_format: { type: "json_object" } }, "tool_choice", /not both/],
    [{ tool_choice: "required", tools: [{ type: "function", function: { name: "x", parameters: {
      type: "object", properties: { v: { anyOf: [{ type: "integer" }] } }, required: ["v"] } } }] }, "tools", /give it a "type"/],
    [{ tool_choice: "required", tools: [{ type: "function", function: { name: "x", parameters: {
      type: "object", properties: { v: { type: "integer", minimum: 3 } }, required: ["v"] } } }] }, "tools", /minimum/],
    [{ tool_choice: "required", max_tokens: 5 }, "max_tokens", /shortest tool call/],
  ]) {
    let e = { status: 200 };
    try {
      await create({ model: "qwen35", messages, tools: TOOLS, max_tokens: 60, ...body });
    } catch (err) {
      e = { status: err.status, param: err.error?.param, message: err.error?.message ?? err.message };
    }
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.equal(e.param, param, e.message);
    assert.match(e.message, pattern);
  }
});

for (const s of Object.values(servers)) {
  s.kill("SIGTERM");
  await s.exited;
}
rmSync(tmp, { recursive: true, force: true });
finish("tool_choice_test");
