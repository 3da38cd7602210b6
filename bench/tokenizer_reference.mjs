// Hugging Face's tokenizers library (the native Node addon the tests install in tests/tokenizer)
// on the same tokenizer files and texts as bench_tokenizer: load time, and encode MB/s on one
// thread. Given bench_tokenizer's JSON output, prints both side by side with recur / library.
//
//   build/release/bench/bench_tokenizer --benchmark_format=json > /tmp/recur.json
//   node bench/tokenizer_reference.mjs /tmp/recur.json
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const require = createRequire(path.join(root, 'tests/tokenizer/package.json'));
const { Tokenizer } = require('tokenizers');

const npm = process.env.RECUR_TOKENIZERS || path.join(root, 'tests/tokenizer/node_modules/@lenml');
const families = {
  llama2: path.join(npm, 'tokenizer-llama2/models/tokenizer.json'),
  llama3: path.join(npm, 'tokenizer-llama3_1/models/tokenizer.json'),
  qwen3: path.join(npm, 'tokenizer-qwen3/models/tokenizer.json'),
  gemma3: path.join(npm, 'tokenizer-gemma3/models/tokenizer.json'),
  gpt4o: path.join(npm, 'tokenizer-gpt4o/models/tokenizer.json'),
  kjv: path.join(root, 'models/kjv/tokenizer.json'),
};

function makeText(kind, bytes) {
  if (kind === 'text') {
    const prose = fs.readFileSync(path.join(root, 'models/kjv/heldout.txt'), 'latin1');
    return prose.repeat(Math.ceil(bytes / prose.length)).slice(0, bytes);
  }
  let x = 1, out = '';
  while (out.length < bytes) {
    x = (x * 48271) % 2147483647;
    out += String.fromCharCode(97 + (x % 26));
  }
  return out;
}

const recur = {};
if (process.argv[2]) {
  for (const b of JSON.parse(fs.readFileSync(process.argv[2], 'utf8')).benchmarks) {
    if (b.error_occurred) continue;
    recur[b.name] = b.name.startsWith('BM_Load') ? b.real_time : b.bytes_per_second / 1e6;
  }
}

const rows = [];
const best = async (reps, fn) => {
  let t = Infinity;
  for (let i = 0; i < reps; i++) {
    const a = performance.now();
    await fn();
    t = Math.min(t, performance.now() - a);
  }
  return t;
};
for (const [name, file] of Object.entries(families)) {
  if (!fs.existsSync(file)) continue;
  let tok;
  const loadMs = await best(3, () => { tok = Tokenizer.fromFile(file); });
  rows.push([`BM_Load/${name}`, 'ms', loadMs, recur[`BM_Load/${name}`]]);
  for (const kind of ['text', 'word']) {
    for (const size of [10000, 100000, 1000000]) {
      const text = makeText(kind, size);
      const ms = await best(size >= 1000000 ? 3 : 10, () => tok.encode(text, null, { addSpecialTokens: false }));
      const key = `BM_Encode/${name}/${kind}/${size}`;
      rows.push([key, 'MB/s', size / 1e6 / (ms / 1000), recur[key]]);
    }
  }
}
console.log(`${'benchmark'.padEnd(32)} ${'unit'.padEnd(5)} ${'library'.padStart(9)} ${'recur'.padStart(9)}  recur/library`);
for (const [key, unit, lib, ours] of rows) {
  const ratio = ours === undefined ? '' : unit === 'ms' ? (lib / ours).toFixed(2) + 'x faster' : (ours / lib).toFixed(2) + 'x';
  console.log(`${key.padEnd(32)} ${unit.padEnd(5)} ${lib.toFixed(2).padStart(9)} ${ours === undefined ? '-'.padStart(9) : ours.toFixed(2).padStart(9)}  ${ratio}`);
}
