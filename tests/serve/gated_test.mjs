// recur serve with the gated and delta-rule models (small random ones from `recur make-model`,
// byte-level: fla's HGRN2, RetNet and a GLA hybrid with a full softmax attention layer and a
// windowed one; RWKV-7; a Qwen3.5 hybrid, three Gated DeltaNet layers and one gated attention
// layer; fla's gated_deltanet; LFM2, gated short convolutions and attention; Mamba-2 and Granite;
// and every other architecture the registry lists that no other test serves, at make-model's
// defaults): 16 requests at once get the bytes each gets alone, a conversation
// continued from its kept state equals one request over the whole text, and the conversation
// store counts the full layer's KV cache, which grows with the conversation: a long hybrid
// conversation holds more bytes than a short one, by exactly that cache (and a Qwen3.5 one by
// its attention layer's), and pushes older
// conversations out of --memory. Usage: node gated_test.mjs path/to/recur
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { check, finish, metric, sameBytesBatched, startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const KEY = "sk-recur-gated-test";
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-gated-serve-"));

// The hybrid: GLA at 0, full attention at 1 (4 heads over 2 kv heads of 16), a window of 8 at 2.
const HYBRID_KV_BYTES_PER_TOKEN = 2 * 2 * 16 * 4;  // keys and values, 2 kv heads of 16 floats
writeFileSync(path.join(tmp, "hybrid.json"), JSON.stringify({
  model_type: "gla", vocab_size: 256, hidden_size: 64, num_hidden_layers: 3, num_heads: 2,
  expand_k: 0.5, expand_v: 1, intermediate_size: 64, tie_word_embeddings: false,
  attn: [{ layers: [1], num_heads: 4, num_kv_heads: 2 }, { layers: [2], num_heads: 4, window_size: 8 }],
}));
// The Qwen3.5 hybrid: Gated DeltaNet at 0-2, gated attention at 3 (4 heads over 2 kv heads of 16).
const QWEN_KV_BYTES_PER_TOKEN = 2 * 2 * 16 * 4;
// LFM2: convolutions at 0 and 2, attention at 1 and 3 (4 heads over 2 kv heads of 16).
const LFM2_KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4;
// The models served, by name: make-model's arguments, where a family's defaults would not do.
const models = {
  "hgrn2": ["--arch", "hgrn2", "--vocab", "256", "--hidden", "64", "--layers", "2", "--expand-ratio", "16", "--intermediate", "64"],
  "retnet": ["--arch", "retnet", "--vocab", "256", "--hidden", "64", "--layers", "2", "--heads", "4", "--intermediate", "64"],
  "gla-hybrid": ["--config", path.join(tmp, "hybrid.json")],
  "rwkv7": ["--arch", "rwkv7", "--vocab", "256", "--hidden", "64", "--layers", "2", "--heads", "2", "--intermediate", "128"],
  "qwen35-hybrid": ["--arch", "qwen35", "--vocab", "256", "--hidden", "64", "--layers", "4", "--heads", "4",
                    "--attn-kv-heads", "2", "--gdn-k-heads", "2", "--intermediate", "64"],
  "gated_deltanet": ["--arch", "gated_deltanet", "--vocab", "256", "--hidden", "64", "--layers", "2", "--heads", "2",
                     "--intermediate", "64"],
  "lfm2": ["--arch", "lfm2", "--vocab", "256", "--hidden", "64", "--layers", "4", "--heads", "4",
           "--attn-kv-heads", "2", "--intermediate", "96"],
  "mamba2": ["--arch", "mamba2", "--vocab", "256", "--hidden", "64", "--layers", "2", "--ssm-groups", "2"],
  "granite-hybrid": ["--arch", "granitemoehybrid", "--vocab", "256", "--hidden", "64", "--heads", "4",
                     "--attn-kv-heads", "2", "--layer-types", "MAMA", "--multipliers"],
  "nemotron_h": ["--arch", "nemotron_h", "--vocab", "256", "--hidden", "64", "--heads", "4",
                 "--attn-kv-heads", "2", "--pattern", "M-*M-", "--intermediate", "96"],
  "falcon_h1": ["--arch", "falcon_h1", "--vocab", "256", "--hidden", "64", "--heads", "4",
                "--attn-kv-heads", "2", "--ssm-groups", "2", "--ssm-rms-norm", "--multipliers"],
};
// The --arch each one is, and the architectures other tests serve.
const archOf = (name) => (models[name].includes("--arch") ? models[name][models[name].indexOf("--arch") + 1] : "gla");
const servedElsewhere = { linear_attn: "client_test.mjs (the built-in model)", based: "based_test.mjs" };
// Every architecture the registry lists (make-model's refusal of an unknown one names them) is
// served: one this table does not name, at make-model's defaults for its family.
const registry = (() => {
  try {
    execFileSync(recur, ["make-model", path.join(tmp, "none"), "--arch", "?"], { stdio: "pipe" });
  } catch (e) {
    const listed = /expected (.*)/.exec(e.stderr.toString());
    if (listed) return listed[1].trim().split(", ");
  }
  throw new Error("make-model --arch ? did not list the registry's architectures");
})();
const named = new Set(Object.keys(models).map(archOf));
for (const arch of registry)
  if (!named.has(arch) && !servedElsewhere[arch])
    models[arch] = ["--arch", arch, "--vocab", "256", "--hidden", "64", "--layers", "2"];
console.log(`     the registry's architectures: ${registry.join(", ")}; served here: ${Object.keys(models).join(", ")}`);
// Granite: two attention layers of 2 kv heads of 16; Nemotron-H: one; Falcon-H1: attention in
// both layers, 2 kv heads of 16.
const growth = { "gla-hybrid": HYBRID_KV_BYTES_PER_TOKEN, "qwen35-hybrid": QWEN_KV_BYTES_PER_TOKEN,
                 "lfm2": LFM2_KV_BYTES_PER_TOKEN,
                 "granite-hybrid": 2 * 2 * 2 * 16 * 4, "nemotron_h": 2 * 2 * 16 * 4,
                 "falcon_h1": 2 * 2 * 2 * 16 * 4 };
for (const [name, args] of Object.entries(models))
  execFileSync(recur, ["make-model", path.join(tmp, name), "--seed", "3", ...args],
               { stdio: ["ignore", "ignore", "inherit"] });

async function start(dir, extra = []) {
  const child = await startServe(recur, ["-m", dir, "--threads", "2", "--keep-alive", "1", "--api-key", KEY, ...extra]);
  child.client = new OpenAI({ baseURL: `${child.url}/v1`, apiKey: KEY, maxRetries: 0 });
  return child;
}
async function stop(server) {
  server.kill("SIGTERM");
  assert.equal(await server.exited, 0);
}
const greedy = { temperature: 0, return_token_ids: true, ignore_eos: true };

for (const name of Object.keys(models)) {
  const server = await start(path.join(tmp, name));
  const client = server.client;
  await check(`${name}: 16 requests at once get the bytes each gets alone (greedy and seeded, with logprobs)`, async () => {
    const prompts = ["And it came to pass", "In the beginning", "The LORD is my shepherd", "Blessed are"];
    const requests = [];
    for (let i = 0; i < 16; i++)
      requests.push({ model: name, prompt: prompts[i % 4].repeat(1 + (i % 3) * 3), max_tokens: 8 + (i * 5) % 17,
                      temperature: i % 2 ? 0.9 : 0, seed: 7 + i, logprobs: 2, return_token_ids: true,
                      ignore_eos: true });
    await sameBytesBatched(client, server.url, KEY, requests);
  });

  await check(`${name}: a continued conversation equals one request over the whole text`, async () => {
    const first = await client.completions.create({ model: name, prompt: "And God said", max_tokens: 6, ...greedy });
    const next = await client.completions.create({ model: name, prompt: [5, 17, 99], max_tokens: 6,
                                                   previous_response_id: first.id, ...greedy });
    const ids = [...first.choices[0].prompt_token_ids, ...first.choices[0].token_ids, 5, 17, 99];
    const whole = await client.completions.create({ model: name, prompt: ids, max_tokens: 6, ...greedy });
    assert.deepEqual(next.choices[0].token_ids, whole.choices[0].token_ids);
  });

  await check(`${name}: the store counts a conversation's state as it is (a full layer's cache grows)`, async () => {
    const bytes = async (prompt) => {
      const b0 = await metric(server.url, KEY, "recur_conversation_bytes");
      await client.completions.create({ model: name, prompt, max_tokens: 2, ...greedy });
      return (await metric(server.url, KEY, "recur_conversation_bytes")) - b0;
    };
    const short = await bytes("In the beginning"), long = await bytes("In the beginning ".repeat(20));
    const more = 20 * 17 - 16;  // tokens the long one has beyond the short one
    console.log(`     ${name}: a conversation of 18 tokens holds ${short} bytes, one of 342 tokens ${long}`);
    if (growth[name])  // the full layer's keys and values, a token at a time
      assert.equal(long - short, more * growth[name],
                   `a long conversation holds ${long} bytes, a short one ${short}`);
    else  // constant state
      assert.equal(long, short, `a long conversation holds ${long} bytes, a short one ${short}`);
  });
  await stop(server);
}

// --memory against the growing cache: room for a few short hybrid conversations, not for one
// long one. The long one pushes the short ones out (none is kept without --state-dir).
await check("gla-hybrid: a long conversation's growing cache pushes others out of --memory", async () => {
  const server = await start(path.join(tmp, "gla-hybrid"), ["--memory", "60000"]);
  try {
    const client = server.client;
    const first = await client.completions.create({ model: "gla-hybrid", prompt: "And God said", max_tokens: 2, ...greedy });
    const held = await metric(server.url, KEY, "recur_conversation_bytes");
    assert.ok(held > 0 && held < 20000, `a short conversation holds ${held} bytes`);
    await client.completions.create({ model: "gla-hybrid", prompt: "And God said ".repeat(30), max_tokens: 2, ...greedy });
    assert.ok((await metric(server.url, KEY, "recur_conversations_dropped_total")) >= 1, "the short conversation was dropped");
    await assert.rejects(client.completions.create({ model: "gla-hybrid", prompt: [5], max_tokens: 1,
                                                     previous_response_id: first.id, ...greedy }),
                         (e) => e.status === 404, "the dropped conversation cannot continue");
  } finally {
    await stop(server);
  }
});

rmSync(tmp, { recursive: true, force: true });
finish("recur serve with gated models");
