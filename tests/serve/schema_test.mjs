// Structured output in recur serve through the official openai client: response_format
// json_schema and json_object on a small random Qwen3.5-architecture model (`recur make-model --arch qwen35`, with the chat
// tests' ChatML tokenizer). Every reply of a few hundred seeds parses and validates (the oracle
// is python3-jsonschema, tests/grammar/validate.py, and ajv), also when max_tokens cuts the reply; a reply
// has the same bytes alone and in a batch; a schema recur does not cover is a 400 that names the
// keyword and its path; a max_tokens too small for the schema is a 400.
// Usage: node schema_test.mjs path/to/recur
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import Ajv2020 from "ajv/dist/2020.js";
import { writeChatTokenizer } from "./chat_fixture.mjs";
import { check, finish, startServe } from "./harness.mjs";

try {
  execFileSync("/usr/bin/python3", ["-c", "import jsonschema"], { stdio: "ignore" });
} catch {
  console.log("python3 with jsonschema is missing (apt-get install python3-jsonschema)");
  process.exit(process.env.RECUR_REQUIRE_ALL_TESTS ? 1 : 77);
}

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const here = path.dirname(fileURLToPath(import.meta.url));
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-schema-serve-"));
const dir = path.join(tmp, "chatml");
// A random model of Qwen3.5's architecture (Gated DeltaNet layers and a gated attention layer).
execFileSync(recur, ["make-model", dir, "--arch", "qwen35", "--seed", "11", "--vocab", "131", "--hidden", "64",
                     "--layers", "4", "--heads", "4", "--attn-kv-heads", "2", "--gdn-k-heads", "2",
                     "--intermediate", "64"], { stdio: ["ignore", "ignore", "inherit"] });
writeChatTokenizer(dir, true);

