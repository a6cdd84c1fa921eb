// openai.mjs: the official openai client, unmodified, against megago serve at the URL given
// as the first argument: it lists the models, completes, chat-completes and streams both.
// Run by .ci/serve.sh; prints one line per check and "N passed, N failed".
import OpenAI from "openai";
import assert from "node:assert/strict";

const base = process.argv[2];
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
let passed = 0, failed = 0;

async function check(name, fn) {
  try {
    const detail = await fn();
    passed++;
    console.log(`ok   ${name}: ${detail}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

const models = await client.models.list();
const model = models.data[0]?.id;
await check("models.list", () => {
  assert.equal(models.data.length, 1);
  assert.equal(typeof model, "string");
  return JSON.stringify(model);
});

const prompt = "func main() {";
let greedy = "";
await check("completions.create", async () => {
  const c = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, seed: 1 });
  assert.equal(c.object, "text_completion");
  assert.equal(c.choices.length, 1);
  assert.ok(["length", "stop"].includes(c.choices[0].finish_reason));
  assert.ok(c.usage.completion_tokens >= 1 && c.usage.prompt_tokens >= 1);
  greedy = c.choices[0].text;
  return JSON.stringify(greedy);
});

await check("completions.create stream", async () => {
  const stream = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stream: true });
  let text = "", chunks = 0, finish = null;
  for await (const chunk of stream) {
    chunks++;
    for (const c of chunk.choices) { text += c.text ?? ""; finish = c.finish_reason ?? finish; }
  }
  assert.equal(text, greedy, "the streamed greedy text equals the non-streamed one");
  assert.ok(finish);
  return `${chunks} chunks, ${JSON.stringify(text)}`;
});

await check("completions.create echo logprobs max_tokens 0", async () => {
  const c = await client.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 1 });
  const lp = c.choices[0].logprobs;
  assert.equal(c.choices[0].text, prompt);
  assert.equal(lp.token_logprobs[0], null);
  assert.ok(lp.token_logprobs.slice(1).every((v) => typeof v === "number" && v <= 0));
  return `${lp.tokens.length} prompt tokens, sum ${lp.token_logprobs.slice(1).reduce((a, b) => a + b, 0).toFixed(3)}`;
});

await check("chat.completions.create", async () => {
  const c = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Write a Go function." }], max_tokens: 12 });
  assert.equal(c.object, "chat.completion");
  assert.equal(c.choices[0].message.role, "assistant");
  assert.equal(typeof c.choices[0].message.content, "string");
  return JSON.stringify(c.choices[0].message.content);
});

await check("chat.completions.create stream", async () => {
  const stream = await client.chat.completions.create({ model, messages: [{ role: "user", content: "Hello" }], max_tokens: 12,
    temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = "", usage = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) text += c.delta?.content ?? "";
    usage = chunk.usage ?? usage;
  }
  assert.ok(usage && usage.completion_tokens >= 1);
  return `${usage.completion_tokens} tokens, ${JSON.stringify(text)}`;
});

await check("400 for a negative max_tokens", async () => {
  await assert.rejects(client.completions.create({ model, prompt, max_tokens: -1 }), (e) => e.status === 400 && /max_tokens/.test(e.message));
  return "refused";
});

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
