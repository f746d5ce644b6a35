// Structured output and tool calls through the official OpenAI client (pinned in package-lock.json):
// json_schema and json_object answers parse and validate on every seed, required and named tool
// calls have arguments that validate, streamed tool-call deltas reassemble to the whole answer's
// calls, tool results render. The demo model writes scripture, not JSON: everything structured here
// is what constrained decoding guarantees. Env: SV_URL (a running server).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const client = new OpenAI({ baseURL: `${process.env.SV_URL}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const user = [{ role: 'user', content: 'Tell of the twelve tribes.' }];

// A validator of the schema subset, written for this test (independent of src/engine/json_schema.c).
function validate(v, s, path = '$') {
  const fail = (why) => { throw new Error(`${path}: ${why} (${JSON.stringify(v)})`); };
  if (s === true || Object.keys(s).length === 0) return;
  const typeOf = (x) => (x === null ? 'null' : Array.isArray(x) ? 'array' : Number.isInteger(x) ? 'integer' : typeof x);
  if ('const' in s && JSON.stringify(v) !== JSON.stringify(s.const)) fail('not the const');
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) fail('not in the enum');
  if (s.anyOf) {
    const ok = s.anyOf.some((b) => { try { validate(v, b, path); return true; } catch { return false; } });
    if (!ok) fail('no anyOf branch');
  }
  if (s.type) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    const t = typeOf(v);
    if (!types.some((x) => x === t || (x === 'number' && t === 'integer'))) fail(`type ${t}, expected ${types}`);
  }
  if (typeof v === 'string') {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) fail('too short');
    if (s.maxLength !== undefined && n > s.maxLength) fail('too long');
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) fail('too few items');
    if (s.maxItems !== undefined && v.length > s.maxItems) fail('too many items');
    if (s.items) v.forEach((x, i) => validate(x, s.items, `${path}[${i}]`));
  }
  if (typeOf(v) === 'object') {
    for (const r of s.required ?? []) if (!(r in v)) fail(`'${r}' is missing`);
    for (const [k, x] of Object.entries(v)) {
      if (s.properties?.[k]) validate(x, s.properties[k], `${path}.${k}`);
      else if (s.additionalProperties === false) fail(`'${k}' is not allowed`);
    }
  }
}

const schema = {
  type: 'object',
  properties: {
    tribe: { enum: ['Judah', 'Levi', 'Dan', 'Asher'] },
    count: { type: 'integer' },
    verse: { type: 'string', maxLength: 40 },
    blessed: { type: 'boolean' },
    sons: { type: 'array', items: { type: 'string', maxLength: 12 }, maxItems: 3 },
    place: { anyOf: [{ type: 'null' }, { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, x: { type: 'number' } }, required: ['city'] }] },
  },
  required: ['tribe', 'count', 'verse', 'blessed'],
  additionalProperties: false,
};

test('the validator refuses what it should (it is not a test that cannot fail)', () => {
  assert.throws(() => validate({ tribe: 'Judah', count: 1.5, verse: '', blessed: true }, schema));
  assert.throws(() => validate({ tribe: 'Judah', count: 1, verse: '', blessed: true, extra: 1 }, schema));
  assert.throws(() => validate({ tribe: 'Judah', count: 1, verse: '', blessed: true, sons: ['a', 'b', 'c', 'd'] }, schema));
  validate({ tribe: 'Dan', count: -3, verse: 'x', blessed: false, place: { city: 'Ur' } }, schema);
});

test('json_schema: 20 seeds, every answer parses and validates', async () => {
  const answers = await Promise.all(Array.from({ length: 20 }, (_, seed) => client.chat.completions.create({
    model: 'demo.gguf', messages: user, seed, temperature: 1.0, max_tokens: 400,
    response_format: { type: 'json_schema', json_schema: { name: 'tribe', strict: true, schema } },
  })));
  const distinct = new Set();
  for (const r of answers) {
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', `seed ended by ${c.finish_reason}: ${c.message.content}`);
    const v = JSON.parse(c.message.content);
    validate(v, schema);
    distinct.add(c.message.content);
  }
  assert.ok(distinct.size > 10, 'the seeds gave different answers');
});

test('json_schema streamed: the deltas join to JSON that validates', async () => {
  const stream = await client.chat.completions.create({
    model: 'demo.gguf', messages: user, seed: 7, temperature: 1.0, max_tokens: 400, stream: true,
    response_format: { type: 'json_schema', json_schema: { name: 'tribe', schema } },
  });
  let text = '';
  for await (const k of stream) text += k.choices[0]?.delta?.content ?? '';
  validate(JSON.parse(text), schema);
});