const server = await startServe(recur, ["-m", dir, "--threads", "2"]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
const messages = [{ role: "user", content: "Describe a person as JSON." }];

const SCHEMAS = {
  person: {
    type: "object",
    properties: {
      name: { type: "string" },
      age: { type: "integer" },
      email: { type: ["string", "null"] },
      tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
      ok: { type: "boolean" },
    },
    required: ["name", "age", "ok"],
    additionalProperties: false,
  },
  tree: {
    $defs: {
      node: {
        type: "object",
        properties: { v: { type: "number" }, kids: { type: "array", items: { $ref: "#/$defs/node" } } },
        required: ["v"],
        additionalProperties: false,
      },
    },
    $ref: "#/$defs/node",
  },
  pair: { type: "array", prefixItems: [{ type: "string" }, { const: 7 }], items: false, minItems: 2 },
  choice: { anyOf: [{ type: "object", properties: { a: { type: "integer" } }, required: ["a"],
                      additionalProperties: false },
                    { type: "object", properties: { b: { type: "null" } }, required: ["b"],
                      additionalProperties: false }] },
};
const format = (name) => ({ type: "json_schema", json_schema: { name, schema: SCHEMAS[name], strict: true } });
const SEEDS = 60;  // per schema, and as many json_object replies

// ajv (npm), the validator JavaScript applications use, judges every reply too: a second
// opinion beside python3-jsonschema's.
const ajv = new Ajv2020({ strict: false });
function validateAjv(cases) {
  let bad = 0;
  for (const c of cases) {
    let value;
    try { value = JSON.parse(c.text); } catch (e) { bad++; console.log(`     not JSON: ${c.text}`); continue; }
    if (!ajv.validate(c.schema, value)) { bad++; console.log(`     ajv: ${ajv.errorsText()}: ${c.text}`); }
  }
  return bad;
}

function validate(cases) {
  const out = execFileSync("/usr/bin/python3", [path.join(here, "../grammar/validate.py")],
                           { input: JSON.stringify(cases), encoding: "utf8" });
  return out.trim().split("\n").pop();
}

async function replies(name, seeds, options) {
  const rf = name === "json_object" ? { type: "json_object" } : format(name);
  const out = [];
  for (let i = 0; i < seeds.length; i += 16)  // 16 at a time: they share the engine's batches
    out.push(...await Promise.all(seeds.slice(i, i + 16).map((seed) =>
      client.chat.completions.create({ model: "chatml", messages, temperature: 1.0, max_tokens: 30 + (seed % 30),
                                       ...options, seed, response_format: rf }))));
  return out;
}

await check(`every reply of ${SEEDS} seeds per schema parses and validates, closed within max_tokens`, async () => {
  const cases = [];
  let tight = 0, early = 0;
  const seeds = [...Array(SEEDS).keys()];
  for (const name of [...Object.keys(SCHEMAS), "json_object"]) {
    for (const [k, r] of (await replies(name, seeds, {})).entries()) {
      const text = r.choices[0].message.content;
      // The mask closes the value within max_tokens: a reply never ends with "length".
      assert.equal(r.choices[0].finish_reason, "stop", `seed ${k}: ${text}`);
      if (r.usage.completion_tokens === 30 + (k % 30)) tight++;
      else early++;
      if (k < 2) console.log(`     ${name}, seed ${k}: ${text}`);
      cases.push({ schema: name === "json_object" ? { type: "object" } : SCHEMAS[name], text, seed: k });
    }
  }
  const summary = validate(cases);
  const ajvBad = validateAjv(cases);
  console.log(`     ${summary} (python3-jsonschema), ${ajvBad} invalid (ajv); ${tight} closed on the last ` +
              `token max_tokens allowed, ${early} before it`);
  assert.match(summary, / 0 invalid$/);
  assert.equal(ajvBad, 0);
  assert.ok(tight > 0 && early > 0, "both endings are exercised");
});

await check("a reply has the same bytes alone and in a batch", async () => {
  const batched = await replies("person", [101, 102, 103, 104, 105, 106, 107, 108], { max_tokens: 40 });
  for (const [i, seed] of [101, 104, 108].entries()) {
    const alone = await client.chat.completions.create({ model: "chatml", messages, temperature: 1.0,
                                                         max_tokens: 40, seed, response_format: format("person") });
    assert.equal(alone.choices[0].message.content, batched[[0, 3, 7][i]].choices[0].message.content);
  }
});

await check("a streamed reply's deltas join into the reply sent whole", async () => {
  const request = { model: "chatml", messages, temperature: 1.0, max_tokens: 50, seed: 77,
                    response_format: format("tree") };
  const whole = await client.chat.completions.create(request);
  let text = "";
  for await (const chunk of await client.chat.completions.create({ ...request, stream: true }))
    text += chunk.choices[0]?.delta?.content ?? "";
  assert.equal(text, whole.choices[0].message.content);
  JSON.parse(text);
});

await check("a schema with a keyword recur does not enforce is a 400 naming it and its path", async () => {
  const bad = { type: "object", properties: { n: { type: "integer", minimum: 3 } } };
  await assert.rejects(
    client.chat.completions.create({ model: "chatml", messages, max_tokens: 20,
                                     response_format: { type: "json_schema", json_schema: { name: "x", schema: bad } } }),
    (e) => e.status === 400 && /#\/properties\/n\/minimum/.test(e.error.message) && /'minimum'/.test(e.error.message));
  await assert.rejects(
    client.chat.completions.create({ model: "chatml", messages, max_tokens: 20, response_format: { type: "yaml" } }),
    (e) => e.status === 400 && /response_format/.test(e.error.message));
});

await check("a max_tokens too small for the schema's shortest value is a 400", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "chatml", messages, max_tokens: 5, response_format: format("person") }),
    (e) => e.status === 400 && e.error.param === "max_tokens" && /shortest value takes 29 bytes/.test(e.error.message));
});

await check("/v1/completions takes response_format too", async () => {
  const r = await client.completions.create({ model: "chatml", prompt: "JSON:", max_tokens: 40, temperature: 1.0,
                                             seed: 3, response_format: { type: "json_object" } });
  assert.equal(typeof JSON.parse(r.choices[0].text), "object");
  assert.equal(r.choices[0].text[0], "{");
});

server.kill("SIGTERM");
await server.exited;
rmSync(tmp, { recursive: true, force: true });
finish("recur serve structured output");
