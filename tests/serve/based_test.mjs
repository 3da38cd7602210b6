// recur serve with a Based model (tests/based/tiny: BaseConv, Taylor linear attention and a
// sliding window, read from pytorch_model.bin, the built-in tokenizer given with --tokenizer):
// 16 requests at once get the bytes each gets alone, and a conversation continued from its kept
// state equals one request over the whole text. Usage: node based_test.mjs path/to/recur SOURCE_DIR
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { check, finish, sameBytesBatched, startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const src = path.resolve(process.argv[3] ?? ".");
const KEY = "sk-recur-based-test";
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-based-serve-"));
const dir = path.join(tmp, "based-tiny");
// The .bin alone, as the hub publishes it (no safetensors beside it, no tokenizer).
for (const f of ["config.json", "pytorch_model.bin"])
  cpSync(path.join(src, "tests/based/tiny", f), path.join(dir, f));

const server = await startServe(recur, ["-m", dir, "--tokenizer", path.join(src, "models/kjv"), "--threads", "2",
                                         "--keep-alive", "1", "--api-key", KEY]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 });
const MODEL = "based-tiny";

await check("16 requests at once get the bytes each gets alone (greedy and seeded, with logprobs)", async () => {
  const prompts = ["And it came to pass", "In the beginning", "The LORD is my shepherd", "Blessed are"];
  const requests = [];
  for (let i = 0; i < 16; i++)
    requests.push({ model: MODEL, prompt: prompts[i % 4].repeat(1 + (i % 3) * 3), max_tokens: 8 + (i * 5) % 17,
                    temperature: i % 2 ? 0.9 : 0, seed: 7 + i, logprobs: 2, return_token_ids: true,
                    ignore_eos: true });
  await sameBytesBatched(client, server.url, KEY, requests);
});

await check("a continued conversation equals one request over the whole text", async () => {
  const first = await client.completions.create({ model: MODEL, prompt: "And God said", max_tokens: 6,
                                                  temperature: 0, return_token_ids: true, ignore_eos: true });
  const next = await client.completions.create({ model: MODEL, prompt: [5, 17, 99], max_tokens: 6, temperature: 0,
                                                 previous_response_id: first.id, return_token_ids: true,
                                                 ignore_eos: true });
  const ids = [...first.choices[0].prompt_token_ids, ...first.choices[0].token_ids, 5, 17, 99];
  const whole = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: 6, temperature: 0,
                                                  return_token_ids: true, ignore_eos: true });
  assert.deepEqual(next.choices[0].token_ids, whole.choices[0].token_ids);
});

server.kill("SIGTERM");
assert.equal(await server.exited, 0);
rmSync(tmp, { recursive: true, force: true });
finish("recur serve with a Based model");
