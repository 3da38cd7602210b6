// The chat page (page.h). It talks to the server it came from: GET /v1/models for the model's
// name, state size and whether it can chat (if not, the page says why instead of sending), POST /v1/chat/completions with stream and include_usage, each turn naming
// the previous reply's id (previous_response_id) so that the server prefills only the new turn.
#include "serve/page.h"

namespace recur::serve {

const char* const kChatPage = R"PAGE(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>recur chat</title>
<style>
  :root { --fg: #1d1d1f; --muted: #6e6e73; --line: #d2d2d7; --user: #e8f0fe; --bot: #f5f5f7; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--fg); display: flex;
         flex-direction: column; height: 100vh; }
  header { padding: 10px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 16px;
           align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 17px; margin: 0; }
  header .info { color: var(--muted); font-size: 13px; }
  #settings { display: flex; gap: 10px; align-items: center; margin-left: auto; font-size: 13px; }
  #settings input { font: inherit; padding: 3px 6px; border: 1px solid var(--line); border-radius: 6px; }
  #log { flex: 1; overflow-y: auto; padding: 16px; display: flex; flex-direction: column; gap: 10px; }
  .msg { max-width: 80ch; padding: 8px 12px; border-radius: 10px; white-space: pre-wrap;
         word-wrap: break-word; }
  .user { align-self: flex-end; background: var(--user); }
  .assistant { align-self: flex-start; background: var(--bot); }
  .error { align-self: center; color: #b00020; }
  .thought { color: var(--muted); font-style: italic; border-left: 2px solid var(--line);
             padding-left: 8px; margin-bottom: 6px; }
  .calls { font: 13px/1.4 ui-monospace, monospace; margin-top: 6px; }
  footer { border-top: 1px solid var(--line); padding: 10px 16px; }
  #status { color: var(--muted); font-size: 13px; min-height: 1.4em; }
  form { display: flex; gap: 8px; margin-top: 6px; }
  textarea { flex: 1; font: inherit; padding: 8px; border: 1px solid var(--line); border-radius: 8px;
             resize: vertical; min-height: 2.6em; }
  button { font: inherit; padding: 6px 14px; border-radius: 8px; border: 1px solid var(--line);
           background: #fff; cursor: pointer; }
  button.primary { background: #0071e3; color: #fff; border-color: #0071e3; }
  button:disabled { opacity: .5; cursor: default; }
</style>
</head>
<body>
<header>
  <h1>recur chat</h1>
  <span class="info" id="model">connecting...</span>
  <div id="settings">
    <label>API key <input id="key" type="password" size="14" autocomplete="off"></label>
    <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.8" style="width:5em"></label>
    <label>max tokens <input id="max" type="number" min="1" value="256" style="width:6em"></label>
    <button id="new" type="button">New conversation</button>
  </div>
</header>
<main id="log" aria-live="polite"></main>
<footer>
  <div id="status"></div>
  <form id="form">
    <textarea id="input" placeholder="Type a message (Enter sends, Shift+Enter for a new line)"></textarea>
    <button id="send" class="primary" type="submit">Send</button>
  </form>
</footer>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let model = null, messages = [], previousId = null, busy = false, noChat = "";
$("key").value = localStorage.getItem("recur-key") || "";
$("key").addEventListener("change", () => { localStorage.setItem("recur-key", $("key").value); connect(); });

function headers() {
  const h = { "Content-Type": "application/json" };
  if ($("key").value) h.Authorization = "Bearer " + $("key").value;
  return h;
}
function bytes(n) {
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(2) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return n + " bytes";
}
function add(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}
async function connect() {
  const res = await fetch("/v1/models", { headers: headers() });
  if (res.status === 401) { $("model").textContent = "this server needs an API key: enter it above"; return; }
  if (!res.ok) { $("model").textContent = "the server answered " + res.status; return; }
  const m = (await res.json()).data[0];
  model = m.id;
  const state = m.recur && m.recur.state_bytes;
  $("model").textContent = "model " + model + (state ? "; each conversation's state: " + bytes(state) +
    (m.recur.state_grows ? " at the start (a full-attention layer's cache grows)" : " at any length") : "");
  // A model the chat API cannot lay out messages for: say so once, here, instead of sending
  // messages that would each fail.
  noChat = m.recur && m.recur.chat === false ? (m.recur.no_chat || "this model cannot chat") : "";
  $("input").disabled = $("send").disabled = !!noChat;
  showNoChat();
}
function showNoChat() {
  if (!noChat || document.getElementById("no-chat")) return;
  const div = add("error", "This model cannot chat here: " + noChat);
  div.id = "no-chat";
}
function reset() {
  messages = []; previousId = null; $("log").textContent = ""; $("status").textContent = "";
  showNoChat();
}
async function send(text) {
  if (!model) await connect();
  if (!model || noChat) return;
  busy = true; $("send").disabled = true;
  messages.push({ role: "user", content: text });
  add("user", text);
  // The reply's parts: its reasoning (dimmed), its text, and the tool calls it made (as JSON).
  const out = add("assistant", "");
  const thought = document.createElement("div"), said = document.createElement("div"),
        calls = document.createElement("div");
  thought.className = "thought"; calls.className = "calls";
  thought.hidden = calls.hidden = true;
  out.append(thought, said, calls);
  const body = { model, messages, stream: true, stream_options: { include_usage: true },
                 temperature: Number($("temperature").value), max_tokens: Number($("max").value) };
  if (previousId) body.previous_response_id = previousId;
  const t0 = performance.now();
  let first = 0, reply = "", reasoning = "", usage = null, id = null;
  const toolCalls = [];
  try {
    const res = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || ("the server answered " + res.status));
    }
    const reader = res.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let at;
      while ((at = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, at); buffer = buffer.slice(at + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message);
        id = chunk.id || id;
        if (chunk.usage) usage = chunk.usage;
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (!delta) continue;
        if (!first && (delta.content || delta.reasoning_content || delta.tool_calls)) first = performance.now();
        if (delta.reasoning_content) {
          reasoning += delta.reasoning_content;
          thought.textContent = reasoning; thought.hidden = false;
        }
        if (delta.content) {
          reply += delta.content;
          said.textContent = reply;
        }
        for (const call of delta.tool_calls || []) {
          const c = toolCalls[call.index] || (toolCalls[call.index] = { name: "", arguments: "" });
          if (call.function && call.function.name) c.name += call.function.name;
          if (call.function && call.function.arguments) c.arguments += call.function.arguments;
          calls.textContent = toolCalls.map((t) => JSON.stringify(t)).join("\n"); calls.hidden = false;
        }
        $("log").scrollTop = $("log").scrollHeight;
      }
    }
    messages.push({ role: "assistant", content: reply });
    previousId = id;
    const seconds = (performance.now() - (first || t0)) / 1000;
    const n = usage ? usage.completion_tokens : 0;
    const cached = usage && usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : 0;
    $("status").textContent = n + " tokens at " + (n / Math.max(seconds, 1e-3)).toFixed(1) +
      " tokens/s; prompt " + (usage ? usage.prompt_tokens : "?") + " tokens, " + cached +
      " of them from the kept state";
  } catch (e) {
    messages.pop();
    out.remove();
    add("error", String(e.message || e));
  } finally {
    busy = false; $("send").disabled = !!noChat;
  }
}
$("form").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = $("input").value.trim();
  if (!text || busy) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("form").requestSubmit(); }
});
$("new").addEventListener("click", reset);
connect();
</script>
</body>
</html>
)PAGE";

}  // namespace recur::serve
