// Generates tests/data/tokenizer/components.json: small hand-built
// tokenizer.json variants (one per normalizer / pre-tokenizer / model option /
// added-token flag / decoder / post-processor) and, for a set of probe texts,
// the ids and decoded text that Hugging Face `tokenizers` computes for each.
// components_test.cc checks our Tokenizer against every case.
//
// Run (needs node and the npm package `tokenizers`, HF's own bindings; not a
// build dependency — the output is committed):
//   cd /tmp/x && npm install tokenizers@0.23.2 && \
//     NODE_PATH=/tmp/x/node_modules node tests/tokenizer/gen_component_cases.js \
//     > tests/data/tokenizer/components.json
const { Tokenizer } = require('tokenizers');

// ---- vocabularies -------------------------------------------------------
// Char-level vocab (SentencePiece style): printable ASCII, ▁, a few merges,
// byte tokens <0x00>..<0xFF>, <unk>, special tokens.
function spVocab(opts = {}) {
  const vocab = {};
  let id = 0;
  const add = (t) => { if (!(t in vocab)) vocab[t] = id++; };
  ['<unk>', '<s>', '</s>'].forEach(add);
  if (opts.bytes !== false) for (let b = 0; b < 256; b++) add('<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>');
  for (let c = 32; c < 127; c++) add(String.fromCharCode(c));
  ['▁', '\n', '\t', 'é', 'ß', 'ı'].forEach(add);
  const merges = [['▁', 't'], ['h', 'e'], ['▁t', 'he'], ['▁', 'a'], ['a', 'b'], ['ab', 'c'], ['l', 'o'],
    ['lo', 'w'], ['e', 'r'], ['low', 'er'], ['▁', 'low'], ['▁', '▁'], ['1', '2'], ['i', 'n'], ['in', 'g'],
    ['e', 's'], ['es', 't'], ['t', 'h'], ['th', 'e']];
  for (const [a, b] of merges) add(a + b.slice(opts.prefix ? opts.prefix.length : 0));
  return { vocab, merges };
}

// Byte-level vocab (GPT-2 style): the 256 byte characters plus merges.
function bytesToUnicode() {
  const bs = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = {};
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
}
function blVocab() {
  const b2u = bytesToUnicode();
  const vocab = {};
  let id = 0;
  for (let b = 0; b < 256; b++) vocab[b2u[b]] = id++;
  const merges = [['Ġ', 't'], ['h', 'e'], ['Ġt', 'he'], ['Ġ', 'a'], ['l', 'o'], ['lo', 'w'], ['e', 'r'],
    ['low', 'er'], ['Ġ', 'low'], ['Ġ', 'Ġ'], ['1', '2'], ['i', 'n'], ['in', 'g'], ['Ã', '©']];
  for (const [a, b] of merges) vocab[a + b] = id++;
  vocab['<|end|>'] = id++;
  return { vocab, merges };
}

function bpe(v, extra = {}) {
  return Object.assign({ type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
    vocab: v.vocab, merges: v.merges }, extra);
}

function tok({ normalizer = null, pre = null, model, decoder = null, post = null, added = [] }) {
  return { version: '1.0', truncation: null, padding: null, added_tokens: added, normalizer,
    pre_tokenizer: pre, post_processor: post, decoder, model };
}

const sp = spVocab();
const spDecoder = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' },
  { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
const spModel = bpe(sp, { unk_token: '<unk>', byte_fallback: true, fuse_unk: true });
const metaspace = (scheme, split) => ({ type: 'Metaspace', replacement: '▁', prepend_scheme: scheme, split });
const split = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert });
const addedTok = (id, content, f = {}) => Object.assign({ id, content, single_word: false, lstrip: false,
  rstrip: false, normalized: false, special: false }, f);
const bl = blVocab();
const blModel = bpe(bl);
const blTok = (pre, extra = {}) => tok(Object.assign({ pre, model: blModel,
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true } }, extra));

