// Error statuses in OpenAI's schema: 400 (bad fields, malformed JSON, context overflow), 401
// (bearer auth), 404 (unknown model and route), 413 (body limit); /health and /metrics.
// The server runs with --api-key (TQ_API_KEY) and --max-body-bytes 65536 --ctx-size 512.
import { assert, baseURL, client, expectStatus, model, OpenAI, run } from './common.mjs';

const c = client();
const prompt = 'hello';

async function raw(path, { method = 'POST', body, auth = true, headers = {} } = {}) {
  const h = { 'Content-Type': 'application/json', ...headers };
  if (auth) h.Authorization = `Bearer ${process.env.TQ_API_KEY}`;
  const r = await fetch(baseURL + path, { method, headers: h, body });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, json, text, headers: r.headers };
}

function isOpenAiError(j) {
  return j && j.error && typeof j.error.message === 'string' && 'type' in j.error && 'param' in j.error && 'code' in j.error;
}

run('errors', async () => {
  // Auth: a wrong key and no key are 401; the right key works.
  await expectStatus(401, client({ apiKey: 'wrong' }).completions.create({ model, prompt, max_tokens: 1 }));
  const noKey = await raw('/v1/completions', { auth: false, body: JSON.stringify({ model, prompt }) });
  assert.equal(noKey.status, 401);
  assert.ok(isOpenAiError(noKey.json));
  assert.equal((await raw('/v1/models', { method: 'GET', auth: false })).status, 401);
  const models = await c.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
  assert.equal((await c.models.retrieve(model)).id, model);
  // Health and metrics stay open.
  assert.equal((await raw('/health', { method: 'GET', auth: false })).status, 200);
  assert.equal((await raw('/metrics', { method: 'GET', auth: false })).status, 200);

  // 400s that name the field.
  await expectStatus(400, c.completions.create({ model, prompt, temperature: 'hot' }), 'temperature');
  await expectStatus(400, c.completions.create({ model, prompt, temperature: 5 }), 'temperature');
  await expectStatus(400, c.completions.create({ model, prompt, top_p: 0 }), 'top_p');
  await expectStatus(400, c.completions.create({ model, prompt, max_tokens: -3 }), 'max_tokens');
  await expectStatus(400, c.completions.create({ model, prompt, n: 2 }), 'n');
  await expectStatus(400, c.completions.create({ model, prompt, logprobs: 50 }), 'logprobs');
  await expectStatus(400, c.completions.create({ model, prompt, stop: 7 }), 'stop');
  await expectStatus(400, c.completions.create({ model, prompt: '' }), 'prompt');
  await expectStatus(400, c.completions.create({ model, prompt: [1, 99999999] }), 'prompt');
  await expectStatus(400, c.completions.create({ model, prompt: ['a', 'b'] }), 'prompt');
  await expectStatus(400, c.completions.create({ model }), 'prompt');
  await expectStatus(400, c.chat.completions.create({ model, messages: [] }), 'messages');
  await expectStatus(400, c.chat.completions.create({ model, messages: [{ role: 'user' }] }), 'messages[0].content');
  await expectStatus(400, c.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), 'top_logprobs');
  await expectStatus(400, c.chat.completions.create({ model, messages: [{ role: 'user',
    content: [{ type: 'image_url', image_url: { url: 'http://x' } }] }] }), 'messages[0].content[0].type');
  // Context overflow: the prompt alone, or prompt + max_tokens, over --ctx-size 512.
  const long = 'word '.repeat(600);
  const e1 = await expectStatus(400, c.completions.create({ model, prompt: long, max_tokens: 1 }), 'prompt');
  assert.equal(e1.code, 'context_length_exceeded');
  await expectStatus(400, c.completions.create({ model, prompt, max_tokens: 600 }), 'max_tokens');
  // A 400 on a streaming request comes before any streaming starts.
  await expectStatus(400, c.completions.create({ model, prompt, stream: true, temperature: -1 }), 'temperature');

  // Malformed JSON and a non-object body.
  const bad = await raw('/v1/completions', { body: '{"model": "x", ' });
  assert.equal(bad.status, 400);
  assert.ok(isOpenAiError(bad.json));
  assert.equal(bad.json.error.code, 'invalid_json');
  assert.equal((await raw('/v1/chat/completions', { body: '[]' })).status, 400);

  // 404: unknown model (OpenAI's NotFoundError) and unknown route, both in the error schema.
  const nf = await expectStatus(404, c.completions.create({ model: 'no-such-model', prompt }), 'model');
  assert.ok(nf instanceof OpenAI.NotFoundError);
  await expectStatus(404, c.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }));
  const route = await raw('/v1/nothing-here', { body: '{}' });
  assert.equal(route.status, 404);
  assert.ok(isOpenAiError(route.json));
  assert.equal((await raw('/v1/completions', { method: 'GET' })).status, 404);

  // 413: a body over --max-body-bytes.
  const big = JSON.stringify({ model, prompt: 'x'.repeat(100000) });
  const tooBig = await raw('/v1/completions', { body: big });
  assert.equal(tooBig.status, 413);
  assert.ok(isOpenAiError(tooBig.json));

  // The server is still healthy and serving after all that.
  const ok = await c.completions.create({ model, prompt, max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});
