// Graceful shutdown: SIGTERM (sent to argv[2], the server pid) while a stream runs. Mode argv[3]:
// "finish" - the stream still completes normally; "cancel" - the grace period is short and the
// stream ends early with finish_reason "abort". Either way the stream is well formed.
import { assert, client, model, run } from './common.mjs';

const pid = Number(process.argv[2]);
const mode = process.argv[3] ?? 'finish';
const c = client();

run('shutdown', async () => {
  const max_tokens = mode === 'finish' ? 200 : 30000;
  const stream = await c.completions.create({ model, prompt: 'def fibonacci(n):', max_tokens, ignore_eos: true,
                                              stream: true, stream_options: { include_usage: true } });
  let chunks = 0, finish = null, usage = null;
  for await (const ch of stream) {
    if (++chunks === 3) process.kill(pid, 'SIGTERM');
    if (ch.usage) usage = ch.usage;
    if (ch.choices.length && ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  if (mode === 'finish') {
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, max_tokens);
  } else {
    assert.equal(finish, 'abort');
    assert.ok(usage.completion_tokens < max_tokens);
  }
  // New work is refused once the server is draining or gone.
  await assert.rejects(c.completions.create({ model, prompt: 'x', max_tokens: 1 }));
});