const variants = {};
for (const b of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
  for (const inv of [false, true]) {
    variants[`split_string_${b}_${inv}`] = tok({ pre: split({ String: ' ' }, b, inv), model: spModel, decoder: spDecoder });
    variants[`split_regex_${b}_${inv}`] = tok({ pre: split({ Regex: '[0-9]+|\\s' }, b, inv), model: spModel, decoder: spDecoder });
  }
}
for (const scheme of ['always', 'first', 'never']) {
  for (const s of [true, false]) {
    variants[`metaspace_${scheme}_${s}`] = tok({ pre: metaspace(scheme, s), model: spModel,
      decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, metaspace(scheme, s)] },
      added: [addedTok(1, '<s>', { special: true })] });
  }
}
variants.metaspace_legacy = tok({ pre: { type: 'Metaspace', replacement: '▁', add_prefix_space: true },
  model: spModel, decoder: { type: 'Metaspace', replacement: '▁', add_prefix_space: true } });
variants.bytelevel_prefix_regex = blTok({ type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true });
variants.bytelevel_noprefix_regex = blTok({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true });
variants.bytelevel_noregex = blTok({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false });
variants.bytelevel_added = blTok({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  { added: [addedTok(bl.vocab['<|end|>'], '<|end|>', { special: true })] });
variants.digits_individual = tok({ pre: { type: 'Digits', individual_digits: true }, model: spModel, decoder: spDecoder });
variants.digits_contiguous = tok({ pre: { type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: false }, metaspace('always', true)] }, model: spModel, decoder: spDecoder });
variants.whitespace = tok({ pre: { type: 'Whitespace' }, model: spModel, decoder: spDecoder });
variants.whitespace_split = tok({ pre: { type: 'WhitespaceSplit' }, model: spModel, decoder: spDecoder });
// Normalizers.
for (const n of ['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase']) {
  variants[`norm_${n}`] = tok({ normalizer: { type: n }, pre: metaspace('always', true), model: spModel, decoder: spDecoder });
}
variants.norm_strip = tok({ normalizer: { type: 'Strip', strip_left: true, strip_right: true }, pre: metaspace('always', true), model: spModel, decoder: spDecoder });
variants.norm_strip_right = tok({ normalizer: { type: 'Strip', strip_left: false, strip_right: true }, pre: metaspace('always', true), model: spModel, decoder: spDecoder });
variants.norm_llama = tok({ normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
  model: spModel, decoder: spDecoder, added: [addedTok(1, '<s>', { special: true }), addedTok(2, '</s>', { special: true })],
  post: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } } });
