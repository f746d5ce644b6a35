// Slot persistence as llama-server has it: GET /slots, POST /slots/{id}?action=save|restore|erase
// with --slot-save-path. The expected answers are those of the same request computed cold
// (cache_prompt: false): a restored slot holds a bit copy of the saved state, and its prompt is cut
// into the same chunks as the cold one (the saved prefix is 256 tokens, the prefill chunk), so greedy
// text and log-probabilities must be identical.
// Env: SV_A (--slot-save-path, 2 slots, --cache-ram 0), SV_B (the same directory, 1 slot, the prefix
// cache on), SV_C (no --slot-save-path), SV_E (the same directory, -c 128), SV_F (another model, the
// same directory), SLOT_DIR, TS_BIN, TS_MODEL (see test_slots.sh).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { OpenAI } = require('openai');

const { SV_A, SV_B, SV_C, SV_E, SV_F, SLOT_DIR } = process.env;
const open = (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'none', timeout: 120_000, maxRetries: 0 });
const A = open(SV_A), B = open(SV_B), F = open(SV_F);
const long = 'And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them, ';
const all = execFileSync(process.env.TS_BIN, ['tokenize', '-m', process.env.TS_MODEL, '-p', long.repeat(20)])
  .toString().trim().split(/\s+/).map(Number);
const P = all.slice(0, 256), Q = all.slice(256, 300); // the saved prefix (one prefill chunk) and the rest
assert.ok(all.length >= 300, `${all.length} tokens`);

const ask = (c, prompt, extra = {}) => c.completions.create({ model: 'demo.gguf', prompt, max_tokens: 12, temperature: 0, logprobs: 2, ignore_eos: true, ...extra });

