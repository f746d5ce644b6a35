// A bounded load on loopback: COUNT requests, CONC at a time, each stopped by TIME_LIMIT_S.
// Half chat, half completions, all streamed (to time the first token), sampled with a seed and
// ignore_eos so every request generates exactly MAX_TOKENS tokens. Prints one JSON line:
// throughput, latency and time-to-first-token percentiles. Env: SV_URL, COUNT, CONC, MAX_TOKENS,
// TIME_LIMIT_S. Exit status 1 when a request failed or the time limit passed.
'use strict';
const base = process.env.SV_URL;
const COUNT = Number(process.env.COUNT || 64), CONC = Number(process.env.CONC || 8);
const MAX_TOKENS = Number(process.env.MAX_TOKENS || 64), LIMIT = Number(process.env.TIME_LIMIT_S || 120) * 1000;
const verses = ['And the LORD said unto Moses', 'In the beginning God created the heaven and the earth.',
  'Blessed are the poor in spirit', 'The LORD is my shepherd', 'And it came to pass in those days',
  'Now these are the generations of the sons of Noah'];

const t0 = Date.now();
const deadline = AbortSignal.timeout(LIMIT);

async function one(i) {
  const chat = i % 2 === 0;
  const body = { model: 'any', max_tokens: MAX_TOKENS, temperature: 0.8, seed: i, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } };
  if (chat) body.messages = [{ role: 'user', content: `${verses[i % verses.length]} (${i})` }];
  else body.prompt = `${verses[i % verses.length]} ${i}`;
  const start = performance.now();
  const res = await fetch(`${base}/v1/${chat ? 'chat/completions' : 'completions'}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal: deadline,
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let ttft = null, usage = null, buf = '';
  const dec = new TextDecoder();
  for await (const part of res.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, k);
      buf = buf.slice(k + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const c = JSON.parse(ev.slice(6));
      if (c.error) throw new Error(JSON.stringify(c.error));
      if (c.usage) usage = c.usage;
      const text = c.choices?.[0]?.delta?.content ?? c.choices?.[0]?.text;
      if (text && ttft === null) ttft = performance.now() - start;
    }
  }
  if (!usage || usage.completion_tokens !== MAX_TOKENS) throw new Error(`usage ${JSON.stringify(usage)}`);
  return { ms: performance.now() - start, ttft, gen: usage.completion_tokens, prompt: usage.prompt_tokens };
}

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
}

(async () => {
  const results = [], errors = [];
  let next = 0;
  async function worker() {
    while (next < COUNT && !deadline.aborted) {
      const i = next++;
      try { results.push(await one(i)); } catch (e) { errors.push(String(e.message || e)); }
    }
  }
  await Promise.all(Array.from({ length: CONC }, worker));
  const wall = (Date.now() - t0) / 1000;
  const gen = results.reduce((a, r) => a + r.gen, 0), prompt = results.reduce((a, r) => a + r.prompt, 0);
  const lat = results.map((r) => r.ms), ttft = results.map((r) => r.ttft);
  const out = {
    requests: COUNT, concurrency: CONC, max_tokens: MAX_TOKENS, ok: results.length, errors: errors.length,
    wall_s: +wall.toFixed(2), requests_per_s: +(results.length / wall).toFixed(2),
    gen_tokens_per_s: +(gen / wall).toFixed(1), prompt_tokens: prompt, gen_tokens: gen,
    latency_ms: { p50: +pct(lat, 50).toFixed(1), p90: +pct(lat, 90).toFixed(1), p99: +pct(lat, 99).toFixed(1), max: +Math.max(...lat).toFixed(1) },
    ttft_ms: { p50: +pct(ttft, 50).toFixed(1), p90: +pct(ttft, 90).toFixed(1), p99: +pct(ttft, 99).toFixed(1) },
  };
  console.log(JSON.stringify(out));
  if (errors.length) console.error('errors:', errors.slice(0, 5));
  if (deadline.aborted) console.error(`the time limit of ${LIMIT / 1000} s passed`);
  process.exit(errors.length || results.length !== COUNT ? 1 : 0);
})();
