// Opens a notebook in JupyterLab in Debian's chromium (headless, through playwright-core) and runs its cells; waits
// until the output of the cell whose source starts with `cellStart` matches `expect`, and notes whether the kernel
// was still running that cell then (a rank's line reached the page while the job ran, not with the cell's end);
// then waits for the kernel to finish.
// Usage: node stream_cell.js BASE_URL TOKEN NOTEBOOK_PATH CELL_START EXPECT_REGEX
// Prints one JSON line: {"seen_while_running", "seen_after_ms", "output_when_seen", "output_at_end"}.
'use strict';
const { launch } = require('./chromium');

const [base, token, notebook, cellStart, expect] = process.argv.slice(2);
const TIMEOUT_MS = Number(process.env.BROWSER_TIMEOUT_MS || 300000);

async function main() {
  const { page, close } = await launch();
  try {
    page.setDefaultTimeout(TIMEOUT_MS);
    await page.goto(`${base}/lab/tree/${notebook}?token=${token}`);
    await page.locator('.jp-Notebook .jp-Cell').first().waitFor();
    const select = page.locator('.jp-Dialog').getByRole('button', { name: 'Select', exact: true });
    await select.waitFor({ timeout: 15000 }).then(() => select.click(), () => {});
    const indicator = page.locator('.jp-Notebook-ExecutionIndicator');
    await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ state: 'attached' });
    await page.getByRole('menuitem', { name: 'Run', exact: true }).click();
    await page.getByRole('menuitem', { name: /^Run All Cells/ }).click();
    const started = Date.now();

    const cell = page.locator('.jp-Notebook .jp-CodeCell').filter({
      has: page.locator('.jp-InputArea-editor', { hasText: cellStart }),
    }).first();
    await cell.locator('.jp-OutputArea-output', { hasText: new RegExp(expect) }).first().waitFor();
    const seenAfter = Date.now() - started;
    // Still running: the cell's prompt shows [*] and the kernel is busy.
    const prompt = await cell.locator('.jp-InputPrompt').innerText();
    const busy = (await indicator.getAttribute('data-status')) === 'busy';
    const outputWhenSeen = await cell.locator('.jp-OutputArea').innerText();

    await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ state: 'attached' });
    console.log(JSON.stringify({
      seen_while_running: busy && prompt.includes('*'),
      seen_after_ms: seenAfter,
      output_when_seen: outputWhenSeen,
      output_at_end: await cell.locator('.jp-OutputArea').innerText(),
    }));
  } finally {
    await close();
  }
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
