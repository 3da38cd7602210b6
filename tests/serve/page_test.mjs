// recur serve's chat page in a real browser: Debian's chromium driven by playwright-core (npm).
// The built-in model with a chat template of ours behind an API key: the page asks for the
// key, a typed message streams its reply, the status line shows tokens/s, the second turn is
// served from the first one's kept state (cached tokens), and "New conversation" starts again.
// A screenshot goes to the test's output folder. Then the built-in model as served with no
// arguments chats on the page with its own template, and a model with no template at all has the
// page say so at load, with nothing to send.
//
//   node tests/serve/page_test.mjs RECUR SOURCE_DIR OUTPUT_DIR
import { cpSync, mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium } from "playwright-core";
import { check, fail, finish, startServe } from "./harness.mjs";

const [recur, src, outDir] = process.argv.slice(2);
if (!recur || !src || !outDir) fail("usage: node page_test.mjs RECUR SOURCE_DIR OUTPUT_DIR");
const browserPath = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));
if (!browserPath) fail("no chromium (apt-get install chromium)");
const KEY = "page-test-key";
const tmp = mkdtempSync(path.join(tmpdir(), "recur-page-"));
const model = path.join(tmp, "kjv");
cpSync(path.join(src, "models", "kjv"), model, { recursive: true });
// This test's template instead of the built-in model's own (which would come first).
rmSync(path.join(model, "chat_template.jinja"));
rmSync(path.join(model, "generation_config.json"));
writeFileSync(path.join(model, "tokenizer_config.json"), JSON.stringify({
  eos_token: "<|endoftext|>",
  chat_template: "{% for m in messages %}{% if m.role == 'user' %}Question: {{ m.content }}\nAnswer:" +
                 "{% else %}{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}",
}));

