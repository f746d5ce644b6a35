// End-to-end: turbospark serve answers the official OpenAI client (pinned in package-lock.json).
// Env: SV_URL (a running server started with --api-key $SV_KEY), SV_KEY, TS_BIN, TS_MODEL.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { OpenAI } = require('openai');

const base = process.env.SV_URL;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: process.env.SV_KEY, timeout: 60_000, maxRetries: 0 });
const bible = 'And the LORD said';
const chat = [{ role: 'system', content: 'Answer in the words of scripture.' }, { role: 'user', content: 'Who was Moses?' }];

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

async function metric(name) {
  const res = await fetch(`${base}/metrics`, { headers: { Authorization: `Bearer ${process.env.SV_KEY}` } });
  const m = (await res.text()).match(new RegExp(`^${name.replace(/[{}"=]/g, (c) => '\\' + c)} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function waitFor(cond, ms = 5000) {
  for (const t0 = Date.now(); Date.now() - t0 < ms; await new Promise((r) => setTimeout(r, 50))) if (await cond()) return true;
  return false;
}

test('models: list and retrieve', async () => {
  const list = await client.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, 'demo.gguf');
  assert.equal(list.data[0].object, 'model');
  const m = await client.models.retrieve('demo.gguf');
  assert.equal(m.id, 'demo.gguf');
  await assert.rejects(client.models.retrieve('gpt-4'), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
});

test('completions: greedy equals turbospark run, streamed equals whole', async () => {
  const n = 40;
  const r = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: n, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  const c = r.choices[0];
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.equal(r.usage.prompt_tokens, 4);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, n);
  // the same continuation as the command line (greedy), which prints prompt + text + "\n"
  const cli = execFileSync(process.env.TS_BIN, ['run', '-m', process.env.TS_MODEL, '-p', bible, '-n', String(n), '--temp', '0'],
    { stdio: ['ignore', 'pipe', 'ignore'], timeout: 60_000 }).toString();
  assert.equal(bible + c.text + '\n', cli);

  const chunks = await collect(await client.completions.create({
    model: 'demo.gguf', prompt: bible, max_tokens: n, temperature: 0, stream: true, stream_options: { include_usage: true },
  }));
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  // the same prompt again: restored whole from the prefix cache
  assert.deepEqual(last.usage, { ...r.usage, prompt_tokens_details: { cached_tokens: r.usage.prompt_tokens } });
  const finish = chunks.filter((k) => k.choices.length && k.choices[0].finish_reason);
  assert.equal(finish.length, 1);
  assert.equal(finish[0].choices[0].finish_reason, c.finish_reason);
  assert.equal(chunks.map((k) => (k.choices.length ? k.choices[0].text : '')).join(''), c.text);
  // streamed as the text is made: the server sends what is new each time it reads, so a busy machine can
  // join tokens into fewer chunks, but never the whole text in one
  const pieces = chunks.filter((k) => k.choices.length && k.choices[0].text);
  assert.ok(pieces.length >= 2, 'the text came in pieces, not at once');
});

test('chat: whole and streamed, roles, usage', async () => {
  const r = await client.chat.completions.create({ model: 'demo.gguf', messages: chat, max_tokens: 48, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const msg = r.choices[0].message;
  assert.equal(msg.role, 'assistant');
  assert.equal(typeof msg.content, 'string');
  assert.ok(msg.content.length > 0);
  assert.ok(r.usage.prompt_tokens > 10);

  const chunks = await collect(await client.chat.completions.create({
    model: 'demo.gguf', messages: chat, max_tokens: 48, temperature: 0, stream: true,
  }));
  assert.equal(chunks[0].object, 'chat.completion.chunk');
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.ok(chunks.every((k) => k.id === chunks[0].id));
  const text = chunks.map((k) => k.choices[0]?.delta?.content ?? '').join('');
  assert.equal(text, msg.content);
  assert.equal(chunks.at(-1).choices[0].finish_reason, r.choices[0].finish_reason);
  assert.equal(chunks.at(-1).usage ?? null, null); // no usage chunk unless asked

  // a second turn that extends the first reuses the slot's sequence (prompt caching)
  const turn2 = [...chat, { role: 'assistant', content: msg.content }, { role: 'user', content: 'And Aaron?' }];
  const r2 = await client.chat.completions.create({ model: 'demo.gguf', messages: turn2, max_tokens: 8, temperature: 0 });
  assert.ok(r2.usage.prompt_tokens > r.usage.prompt_tokens);
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens > r.usage.prompt_tokens, JSON.stringify(r2.usage));
});

test('stop strings: cut before the stop, streamed and not', async () => {
  const full = (await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 60, temperature: 0 })).choices[0].text;
  for (const stop of [',', ['LORD of', 'servant'], 'unto me']) {
    const list = Array.isArray(stop) ? stop : [stop];
    const cut = Math.min(...list.map((s) => { const i = full.indexOf(s); return i < 0 ? Infinity : i; }));
    assert.ok(Number.isFinite(cut), `the greedy text holds one of ${list}`);
    const r = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 60, temperature: 0, stop });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].text, full.slice(0, cut));
    const chunks = await collect(await client.completions.create({
      model: 'demo.gguf', prompt: bible, max_tokens: 60, temperature: 0, stop, stream: true,
    }));
    assert.equal(chunks.map((k) => k.choices[0].text).join(''), full.slice(0, cut));
  }
  const c = await client.chat.completions.create({ model: 'demo.gguf', messages: chat, max_tokens: 48, temperature: 0, stop: [' '] });
  assert.ok(!c.choices[0].message.content.includes(' '));
  assert.equal(c.choices[0].finish_reason, 'stop');
});

test('sampling: a seed reproduces, max_tokens gives length', async () => {
  const ask = (seed) => client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 30, temperature: 1, seed, ignore_eos: true });
  const [a, b, c] = await Promise.all([ask(42), ask(42), ask(43)]);
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.notEqual(a.choices[0].text, c.choices[0].text);
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 30);
  const p = await client.completions.create({
    model: 'demo.gguf', prompt: bible, max_tokens: 20, temperature: 0.7, top_p: 0.9, top_k: 20, min_p: 0.05,
    presence_penalty: 0.5, frequency_penalty: 0.5, repetition_penalty: 1.1, seed: 1,
  });
  assert.ok(p.choices[0].text.length > 0);
});

test('errors: the client sees OpenAI error objects', async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === 'invalid_api_key');
  await assert.rejects(bad.chat.completions.create({ model: 'demo.gguf', messages: chat }), (e) => e.status === 401);
  const check = (status, param, code) => (e) => {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.equal(e.status, status);
    assert.equal(e.param, param);
    if (code) assert.equal(e.code, code);
    assert.equal(e.type, 'invalid_request_error');
    assert.ok(e.message.length > 10);
    return true;
  };
  await assert.rejects(client.chat.completions.create({ model: 'demo.gguf', messages: chat, n: 17 }), check(400, 'n', 'unsupported_parameter'));
  await assert.rejects(client.chat.completions.create({ model: 'demo.gguf', messages: chat, top_logprobs: 2 }), check(400, 'top_logprobs', 'invalid_value'));
  await assert.rejects(client.chat.completions.create({
    model: 'demo.gguf', messages: chat, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'email' } } },
  }), (e) => check(400, 'response_format', 'invalid_schema')(e) && /'format'/.test(e.message));
  await assert.rejects(client.chat.completions.create({
    model: 'demo.gguf', messages: [{ role: 'user', content: [{ type: 'text', text: 'What is this?' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }],
  }), (e) => check(400, 'messages[0].content[1].type', 'unsupported_content_type')(e) && /text model only/.test(e.message));
  await assert.rejects(client.completions.create({ model: 'demo.gguf', prompt: 'word '.repeat(5000) }),
    check(400, 'prompt', 'context_length_exceeded'));
  await assert.rejects(client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 1_000_000 }),
    check(400, 'max_tokens', 'context_length_exceeded'));
  await assert.rejects(client.chat.completions.create({ model: 'demo.gguf', messages: chat, temperature: 5 }), check(400, 'temperature', 'invalid_value'));
  // the server keeps serving
  const ok = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 3, temperature: 0 });
  assert.equal(ok.usage.completion_tokens, 3);
});

test('abort: a client that goes away frees its slot at once', async () => {
  const before = await metric('turbospark_requests_total{finish_reason="cancelled"}');
  const ac = new AbortController();
  const stream = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 3000, ignore_eos: true, stream: true }, { signal: ac.signal });
  let n = 0;
  try { // chunks already received may still come, or the client throws an abort error
    for await (const _ of stream) if (++n === 5) ac.abort();
  } catch (e) {
    assert.ok(e.name === 'APIUserAbortError' || e.name === 'AbortError', String(e));
  }
  assert.ok(n >= 5 && n < 3000, `${n} chunks`);
  assert.ok(await waitFor(async () => (await metric('turbospark_requests_total{finish_reason="cancelled"}')) === before + 1), 'cancelled');
  assert.ok(await waitFor(async () => (await metric('turbospark_slots_busy')) === 0), 'slot freed');
  // and a whole (non-streamed) request too
  const ac2 = new AbortController();
  const p = client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 3000, ignore_eos: true }, { signal: ac2.signal });
  setTimeout(() => ac2.abort(), 300);
  await assert.rejects(p);
  assert.ok(await waitFor(async () => (await metric('turbospark_requests_total{finish_reason="cancelled"}')) === before + 2), 'cancelled');
  assert.ok(await waitFor(async () => (await metric('turbospark_slots_busy')) === 0), 'slot freed');
});