variants.norm_replace_regex = tok({ normalizer: { type: 'Replace', pattern: { Regex: '\\s+' }, content: '▁' }, model: spModel, decoder: spDecoder });
// Model options.
variants.model_no_fallback_unk = tok({ pre: metaspace('always', true), model: bpe(spVocab({ bytes: false }), { unk_token: '<unk>', fuse_unk: false }), decoder: spDecoder });
variants.model_no_fallback_fuse = tok({ pre: metaspace('always', true), model: bpe(spVocab({ bytes: false }), { unk_token: '<unk>', fuse_unk: true }), decoder: spDecoder });
variants.model_no_unk = tok({ pre: metaspace('always', true), model: bpe(spVocab({ bytes: false })), decoder: spDecoder });
variants.model_ignore_merges = tok({ pre: metaspace('always', true), model: bpe(sp, { ignore_merges: true, byte_fallback: true }), decoder: spDecoder });
{
  const v = spVocab();
  v.merges = v.merges.map(([a, b]) => a + ' ' + b);  // legacy string encoding
  variants.model_string_merges = tok({ pre: metaspace('always', true), model: bpe(v, { byte_fallback: true, unk_token: '<unk>' }), decoder: spDecoder });
}
{
  // continuing_subword_prefix / end_of_word_suffix (WordPiece-like BPE).
  const vocab = {};
  let id = 0;
  vocab['<unk>'] = id++;
  for (let c = 33; c < 127; c++) { const s = String.fromCharCode(c); vocab[s] = id++; vocab['##' + s] = id++; vocab[s + '</w>'] = id++; vocab['##' + s + '</w>'] = id++; }
  const merges = [['l', '##o'], ['lo', '##w'], ['##e', '##r</w>'], ['t', '##h'], ['th', '##e</w>']];
  for (const [a, b] of merges) vocab[a + b.slice(2)] = id++;
  variants.model_prefix_suffix = tok({ pre: { type: 'WhitespaceSplit' }, model: bpe({ vocab, merges }, { unk_token: '<unk>', continuing_subword_prefix: '##', end_of_word_suffix: '</w>' }), decoder: null });
}
// Added tokens.
const addedVariants = {
  added_plain: [addedTok(1, '<s>', { special: true }), addedTok(2, 'low', {})],
  added_lstrip: [addedTok(1, '<s>', { special: true, lstrip: true })],
  added_rstrip: [addedTok(1, '<s>', { special: true, rstrip: true })],
  added_lrstrip: [addedTok(1, '<s>', { special: true, lstrip: true, rstrip: true }), addedTok(2, '</s>', { special: true, lstrip: true })],
  added_single_word: [addedTok(2, 'low', { single_word: true }), addedTok(1, '<s>', { special: true })],
  added_normalized: [addedTok(2, 'LOW', { normalized: true }), addedTok(1, '<s>', { special: true, normalized: false })],
  added_longest: [addedTok(1, '<s>', { special: true }), addedTok(2, '<s>x', {}), addedTok(3, 'ab', {})],
};
for (const [name, added] of Object.entries(addedVariants)) {
  variants[name] = tok({ normalizer: name === 'added_normalized' ? { type: 'Lowercase' } : null,
    pre: metaspace('always', true), model: spModel, decoder: spDecoder, added });
}
// Decoders.
variants.dec_strip_both = tok({ pre: metaspace('always', true), model: spModel, decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: '▁', start: 1, stop: 1 }] } });
variants.dec_replace_regex = tok({ pre: metaspace('always', true), model: spModel, decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { Regex: '▁+' }, content: '_' }, { type: 'ByteFallback' }, { type: 'Fuse' }] } });
variants.dec_none = tok({ pre: metaspace('always', true), model: spModel, decoder: null });
variants.post_bert = tok({ pre: metaspace('always', true), model: spModel, decoder: spDecoder, added: [addedTok(1, '<s>', { special: true }), addedTok(2, '</s>', { special: true })],
  post: { type: 'BertProcessing', sep: ['</s>', 2], cls: ['<s>', 1] } });

const texts = [
  'the lower lowest', ' the  lower   ', 'abc abcd ab', '12 345 6789x', 'Hello, world!', 'tabs\tand\nnew lines\n',
  'é e\u0301 ß ẞ ı İ Ǆ ﬁ ①', 'unknown: 日本 😀 ü', '<s>the</s> <s> low<s>', 'a<s>b', 'a <s> b', 'a  <s>  b', ' <s>',
  '<s>x and <s>y', 'slow lowly low low_ low. (low)', 'LOW Low low', '  ', 'x', '', 'The  THE the', 'ab\u00a0cd\u3000ef',
  'lowerlower', '<0x41>', '▁the ▁', 'mixed 12ab34 cd5', '   leading', 'trailing   ', 'über Straße',
];

function pairsOf(v) { return v; }
(async () => {
  const cases = [];
  for (const [name, json] of Object.entries(variants)) {
    const t = Tokenizer.fromString(JSON.stringify(json));
    for (const text of texts) {
      // HF's Strip decoder panics on an empty token list with stop > 0.
      if (name === 'dec_strip_both' && text === '') continue;
      const e = await t.encode(text, null, { addSpecialTokens: false });
      const ids = Array.from(e.getIds());
      const es = await t.encode(text, null, { addSpecialTokens: true });
      cases.push({ variant: name, text, ids, ids_special: Array.from(es.getIds()),
        decoded: await t.decode(ids, false), decoded_skip: await t.decode(ids, true) });
    }
  }
  process.stdout.write(JSON.stringify({ generator: 'Hugging Face tokenizers 0.23.2 (npm)', variants, cases }) + '\n');
})();
