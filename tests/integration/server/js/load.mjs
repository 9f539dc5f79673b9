// Bounded load run: N requests (argv[2], default 200) at concurrency C (argv[3], default 16),
// short prompts, completions and chat, streaming and not. Every response must arrive and be
// well formed; prints throughput.
import { assert, client, metric, metrics, model, run, waitFor } from './common.mjs';

const total = Number(process.argv[2] ?? 200);
const concurrency = Number(process.argv[3] ?? 16);
const c = client();
const topics = ['sort a list', 'parse a date', 'read a file', 'fibonacci', 'binary search', 'a stack class'];

async function one(i) {
  const max_tokens = 4 + (i % 13);
  const prompt = `# ${topics[i % topics.length]} (${i})\ndef f`;
  const stream = i % 2 === 1, chat = i % 3 === 0;
  let text = '', finish = null, usage = null;
  if (chat) {
    const body = { model, messages: [{ role: 'user', content: prompt }], max_tokens, temperature: i % 4 === 0 ? 0.8 : 0, seed: i };
    if (stream) {
      for await (const ch of await c.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) {
        if (ch.usage) usage = ch.usage;
        if (!ch.choices.length) continue;
        text += ch.choices[0].delta.content ?? '';
        finish = ch.choices[0].finish_reason ?? finish;
      }
    } else {
      const r = await c.chat.completions.create(body);
      text = r.choices[0].message.content; finish = r.choices[0].finish_reason; usage = r.usage;
    }
  } else {
    const body = { model, prompt, max_tokens, temperature: i % 4 === 0 ? 0.8 : 0, seed: i };
    if (stream) {
      for await (const ch of await c.completions.create({ ...body, stream: true, stream_options: { include_usage: true } })) {
        if (ch.usage) usage = ch.usage;
        if (!ch.choices.length) continue;
        text += ch.choices[0].text;
        finish = ch.choices[0].finish_reason ?? finish;
      }
    } else {
      const r = await c.completions.create(body);
      text = r.choices[0].text; finish = r.choices[0].finish_reason; usage = r.usage;
    }
  }
  assert.equal(typeof text, 'string');
  assert.ok(finish === 'stop' || finish === 'length', `finish_reason ${finish}`);
  assert.ok(usage && usage.prompt_tokens > 0, 'usage.prompt_tokens');
  assert.ok(usage.completion_tokens >= 1 && usage.completion_tokens <= max_tokens, 'usage.completion_tokens');
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  if (finish === 'length') assert.equal(usage.completion_tokens, max_tokens);
  return usage.completion_tokens;
}

run('load', async () => {
  let next = 0, ok = 0, tokens = 0;
  const failures = [];
  const t0 = Date.now();
  async function worker() {
    while (next < total) {
      const i = next++;
      try {
        const n = await one(i);
        tokens += n;
        ok++;
      } catch (e) {
        failures.push(`request ${i}: ${e.message}`);
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = (Date.now() - t0) / 1000;
  const m = await metrics();
  const summary = { requests: total, concurrency, ok, failed: failures.length, seconds,
                    requests_per_s: total / seconds, completion_tokens: tokens,
                    completion_tokens_per_s: tokens / seconds,
                    server_decode_tokens_per_s: metric(m, 'tq_decode_tokens_per_second'),
                    server_prefill_tokens_per_s: metric(m, 'tq_prefill_tokens_per_second') };
  console.log(JSON.stringify(summary));
  assert.deepEqual(failures, [], 'lost or malformed responses');
  assert.equal(ok, total);
  const served = metric(m, 'tq_requests_total', { endpoint: '/v1/completions', outcome: 'success' }) +
                 metric(m, 'tq_requests_total', { endpoint: '/v1/chat/completions', outcome: 'success' });
  assert.equal(served, total, 'the server counted every request as a success');
  // The engine releases a finished sequence's cache after its last bytes went out, so the gauge
  // may trail the client by a step: wait for it to drain (a leaked sequence never does).
  await waitFor('no sequence left running', async () =>
    metric(await metrics(), 'tq_requests_running') === 0, 5000);
});
