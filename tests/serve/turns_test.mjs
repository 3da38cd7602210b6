// A thinking model's turns continued from a checkpoint, through the official openai client: a
// random Qwen3.5-architecture model (Gated DeltaNet and attention layers) served with Qwen3.5's
// own template (tests/fixtures/published/qwen3.5-4b), thinking on. That template drops an earlier
// reply's reasoning when the next turn renders it (the reply was generated after `<think>\n`;
// rendered again it is `<|im_start|>assistant\n` + its content), so the next prompt does not
// extend the state kept after the reply, and without checkpoints the turn prefilled everything.
// The server also keeps the state at the end of each prompt's last message: the next turn
// starts there (cached_tokens is exactly where the previous prompt's generation prompt began),
// and its reply has the bytes of the same request sent whole to a second server.
// The tokenizer is the chat tests' byte-level one (chat_fixture.mjs): ids read back as text.
// Usage: node turns_test.mjs path/to/recur path/to/tests/fixtures
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { writeChatTokenizer } from "./chat_fixture.mjs";
import { check, finish, startServe } from "./harness.mjs";

const recur = path.resolve(process.argv[2] ?? "build/release/tools/recur");
const fixtures = path.resolve(process.argv[3] ?? "tests/fixtures");
const tmp = mkdtempSync(path.join(os.tmpdir(), "recur-turns-serve-"));
const dir = path.join(tmp, "qwen35");
const IM_START = 128;

execFileSync(recur, ["make-model", dir, "--arch", "qwen35", "--seed", "5", "--vocab", "131", "--hidden", "64",
                     "--layers", "4", "--heads", "4", "--attn-kv-heads", "2", "--gdn-k-heads", "2",
                     "--intermediate", "64"], { stdio: ["ignore", "ignore", "inherit"] });
writeChatTokenizer(dir, false);
copyFileSync(path.join(fixtures, "published/qwen3.5-4b/chat_template.jinja"), path.join(dir, "chat_template.jinja"));
writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ eos_token: "<|im_end|>", bos_token: null }));

// The server under test keeps two checkpoints per conversation, and every state in its directory
// store (no memory for them: all but the newest go to a file, and are read back from it); the
// reference one keeps no checkpoints and no prompt index, and is only ever sent whole
// conversations (no previous_response_id): every reply from scratch.
const [server, reference] = await Promise.all([
  startServe(recur, ["-m", dir, "--threads", "1", "--max-checkpoints", "2", "--memory", "0", "--state-dir",
                     path.join(tmp, "states")]),
  startServe(recur, ["-m", dir, "--threads", "1", "--max-checkpoints", "0", "--prompt-index", "0"]),
]);
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
const whole = new OpenAI({ baseURL: `${reference.url}/v1`, apiKey: "none", maxRetries: 0 });
const base = { model: "qwen35", temperature: 0, max_tokens: 12, return_token_ids: true };

const same = (a, b, what) => {
  assert.deepEqual(a.choices[0].token_ids, b.choices[0].token_ids, `${what}: the reply's ids`);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content, `${what}: the content`);
  assert.equal(a.choices[0].message.reasoning_content, b.choices[0].message.reasoning_content,
               `${what}: the reasoning`);
  assert.deepEqual(a.choices[0].prompt_token_ids, b.choices[0].prompt_token_ids, `${what}: the prompt's ids`);
};
const cached = (r) => r.usage.prompt_tokens_details.cached_tokens;
// Where a prompt's generation prompt (`<|im_start|>assistant\n<think>\n`) begins: the end of its
// last whole message.
const lastMessageEnd = (r) => r.choices[0].prompt_token_ids.lastIndexOf(IM_START);
const reply = (r) => ({ role: "assistant", content: r.choices[0].message.content,
                        reasoning_content: r.choices[0].message.reasoning_content });

