// /v1/chat/completions through the openai client: the chat template, streaming deltas, content
// parts, template kwargs, tools, stop strings and the chat logprobs format.
import { assert, client, model, run } from './common.mjs';

const c = client();
const messages = [
  { role: 'system', content: 'You write Python.' },
  { role: 'user', content: 'def fibonacci(n):' },
];

async function collect(stream) {
  let text = '', finish = null, usage = null, role = null, lp = [], n = 0;
  for await (const ch of stream) {
    n++;
    assert.equal(ch.object, 'chat.completion.chunk');
    if (ch.usage) usage = ch.usage;
    if (!ch.choices.length) continue;
    const d = ch.choices[0].delta;
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (ch.choices[0].logprobs?.content) lp.push(...ch.choices[0].logprobs.content);
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { text, finish, usage, role, lp, n };
}

run('chat', async () => {
  const r = await c.chat.completions.create({ model, messages, max_tokens: 20, ignore_eos: true });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 20);
  const full = r.choices[0].message.content;

  // The prompt is the template's rendering: its token count matches /v1/completions on that text.
  const rendered = '<|im_start|>system\nYou write Python.<|im_end|>\n<|im_start|>user\ndef fibonacci(n):<|im_end|>\n<|im_start|>assistant\n';
  const asText = await c.completions.create({ model, prompt: rendered, max_tokens: 20, ignore_eos: true });
  assert.equal(asText.usage.prompt_tokens, r.usage.prompt_tokens);
  assert.equal(asText.choices[0].text, full);

  // max_completion_tokens is the newer name for the same limit.
  const m = await c.chat.completions.create({ model, messages, max_completion_tokens: 5, ignore_eos: true });
  assert.equal(m.usage.completion_tokens, 5);

  // Streaming: a role chunk first, then content deltas adding up to the same text, then usage.
  const s = await collect(await c.chat.completions.create({
    model, messages, max_tokens: 20, ignore_eos: true, stream: true, stream_options: { include_usage: true } }));
  assert.equal(s.role, 'assistant');
  assert.equal(s.text, full);
  assert.equal(s.finish, 'length');
  assert.deepEqual(s.usage, r.usage);

  // Content as an array of text parts renders like the joined string.
  const parts = await c.chat.completions.create({ model, max_tokens: 20, ignore_eos: true, messages: [
    messages[0], { role: 'user', content: [{ type: 'text', text: 'def fibonacci(n):' }] }] });
  assert.equal(parts.choices[0].message.content, full);

  // add_generation_prompt=false changes the prompt (no assistant header).
  const noGen = await c.chat.completions.create({ model, messages, max_tokens: 1, add_generation_prompt: false,
                                                   chat_template_kwargs: { enable_thinking: false } });
  assert.ok(noGen.usage.prompt_tokens < r.usage.prompt_tokens);

  // Tools are passed to the template (this one ignores them) without failing the request.
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
                   parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
  const t = await c.chat.completions.create({ model, messages, tools, max_tokens: 4 });
  assert.equal(t.choices[0].message.role, 'assistant');

  // Stop strings end the message before the stop string, streaming or not.
  const stop = full.slice(6, 9);
  const cut = full.indexOf(stop);
  const st = await c.chat.completions.create({ model, messages, max_tokens: 20, ignore_eos: true, stop });
  assert.equal(st.choices[0].message.content, full.slice(0, cut));
  assert.equal(st.choices[0].finish_reason, 'stop');
  const ss = await collect(await c.chat.completions.create({ model, messages, max_tokens: 20, ignore_eos: true, stop, stream: true }));
  assert.equal(ss.text, full.slice(0, cut));
  assert.equal(ss.finish, 'stop');

  // Chat logprobs: token, logprob, bytes and top_logprobs per token.
  const l = await c.chat.completions.create({ model, messages, max_tokens: 6, ignore_eos: true, logprobs: true, top_logprobs: 3 });
  const content = l.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  for (const e of content) {
    assert.equal(typeof e.token, 'string');
    assert.ok(e.logprob <= 0);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token, 'utf8')]);
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4, 'greedy picks the top token');
    assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
  }
  assert.equal(content.map((e) => e.token).join(''), l.choices[0].message.content);
  const ls = await collect(await c.chat.completions.create({ model, messages, max_tokens: 6, ignore_eos: true,
                                                             logprobs: true, top_logprobs: 3, stream: true }));
  assert.deepEqual(ls.lp, content);
  const l0 = await c.chat.completions.create({ model, messages, max_tokens: 2, logprobs: true });
  assert.deepEqual(l0.choices[0].logprobs.content[0].top_logprobs, []);
  const none = await c.chat.completions.create({ model, messages, max_tokens: 2 });
  assert.equal(none.choices[0].logprobs, null);
});
