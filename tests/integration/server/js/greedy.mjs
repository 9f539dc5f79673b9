// Greedy correctness and batching invariance: each case's prompt ids (argv[2]: a JSON file of
// {cases: [{name, ids, out?}]}) alone must give `out` when given; then all cases at once, half
// streaming, must give exactly what each gave alone.
import { readFileSync } from 'node:fs';
import { assert, client, idsOf, model, run } from './common.mjs';

const { cases, max_tokens } = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const c = client();

async function generate(ids, stream) {
  const body = { model, prompt: ids, max_tokens, ignore_eos: true, logprobs: 0, return_tokens_as_token_ids: true };
  if (!stream) {
    const r = await c.completions.create(body);
    assert.equal(r.choices[0].finish_reason, 'length');
    return idsOf(r.choices[0].logprobs.tokens);
  }
  const tokens = [];
  for await (const ch of await c.completions.create({ ...body, stream: true }))
    if (ch.choices.length && ch.choices[0].logprobs) tokens.push(...ch.choices[0].logprobs.tokens);
  return idsOf(tokens);
}

run('greedy', async () => {
  const alone = [];
  let checked = 0;
  for (const k of cases) {
    const got = await generate(k.ids, false);
    assert.equal(got.length, max_tokens);
    if (k.out) {
      assert.deepEqual(got, k.out, `${k.name}: greedy tokens differ from the reference`);
      checked++;
    }
    alone.push(got);
  }
  const t0 = Date.now();
  const together = await Promise.all(cases.map((k, i) => generate(k.ids, i % 2 === 1)));
  const seconds = (Date.now() - t0) / 1000;
  for (let i = 0; i < cases.length; i++)
    assert.deepEqual(together[i], alone[i], `${cases[i].name}: batched output differs from alone`);
  console.log(JSON.stringify({ cases: cases.length, reference_checked: checked, concurrent_seconds: seconds,
                               concurrent_tokens_per_s: (cases.length * max_tokens) / seconds }));
});
