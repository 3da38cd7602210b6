// The figure of docs/chat.md: turn N of a long chat, continued from the kept state of turn N-1
// (previous_response_id) against the same turn sent from scratch. Both must give the same bytes
// (greedy: the same ids and text); the time of each is printed, best of `--repeat` runs.
//
//   node tests/serve/chat_turns.mjs build/release/tools/recur [--turns 10] [--words 150]
//        [--reply 32] [--hidden 512] [--layers 8] [--threads 2] [--repeat 3]
//
// The model is a random one from `recur make-model` (linear_attn, the shape given) with the
// chat tests' byte-level ChatML tokenizer (chat_fixture.mjs): one token per byte, so a turn of
// `--words` words is about 6 tokens a word. Exits 1 if the bytes differ or nothing was cached.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { writeChatTokenizer } from "./chat_fixture.mjs";
import { startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const opt = (name, fallback) => {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 ? Number(process.argv[at + 1]) : fallback;
};
const turns = opt("turns", 10), words = opt("words", 150), reply = opt("reply", 32);
const hidden = opt("hidden", 512), layers = opt("layers", 8), threads = opt("threads", 2), repeat = opt("repeat", 3);

const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-chat-turns-"));
const dir = path.join(tmp, "chatml");
execFileSync(recur, ["make-model", dir, "--seed", "7", "--vocab", "131", "--hidden", String(hidden),
                     "--layers", String(layers)], { stdio: ["ignore", "ignore", "inherit"] });
writeChatTokenizer(dir, true);
// No prompt index: the turn sent whole is prefilled from scratch, not found by its ids.
const server = await startServe(recur, ["-m", dir, "--threads", String(threads), "--keep-alive", "1",
                                        "--prompt-index", "0"]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
const greedy = { temperature: 0, max_tokens: reply, ignore_eos: true, return_token_ids: true };

// A user turn of `words` words, different each turn.
const LEXICON = ["the", "state", "holds", "every", "token", "so", "far", "and", "a", "turn", "costs",
                 "only", "what", "is", "new", "in", "it", "while", "history", "grows"];
const question = (t) => Array.from({ length: words }, (_, i) => LEXICON[(i * 7 + t * 3) % LEXICON.length]).join(" ");

const messages = [{ role: "system", content: "You answer at length." }];
let previous = null, last = null;
for (let t = 1; t < turns; t++) {
  messages.push({ role: "user", content: question(t) });
  const r = await client.chat.completions.create({ ...greedy, messages, ...(previous ? { previous_response_id: previous } : {}) });
  messages.push({ role: "assistant", content: r.choices[0].message.content });
  previous = r.id;
  last = r;
}
messages.push({ role: "user", content: question(turns) });

async function timed(body) {
  const t0 = process.hrtime.bigint();
  const r = await client.chat.completions.create(body);
  return { r, ms: Number(process.hrtime.bigint() - t0) / 1e6 };
}
let cont = null, whole = null;
for (let k = 0; k < repeat; k++) {
  // Each continuation branches from the same kept turn N-1: the same work every time.
  const c = await timed({ ...greedy, messages, previous_response_id: previous });
  const w = await timed({ ...greedy, messages });
  if (!cont || c.ms < cont.ms) cont = c;
  if (!whole || w.ms < whole.ms) whole = w;
}
server.kill("SIGTERM");
await server.exited;
rmSync(tmp, { recursive: true, force: true });

const same = JSON.stringify(cont.r.choices[0].token_ids) === JSON.stringify(whole.r.choices[0].token_ids) &&
             cont.r.choices[0].message.content === whole.r.choices[0].message.content;
const u = cont.r.usage;
console.log(`model: linear_attn, hidden ${hidden}, ${layers} layers, random weights, --threads ${threads}`);
console.log(`turn ${turns}: ${u.prompt_tokens} prompt tokens (${u.prompt_tokens_details.cached_tokens} from turn ${turns - 1}'s kept state), ${u.completion_tokens} generated`);
console.log(`continued from the kept state: ${cont.ms.toFixed(1)} ms (best of ${repeat})`);
console.log(`sent whole, from scratch:      ${whole.ms.toFixed(1)} ms (best of ${repeat}); ${(whole.ms / cont.ms).toFixed(2)}x`);
console.log(`the same bytes: ${same ? "yes" : "NO"} (${u.completion_tokens} token ids and the text)`);
assert.ok(same, "the continued turn differs from the turn sent whole");
assert.equal(u.prompt_tokens_details.cached_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
assert.equal(whole.r.usage.prompt_tokens_details.cached_tokens, 0);
