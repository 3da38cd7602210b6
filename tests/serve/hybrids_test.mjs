// recur serve's /v1/chat/completions with the Mamba-2 and short-convolution families (issue 44),
// random models from `recur make-model` with the chat tests' byte-level tokenizer
// (chat_fixture.mjs): plain Mamba-2 (no published template of one was found: the fixture's
// ChatML one), a Granite 4.0-H hybrid (Mamba-2 and attention layers) with Granite
// 4.0-H-Micro's published template and LFM2 (gated short convolutions and attention) with
// LFM2.5-1.2B-Instruct's (tests/fixtures/published), and Nemotron-H (Mamba-2, attention and MLP
// blocks) and Falcon-H1 (attention beside Mamba-2 in every layer) with the fixture's ChatML one. For each: the template renders the
// messages into the prompt's ids, the reply streams (role, content deltas, finish reason) with the
// text of the reply sent whole, the server reports the state a new conversation takes and
// whether it grows (/v1/models), and a longer conversation holds exactly the attention layers' KV
// cache more (Mamba-2: nothing more).
// Usage: node hybrids_test.mjs path/to/recur path/to/tests/fixtures
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { execFileSync } from "node:child_process";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { IM_END, writeChatTokenizer } from "./chat_fixture.mjs";
import { check, finish, metric, startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const fixtures = path.resolve(process.argv[3] ?? "tests/fixtures");
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-hybrids-serve-"));
const KEY = "sk-recur-hybrids-test";

// The text each template gives the messages (a system turn first), and its ids under the
// fixture's tokenizer: one per ASCII byte, ChatML's specials after them (Granite's markers are
// not in it, so they are bytes too).
const chatml = (messages) =>
  messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join("") + "<|im_start|>assistant\n";
const granite = (messages) =>
  messages.map((m) => `<|start_of_role|>${m.role}<|end_of_role|>${m.content}<|end_of_text|>\n`).join("") +
  "<|start_of_role|>assistant<|end_of_role|>";
const SPECIAL = { "<|im_start|>": 128, "<|im_end|>": IM_END };
const idsOf = (text) => text.split(/(<\|im_start\|>|<\|im_end\|>)/).filter((p) => p)
  .flatMap((p) => SPECIAL[p] !== undefined ? [SPECIAL[p]] : [...p].map((c) => c.charCodeAt(0)));

// Keys and values of 2 kv heads of 16 floats, in each of two attention layers.
const KV_BYTES_PER_TOKEN = 2 * 2 * 2 * 16 * 4;
const families = {
  "mamba2": { args: ["--arch", "mamba2", "--hidden", "64", "--layers", "2"], grows: 0, render: chatml },
  "granite-hybrid": { args: ["--arch", "granitemoehybrid", "--hidden", "64", "--heads", "4", "--attn-kv-heads", "2",
                             "--layer-types", "MAMA", "--multipliers"], grows: KV_BYTES_PER_TOKEN,
                      template: path.join(fixtures, "published/granite-4.0-h-micro/chat_template.jinja"),
                      render: granite },
  "lfm2": { args: ["--arch", "lfm2", "--hidden", "64", "--layers", "4", "--heads", "4", "--attn-kv-heads", "2",
                   "--intermediate", "96"], grows: KV_BYTES_PER_TOKEN,
            template: path.join(fixtures, "published/lfm2.5-1.2b-instruct/chat_template.jinja"), render: chatml },
  // Nemotron-H: one attention layer of 2 kv heads of 16 among Mamba-2 and MLP blocks (no
  // published template of one was found: the fixture's ChatML one).
  "nemotron_h": { args: ["--arch", "nemotron_h", "--hidden", "64", "--heads", "4", "--attn-kv-heads", "2",
                         "--pattern", "M-*M-", "--intermediate", "96"], grows: 2 * 2 * 16 * 4, render: chatml },
  // Falcon-H1: attention beside Mamba-2 in both layers, 2 kv heads of 16 (no published template
  // of one was found: the fixture's ChatML one).
  "falcon_h1": { args: ["--arch", "falcon_h1", "--hidden", "64", "--layers", "2", "--heads", "4",
                        "--attn-kv-heads", "2", "--intermediate", "96"], grows: KV_BYTES_PER_TOKEN,
                 render: chatml },
};
for (const [name, f] of Object.entries(families)) {
  const dir = path.join(tmp, name);
  execFileSync(recur, ["make-model", dir, "--seed", "3", "--vocab", "131", ...f.args],
               { stdio: ["ignore", "ignore", "inherit"] });
  writeChatTokenizer(dir, !f.template);
  if (f.template) {
    copyFileSync(f.template, path.join(dir, "chat_template.jinja"));
    // The fixture's tokenizer has no bos token to give (LFM2.5's template opens with one).
    writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|im_end|>", bos_token: "" }));
  }
}


const greedy = { temperature: 0, return_token_ids: true, ignore_eos: true };
for (const [name, f] of Object.entries(families)) {
  const server = await startServe(recur, ["-m", path.join(tmp, name), "--threads", "1", "--api-key", KEY,
                                          "--max-checkpoints", "0"]);
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
  const messages = [{ role: "system", content: "Answer briefly." }, { role: "user", content: "Who begat Enos?" }];

  await check(`${name}: the template lays the messages out, and the reply streams with the text of one sent whole`, async () => {
    const whole = await client.chat.completions.create({ model: name, messages, max_tokens: 12, ...greedy });
    assert.deepEqual(whole.choices[0].prompt_token_ids, idsOf(f.render(messages)));
    assert.equal(whole.choices[0].token_ids.length, 12);
    const stream = await client.chat.completions.create({ model: name, messages, max_tokens: 12, stream: true, ...greedy });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk.choices[0]);
    // The role first, then content deltas (as many as the engine's steps were flushed in), the
    // finish reason last.
    assert.deepEqual(chunks[0].delta, { role: "assistant", content: "" });
    assert.equal(chunks.at(-1).finish_reason, "length");
    const deltas = chunks.slice(1, -1).map((c) => c.delta.content);
    assert.ok(deltas.length >= 1 && deltas.every((d) => typeof d === "string"), JSON.stringify(chunks));
    assert.equal(deltas.join(""), whole.choices[0].message.content);
  });

  await check(`${name}: /v1/models reports the state of a new conversation and whether it grows`, async () => {
    const model = (await client.models.list()).data[0];
    assert.equal(model.id, name);
    assert.ok(model.recur.state_bytes > 0, `state_bytes ${model.recur.state_bytes}`);
    assert.equal(model.recur.state_grows, f.grows > 0);
    assert.equal(model.recur.chat, true);
  });

  await check(`${name}: a longer conversation holds the attention layers' KV cache more, and nothing more`, async () => {
    const held = async (content) => {
      const b0 = await metric(server.url, KEY, "recur_conversation_bytes");
      const r = await client.chat.completions.create({ model: name, messages: [{ role: "user", content }],
                                                       max_tokens: 2, ...greedy });
      return { bytes: (await metric(server.url, KEY, "recur_conversation_bytes")) - b0, tokens: r.usage.prompt_tokens };
    };
    const short = await held("In the beginning"), long = await held("In the beginning ".repeat(20));
    console.log(`     ${name}: a conversation of ${short.tokens} prompt tokens holds ${short.bytes} bytes, ` +
                `one of ${long.tokens} ${long.bytes}`);
    assert.ok(short.bytes > 0);
    // A chat conversation keeps its token ids with its state (4 bytes each), so that the next
    // turn can tell whether its prompt extends them; the state itself grows by the KV cache.
    assert.equal(long.bytes - short.bytes, (long.tokens - short.tokens) * (4 + f.grows));
  });

  server.kill("SIGTERM");
  assert.equal(await server.exited, 0);
}

rmSync(tmp, { recursive: true, force: true });
finish("recur serve's chat API with Mamba-2, Granite 4.0-H, LFM2 and Nemotron-H");
