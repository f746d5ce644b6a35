// Reasoning through the official OpenAI client: a server started with the thinking template and
// a reasoning budget (test_structured.sh). The prompt opens <think>, so the demo model's text is
// reasoning until the budget forces </think>; the answer follows. Env: SV_URL, SV_URL_NONE (the same
// server with --reasoning-format none), BUDGET.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const mk = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const client = mk(process.env.SV_URL), raw = mk(process.env.SV_URL_NONE);
const ask = { model: 'demo.gguf', messages: [{ role: 'user', content: 'Who begat Enos?' }], max_tokens: 40, temperature: 0, ignore_eos: true };

test('reasoning_content is split off, whole and streamed alike', async () => {
  const r = await client.chat.completions.create(ask);
  const m = r.choices[0].message;
  assert.ok(m.reasoning_content.length > 0);
  assert.ok(!m.reasoning_content.includes('</think>') && !m.content.includes('</think>'));
  let rs = '', cs = '';
  for await (const k of await client.chat.completions.create({ ...ask, stream: true })) {
    rs += k.choices[0]?.delta?.reasoning_content ?? '';
    cs += k.choices[0]?.delta?.content ?? '';
  }
  assert.equal(rs, m.reasoning_content);
  assert.equal(cs, m.content);
  // the same generation unsplit: the text before </think> is the reasoning, after it the answer
  const t = (await raw.chat.completions.create(ask)).choices[0].message.content;
  const [before, after] = t.split('</think>');
  assert.ok(after !== undefined, `the budget forced </think>: ${t}`);
  assert.equal(before.replace(/^\n+|\n+$/g, ''), m.reasoning_content);
  assert.equal(after.replace(/^\n+/, ''), m.content);
});

test('the budget bounds the thinking', async () => {
  const t = (await raw.chat.completions.create(ask)).choices[0].message.content;
  const before = t.split('</think>')[0];
  const n = Number(process.env.BUDGET);
  // the budget counts tokens; the demo tokenizer needs at least one per 8 bytes of this text
  assert.ok(before.length <= 8 * (n + 1) + 1, `${before.length} bytes of thinking for a budget of ${n}`);
  const r = await client.chat.completions.create({ ...ask, max_tokens: 60 });
  assert.ok(r.usage.completion_tokens > n + 3, 'the answer goes on after the forced </think>');
});

test('json_schema after thinking: the answer validates', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      ...ask, ignore_eos: false, seed, temperature: 1, max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false } } },
    });
    const m = r.choices[0].message;
    assert.ok(m.reasoning_content.length > 0);
    assert.ok(Number.isInteger(JSON.parse(m.content).n), m.content);
  }
});
