// gen.mjs: golden chat-template renderings from @huggingface/jinja (the JavaScript Jinja
// of Hugging Face's transformers.js, an implementation independent of the Go one) for
// serve's chat template tests. Templates: the chat_template of the Llama 3.1 and Qwen3
// tokenizer_config.json files in data/testdata/hf, the Llama 2 chat template (llama2.jinja,
// written after Llama-2-chat's; data/testdata/hf/llama2 has none), serve's plain template (copied from
// chat_template.go), and whitespace control at the start of a template: spaces.jinja,
// oneline.jinja (text between an expression and a block tag), trimstart.jinja ({%- first)
// and indent.jinja (indentation before the first tag). To rerun, from this directory:
// (cd ../clients && npm ci) && node gen.mjs > golden.json
import { readFileSync } from "node:fs";
import { Template } from "../clients/node_modules/@huggingface/jinja/dist/index.js";

const hf = (name) => JSON.parse(readFileSync(new URL(`../../../data/testdata/hf/${name}/tokenizer_config.json`, import.meta.url)));
const file = (name) => readFileSync(new URL(name, import.meta.url), "utf8");
const plain = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
const templates = {
  llama3: { source: hf("llama3").chat_template, bos: "<|begin_of_text|>", eos: "<|eot_id|>" },
  qwen3: { source: hf("qwen3").chat_template, bos: "", eos: "<|im_end|>" },
  llama2: { source: file("llama2.jinja"), bos: "<s>", eos: "</s>" },
  plain: { source: plain, bos: "", eos: "" },
  spaces: { source: file("spaces.jinja"), bos: "", eos: "" },
  oneline: { source: file("oneline.jinja"), bos: "", eos: "" },
  trimstart: { source: file("trimstart.jinja"), bos: "", eos: "" },
  indent: { source: file("indent.jinja"), bos: "", eos: "" },
};
const conversations = [
  [{ role: "user", content: "Hello!" }],
  [{ role: "system", content: "You are terse." }, { role: "user", content: "What is 2+2?" }],
  [{ role: "system", content: "You are terse." }, { role: "user", content: "What is 2+2?" }, { role: "assistant", content: "4" },
    { role: "user", content: "  And 3+3?  " }],
  [{ role: "user", content: "Think first." }, { role: "assistant", content: "<think>\nLet me see.\n</think>\n\nDone." }],
];
const out = [];
for (const [name, t] of Object.entries(templates)) {
  const tmpl = new Template(t.source);
  conversations.forEach((messages, i) => {
    for (const add_generation_prompt of [true, false]) {
      let want, error = false;
      try {
        want = tmpl.render({ messages, add_generation_prompt, bos_token: t.bos, eos_token: t.eos });
      } catch (e) {
        error = true;
      }
      out.push({ template: name, bos: t.bos, eos: t.eos, conversation: i, add_generation_prompt, error, want });
    }
  });
}
console.log(JSON.stringify({ conversations, goldens: out }, null, 1));
