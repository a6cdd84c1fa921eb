// web.mjs: playwright-core drives Debian's chromium through megago serve's web page at the
// URL given as the first argument: it types a prompt, streams a completion and saves a
// screenshot to the second argument. Run by .ci/serve.sh.
import { chromium } from "playwright-core";

const [base, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let ok = false;
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 720 } });
  await page.goto(base + "/");
  await page.waitForFunction(() => !document.getElementById("model").textContent.includes("…"));
  await page.fill("#prompt", "func (b *Buffer) ");
  await page.fill("#max_tokens", "48");
  await page.fill("#seed", "7");
  await page.click("#generate");
  // Streaming: the output grows before the request is done.
  await page.waitForFunction(() => document.getElementById("output").textContent.length > "func (b *Buffer) ".length, null, { timeout: 60000 });
  await page.waitForFunction(() => document.getElementById("stats").dataset.done === "true", null, { timeout: 120000 });
  const stats = await page.textContent("#stats");
  const output = await page.textContent("#output");
  await page.screenshot({ path: shot });
  console.log(`web page: ${stats}\n${output}`);
  ok = /tokens\/s/.test(stats) && !/error/.test(stats) && output.length > "func (b *Buffer) ".length;
} finally {
  await browser.close();
}
console.log(ok ? "1 passed, 0 failed" : "0 passed, 1 failed");
process.exit(ok ? 0 : 1);