const USERS = ["Name a fjord.", "And a second one, further north?", "Which of the two is deeper?"];
const messages = [{ role: "system", content: "You think before you answer." }];
const turns = [];
await check("three turns, each continued from the checkpoint at the end of the previous prompt, with the bytes of the whole", async () => {
  for (let t = 0; t < USERS.length; t++) {
    messages.push({ role: "user", content: USERS[t] });
    const previous = turns.at(-1);
    const r = await client.chat.completions.create({ ...base, messages: [...messages],
                                                     ...(previous ? { previous_response_id: previous.id } : {}) });
    same(r, await whole.chat.completions.create({ ...base, messages: [...messages] }), `turn ${t + 1}`);
    assert.equal(r.choices[0].prompt_token_ids.at(-1), "\n".charCodeAt(0));
    if (previous) {
      // The template wrote the previous reply again without its thought: the prompt does not
      // extend the state after the reply, ...
      const after = [...previous.choices[0].prompt_token_ids, ...previous.choices[0].token_ids];
      assert.notDeepEqual(r.choices[0].prompt_token_ids.slice(0, after.length), after, "the template kept the reply as generated");
      // ... and the turn starts from the end of the previous prompt's last message.
      assert.equal(cached(r), lastMessageEnd(previous), `turn ${t + 1}: cached_tokens`);
      assert.ok(cached(r) > 0 && cached(r) < r.usage.prompt_tokens);
      console.log(`  turn ${t + 1}: ${r.usage.prompt_tokens} prompt tokens, ${cached(r)} from the checkpoint, ` +
                  `${r.usage.prompt_tokens - cached(r)} prefilled (whole: ${r.usage.prompt_tokens})`);
    } else {
      assert.equal(cached(r), 0);
    }
    turns.push(r);
    messages.push(reply(r));
  }
  // With no memory for states, all but the newest went to the directory (the checks below read
  // turns 2 and 3 back from their files).
  assert.ok(readdirSync(path.join(tmp, "states")).filter((f) => f.endsWith(".state")).length >= 2);
});

await check("the oldest checkpoint goes past --max-checkpoints, and the rest still serve an edited turn", async () => {
  // Turn 3's conversation holds the checkpoints of turns 2 and 3 (turn 1's was dropped): an
  // edited second message needs turn 1's and starts fresh, an edited third one starts at turn 2's.
  const edited2 = [...messages.slice(0, 3), { role: "user", content: "Or one further south?" }];
  const edited3 = [...messages.slice(0, 5), { role: "user", content: "Which is longer?" }];
  const from3 = await client.chat.completions.create({ ...base, messages: edited2, previous_response_id: turns[2].id });
  same(from3, await whole.chat.completions.create({ ...base, messages: edited2 }), "edited second message");
  assert.equal(cached(from3), 0);
  const edit3 = await client.chat.completions.create({ ...base, messages: edited3, previous_response_id: turns[2].id });
  same(edit3, await whole.chat.completions.create({ ...base, messages: edited3 }), "edited third message");
  assert.equal(cached(edit3), lastMessageEnd(turns[1]));
  // Turn 2's conversation still holds turn 1's checkpoint.
  const from2 = await client.chat.completions.create({ ...base, messages: edited2, previous_response_id: turns[1].id });
  same(from2, from3, "edited second message from turn 2");
  assert.equal(cached(from2), lastMessageEnd(turns[0]));
});

await check("the same request again starts from its own prompt's checkpoint", async () => {
  const again = await client.chat.completions.create({ ...base, messages: messages.slice(0, 6), previous_response_id: turns[2].id });
  same(again, turns[2], "turn 3 again");
  assert.equal(cached(again), lastMessageEnd(turns[2]));
});

// A client that resends the whole `messages` each turn and names no response (most OpenAI
// clients): the server finds the longest kept state that begins the prompt by its ids, for the
// same API key's owner only. A server of its own, with two keys, its states in a directory.
const keyed = await startServe(recur, ["-m", dir, "--threads", "1", "--max-checkpoints", "2", "--memory", "0",
                                       "--state-dir", path.join(tmp, "keyed"), "--api-key", "key-a", "--api-key", "key-b"]);
