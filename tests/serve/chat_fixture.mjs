// The chat tests' tokenizer: byte-level BPE with one token per ASCII byte (ids 0-127) and no
// merges, then ChatML's <|im_start|>, <|im_end|> and <|endoftext|> (128-130); a model for it
// has 131 ids. With no merges, any text the model writes is tokenized again into the very ids
// it wrote, so a kept conversation is a prefix of the next turn's prompt.
import { writeFileSync } from "node:fs";
import path from "node:path";

// A byte-level BPE tokenizer with one token per ASCII byte and no merges, so that any text the
// model writes is tokenized again into the very ids it wrote (what lets a kept conversation be
// a prefix of the next prompt), and ChatML's three special tokens after them.
function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++)
    if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const map = new Map();
  bs.forEach((b, i) => map.set(b, String.fromCodePoint(cs[i])));
  return map;
}
const byteChar = bytesToUnicode();
const vocab = {};
for (let b = 0; b < 128; b++) vocab[byteChar.get(b)] = b;
const SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"];
SPECIAL.forEach((t, i) => { vocab[t] = 128 + i; });
export const IM_END = 129;
const tokenizer = {
  version: "1.0",
  added_tokens: SPECIAL.map((content, i) => ({ id: 128 + i, content, single_word: false, lstrip: false,
                                               rstrip: false, normalized: false, special: true })),
  normalizer: null,
  pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: true },
  post_processor: null,
  decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null,
           end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, vocab, merges: [] },
};
// ChatML; a content given as a list of text parts is walked part by part, as Qwen2-VL's template
// does (so the server gives this template the list, not the joined text).
export const TEMPLATE =
  "{% for message in messages %}" +
  "{% if message.role == 'tool' %}{{ raise_exception('this template has no tool turns') }}{% endif %}" +
  "<|im_start|>{{ message.role }}\n" +
  "{% if message.content is string %}{{ message.content }}" +
  "{% else %}{% for part in message.content %}{{ part.text }}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}" +
  "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";


// Writes tokenizer.json into `dir`, and with `withTemplate` a tokenizer_config.json holding the
// ChatML template above.
export function writeChatTokenizer(dir, withTemplate) {
  writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(tokenizer));
  if (withTemplate)
    writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({
      chat_template: TEMPLATE, eos_token: "<|endoftext|>", bos_token: null,
    }));
}
