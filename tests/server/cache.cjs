// The prefix cache across requests. The expected outputs are those of the same request computed
// cold (cache_prompt: false evaluates the whole prompt), compared exactly: a restored snapshot is a
// bit copy of the state, so greedy text and log-probabilities must be identical.
// Env: SV_URL (a server of 4 slots of 2,304 tokens with the default --cache-ram and --cache-every 128),
// SV_URL_SMALL (--cache-ram 4), TS_BIN, TS_MODEL.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const { performance } = require('node:perf_hooks');
const { OpenAI } = require('openai');

const client = new OpenAI({ baseURL: `${process.env.SV_URL}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const small = new OpenAI({ baseURL: `${process.env.SV_URL_SMALL}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const long = 'And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them, ';

async function metric(url, name) {
  const t = await (await fetch(`${url}/metrics`)).text();
  const m = t.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

// token ids of a long text (the tokenizer command), cut to n
function ids(n) {
  const all = execFileSync(process.env.TS_BIN, ['tokenize', '-m', process.env.TS_MODEL, '-p', long.repeat(120)]).toString().trim().split(/\s+/).map(Number);
  assert.ok(all.length >= n, `${all.length} tokens`);
  return all.slice(0, n);
}

const ask = (c, prompt, extra = {}) => c.completions.create({ model: 'demo.gguf', prompt, max_tokens: 12, temperature: 0, logprobs: 2, ignore_eos: true, ...extra });

test('an identical second request restores the whole prompt and answers the same', async () => {
  const P = ids(400);
  const hits0 = await metric(process.env.SV_URL, 'turbospark_prefix_cache_hits_total');
  const tokens0 = await metric(process.env.SV_URL, 'turbospark_prefix_cache_tokens_total');
  const cold = await ask(client, P, { cache_prompt: false });
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  const first = await ask(client, P);
  const second = await ask(client, P);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= 0.9 * second.usage.prompt_tokens, JSON.stringify(second.usage));
  assert.equal(second.choices[0].text, cold.choices[0].text);
  assert.deepEqual(second.choices[0].logprobs.token_logprobs, cold.choices[0].logprobs.token_logprobs);
  assert.deepEqual(first.choices[0].logprobs.token_logprobs, cold.choices[0].logprobs.token_logprobs);
  assert.equal(await metric(process.env.SV_URL, 'turbospark_prefix_cache_hits_total'), hits0 + 1);
  assert.equal(await metric(process.env.SV_URL, 'turbospark_prefix_cache_tokens_total'), tokens0 + P.length);
  assert.ok((await metric(process.env.SV_URL, 'turbospark_prefix_cache_bytes')) > 0);
  assert.ok((await metric(process.env.SV_URL, 'turbospark_prefix_cache_entries')) >= 1);
  // streamed, from the cache too
  const chunks = [];
  for await (const k of await client.completions.create({ model: 'demo.gguf', prompt: P, max_tokens: 12, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } })) chunks.push(k);
  assert.equal(chunks.map((k) => k.choices[0]?.text ?? '').join(''), cold.choices[0].text);
  assert.equal(chunks.at(-1).usage.prompt_tokens_details.cached_tokens, P.length);
});

// streamed: the time to the first chunk of the answer (ms), its text and usage
async function timed(c, prompt, extra = {}) {
  const t0 = performance.now();
  const stream = await c.completions.create({ model: 'demo.gguf', prompt, max_tokens: 4, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true }, ...extra });
  let first = 0, text = '', usage = null;
  for await (const k of stream) {
    if (!first && k.choices.length) first = performance.now() - t0;
    text += k.choices[0]?.text ?? '';
    if (k.usage) usage = k.usage;
  }
  return { first, text, usage };
}

test('a 2,000-token prompt sent again: cached_tokens ≥ 90 % of it, the first token ≥ 5× sooner', async () => {
  const P = ids(2000);
  P[0] = 17; // unlike the other tests' prompts
  const cold = [await timed(client, P, { cache_prompt: false }), await timed(client, P)]; // the second one fills the cache
  for (const c of cold) assert.equal(c.usage.prompt_tokens_details.cached_tokens, 0, JSON.stringify(c.usage));
  const warm = [];
  for (let i = 0; i < 3; i++) warm.push(await timed(client, P));
  for (const w of warm) {
    assert.ok(w.usage.prompt_tokens_details.cached_tokens >= 0.9 * w.usage.prompt_tokens, JSON.stringify(w.usage));
    assert.equal(w.usage.prompt_tokens, P.length);
    assert.equal(w.text, cold[0].text);
  }
  const coldMs = Math.min(...cold.map((c) => c.first)), warmMs = Math.max(...warm.map((w) => w.first));
  console.log(`time to first token, 2,000 tokens: cold ${coldMs.toFixed(1)} ms (the faster of 2), cached ${warmMs.toFixed(1)} ms (the slower of 3): ${(coldMs / warmMs).toFixed(1)}x`);
  assert.ok(coldMs >= 5 * warmMs, `cold ${coldMs} ms, cached ${warmMs} ms`);
});

