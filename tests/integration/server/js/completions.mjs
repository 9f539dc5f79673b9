// /v1/completions through the openai client: plain and streaming, usage, stop strings (across
// tokens, never leaked), logprobs, echo, prompt forms.
import { assert, client, model, idsOf, run } from './common.mjs';

const c = client();
const prompt = 'def fibonacci(n):';

async function collect(stream) {
  let text = '', finish = null, usage = null, chunks = 0, tokens = [];
  for await (const ch of stream) {
    chunks++;
    if (ch.usage) usage = ch.usage;
    if (!ch.choices.length) continue;
    text += ch.choices[0].text;
    if (ch.choices[0].logprobs) tokens.push(...ch.choices[0].logprobs.tokens);
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { text, finish, usage, chunks, tokens };
}

run('completions', async () => {
  // Plain.
  const r = await c.completions.create({ model, prompt, max_tokens: 24, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 24);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
  const full = r.choices[0].text;

  // Streaming gives the same greedy text, then a usage-only chunk.
  const s = await collect(await c.completions.create({
    model, prompt, max_tokens: 24, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } }));
  assert.equal(s.text, full);
  assert.equal(s.finish, 'length');
  assert.deepEqual(s.usage, r.usage);
  assert.ok(s.chunks >= 3);

  // Stop strings: pick one that straddles a token boundary of the greedy text.
  const lp = await c.completions.create({ model, prompt, max_tokens: 24, ignore_eos: true, logprobs: 0 });
  const toks = lp.choices[0].logprobs.tokens;
  let at = 0, k = 0;
  for (; k < toks.length - 1 && (at + toks[k].length < 4 || !toks[k].length || !toks[k + 1].length); k++) at += toks[k].length;
  const stop = toks[k].slice(-1) + toks[k + 1].slice(0, 1);
  const cut = full.indexOf(stop);
  assert.ok(cut >= 0, `stop '${stop}' in '${full}'`);
  const st = await c.completions.create({ model, prompt, max_tokens: 24, ignore_eos: true, stop: [stop, 'NEVER-SEEN'] });
  assert.equal(st.choices[0].text, full.slice(0, cut));
  assert.equal(st.choices[0].finish_reason, 'stop');
  assert.ok(st.usage.completion_tokens < 24);
  const ss = await collect(await c.completions.create({ model, prompt, max_tokens: 24, ignore_eos: true, stop, stream: true }));
  assert.equal(ss.text, full.slice(0, cut));
  assert.equal(ss.finish, 'stop');
  assert.ok(!ss.text.includes(stop));

  // Logprobs: one entry per token, greedy picks the top-1, alternatives sorted.
  const l = await c.completions.create({ model, prompt, max_tokens: 8, ignore_eos: true, logprobs: 3 });
  const L = l.choices[0].logprobs;
  assert.equal(L.tokens.length, 8);
  assert.equal(L.token_logprobs.length, 8);
  assert.equal(L.top_logprobs.length, 8);
  assert.equal(L.tokens.join(''), l.choices[0].text);
  for (let i = 0; i < 8; i++) {
    const top = Object.entries(L.top_logprobs[i]);
    assert.ok(top.length >= 1 && top.length <= 3);
    assert.ok(L.token_logprobs[i] <= 0);
    const best = Math.max(...top.map(([, v]) => v));
    assert.ok(Math.abs(best - L.token_logprobs[i]) < 1e-4, 'greedy token is the most likely');
    if (i) assert.equal(L.text_offset[i], L.text_offset[i - 1] + L.tokens[i - 1].length);
  }
  const ls = await collect(await c.completions.create({ model, prompt, max_tokens: 8, ignore_eos: true, logprobs: 1, stream: true }));
  assert.deepEqual(ls.tokens, L.tokens);

  // Echo with logprobs scores the prompt (max_tokens 0: only the prompt).
  const e = await c.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 1 });
  assert.equal(e.choices[0].text, prompt);
  const E = e.choices[0].logprobs;
  assert.equal(E.tokens.length, e.usage.prompt_tokens);
  assert.equal(E.token_logprobs[0], null);
  assert.equal(E.top_logprobs[0], null);
  assert.ok(E.token_logprobs.slice(1).every((x) => x <= 0));
  assert.equal(e.usage.completion_tokens, 0);
  const e2 = await c.completions.create({ model, prompt, max_tokens: 4, echo: true });
  assert.ok(e2.choices[0].text.startsWith(prompt));
  const es = await collect(await c.completions.create({ model, prompt, max_tokens: 4, echo: true, stream: true }));
  assert.equal(es.text, e2.choices[0].text);

  // Prompt as ids and as a list of one: the same greedy continuation as the text.
  const ids = await c.completions.create({ model, prompt, max_tokens: 0, echo: true, logprobs: 0,
                                          return_tokens_as_token_ids: true });
  const promptIds = idsOf(ids.choices[0].logprobs.tokens);
  const byIds = await c.completions.create({ model, prompt: promptIds, max_tokens: 24, ignore_eos: true });
  assert.equal(byIds.choices[0].text, full);
  const byList = await c.completions.create({ model, prompt: [prompt], max_tokens: 24, ignore_eos: true });
  assert.equal(byList.choices[0].text, full);
  const byIdList = await c.completions.create({ model, prompt: [promptIds], max_tokens: 24, ignore_eos: true });
  assert.equal(byIdList.choices[0].text, full);

  // Seeded sampling is reproducible.
  const a = await c.completions.create({ model, prompt, max_tokens: 16, temperature: 1, top_p: 0.9, seed: 7 });
  const b = await c.completions.create({ model, prompt, max_tokens: 16, temperature: 1, top_p: 0.9, seed: 7 });
  assert.equal(a.choices[0].text, b.choices[0].text);
  // Penalties are accepted and change nothing structural.
  const p = await c.completions.create({ model, prompt, max_tokens: 16, presence_penalty: 1.5, frequency_penalty: 1 });
  assert.ok(p.usage.completion_tokens >= 1);
});
