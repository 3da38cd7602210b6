// The reference for recur's tokenizer: Hugging Face's tokenizers library (its native Node
// addon) encodes and decodes hard texts with real tokenizer.json files, and with variants of them
// that use the other components recur reads. test_tokenizer compares recur's results with what
// this writes.
//
//   node oracle.mjs OUT_DIR [EXTRA_TOKENIZER.json ...]
//
// OUT_DIR receives expected.json and the variant tokenizer files it names.
import fs from 'node:fs';
import path from 'node:path';
import { Tokenizer } from 'tokenizers';

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
const files = {
  llama2: packaged('tokenizer-llama2'),
  llama3: packaged('tokenizer-llama3_1'),
  qwen3: packaged('tokenizer-qwen3'),
  gemma3: packaged('tokenizer-gemma3'),
  gpt4o: packaged('tokenizer-gpt4o'),
};
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
  out.tokenizers.push({ name, file: path.resolve(file), cases });
  console.error(`oracle: ${name}: ${cases.length} texts`);
}
fs.writeFileSync(path.join(outDir, 'expected.json'), JSON.stringify(out));
