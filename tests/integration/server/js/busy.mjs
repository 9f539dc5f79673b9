// Admission: with --max-concurrency 1 --max-queue 1, requests beyond the queue get a retryable
// 503 with Retry-After at once (never a hang), and the server serves again afterwards.
import { assert, client, metric, metrics, model, run } from './common.mjs';

const c = client();
const body = { model, prompt: 'def fibonacci(n):', max_tokens: 300, ignore_eos: true };

run('busy', async () => {
  const t0 = Date.now();
  const results = await Promise.allSettled(Array.from({ length: 5 }, () => c.completions.create(body)));
  const ok = results.filter((r) => r.status === 'fulfilled');
  const busy = results.filter((r) => r.status === 'rejected');
  assert.ok(ok.length >= 2, `at least the running and the queued request succeed (${ok.length})`);
  assert.ok(busy.length >= 1, 'some requests are turned away');
  for (const r of busy) {
    assert.equal(r.reason.status, 503, r.reason.message);
    assert.equal(r.reason.headers.get('retry-after'), '1');
    assert.equal(r.reason.code, 'server_busy');
  }
  for (const r of ok) assert.equal(r.value.usage.completion_tokens, 300);
  const m = await metrics();
  assert.equal(metric(m, 'tq_requests_total', { endpoint: '/v1/completions', outcome: 'rejected' }), busy.length);
  // The retry the 503 asks for now succeeds.
  const again = await c.completions.create({ ...body, max_tokens: 2 });
  assert.equal(again.usage.completion_tokens, 2);
  console.log(JSON.stringify({ ok: ok.length, rejected: busy.length, seconds: (Date.now() - t0) / 1000 }));
});