// POST /slots/{id}?action=...; body undefined: none; a string or Buffer: sent as it is
async function slot(url, id, action, body, headers = { 'Content-Type': 'application/json' }) {
  const q = action === undefined ? '' : `?action=${encodeURIComponent(action)}`;
  const data = body === undefined ? '' : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const res = await fetch(`${url}/slots/${id}${q}`, { method: 'POST', headers, body: data });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { assert.fail(`not JSON (${res.status}): ${text}`); }
  return { status: res.status, json };
}
const slots = async (url) => {
  const res = await fetch(`${url}/slots`);
  assert.equal(res.status, 200);
  return res.json();
};
async function metric(url, name) {
  const t = await (await fetch(`${url}/metrics`)).text();
  const m = t.match(new RegExp(`^${name.replace(/[{}"]/g, '\\$&')} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}
function refused(r, status, param, code, what) {
  assert.equal(r.status, status, `${what}: ${JSON.stringify(r.json)}`);
  assert.equal(typeof r.json.error.message, 'string');
  assert.ok(r.json.error.message.length > 10, r.json.error.message);
  if (param !== undefined) assert.equal(r.json.error.param, param, `${what}: ${JSON.stringify(r.json)}`);
  if (code !== undefined) assert.equal(r.json.error.code, code, `${what}: ${JSON.stringify(r.json)}`);
}

let cold, saved; // the cold answer to P + Q, and the save's response

test('GET /slots lists the slots, idle and empty at first', async () => {
  const s = await slots(SV_A);
  assert.deepEqual(s, [0, 1].map((id) => ({ id, n_ctx: 1024, speculative: false, is_processing: false, n_prompt_tokens: 0 })));
});

test('save a slot after a request, erase it, restore it: the next request reuses the prefix and answers as cold', async () => {
  cold = await ask(A, [...P, ...Q], { cache_prompt: false });
  assert.equal(cold.usage.prompt_tokens_details.cached_tokens, 0);
  await ask(A, P, { max_tokens: 1 }); // its slot now holds P (the reply's one token is never evaluated)
  let s = await slots(SV_A);
  const x = s.find((e) => e.n_prompt_tokens === P.length);
  assert.ok(x && !x.is_processing, JSON.stringify(s));

  const sv = await slot(SV_A, x.id, 'save', { filename: 'prefix.bin' });
  assert.equal(sv.status, 200, JSON.stringify(sv.json));
  assert.deepEqual(Object.keys(sv.json).sort(), ['filename', 'id_slot', 'n_saved', 'n_written', 'timings']);
  assert.equal(sv.json.id_slot, x.id);
  assert.equal(sv.json.filename, 'prefix.bin');
  assert.equal(sv.json.n_saved, P.length);
  assert.equal(sv.json.n_written, fs.statSync(path.join(SLOT_DIR, 'prefix.bin')).size);
  assert.ok(sv.json.timings.save_ms >= 0);
  saved = sv.json;

  const er = await slot(SV_A, x.id, 'erase'); // llama-server's erase takes no body
  assert.equal(er.status, 200, JSON.stringify(er.json));
  assert.deepEqual(er.json, { id_slot: x.id, n_erased: P.length });
  s = await slots(SV_A);
  assert.equal(s[x.id].n_prompt_tokens, 0);
  const gone = await ask(A, [...P, ...Q]); // nothing holds the prefix now
  assert.equal(gone.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(gone.choices[0].text, cold.choices[0].text);

  const y = 1 - x.id; // the other slot: a file is not tied to the slot it came from
  const rs = await slot(SV_A, y, 'restore', { filename: 'prefix.bin' });
  assert.equal(rs.status, 200, JSON.stringify(rs.json));
  assert.deepEqual(Object.keys(rs.json).sort(), ['filename', 'id_slot', 'n_read', 'n_restored', 'timings']);
  assert.equal(rs.json.id_slot, y);
  assert.equal(rs.json.n_restored, P.length);
  assert.equal(rs.json.n_read, saved.n_written);
  assert.ok(rs.json.timings.restore_ms >= 0);
  assert.equal((await slots(SV_A))[y].n_prompt_tokens, P.length);

  const warm = await ask(A, [...P, ...Q]);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, P.length, JSON.stringify(warm.usage));
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  assert.deepEqual(warm.choices[0].logprobs.token_logprobs, cold.choices[0].logprobs.token_logprobs);
});

test('another server restores the file: the same answer, and only the rest of the prompt is evaluated', async () => {
  const p0 = await metric(SV_B, 'turbospark_prompt_tokens_total');
  const rs = await slot(SV_B, 0, 'restore', { filename: 'prefix.bin' });
  assert.equal(rs.status, 200, JSON.stringify(rs.json));
  assert.equal(rs.json.n_restored, P.length);
  const warm = await ask(B, [...P, ...Q]);
  assert.equal(warm.usage.prompt_tokens_details.cached_tokens, P.length, JSON.stringify(warm.usage));
  assert.equal(warm.choices[0].text, cold.choices[0].text);
  assert.deepEqual(warm.choices[0].logprobs.token_logprobs, cold.choices[0].logprobs.token_logprobs);
  assert.equal((await metric(SV_B, 'turbospark_prompt_tokens_total')) - p0, Q.length);
});

test('file names: a plain name in the slot directory only (llama.cpp\'s fs_validate_filename)', async () => {
  const before = fs.readdirSync(SLOT_DIR).sort();
  const bad = ['../x.bin', '..', '.', 'a/b.bin', 'a\\b.bin', '/tmp/x.bin', 'x..y', ' a.bin', 'a.bin ', 'a.', 'a:b',
    'a*b', 'a?b', 'a"b', 'a<b', 'a>b', 'a|b', 'a\u0000b', 'a\u0007b', 'a\u007fb', 'a\u0085b', 'a\u2215b', 'a\u2216b',
    'a\uff0eb', 'a\ufeffb', 'a\ufffdb', 'x'.repeat(256), ''];
  for (const name of bad)
    for (const action of ['save', 'restore'])
      refused(await slot(SV_A, 0, action, { filename: name }), 400, 'filename', 'invalid_value', `${action} ${JSON.stringify(name)}`);
  for (const body of [{}, { filename: 5 }, { filename: null }, { filename: ['a.bin'] }, { name: 'a.bin' }])
    refused(await slot(SV_A, 0, 'save', body), 400, 'filename', undefined, JSON.stringify(body));
  refused(await slot(SV_A, 0, 'save', Buffer.from('{"filename": "a\xffb.bin"}', 'latin1')), 400, 'filename', 'invalid_value', 'invalid UTF-8');
  refused(await slot(SV_A, 0, 'save', 'not json'), 400, undefined, 'invalid_json', 'not JSON');
  refused(await slot(SV_A, 0, 'save', '[]'), 400, undefined, 'invalid_type', 'not an object');
  assert.deepEqual(fs.readdirSync(SLOT_DIR).sort(), before, 'nothing was written');
  assert.ok(!fs.existsSync(path.join(SLOT_DIR, '..', 'x.bin')));
  // the longest name and one of other scripts are fine
  for (const name of ['y'.repeat(255), 'Ärger-日本-🙂.bin']) {
    const r = await slot(SV_A, 0, 'save', { filename: name });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.filename, name);
    assert.ok(fs.statSync(path.join(SLOT_DIR, name)).isFile());
  }
});

test('slot ids, actions and methods are checked; without --slot-save-path the actions are refused (501)', async () => {
  for (const id of ['2', '-1', 'abc', '1x', '99999999999', '0.5', '%20'])
    refused(await slot(SV_A, id, 'save', { filename: 'ok.bin' }), 400, 'id_slot', 'invalid_value', `slot ${id}`);
  refused(await slot(SV_A, 0, undefined, { filename: 'ok.bin' }), 400, 'action', 'missing_required_parameter', 'no action');
  for (const a of ['foo', 'SAVE', ''])
    refused(await slot(SV_A, 0, a, { filename: 'ok.bin' }), 400, 'action', undefined, `action ${a}`);
  refused(await slot(SV_A, 0, 'erase', '', {}), 415, undefined, 'unsupported_media_type', 'no Content-Type');
  const get = await fetch(`${SV_A}/slots/0`);
  assert.equal(get.status, 405);
  assert.equal(get.headers.get('allow'), 'POST');
  const post = await fetch(`${SV_A}/slots`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
  assert.equal(post.status, 405);
  for (const a of ['save', 'restore', 'erase']) {
    const r = await slot(SV_C, 0, a, { filename: 'prefix.bin' });
    refused(r, 501, undefined, 'not_supported', `${a} without --slot-save-path`);
    assert.equal(r.json.error.type, 'not_supported_error');
    assert.match(r.json.error.message, /--slot-save-path/);
  }
  assert.equal((await slots(SV_C)).length, 1, 'GET /slots works without it');
});

test('restore refuses a missing, damaged, foreign or oversized file and leaves the slot as it was', async () => {
  const good = fs.readFileSync(path.join(SLOT_DIR, 'prefix.bin'));
  const put = (name, bytes) => fs.writeFileSync(path.join(SLOT_DIR, name), bytes);
  const flip = Buffer.from(good);
  flip[good.length >> 1] ^= 1;
  put('trunc.bin', good.subarray(0, good.length - 100));
  put('flip.bin', flip);
  put('padded.bin', Buffer.concat([good, Buffer.alloc(4)]));
  put('garbage.bin', Buffer.from('hello, world'));
  put('empty.bin', Buffer.alloc(0));
  put('header.bin', good.subarray(0, 20));
  fs.mkdirSync(path.join(SLOT_DIR, 'adir.bin'));
  execFileSync('mkfifo', [path.join(SLOT_DIR, 'fifo.bin')]); // must not hang the request

  const y = (await slots(SV_A)).findIndex((e) => e.n_prompt_tokens > 0);
  const held = (await slots(SV_A))[y].n_prompt_tokens;
  refused(await slot(SV_A, y, 'restore', { filename: 'nope.bin' }), 404, 'filename', 'file_not_found', 'missing');
  for (const [name, why] of [['trunc.bin', /damaged|truncated/], ['flip.bin', /damaged/], ['padded.bin', /damaged/],
    ['garbage.bin', /not a turbospark slot file/], ['empty.bin', /not a turbospark slot file/], ['header.bin', /not a turbospark slot file/],
    ['adir.bin', /not a regular file/], ['fifo.bin', /not a regular file/]]) {
    const r = await slot(SV_A, y, 'restore', { filename: name });
    refused(r, 400, 'filename', 'invalid_slot_file', name);
    assert.match(r.json.error.message, why, name);
    assert.equal((await slots(SV_A))[y].n_prompt_tokens, held, `${name}: the slot is unchanged`);
  }
  // a directory in the way of a save
  refused(await slot(SV_A, y, 'save', { filename: 'adir.bin' }), 400, 'filename', 'invalid_slot_file', 'save onto a directory');

  // another model's state
  await F.completions.create({ model: 'tiny.gguf', prompt: 'And it came to pass', max_tokens: 4, temperature: 0 });
  const fsv = await slot(SV_F, 0, 'save', { filename: 'foreign.bin' });
  assert.equal(fsv.status, 200, JSON.stringify(fsv.json));
  const r = await slot(SV_A, y, 'restore', { filename: 'foreign.bin' });
  refused(r, 400, 'filename', 'invalid_slot_file', 'foreign');
  assert.match(r.json.error.message, /another model/);
  assert.equal((await slots(SV_A))[y].n_prompt_tokens, held, 'foreign: the slot is unchanged');

  // a slot of 128 tokens cannot take a state of 256
  const e = await slot(SV_E, 0, 'restore', { filename: 'prefix.bin' });
  refused(e, 400, 'filename', 'invalid_slot_file', 'too long');
  assert.match(e.json.error.message, /more than/);
  assert.equal((await slots(SV_E))[0].n_prompt_tokens, 0);

  // the slot still answers as before
  const warm = await ask(A, [...P, ...Q]);
  assert.equal(warm.choices[0].text, cold.choices[0].text);
});

test('a slot running a request is busy: save, restore and erase are refused (409) until it is idle', async () => {
  const ac = new AbortController();
  const stream = await B.completions.create({ model: 'demo.gguf', prompt: 'And it came to pass', max_tokens: 900, ignore_eos: true, temperature: 0, stream: true }, { signal: ac.signal });
  const it = stream[Symbol.asyncIterator]();
  await it.next(); // the request is running
  assert.equal((await slots(SV_B))[0].is_processing, true);
  for (const [a, body] of [['save', { filename: 'busy.bin' }], ['restore', { filename: 'prefix.bin' }], ['erase', undefined]])
    refused(await slot(SV_B, 0, a, body), 409, 'id_slot', 'slot_busy', `${a} while busy`);
  const full = await fetch(`${SV_B}/slots?fail_on_no_slot=1`);
  assert.equal(full.status, 503);
  ac.abort();
  try { for (;;) if ((await it.next()).done) break; } catch (e) {
    assert.ok(e.name === 'APIUserAbortError' || e.name === 'AbortError', String(e));
  }
  for (let i = 0; i < 200 && (await slots(SV_B))[0].is_processing; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal((await slots(SV_B))[0].is_processing, false);
  assert.equal((await fetch(`${SV_B}/slots?fail_on_no_slot=1`)).status, 200);
  assert.ok(!fs.existsSync(path.join(SLOT_DIR, 'busy.bin')));
  const er = await slot(SV_B, 0, 'erase', {});
  assert.equal(er.status, 200, JSON.stringify(er.json));
});
