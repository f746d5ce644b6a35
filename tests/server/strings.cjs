// Strings cJSON would read wrongly (ts_json_check, include/turbospark.h): the escape \u0000 ends a
// C string, so a field holding it would silently lose its tail. A completion's prompt and
// /tokenize's content are carried whole (the tokenizer takes a length): the answer is that of the
// whole text. Every other
// string holding it is refused with a 400 naming the field, on every endpoint that takes text; lone
// surrogate escapes and raw bytes that are not UTF-8 are refused everywhere, never replaced.
// Env: SV_URL (a server of the demo model with its own template).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenAI } = require('openai');

const base = process.env.SV_URL;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', timeout: 60_000, maxRetries: 0 });
const model = 'demo.gguf';
const NUL_MSG = /contains a NUL character \(\\u0000\), which this server cannot carry/;

// POST a body (an object, or a string / Buffer sent as it is)
async function post(path, body) {
  const data = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const res = await fetch(base + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: data });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { assert.fail(`not JSON (${res.status}): ${text}`); }
  return { status: res.status, json };
}
function refused(r, param, code, what, message) {
  assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.json)}`);
  assert.deepEqual(Object.keys(r.json.error).sort(), ['code', 'message', 'param', 'type'], what);
  assert.equal(r.json.error.param, param, `${what}: ${JSON.stringify(r.json)}`);
  assert.equal(r.json.error.code, code, `${what}: ${JSON.stringify(r.json)}`);
  if (message) assert.match(r.json.error.message, message, what);
}
const rejects = (promise, param, code, message) => assert.rejects(promise, (e) => {
  assert.ok(e instanceof OpenAI.BadRequestError, String(e));
  assert.equal(e.param, param, e.message);
  assert.equal(e.code, code, e.message);
  if (message) assert.match(e.message, message);
  return true;
});

test('a prompt with a NUL is carried whole: /tokenize, /detokenize and completions agree', async () => {
  const text = 'And the LORD said\u0000unto Moses';
  const tok = await post('/tokenize', { content: text, with_pieces: true });
  assert.equal(tok.status, 200, JSON.stringify(tok.json));
  assert.equal(tok.json.tokens.map((t) => t.piece).join(''), text, 'the pieces are the whole text');
  assert.ok(tok.json.tokens.some((t) => t.piece.includes('\u0000')), 'a token holds the NUL');
  const ids = tok.json.tokens.map((t) => t.id);
  const cut = await post('/tokenize', { content: 'And the LORD said' });
  assert.ok(ids.length > cut.json.tokens.length + 2, `${ids.length} tokens, ${cut.json.tokens.length} before the NUL`);
  const plain = await post('/tokenize', { content: text });
  assert.deepEqual(plain.json.tokens, ids);
  const det = await post('/detokenize', { tokens: ids });
  assert.equal(det.status, 200);
  assert.equal(det.json.content, text, 'back to the text, NUL and all');

  // completions: the answer to the whole text is the answer to its ids, in every form of prompt
  const ask = (prompt, extra = {}) => client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, ...extra });
  const byIds = await ask(ids);
  for (const prompt of [text, [text]]) {
    const r = await ask(prompt);
    assert.equal(r.usage.prompt_tokens, ids.length, JSON.stringify(prompt));
    assert.equal(r.choices[0].text, byIds.choices[0].text);
  }
  const chunks = [];
  for await (const c of await ask(text, { stream: true, stream_options: { include_usage: true } })) chunks.push(c);
  assert.equal(chunks.at(-1).usage.prompt_tokens, ids.length);
  assert.equal(chunks.map((k) => (k.choices.length ? k.choices[0].text : '')).join(''), byIds.choices[0].text);
});

test('chat and /apply-template: a NUL anywhere is refused with the name of its field', async () => {
  const msgs = [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'abc\u0000def' }];
  const msg = "'messages[2].content' contains a NUL character (\\u0000), which this server cannot carry";
  await rejects(client.chat.completions.create({ model, messages: msgs, max_tokens: 4 }), 'messages[2].content', 'invalid_value');
  await assert.rejects(client.chat.completions.create({ model, messages: msgs, max_tokens: 4 }), (e) => e.error.message === msg);
  await rejects(client.chat.completions.create({ model, messages: msgs, max_tokens: 4, stream: true }), 'messages[2].content', 'invalid_value', NUL_MSG);
  refused(await post('/apply-template', { messages: msgs }), 'messages[2].content', 'invalid_value', 'apply-template', NUL_MSG);

  const u = [{ role: 'user', content: 'hi' }];
  const tool = (fn) => [{ type: 'function', function: { name: 'f', parameters: { type: 'object' }, ...fn } }];
  const cases = [
    [{ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b\u0000' }] }] }, 'messages[0].content[1].text'],
    [{ messages: [{ role: 'system', content: '\u0000' }, ...u] }, 'messages[0].content'],
    [{ messages: [{ role: 'user\u0000', content: 'a' }] }, 'messages[0].role'],
    [{ messages: [...u, { role: 'assistant', content: 'x', reasoning_content: 'r\u0000' }] }, 'messages[1].reasoning_content'],
    [{ messages: [...u, { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{"x": "\u0000"}' } }] }] },
      'messages[1].tool_calls[0].function.arguments'],
    [{ messages: u, stop: ['x', 'a\u0000'] }, 'stop[1]'],
    [{ messages: u, tools: tool({ description: 'd\u0000' }) }, 'tools[0].function.description'],
    [{ messages: u, tools: tool({ parameters: { type: 'object', properties: { x: { type: 'string', description: '\u0000' } } } }) },
      'tools[0].function.parameters.properties.x.description'],
    [{ messages: u, tools: tool({}), tool_choice: { type: 'function', function: { name: 'f\u0000' } } }, 'tool_choice.function.name'],
    [{ messages: u, response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { enum: ['a', 'b\u0000'] } } } },
      'response_format.json_schema.schema.enum[1]'],
    [{ messages: u, json_schema: { const: '\u0000' } }, 'json_schema.const'],
    [{ messages: u, grammar: 'root ::= "a\u0000"' }, 'grammar'],
    [{ messages: u, chat_template_kwargs: { enable_thinking: false, name: 'x\u0000' } }, 'chat_template_kwargs.name'],
    [{ messages: u, model: 'demo\u0000.gguf' }, 'model'],
    [{ messages: u, user: 'someone\u0000' }, 'user'], // ignored fields too: the rule is the body's
  ];
  for (const [body, param] of cases) {
    await rejects(client.chat.completions.create({ model, max_tokens: 4, ...body }), param, 'invalid_value', NUL_MSG);
    refused(await post('/apply-template', body), param, 'invalid_value', `apply-template ${param}`, NUL_MSG);
  }
  // a key: named by its object
  refused(await post('/v1/chat/completions', { messages: [{ role: 'user', 'content\u0000': 'x', content: 'y' }] }),
    'messages[0]', 'invalid_value', 'a key', /a key of 'messages\[0\]' contains a NUL/);
  refused(await post('/v1/chat/completions', { messages: u, 'stream\u0000': true }), null, 'invalid_value', 'a top-level key');
});

test('completions and /tokenize: a NUL outside the text is refused by name', async () => {
  await rejects(client.completions.create({ model, prompt: 'x', stop: 'a\u0000' }), 'stop', 'invalid_value', NUL_MSG);
  await rejects(client.completions.create({ model, prompt: 'x', stop: ['\n', '\u0000'] }), 'stop[1]', 'invalid_value', NUL_MSG);
  await rejects(client.completions.create({ model, prompt: 'x', suffix: '\u0000' }), 'suffix', 'invalid_value', NUL_MSG);
  await rejects(client.completions.create({ model, prompt: 'x', grammar: 'root ::= "\u0000"' }), 'grammar', 'invalid_value', NUL_MSG);
  refused(await post('/v1/completions', { prompt: 'x', logit_bias: { '11\u0000': 5 } }), 'logit_bias', 'invalid_value', 'logit_bias key');
  refused(await post('/tokenize', { content: 'x', note: '\u0000' }), 'note', 'invalid_value', 'tokenize', NUL_MSG);
  refused(await post('/detokenize', { tokens: [1], note: '\u0000' }), 'note', 'invalid_value', 'detokenize', NUL_MSG);
  // an escaped backslash before u0000 is text, not a NUL
  const t = await post('/tokenize', { content: '\\u0000', with_pieces: true });
  assert.equal(t.json.tokens.map((k) => k.piece).join(''), '\\u0000');
});

test('lone surrogates, bad \\u escapes and invalid UTF-8: refused, never replaced', async () => {
  // JSON.stringify writes a lone surrogate as the escape \ud800 (ES2019)
  await rejects(client.completions.create({ model, prompt: 'a\ud800b', max_tokens: 1 }), 'prompt', 'invalid_value', /lone surrogate escape \\ud800/);
  await rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: '\udc00' }], max_tokens: 1 }),
    'messages[0].content', 'invalid_value', /lone surrogate/);
  const raw = [
    ['/v1/completions', '{"prompt":"a\\ud800\\u0041","max_tokens":1}', 'prompt', 'invalid_value'],
    ['/v1/completions', '{"prompt":"\\uZZZZ","max_tokens":1}', null, 'invalid_json'], // cJSON reads it as \u0000
    ['/v1/completions', '{"prompt":"\\u00e","max_tokens":1}', null, 'invalid_json'],
    ['/v1/completions', Buffer.from('{"prompt":"a\xc0\x80b","max_tokens":1}', 'latin1'), 'prompt', 'invalid_value'], // overlong NUL
    ['/v1/completions', Buffer.from('{"prompt":"And \xff\xfe the LORD","max_tokens":1}', 'latin1'), 'prompt', 'invalid_value'],
    ['/v1/completions', Buffer.from('{"prompt":"\xed\xa0\x80","max_tokens":1}', 'latin1'), 'prompt', 'invalid_value'], // encoded surrogate
    ['/v1/chat/completions', Buffer.from('{"messages":[{"role":"user","content":"x\xc3"}]}', 'latin1'), 'messages[0].content', 'invalid_value'],
    ['/apply-template', '{"messages":[{"role":"user","content":"\\ud83d"}]}', 'messages[0].content', 'invalid_value'],
    ['/tokenize', Buffer.from('{"content":"\xf4\x90\x80\x80"}', 'latin1'), 'content', 'invalid_value'], // past U+10FFFF
    ['/tokenize', '{"content":"\\udfff"}', 'content', 'invalid_value'],
  ];
  for (const [path, body, param, code] of raw) refused(await post(path, body), param, code, `${path} ${body}`);
  // a surrogate pair is one character (its bytes may be split between tokens: /detokenize joins them)
  const t = await post('/tokenize', '{"content":"\\ud83d\\ude00"}');
  assert.equal(t.status, 200);
  assert.deepEqual(t.json, (await post('/tokenize', { content: '\u{1F600}' })).json);
  assert.equal((await post('/detokenize', t.json)).json.content, '\u{1F600}');
});