const server = await startServe(recur, ["-m", model, "--threads", "1", "--api-key", KEY]);
const browser = await chromium.launch({ executablePath: browserPath, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  // Everything the page loads comes from the server: no outside fetch.
  const outside = [];
  page.on("request", (r) => { if (!r.url().startsWith(server.url)) outside.push(r.url()); });

  await check("the page asks for the API key, and with it names the model and its state", async () => {
    await page.goto(server.url + "/");
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("API key"));
    await page.fill("#key", KEY);
    await page.dispatchEvent("#key", "change");
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("state"));
    const info = await page.textContent("#model");
    if (!/model kjv; each conversation's state: [0-9.]+ MiB at any length/.test(info)) fail(`model line: ${info}`);
  });

  const turn = async (text, n) => {
    await page.fill("#input", text);
    await page.press("#input", "Enter");
    await page.waitForFunction((k) => document.querySelectorAll(".msg.assistant").length === k &&
      document.getElementById("status").textContent.includes("tokens/s"), n, { timeout: 60000 });
    await page.waitForFunction(() => !document.getElementById("send").disabled);
    return { reply: (await page.locator(".msg.assistant").nth(n - 1).textContent()),
             status: await page.textContent("#status") };
  };

  await check("a message streams its reply, and the status shows its speed", async () => {
    await page.fill("#temperature", "0");
    await page.fill("#max", "24");
    const { reply, status } = await turn("Who begat Enos?", 1);
    if (!reply.trim()) fail("an empty reply");
    if (!/^24 tokens at [0-9.]+ tokens\/s; prompt [0-9]+ tokens, 0 of them from the kept state$/.test(status))
      fail(`status after the first turn: ${status}`);
  });

  await check("the second turn continues the conversation from its kept state", async () => {
    const { reply, status } = await turn("And what did the LORD say?", 2);
    if (!reply.trim()) fail("an empty second reply");
    const m = status.match(/prompt ([0-9]+) tokens, ([0-9]+) of them from the kept state/);
    if (!m || Number(m[2]) <= 0 || Number(m[2]) >= Number(m[1])) fail(`status after the second turn: ${status}`);
    const shot = path.join(outDir, "chat_page.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`page_test: screenshot ${shot}`);
  });

  await check("New conversation starts again, and the page made no outside request", async () => {
    await page.click("#new");
    if ((await page.locator(".msg").count()) !== 0) fail("messages left after New conversation");
    const { status } = await turn("Who begat Enos?", 1);
    if (!status.includes("0 of them from the kept state")) fail(`a new conversation used a kept state: ${status}`);
    if (outside.length) fail(`requests outside the server: ${outside.join(", ")}`);
    if (errors.length) fail(`errors in the page: ${errors.join("; ")}`);
  });

  await check("the built-in model, served with no arguments, chats on the page", async () => {
    const builtin = await startServe(recur, ["--threads", "1"]);
    try {
      const p = await browser.newPage();
      const posts = [];
      p.on("request", (r) => { if (r.method() === "POST") posts.push(r.url()); });
      await p.goto(builtin.url + "/");
      await p.waitForFunction(() => document.getElementById("model").textContent.includes("state"));
      await p.fill("#temperature", "0");
      await p.fill("#max", "24");
      await p.fill("#input", "Who begat Enos?");
      await p.press("#input", "Enter");
      await p.waitForFunction(() => document.getElementById("status").textContent.includes("tokens/s"), null, { timeout: 60000 });
      const reply = await p.locator(".msg.assistant").first().textContent();
      if (!/[A-Za-z]/.test(reply)) fail(`the built-in model's reply: '${reply}'`);
      if (reply.includes("\n")) fail(`the reply goes past its line: '${reply}'`);
      if (await p.locator(".msg.error").count()) fail(`an error: ${await p.locator(".msg.error").first().textContent()}`);
      if (posts.length !== 1) fail(`${posts.length} POST requests for one message`);
      posts.length = 0;
      // Its reply ends at the end of its line (generation_config.json's stop_strings): with seed 1
      // (the same reply everywhere) before 200 tokens, the newline not part of it.
      const r = await p.evaluate(async () => (await fetch("/v1/chat/completions", { method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "Who begat Enos?" }], seed: 1, max_tokens: 200 }) })).json());
      const line = r.choices[0].message.content;
      if (r.choices[0].finish_reason !== "stop" || line.includes("\n") || !/[A-Za-z]/.test(line) ||
          r.usage.completion_tokens >= 200)
        fail(`the seeded reply did not end at its line: ${JSON.stringify(r)}`);
      console.log(`page_test: the built-in model replied '${reply}', and with seed 1 '${line}'`);
      await p.close();
    } finally {
      builtin.kill("SIGTERM");
      await builtin.exited;
    }
  });

  await check("a reply inside a thought shows as reasoning, dimmed apart from the reply's text", async () => {
    // A template whose generation prompt opens a thought: the reply, King James text that never
    // writes </think>, is all reasoning_content.
    const thinking = path.join(tmp, "thinking");
    cpSync(model, thinking, { recursive: true });
    writeFileSync(path.join(thinking, "tokenizer_config.json"), JSON.stringify({
      eos_token: "<|endoftext|>",
      chat_template: "{% for m in messages %}{% if m.role == 'user' %}Question: {{ m.content }}\n" +
                     "{% else %}{{ m.content }}{{ eos_token }}\n\n{% endif %}{% endfor %}" +
                     "{% if add_generation_prompt %}Answer: <think>\n{% endif %}",
    }));
    const server3 = await startServe(recur, ["-m", thinking, "--threads", "1"]);
    try {
      const p = await browser.newPage();
      await p.goto(server3.url + "/");
      await p.waitForFunction(() => document.getElementById("model").textContent.includes("state"));
      await p.fill("#temperature", "0");
      await p.fill("#max", "16");
      await p.fill("#input", "Who begat Enos?");
      await p.press("#input", "Enter");
      await p.waitForFunction(() => document.getElementById("status").textContent.includes("tokens/s"), null, { timeout: 60000 });
      const thought = p.locator(".msg.assistant .thought");
      const shown = await thought.isVisible(), said = await thought.textContent();
      const reply = await p.locator(".msg.assistant > div").nth(1).textContent();
      const style = await thought.evaluate((e) => getComputedStyle(e).fontStyle);
      if (!shown || !/[A-Za-z]/.test(said)) fail(`no reasoning shown: '${said}'`);
      if (reply !== "") fail(`text outside the thought: '${reply}'`);
      if (style !== "italic") fail(`the reasoning is not set apart (font-style ${style})`);
      await p.close();
    } finally {
      server3.kill("SIGTERM");
      await server3.exited;
    }
  });

  await check("a model with no chat template: the page says so at load and sends nothing", async () => {
    const plain = path.join(tmp, "plain");
    cpSync(model, plain, { recursive: true });
    rmSync(path.join(plain, "tokenizer_config.json"));
    const server2 = await startServe(recur, ["-m", plain, "--threads", "1"]);
    try {
      const p = await browser.newPage();
      const posts = [];
      p.on("request", (r) => { if (r.method() === "POST") posts.push(r.url()); });
      await p.goto(server2.url + "/");
      await p.waitForSelector("#no-chat");
      const text = await p.textContent("#no-chat");
      if (!/cannot chat here: .*no chat template .*: start recur serve with --chat-template FILE, or send text to \/v1\/completions$/.test(text))
        fail(`the page's message: ${text}`);
      if (!(await p.isDisabled("#input")) || !(await p.isDisabled("#send"))) fail("the input is still enabled");
      await p.click("#new");  // a new conversation keeps the message
      if ((await p.locator("#no-chat").count()) !== 1) fail("the message is gone after New conversation");
      if (posts.length) fail(`requests sent: ${posts.join(", ")}`);
      await p.close();
    } finally {
      server2.kill("SIGTERM");
      await server2.exited;
    }
  });
} finally {
  await browser.close();
  server.kill("SIGTERM");
  await server.exited;
  rmSync(tmp, { recursive: true, force: true });
}
finish("the chat page in chromium");
