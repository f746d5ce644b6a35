// logprobs and n > 1 through the official OpenAI client. The expected log-probabilities come from
// the command line, not from the server: `turbospark generate` gives the greedy continuation and
// `turbospark logits` the logits of every position, whose log-softmax is computed here.
// Env: SV_URL (a server with 4 slots), TS_BIN, TS_MODEL, TS_TMP.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { OpenAI } = require('openai');

const client = new OpenAI({ baseURL: `${process.env.SV_URL}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const bible = 'And the LORD said unto Moses';
const chat = [{ role: 'user', content: 'Who was Moses?' }];
const TOL = 2e-3; // the server's batched decode against one prefill of the whole sequence: rounding only

function writeNpyI32(file, ids) {
  let header = `{'descr': '<i4', 'fortran_order': False, 'shape': (${ids.length},), }`;
  const pad = 64 - ((10 + header.length + 1) % 64);
  header += ' '.repeat(pad % 64) + '\n';
  const h = Buffer.alloc(10);
  h.write('\x93NUMPY', 0, 'latin1');
  h[6] = 1, h[7] = 0, h.writeUInt16LE(header.length, 8);
  const body = Buffer.from(new Int32Array(ids).buffer);
  fs.writeFileSync(file, Buffer.concat([h, Buffer.from(header, 'latin1'), body]));
}

function readNpy(file) {
  const b = fs.readFileSync(file);
  const hl = b.readUInt16LE(8), header = b.subarray(10, 10 + hl).toString('latin1');
  const shape = header.match(/'shape': \(([^)]*)\)/)[1].split(',').filter((s) => s.trim()).map(Number);
  const data = b.subarray(10 + hl);
  const copy = new Uint8Array(data.length);
  copy.set(data);
  const arr = /<f4/.test(header) ? new Float32Array(copy.buffer) : new Int32Array(copy.buffer);
  return { shape, arr };
}

const cli = (...args) => execFileSync(process.env.TS_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000 }).toString();

function logSoftmax(row) {
  let mx = -Infinity;
  for (const x of row) if (x > mx) mx = x;
  let s = 0;
  for (const x of row) s += Math.exp(x - mx);
  const lse = mx + Math.log(s);
  return Array.from(row, (x) => x - lse);
}

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

test('completions logprobs equal the log-softmax of the logits command', async () => {
  const dir = fs.mkdtempSync(path.join(process.env.TS_TMP, 'lp-'));
  const P = cli('tokenize', '-m', process.env.TS_MODEL, '-p', bible).trim().split(/\s+/).map(Number);
  assert.ok(P.length >= 4, `prompt ids ${P}`);
  const N = 8, K = 5;
  writeNpyI32(path.join(dir, 'p.npy'), P);
  cli('generate', '-m', process.env.TS_MODEL, '--tokens-npy', path.join(dir, 'p.npy'), '-n', String(N), '-o', path.join(dir, 'g.npy'));
  const G = Array.from(readNpy(path.join(dir, 'g.npy')).arr);
  writeNpyI32(path.join(dir, 'pg.npy'), [...P, ...G.slice(0, -1)]);
  cli('logits', '-m', process.env.TS_MODEL, '--tokens-npy', path.join(dir, 'pg.npy'), '-o', path.join(dir, 'l.npy'));
  const L = readNpy(path.join(dir, 'l.npy'));
  const V = L.shape[1];
  assert.equal(L.shape[0], P.length + N - 1);

  const r = await client.completions.create({ model: 'demo.gguf', prompt: P, max_tokens: N, temperature: 0, logprobs: K, ignore_eos: true });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.token_logprobs.length, N);
  assert.equal(lp.tokens.join(''), r.choices[0].text);
  for (let t = 0; t < N; t++) {
    const ls = logSoftmax(L.arr.subarray((P.length - 1 + t) * V, (P.length + t) * V));
    assert.ok(Math.abs(lp.token_logprobs[t] - ls[G[t]]) < TOL, `step ${t}: ${lp.token_logprobs[t]} vs ${ls[G[t]]}`);
    const want = [...ls].sort((a, b) => b - a).slice(0, K);
    const got = Object.values(lp.top_logprobs[t]).sort((a, b) => b - a);
    assert.ok(got.length >= 1 && got.length <= K);
    for (let k = 0; k < got.length; k++) assert.ok(Math.abs(got[k] - want[k]) < TOL, `step ${t} top ${k}: ${got[k]} vs ${want[k]}`);
    assert.ok(got.reduce((s, x) => s + Math.exp(x), 0) <= 1 + 1e-5, 'the top probabilities sum to at most 1');
    assert.ok(Math.abs(got[0] - lp.token_logprobs[t]) < 1e-6, 'greedy: the chosen token is the most likely');
    if (t > 0) assert.ok(lp.text_offset[t] > lp.text_offset[t - 1]);
  }
  assert.equal(lp.text_offset[0], 0);

  const chunks = await collect(await client.completions.create({
    model: 'demo.gguf', prompt: P, max_tokens: N, temperature: 0, logprobs: K, ignore_eos: true, stream: true,
  }));
  const s = chunks.flatMap((c) => (c.choices[0]?.logprobs ? c.choices[0].logprobs.token_logprobs : []));
  assert.equal(s.length, N);
  for (let t = 0; t < N; t++) assert.ok(Math.abs(s[t] - lp.token_logprobs[t]) < 1e-5);
});

test('chat logprobs equal the log-softmax of the logits command on the rendered prompt', async () => {
  const dir = fs.mkdtempSync(path.join(process.env.TS_TMP, 'lpc-'));
  const post = async (p, body) => (await fetch(`${process.env.SV_URL}${p}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).json();
  const { prompt } = await post('/apply-template', { messages: chat });
  const P = (await post('/tokenize', { content: prompt })).tokens; // as the chat endpoint tokenizes it
  assert.ok(P.length >= 4, `prompt ids ${P}`);
  const N = 8, K = 5;
  writeNpyI32(path.join(dir, 'p.npy'), P);
  cli('generate', '-m', process.env.TS_MODEL, '--tokens-npy', path.join(dir, 'p.npy'), '-n', String(N), '-o', path.join(dir, 'g.npy'));
  const G = Array.from(readNpy(path.join(dir, 'g.npy')).arr);
  assert.equal(G.length, N);
  writeNpyI32(path.join(dir, 'pg.npy'), [...P, ...G.slice(0, -1)]);
  cli('logits', '-m', process.env.TS_MODEL, '--tokens-npy', path.join(dir, 'pg.npy'), '-o', path.join(dir, 'l.npy'));
  const L = readNpy(path.join(dir, 'l.npy'));
  const V = L.shape[1];
  for (const stream of [false, true]) {
    const req = { model: 'demo.gguf', messages: chat, max_tokens: N, temperature: 0, logprobs: true, top_logprobs: K, ignore_eos: true, stream };
    const content = stream
      ? (await collect(await client.chat.completions.create(req))).flatMap((k) => k.choices[0]?.logprobs?.content ?? [])
      : (await client.chat.completions.create(req)).choices[0].logprobs.content;
    assert.equal(content.length, N, `stream ${stream}`);
    let sum = 0, wantSum = 0;
    for (let t = 0; t < N; t++) {
      const ls = logSoftmax(L.arr.subarray((P.length - 1 + t) * V, (P.length + t) * V));
      assert.ok(Math.abs(content[t].logprob - ls[G[t]]) < TOL, `stream ${stream} step ${t}: ${content[t].logprob} vs ${ls[G[t]]}`);
      const want = [...ls].sort((a, b) => b - a).slice(0, K);
      assert.equal(content[t].top_logprobs.length, K);
      for (let k = 0; k < K; k++) assert.ok(Math.abs(content[t].top_logprobs[k].logprob - want[k]) < TOL, `step ${t} top ${k}`);
      sum += content[t].logprob, wantSum += ls[G[t]];
    }
    // the sequence's log-likelihood is the sum of its tokens' (what a client adds up)
    assert.ok(Math.abs(sum - wantSum) < N * TOL, `sum ${sum} vs ${wantSum}`);
  }
});

