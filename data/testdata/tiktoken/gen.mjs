// gen.mjs writes the test vocabulary of data's TikTokenizer tests (o200k_8000.json.gz) and
// their golden ids (golden.json), using npm's tiktoken (the WebAssembly build of OpenAI's
// Rust crate) as the independent implementation. Rerun: see README.md.
//
// The vocabulary is OpenAI's o200k_base as it ships in the npm package, written in
// Megatron's JSON list format ({rank, token_bytes (base64), token_str}) and cut to its
// first N ranks, as Megatron's --vocab-size cuts a vocabulary. Megatron requires rank i < 256
// to be the single byte i, while o200k numbers its 256 single bytes in GPT-2's byte order,
// so those ranks are renumbered; the order of the merged tokens, which alone decides how
// BPE merges, is kept.
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { createRequire } from "node:module";

const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(process.env.TIKTOKEN_NPM ?? here, "x.js"));
const { Tiktoken } = require("tiktoken/lite");
const o200k = require("tiktoken/encoders/o200k_base.json");
let pkg = path.dirname(require.resolve("tiktoken/lite"));
while (!fs.existsSync(path.join(pkg, "package.json"))) pkg = path.dirname(pkg);
const version = JSON.parse(fs.readFileSync(path.join(pkg, "package.json"))).version;

const N = 8000; // ranks kept in the vocabulary file

