// Drives tqserve's /admin page in a real headless Chromium (Debian's `chromium`) through
// playwright-core: the TurboQuant parent / mid-prefill child toggles, saving settings, a reload
// showing them persisted, a rejected value naming its field, and the load/unload buttons.
// Env: TQ_BASE_URL (a server started with --model-dir holding `micro` and `tiny`), CHROMIUM
// (default /usr/bin/chromium), TQ_SCREENSHOTS (a folder for admin-*.png, optional).
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const base = process.env.TQ_BASE_URL;
if (!base) throw new Error("TQ_BASE_URL is not set");
const shots = process.env.TQ_SCREENSHOTS || "";

async function apiSettings(name) {
  const r = await fetch(`${base}/admin/api/models/${name}/settings`);
  assert.equal(r.status, 200);
  return r.json();
}

async function selectModel(page, name) {
  await page.waitForSelector(`#settings-model option[value="${name}"]`, { state: "attached" });
  await page.selectOption("#settings-model", name);
  // The form is filled from the API after the change: wait for the fetch to land.
  await page.waitForResponse((r) => r.url().endsWith(`/admin/api/models/${name}/settings`));
  await page.waitForTimeout(100);
}

async function rowState(page, name) {
  return page.locator(`tr[data-model="${name}"] [data-testid=state]`).textContent();
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
let failed = false;
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 960 } });
  // The page must not reach anything but this server.
  const foreign = [];
  page.on("request", (req) => { if (!req.url().startsWith(base)) foreign.push(req.url()); });
  page.on("pageerror", (e) => { console.error("page error:", e.message); failed = true; });

  await page.goto(`${base}/admin`);
  await page.waitForSelector('tr[data-model="micro"]');
  await page.waitForSelector('tr[data-model="tiny"]');
  await selectModel(page, "micro");

  const parent = page.getByTestId("tq-enabled");
  const child = page.getByTestId("tq-mid-prefill");

  // Parent on -> child enabled; child on; parent off -> child disabled, value kept; on again -> restored.
  await parent.check();
  assert.equal(await child.isEnabled(), true, "mid-prefill is enabled while TurboQuant is on");
  await child.check();
  await parent.uncheck();
  assert.equal(await child.isDisabled(), true, "mid-prefill is disabled while TurboQuant is off");
  assert.equal(await child.isChecked(), true, "mid-prefill keeps its value while disabled");
  await parent.check();
  assert.equal(await child.isEnabled(), true);
  assert.equal(await child.isChecked(), true, "turning TurboQuant back on restores mid-prefill");

  // Save with the parent off and the child on: the child's value is saved as is.
  await page.fill('input[name="turboquant.key_bits"]', "3");
  await parent.uncheck();
  assert.equal(await page.locator('input[name="turboquant.key_bits"]').isDisabled(), true);
  await page.fill('input[name="sampling.temperature"]', "0.7");
  await page.fill('input[name="context_size"]', "2048");
  await page.getByTestId("save-settings").click();
  await page.waitForFunction(() => document.querySelector("#settings-status").textContent === "Saved.");
  let s = await apiSettings("micro");
  assert.equal(s.turboquant.enabled, false);
  assert.equal(s.turboquant.mid_prefill, true, "the child's saved value survives the parent being off");
  assert.equal(s.turboquant.key_bits, 3);
  assert.equal(s.sampling.temperature, 0.7);
  assert.equal(s.context_size, 2048);
  if (shots) await page.screenshot({ path: `${shots}/admin-settings.png`, fullPage: true });

  // A reload shows the saved settings: parent off, child disabled but still on.
  await page.reload();
  await page.waitForSelector('tr[data-model="micro"]');
  await selectModel(page, "micro");
  assert.equal(await parent.isChecked(), false);
  assert.equal(await child.isDisabled(), true);
  assert.equal(await child.isChecked(), true);
  assert.equal(await page.inputValue('input[name="sampling.temperature"]'), "0.7");
  assert.equal(await page.inputValue('input[name="context_size"]'), "2048");
  await parent.check();
  assert.equal(await child.isChecked(), true, "after a reload, the parent back on restores the child");

  // Traffic for the throughput and event panels: tiny, then micro (which evicts tiny under the
  // server's limit).
  for (const model of ["tiny", "micro"]) {
    const r = await fetch(`${base}/v1/completions`, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, prompt: "def fibonacci(n):", max_tokens: 16 }) });
    assert.equal(r.status, 200, await r.text());
  }
  // Load and unload buttons. micro's load evicted tiny on the server; the page shows it at its
  // next refresh (every 2 s), so wait for that rather than read the row at once.
  let models = await (await fetch(`${base}/admin/api/models`)).json();
  assert.equal(models.data.find((m) => m.name === "tiny").state, "unloaded");
  await page.waitForFunction(() =>
    document.querySelector('tr[data-model="tiny"] [data-testid=state]')?.textContent === "unloaded", null, { timeout: 10000 });
  await page.locator('tr[data-model="tiny"] [data-testid=load]').click();
  await page.waitForFunction(() =>
    document.querySelector('tr[data-model="tiny"] [data-testid=state]')?.textContent === "loaded", null, { timeout: 60000 });
  models = await (await fetch(`${base}/admin/api/models`)).json();
  assert.equal(models.data.find((m) => m.name === "tiny").state, "loaded");
  if (shots) await page.screenshot({ path: `${shots}/admin-overview.png`, fullPage: true });
  await page.locator('tr[data-model="tiny"] [data-testid=unload]').click();
  await page.waitForFunction(() =>
    document.querySelector('tr[data-model="tiny"] [data-testid=state]')?.textContent === "unloaded");
  models = await (await fetch(`${base}/admin/api/models`)).json();
  assert.equal(models.data.find((m) => m.name === "tiny").state, "unloaded");

  // An invalid value is rejected with the field named, and nothing is saved.
  await page.fill('input[name="memory_guard.limit"]', "lots");
  await page.getByTestId("save-settings").click();
  await page.waitForFunction(() => document.querySelector("#settings-status").className === "bad");
  const msg = await page.getByTestId("settings-status").textContent();
  assert.match(msg, /memory_guard\.limit/, `the error names the field: ${msg}`);
  s = await apiSettings("micro");
  assert.equal(s.memory_guard.limit, "");
  assert.equal(s.turboquant.enabled, false, "a rejected save changes nothing");

  assert.deepEqual(foreign, [], "the page fetched nothing outside the server");
  console.log("admin page: all checks passed");
} catch (e) {
  console.error(e);
  failed = true;
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