test('chat logprobs: shape, greedy consistency, streamed equals whole', async () => {
  const r = await client.chat.completions.create({ model: 'demo.gguf', messages: chat, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3 });
  const c = r.choices[0];
  const content = c.logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  assert.equal(Buffer.from(content.flatMap((e) => e.bytes)).toString('utf8'), c.message.content);
  for (const e of content) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, 'greedy picks the most likely');
    assert.equal(e.top_logprobs[0].token, e.token);
    for (let k = 1; k < 3; k++) assert.ok(e.top_logprobs[k].logprob <= e.top_logprobs[k - 1].logprob);
    assert.ok(e.top_logprobs.reduce((s, x) => s + Math.exp(x.logprob), 0) <= 1 + 1e-5);
  }
  const plain = await client.chat.completions.create({ model: 'demo.gguf', messages: chat, max_tokens: 12, temperature: 0 });
  assert.equal(plain.choices[0].logprobs, null);
  assert.equal(plain.choices[0].message.content, c.message.content);

  const chunks = await collect(await client.chat.completions.create({
    model: 'demo.gguf', messages: chat, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 3, stream: true,
  }));
  const s = chunks.flatMap((k) => k.choices[0]?.logprobs?.content ?? []);
  assert.deepEqual(s.map((e) => e.token), content.map((e) => e.token));
  for (let i = 0; i < s.length; i++) assert.ok(Math.abs(s[i].logprob - content[i].logprob) < 1e-5);
});