test('json_object: an object every time', async () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.chat.completions.create({
      model: 'demo.gguf', messages: user, seed, temperature: 0.8, max_tokens: 60, response_format: { type: 'json_object' },
    });
    const c = r.choices[0];
    if (c.finish_reason === 'stop') assert.equal(typeof JSON.parse(c.message.content), 'object');
    else assert.match(c.message.content, /^\s*\{/); // cut by max_tokens: still an object's beginning
  }
});

const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'The weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 16 }, days: { type: 'integer' },
      unit: { enum: ['celsius', 'fahrenheit'] } }, required: ['city', 'unit'] } } },
  { type: 'function', function: { name: 'count_tribes', parameters: { type: 'object', properties: { of: { enum: ['Israel'] } }, required: ['of'] } } },
];
const paramsOf = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));

test('tool_choice required: valid calls with ids, arguments that validate, on every seed', async () => {
  for (let seed = 0; seed < 8; seed++) {
    const r = await client.chat.completions.create({
      model: 'demo.gguf', messages: user, tools, tool_choice: 'required', seed, temperature: 1.0, max_tokens: 1500,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
    assert.ok(c.message.tool_calls.length >= 1);
    assert.equal(c.message.content, null);
    for (const call of c.message.tool_calls) {
      assert.match(call.id, /^call_[0-9a-f]{24}$/);
      assert.equal(call.type, 'function');
      assert.ok(call.function.name in paramsOf, call.function.name);
      validate(JSON.parse(call.function.arguments), paramsOf[call.function.name]);
    }
  }
});

test('tool_choice named, parallel_tool_calls false: one call of that function', async () => {
  for (let seed = 0; seed < 4; seed++) {
    const r = await client.chat.completions.create({
      model: 'demo.gguf', messages: user, tools, seed, temperature: 1.0, max_tokens: 300, parallel_tool_calls: false,
      tool_choice: { type: 'function', function: { name: 'count_tribes' } },
    });
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, 'count_tribes');
    assert.deepEqual(JSON.parse(calls[0].function.arguments), { of: 'Israel' });
  }
});

test('streamed tool-call deltas reassemble to the same calls as the whole answer', async () => {
  const ask = { model: 'demo.gguf', messages: user, tools, tool_choice: 'required', seed: 3, temperature: 1.0, max_tokens: 1500 };
  const whole = (await client.chat.completions.create(ask)).choices[0];
  const calls = [];
  let finish = null;
  for await (const k of await client.chat.completions.create({ ...ask, stream: true })) {
    const ch = k.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) finish = ch.finish_reason;
    for (const d of ch.delta.tool_calls ?? []) {
      calls[d.index] ??= { id: '', name: '', arguments: '' };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].name += d.function.name;
      if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.deepEqual(calls.map((c) => [c.name, c.arguments]), whole.message.tool_calls.map((c) => [c.function.name, c.function.arguments]));
  for (const c of calls) assert.match(c.id, /^call_/);
});

test('a conversation with tool calls and tool results is rendered and answered', async () => {
  const r = await client.chat.completions.create({
    model: 'demo.gguf', tools, max_tokens: 8, temperature: 0,
    messages: [...user, { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'count_tribes', arguments: '{"of": "Israel"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '12' }],
  });
  assert.ok(r.usage.prompt_tokens > 100, 'the tools and the call are in the prompt');
  const none = await client.chat.completions.create({ model: 'demo.gguf', tools, tool_choice: 'none', messages: user, max_tokens: 4, temperature: 0 });
  assert.ok(none.usage.prompt_tokens < 40, 'tool_choice none leaves the tools out of the prompt');
});

test('llama-server fields on /v1/completions: a GBNF grammar and a top-level json_schema', async () => {
  const grammar = 'root ::= ("yea" | "nay") " " [1-9] [0-9]? "."';
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.completions.create({ model: 'demo.gguf', prompt: 'And the people answered', seed, temperature: 1, max_tokens: 20, grammar });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.match(r.choices[0].text, /^(yea|nay) [1-9][0-9]?\.$/);
  }
  const s = { type: 'array', items: { enum: ['Reuben', 'Simeon'] }, minItems: 1, maxItems: 3 };
  const r = await client.completions.create({ model: 'demo.gguf', prompt: 'The sons:', seed: 9, temperature: 1, max_tokens: 60, json_schema: s });
  validate(JSON.parse(r.choices[0].text), s);
  await assert.rejects(client.completions.create({ model: 'demo.gguf', prompt: 'x', grammar: 'root ::= [\\u00e0-\\u00ff]' }),
    (e) => e.status === 400 && e.code === 'invalid_grammar' && /non-ASCII/.test(e.message));
});
