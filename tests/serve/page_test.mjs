// recur serve's chat page in a real browser: Debian's chromium driven by playwright-core (npm).
// The built-in model with a chat template of ours behind an API key: the page asks for the
// key, a typed message streams its reply, the status line shows tokens/s, the second turn is
// served from the first one's kept state (cached tokens), and "New conversation" starts again.
// A screenshot goes to the test's output folder.
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
} finally {
  await browser.close();
  server.kill("SIGTERM");
  await server.exited;
  rmSync(tmp, { recursive: true, force: true });
}
finish("the chat page in chromium");