test('n = 3: three choices; greedy ones equal a single request', async () => {
  const one = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 16, temperature: 0 });
  const r = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 16, temperature: 0, n: 3 });
  assert.equal(r.choices.length, 3);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) assert.equal(c.text, one.choices[0].text);
  assert.equal(r.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, 3 * one.usage.completion_tokens);

  const ch = await client.chat.completions.create({ model: 'demo.gguf', messages: chat, max_tokens: 16, temperature: 0, n: 3 });
  assert.equal(ch.choices.length, 3);
  for (const c of ch.choices) assert.equal(c.message.content, ch.choices[0].message.content);
});

test('n = 3 seeded: reproducible, and choice i samples as a single request with seed + i', async () => {
  const ask = (n, seed) => client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 24, temperature: 1.5, top_k: 0, top_p: 1, min_p: 0, seed, n, ignore_eos: true });
  const [a, b] = await Promise.all([ask(3, 42), ask(3, 42)]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.ok(new Set(a.choices.map((c) => c.text)).size > 1, `the choices differ: ${JSON.stringify(a.choices.map((c) => c.text))}`);
  for (let i = 0; i < 3; i++) {
    const single = await ask(1, 42 + i);
    assert.equal(a.choices[i].text, single.choices[0].text, `choice ${i}`);
  }
  // streamed: the chunks of each index add up to the whole response's choices
  const chunks = await collect(await client.completions.create({
    model: 'demo.gguf', prompt: bible, max_tokens: 24, temperature: 1.5, top_k: 0, top_p: 1, min_p: 0, seed: 42, n: 3, ignore_eos: true, stream: true,
  }));
  const texts = ['', '', ''], fin = [0, 0, 0];
  for (const k of chunks) for (const c of k.choices) { texts[c.index] += c.text; if (c.finish_reason) fin[c.index]++; }
  assert.deepEqual(texts, a.choices.map((c) => c.text));
  assert.deepEqual(fin, [1, 1, 1]);
});

test('n beyond the slots is refused', async () => {
  await assert.rejects(client.completions.create({ model: 'demo.gguf', prompt: bible, n: 5 }),
    (e) => e.status === 400 && e.param === 'n');
  const ok = await client.completions.create({ model: 'demo.gguf', prompt: bible, max_tokens: 2, temperature: 0, n: 4 });
  assert.equal(ok.choices.length, 4);
});

// ---- llama-server's /tokenize, /detokenize and /props ----------------------------------------
const base = process.env.SV_URL;
const post = async (p, body) => {
  const res = await fetch(`${base}${p}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, json: await res.json() };
};

test('tokenize and detokenize: the tokenize command\'s ids, and back to the text', async () => {
  const text = 'And the LORD said unto Moses, «Draw near» <|im_start|> 🙂';
  const want = cli('tokenize', '-m', process.env.TS_MODEL, '-p', text).trim().split(/\s+/).map(Number);
  const plain = cli('tokenize', '-m', process.env.TS_MODEL, '-p', text, '--no-special').trim().split(/\s+/).map(Number);
  assert.notDeepEqual(want, plain, 'the text holds a special token');
  const r = await post('/tokenize', { content: text });
  assert.equal(r.status, 200);
  assert.deepEqual(r.json.tokens, want);
  assert.deepEqual((await post('/tokenize', { content: text, parse_special: false })).json.tokens, plain);
  const p = await post('/tokenize', { content: text, with_pieces: true });
  assert.deepEqual(p.json.tokens.map((t) => t.id), want);
  assert.equal(typeof p.json.tokens[0].piece, 'string');
  const d = await post('/detokenize', { tokens: want });
  assert.equal(d.status, 200);
  assert.equal(d.json.content, text);
  // bad input: 400 with the parameter named
  assert.equal((await post('/tokenize', { content: 5 })).json.error.param, 'content');
  const bad = await post('/detokenize', { tokens: [1, 1e9] });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'tokens[1]');
  assert.equal((await post('/detokenize', { tokens: 'x' })).status, 400);
});

test('props: context, slots, model and chat template', async () => {
  const res = await fetch(`${base}/props`);
  assert.equal(res.status, 200);
  const p = await res.json();
  assert.equal(p.total_slots, 4);
  assert.equal(p.default_generation_settings.n_ctx, 1024);
  assert.equal(p.model_alias, 'demo.gguf');
  assert.equal(typeof p.chat_template, 'string');
  assert.ok(p.chat_template.length > 0);
  assert.ok(p.chat_template_name.length > 0 && p.chat_template_name !== 'none', p.chat_template_name);
  const models = await (await fetch(`${base}/v1/models`)).json();
  assert.equal(p.chat_template_name, models.data[0].meta.chat_template);
});
