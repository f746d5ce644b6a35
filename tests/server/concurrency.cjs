// Continuous batching must not change answers: 8 greedy clients (temperature 0), started together
// or staggered so that they join running batches, each receive exactly what they receive alone.
// The mix: completions and chat, streamed and whole, stop strings, different lengths, and one long
// prompt whose chunked prefill runs while the others decode. Env: SV_URL.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const base = process.env.SV_URL;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const long = 'And it came to pass after these things, that God did tempt Abraham, and said unto him, Abraham: '.repeat(16);

const jobs = [
  { kind: 'completion', prompt: 'And the LORD said', max_tokens: 64 },
  { kind: 'completion', prompt: 'In the beginning God created', max_tokens: 64, stream: true },
  { kind: 'chat', messages: [{ role: 'user', content: 'Who was Moses?' }], max_tokens: 48 },
  { kind: 'chat', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me of David.' }], max_tokens: 72, stream: true },
  { kind: 'completion', prompt: long, max_tokens: 48 },
  { kind: 'completion', prompt: 'Blessed are the meek', max_tokens: 80, stop: ['.', ';'], stream: true },
  { kind: 'chat', messages: [{ role: 'user', content: 'What did Noah build?' }], max_tokens: 64, stop: ['\n'] },
  { kind: 'completion', prompt: 'The heavens declare', max_tokens: 72, stream: true },
];

async function run(j) {
  const common = { model: 'demo.gguf', max_tokens: j.max_tokens, temperature: 0, stop: j.stop };
  if (j.kind === 'completion') {
    const req = { ...common, prompt: j.prompt };
    if (!j.stream) {
      const r = await client.completions.create(req);
      return { text: r.choices[0].text, finish: r.choices[0].finish_reason, n: r.usage.completion_tokens };
    }
    let text = '', finish = null, n = null;
    for await (const c of await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
      if (c.usage) n = c.usage.completion_tokens;
      if (c.choices.length) text += c.choices[0].text, finish = c.choices[0].finish_reason ?? finish;
    }
    return { text, finish, n };
  }
  const req = { ...common, messages: j.messages };
  if (!j.stream) {
    const r = await client.chat.completions.create(req);
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason, n: r.usage.completion_tokens };
  }
  let text = '', finish = null, n = null;
  for await (const c of await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
    if (c.usage) n = c.usage.completion_tokens;
    if (c.choices.length) text += c.choices[0].delta.content ?? '', finish = c.choices[0].finish_reason ?? finish;
  }
  return { text, finish, n };
}

async function metrics() {
  const t = await (await fetch(`${base}/metrics`)).text();
  const get = (name) => Number(t.match(new RegExp(`^${name} (\\S+)$`, 'm'))[1]);
  return { steps: get('turbospark_batch_steps_total'), seqs: get('turbospark_batch_sequences_total') };
}

test('8 concurrent greedy clients each get what they get alone', async () => {
  const alone = [];
  for (const j of jobs) alone.push(await run(j));
  for (const a of alone) assert.ok(a.text.length > 0 && ['stop', 'length'].includes(a.finish) && a.n > 0, JSON.stringify(a));

  const m0 = await metrics();
  const together = await Promise.all(jobs.map(run));
  const m1 = await metrics();
  // staggered: each starts while the earlier ones decode, and joins between steps
  const staggered = await Promise.all(jobs.map((j, i) => new Promise((r) => setTimeout(r, 15 * i)).then(() => run(j))));
  // reversed order: other requests wait in the queue and take other slots
  const reversed = (await Promise.all([...jobs].reverse().map(run))).reverse();

  for (let i = 0; i < jobs.length; i++) {
    assert.deepEqual(together[i], alone[i], `job ${i} together`);
    assert.deepEqual(staggered[i], alone[i], `job ${i} staggered`);
    assert.deepEqual(reversed[i], alone[i], `job ${i} reversed`);
  }
  const mean = (m1.seqs - m0.seqs) / (m1.steps - m0.steps);
  console.log(`mean sequences per step while 8 ran together: ${mean.toFixed(2)}`);
  assert.ok(mean > 1.5, `requests were decoded together (mean batch ${mean})`);
});