const ownerA = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: "key-a", maxRetries: 0 });
const ownerB = new OpenAI({ baseURL: `${keyed.url}/v1`, apiKey: "key-b", maxRetries: 0 });
const resent = [{ role: "system", content: "You think before you answer." }];
const resentTurns = [];
await check("a conversation resent whole each turn continues from the longest kept state that begins it, with the bytes of the whole", async () => {
  for (let t = 0; t < USERS.length; t++) {
    resent.push({ role: "user", content: USERS[t] });
    const r = await ownerA.chat.completions.create({ ...base, messages: [...resent] });
    const w = await whole.chat.completions.create({ ...base, messages: [...resent] });
    same(r, w, `resent turn ${t + 1}`);
    assert.equal(cached(w), 0, "the reference server (--prompt-index 0) found a state");
    // The longest kept state that begins the prompt is the previous turn's checkpoint (its
    // reply is rendered without the thought, so the state after it does not).
    assert.equal(cached(r), t === 0 ? 0 : lastMessageEnd(resentTurns.at(-1)), `resent turn ${t + 1}: cached_tokens`);
    if (t > 0) assert.ok(cached(r) > 0);
    console.log(`  resent turn ${t + 1}: ${r.usage.prompt_tokens} prompt tokens, ${cached(r)} cached`);
    resentTurns.push(r);
    resent.push(reply(r));
  }
});

await check("another API key's owner resending the same messages finds none of them", async () => {
  const r = await ownerB.chat.completions.create({ ...base, messages: resent.slice(0, 6) });
  same(r, resentTurns[2], "turn 3 from another key");
  assert.equal(cached(r), 0);
  // The owner's own resend of it starts from turn 3's checkpoint (its prompt's own).
  const mine = await ownerA.chat.completions.create({ ...base, messages: resent.slice(0, 6) });
  same(mine, resentTurns[2], "turn 3 again");
  assert.equal(cached(mine), lastMessageEnd(resentTurns[2]));
});

await check("a resend with an edited earlier message starts from the longest kept state still matching", async () => {
  // An edited second message matches turn 1's checkpoint only (kept in turn 1's and turn 2's
  // conversations); an edited third one turn 2's.
  const edited2 = [...resent.slice(0, 3), { role: "user", content: "Or one further south?" }];
  const edited3 = [...resent.slice(0, 5), { role: "user", content: "Which is longer?" }];
  const r2 = await ownerA.chat.completions.create({ ...base, messages: edited2 });
  same(r2, await whole.chat.completions.create({ ...base, messages: edited2 }), "edited second message");
  assert.equal(cached(r2), lastMessageEnd(resentTurns[0]));
  const r3 = await ownerA.chat.completions.create({ ...base, messages: edited3 });
  same(r3, await whole.chat.completions.create({ ...base, messages: edited3 }), "edited third message");
  assert.equal(cached(r3), lastMessageEnd(resentTurns[1]));
  // An edited first message matches nothing kept.
  const edited1 = [resent[0], { role: "user", content: "Name a lake." }];
  const r1 = await ownerA.chat.completions.create({ ...base, messages: edited1 });
  same(r1, await whole.chat.completions.create({ ...base, messages: edited1 }), "edited first message");
  assert.equal(cached(r1), 0);
});

await check("a negative --max-checkpoints is refused, naming it", async () => {
  let out = "";
  try {
    execFileSync(recur, ["serve", "-m", dir, "--max-checkpoints", "-1"], { stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    out = String(e.stderr);
  }
  assert.match(out, /max-checkpoints/);
});

for (const s of [server, reference, keyed]) {
  s.kill("SIGTERM");
  await s.exited;
}
rmSync(tmp, { recursive: true, force: true });
finish("turns");
