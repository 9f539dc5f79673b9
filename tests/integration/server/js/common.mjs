// Shared helpers for the tqserve integration scripts: the openai client pointed at the server
// under test (TQ_BASE_URL, TQ_API_KEY, TQ_MODEL), /metrics parsing, and a failing-exit wrapper.
import OpenAI from 'openai';
import assert from 'node:assert/strict';

export { assert, OpenAI };
export const baseURL = process.env.TQ_BASE_URL;
export const model = process.env.TQ_MODEL ?? 'micro-qwen3';
export const apiKey = process.env.TQ_API_KEY ?? 'no-key';

export function client(opts = {}) {
  return new OpenAI({ baseURL: `${baseURL}/v1`, apiKey, maxRetries: 0, timeout: 120000, ...opts });
}

// Prometheus text -> Map('name{labels}' -> number).
export async function metrics() {
  const r = await fetch(`${baseURL}/metrics`);
  assert.equal(r.status, 200);
  const out = new Map();
  for (const line of (await r.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

export function metric(m, name, labels = {}) {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(',');
  for (const [key, value] of m) {
    const brace = key.indexOf('{');
    const n = brace < 0 ? key : key.slice(0, brace);
    if (n !== name) continue;
    const have = brace < 0 ? '' : key.slice(brace + 1, -1);
    if (want.split(',').every((kv) => !kv || have.split(',').includes(kv))) return value;
  }
  return undefined;
}

export async function waitFor(what, fn, timeoutMs = 15000) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// Ids of the generated tokens, from logprobs with return_tokens_as_token_ids.
export function idsOf(tokens) {
  return tokens.map((t) => {
    assert.match(t, /^token_id:\d+$/);
    return Number(t.slice('token_id:'.length));
  });
}

// Expects `promise` to reject with an APIError of `status`; returns the error.
export async function expectStatus(status, promise, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    assert.equal(e.status, status, `status of: ${e.message}`);
    if (param !== undefined) assert.equal(e.param, param, `param of: ${e.message}`);
    assert.equal(typeof e.error?.message, 'string', 'error.message');
    assert.ok('type' in e.error && 'param' in e.error && 'code' in e.error, 'OpenAI error schema');
    return e;
  }
  assert.fail(`expected HTTP ${status}, but the request succeeded`);
}

export function run(name, fn) {
  fn().then(
    () => console.error(`${name}: ok`),
    (e) => {
      console.error(`${name}: FAILED\n${e?.stack ?? e}`);
      process.exit(1);
    },
  );
}
