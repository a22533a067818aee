// Drive Debian's chromium headless (playwright-core, no browser download) through the example page and
// print what it computed as JSON: what tests/test_web_page.py and benchmarks/browser_wasm.py read.
//
//   node browser_run.mjs SPEC.json
//
// SPEC.json: {"pages": [{"url": ..., "screenshot": "/path/page.png" (optional),
//                        "bench": [edgebertBench spec, ...] (optional)}], "timeout_ms": 120000}
import { readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
const FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"];
const browser = await chromium.launch({ executablePath: spec.executable ?? "/usr/bin/chromium", args: FLAGS,
                                        headless: true });
const out = { browser: browser.version(), pages: [] };
try {
  for (const item of spec.pages) {
    const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
    const console_ = [];
    page.on("console", (m) => { if (m.type() === "error") console_.push(m.text()); });
    page.on("pageerror", (e) => console_.push(String(e)));
    await page.goto(item.url);
    await page.waitForFunction(() => window.edgebertDone === true, null, { timeout: spec.timeout_ms ?? 120000 });
    const results = await page.evaluate(() => window.edgebertResults);
    const bench = [];
    for (const call of item.bench ?? []) {
      bench.push(await page.evaluate((c) => window.edgebertBench(c), call));
    }
    if (item.screenshot) await page.screenshot({ path: item.screenshot, fullPage: true });
    out.pages.push({ url: item.url, results, bench, errors: console_ });
    await page.close();
  }
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
