// Client disconnects cancel generation: a stream aborted mid-way and a non-streaming request
// aborted while waiting both free their sequence (running 0, KV bytes 0 in /metrics).
import { assert, client, metric, metrics, model, OpenAI, run, waitFor } from './common.mjs';

const c = client();
const body = { model, prompt: 'def fibonacci(n):', max_tokens: 4000, ignore_eos: true };

run('cancel', async () => {
  const stream = await c.completions.create({ ...body, stream: true });
  let chunks = 0;
  for await (const ch of stream) {
    if (++chunks === 5) break;  // leaving the loop aborts the HTTP request
  }
  // While it ran, it was visible (checked loosely: it may already be gone).
  await waitFor('the aborted stream to be freed', async () => {
    const m = await metrics();
    return metric(m, 'tq_requests_running') === 0 && metric(m, 'tq_client_cancellations_total') >= 1 &&
           metric(m, 'tq_kv_cache_bytes', { kind: 'dense' }) === 0 && metric(m, 'tq_requests_inflight') === 0;
  });
  let m = await metrics();
  const generated = metric(m, 'tq_generation_tokens_total');
  assert.ok(generated < 4000, `generation stopped early (${generated} tokens)`);

  // Non-streaming: abort while the server is still generating.
  const ac = new AbortController();
  const p = c.completions.create(body, { signal: ac.signal });
  await waitFor('the request to start', async () => {
    const mm = await metrics();
    return metric(mm, 'tq_requests_running') === 1 && metric(mm, 'tq_kv_cache_bytes', { kind: 'dense' }) > 0;
  });
  ac.abort();
  await assert.rejects(p, (e) => e instanceof OpenAI.APIUserAbortError);
  await waitFor('the aborted request to be freed', async () => {
    const mm = await metrics();
    return metric(mm, 'tq_requests_running') === 0 && metric(mm, 'tq_client_cancellations_total') >= 2 &&
           metric(mm, 'tq_kv_cache_bytes', { kind: 'dense' }) === 0;
  });
  m = await metrics();
  assert.ok(metric(m, 'tq_generation_tokens_total') - generated < 4000, 'the second request stopped early');
  assert.ok(metric(m, 'tq_requests_total', { endpoint: '/v1/completions', outcome: 'cancelled' }) >= 2);
  // The server keeps serving.
  const r = await c.completions.create({ model, prompt: 'x', max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});