// Megatron's patterns (megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py).
const PATTERNS = {
  v1: String.raw`[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+`,
  v2: "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
const SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"];

// The o200k tokens in rank order, the single bytes first in byte order.
const parts = o200k.bpe_ranks.split(" ");
if (parts[0] !== "!" || parts[1] !== "0") throw new Error("unexpected bpe_ranks format");
const orig = parts.slice(2).map((b) => Buffer.from(b, "base64"));
const bytes = orig.slice(0, 256);
if (new Set(bytes.filter((b) => b.length === 1).map((b) => b[0])).size !== 256) throw new Error("o200k: ranks 0..255 are not the 256 bytes");
const tokens = [...Array(256).keys()].map((b) => Buffer.from([b])).concat(orig.slice(256, N));

// Every kept token must be reachable by BPE within the cut vocabulary: it splits into two
// kept tokens of lower rank.
const rankOf = new Map(tokens.map((t, i) => [t.toString("latin1"), i]));
tokens.forEach((t, i) => {
  if (i < 256) return;
  for (let k = 1; k < t.length; k++) {
    const a = rankOf.get(t.subarray(0, k).toString("latin1")), b = rankOf.get(t.subarray(k).toString("latin1"));
    if (a !== undefined && b !== undefined && a < i && b < i) return;
  }
  throw new Error(`rank ${i} ${JSON.stringify(t.toString())}: no split into lower ranks`);
});

const utf8 = new TextDecoder("utf-8", { fatal: true });
function tokenStr(t) {
  try { return utf8.decode(t); } catch { return null; }
}
const entries = tokens.map((t, i) => `{"rank": ${i}, "token_bytes": ${JSON.stringify(t.toString("base64"))}, "token_str": ${JSON.stringify(tokenStr(t))}}`);
fs.writeFileSync(path.join(here, `o200k_${N}.json.gz`), zlib.gzipSync("[" + entries.join(",\n") + "]\n", { level: 9 }));

// An encoder as Megatron builds one: the first `inner` ranks shifted by the number of
// special tokens, which take the ids before them.
function encoder(pattern, vocabSize, numSpecial, special) {
  const inner = vocabSize - numSpecial;
  const specials = {};
  special.forEach((s, i) => (specials[s] = i));
  for (let i = special.length; i < numSpecial; i++) specials[`<SPECIAL_${i}>`] = i;
  const bfe = "! " + numSpecial + " " + tokens.slice(0, inner).map((t) => t.toString("base64")).join(" ");
  return new Tiktoken(bfe, specials, PATTERNS[pattern]);
}

// A deterministic random text over characters of every class the patterns tell apart.
const alphabet = [..."aZz Q ǅʰ文ßé\u0301\u0308١٣Ⅻ½①\t\r\n\u00a0\u3000 /.,'!?-_<>|$😀👋🏽ש가ا\u200b\u000b"].concat(
  ["<s>", "</s>", "<unk>", "<SPECIAL_7>", "<|endoftext|>", "'s", "'LL", "//", "\r\n", "  "]);
let seed = 12345;
function rnd(n) { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; }
const randomTexts = [...Array(60)].map(() => [...Array(1 + rnd(24))].map(() => alphabet[rnd(alphabet.length)]).join(""));

const texts = [
  "", "Hello world", "Hello, world! How are you?", " leading space", "  two leading", "trailing   ",
  "don't I'LL we'Re they've he'd", "The year 2024 had 365 days; π≈3.14159, 1234567890.",
  "func main() {\n\tfmt.Println(\"hi\")\n\tfor i := 0; i < 10; i++ {}\n}\n",
  "def f(x):\n    return x**2  # square\n\n\n", "if (a&&b||!c) { x->y = *p++; } // C",
  "tabs\t\tand\r\nCRLF\r\n\r\nend", "many     spaces   here \t \n  \n x",
  "emoji 👋🏽 🇫🇷 👨‍👩‍👧 😀😀", "你好，世界！今天天气很好。", "日本語のテキストです。カタカナ", "한국어 문장입니다",
  "مرحبا بالعالم", "שלום עולם", "Привет, мир! Ёжик", "Ελληνικά κείμενα", "हिन्दी पाठ", "ภาษาไทย",
  "café naïve résumé", "cafe\u0301 (decomposed)", "ﬁ ligature Å Ω", "ǅemal ǈubljana ʰaspirated",
  "camelCaseWords and XMLHttpRequest, iPhone", "ALLCAPS and MiXeD CaSe",
  "http://example.com/path?q=1&r=2#frag", "a/b/c //comment\n/* block */ ../x", "!!!\n/\r\n//x",
  "<s>hi</s>", "<s> and </s> and <unk>", "<mask><pad><cls><sep>", "<|endoftext|> after",
  "x<|im_start|>user\nhi<|im_end|>", "< s> <s >  <S>", "<SPECIAL_7> <SPECIAL_999> <SPECIAL_1000> <SPECIAL_07>",
  "<|begin_of_text", " nbsp\u00a0em\u3000ideo", "   \n", "\n", " ", "a\n\nb", "123 4567 89", "١٢٣ ①② Ⅻ",
  "ᚠᚢᚦ runes ∑∫√", "\u200bzero\u200dwidth", "x".repeat(300), "ab ".repeat(50),
  "aaaaaaaaaaaaaaaa\t\t\t\t\t\t        \n\n\n\n", "\u000b\f\u0085\u2028\u2029 mixed spaces",
];

const cases = [];
function add(name, pattern, vocabSize, numSpecial, special, list) {
  const enc = encoder(pattern, vocabSize, numSpecial, special);
  for (const text of list) {
    cases.push({ name, pattern, vocab_size: vocabSize, num_special_tokens: numSpecial, special_tokens: special,
      text, ids: Array.from(enc.encode(text, "all")) });
  }
  enc.free();
}
for (const p of ["v1", "v2"]) {
  add(`full-${p}`, p, 1000 + N, 1000, SPECIAL_TOKENS, texts.concat(randomTexts));
}
// --vocab-size cuts the ranks; fewer special tokens, and user ones after Megatron's.
add("cut-v2", "v2", 1000 + 3000, 1000, SPECIAL_TOKENS, texts);
add("custom-special-v1", "v1", 16 + 5000, 16, [...SPECIAL_TOKENS, "<|im_start|>", "<|im_end|>"], texts);

fs.writeFileSync(path.join(here, "golden.json"), JSON.stringify({
  source: `npm tiktoken ${version}, Tiktoken.encode(text, "all")`,
  vocab: `o200k_${N}.json.gz`, cases,
}, null, 0) + "\n");
console.log(`${cases.length} cases`);