test('a prompt that extends a cached one restores the shared prefix', async () => {
  // 256 = the prefill chunk: the cold run cuts the prompt at the same place, so the numbers are equal
  const P = ids(256).map((t) => (t === 7 ? 8 : t)), Q = ids(300).slice(256);
  P[0] = 7; // unlike the other tests' prompts
  const cold = await ask(client, [...P, ...Q], { cache_prompt: false });
  await ask(client, P);
  const warm = await ask(client, [...P, ...Q]);
  assert.ok(warm.usage.prompt_tokens_details.cached_tokens >= P.length, JSON.stringify(warm.usage));
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  assert.deepEqual(warm.choices[0].logprobs.token_logprobs, cold.choices[0].logprobs.token_logprobs);
});

const tok = (text) => execFileSync(process.env.TS_BIN, ['tokenize', '-m', process.env.TS_MODEL, '-p', text]).toString().trim().split(/\s+/).map(Number);

test('prompts that share a long prefix share its prefill (snapshots every 128 tokens)', async () => {
  const url = process.env.SV_URL;
  const S = ids(300);
  S[0] = 11; // unlike the other tests' prompts
  const U = (i) => tok(` Question ${i}: what did Moses say unto Aaron on the day ${i * 7}?`);
  await ask(client, [...S, ...U(0)]);
  const cold = await ask(client, [...S, ...U(1)], { cache_prompt: false });
  const warm = await ask(client, [...S, ...U(1)]);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, 256, JSON.stringify(warm.usage));
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  assert.deepEqual(warm.choices[0].logprobs.token_logprobs, cold.choices[0].logprobs.token_logprobs);
  // 8 clients at once: each evaluates its prompt past the shared 256 tokens only
  const p0 = await metric(url, 'turbospark_prompt_tokens_total');
  const rs = await Promise.all([2, 3, 4, 5, 6, 7, 8, 9].map((i) => ask(client, [...S, ...U(i)])));
  for (const r of rs) assert.equal(r.usage.prompt_tokens_details.cached_tokens, 256, JSON.stringify(r.usage));
  const want = rs.reduce((n, r) => n + r.usage.prompt_tokens - 256, 0);
  assert.equal((await metric(url, 'turbospark_prompt_tokens_total')) - p0, want);
});

test('8 clients that send one long system prompt at once evaluate it once', async () => {
  const url = process.env.SV_URL;
  const S = ids(300);
  S[0] = 13; // unlike the other tests' prompts
  const prompts = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => [...S, ...tok(` Question ${i + 20}: what did Moses say unto Aaron on the day ${i * 7}?`)]);
  const cold = [];
  for (const p of prompts) cold.push(await ask(client, p, { cache_prompt: false }));
  const p0 = await metric(url, 'turbospark_prompt_tokens_total');
  const rs = await Promise.all(prompts.map((p) => ask(client, p))); // 8 clients, 4 slots, nothing cached
  // one evaluates the system prompt; the others wait for its snapshot at 256 (the last multiple of
  // --cache-every inside the shared part) and evaluate only what follows
  const cached = rs.map((r) => r.usage.prompt_tokens_details.cached_tokens).sort((a, b) => a - b);
  assert.deepEqual(cached, [0, 256, 256, 256, 256, 256, 256, 256]);
  const all = rs.reduce((n, r) => n + r.usage.prompt_tokens, 0);
  assert.equal((await metric(url, 'turbospark_prompt_tokens_total')) - p0, all - 7 * 256);
  for (let i = 0; i < 8; i++) { // batched with others: the same greedy text, logits to rounding (docs/DECISIONS.md)
    assert.equal(rs[i].choices[0].text, cold[i].choices[0].text, `client ${i}`);
    rs[i].choices[0].logprobs.token_logprobs.forEach((x, t) => assert.ok(Math.abs(x - cold[i].choices[0].logprobs.token_logprobs[t]) < 1e-4, `client ${i} step ${t}`));
  }
});

test('n = 3 from a cached prompt', async () => {
  const P = ids(120);
  const cold = await ask(client, P, { cache_prompt: false });
  await ask(client, P);
  const r = await ask(client, P, { n: 3 });
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, P.length);
  for (const c of r.choices) assert.equal(c.text, cold.choices[0].text);
});

test('a small budget evicts the least recently used snapshots', async () => {
  const url = process.env.SV_URL_SMALL;
  const prompts = [ids(300), ids(301), ids(302), ids(303)].map((p, i) => [i + 5, ...p.slice(1)]);
  for (const p of prompts) await ask(small, p);
  const ev = await metric(url, 'turbospark_prefix_cache_evictions_total'), by = await metric(url, 'turbospark_prefix_cache_bytes');
  assert.ok(ev > 0, `evictions ${ev}`);
  assert.ok(by > 0 && by <= 4 << 20, `bytes ${by}`);
  const last = await ask(small, prompts[3]);
  assert.equal(last.usage.prompt_tokens_details.cached_tokens, prompts[3].length, 'the newest is still there');
  const oldest = await ask(small, prompts[0]);
  assert.equal(oldest.usage.prompt_tokens_details.cached_tokens, 0, 'the oldest was evicted');
});
