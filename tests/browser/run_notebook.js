// Opens JupyterLab in Debian's chromium (headless, through playwright-core; no browser is downloaded) as a user
// would: first without the token, then with it, opens a notebook, runs all its cells, waits for the output of
// the cell whose source starts with `cellStart` to match `expect` and for the kernel to finish, saves the
// notebook and takes a screenshot.
// Usage: node run_notebook.js BASE_URL TOKEN NOTEBOOK_PATH CELL_START EXPECT_REGEX SCREENSHOT.png
// Prints one JSON line: {"login": {...}, "cell": {"source", "output"}}.
'use strict';
const { launch } = require('./chromium');

const [base, token, notebook, cellStart, expect, screenshot] = process.argv.slice(2);
const TIMEOUT_MS = Number(process.env.BROWSER_TIMEOUT_MS || 300000);

// The notebook's kernel has started and runs nothing (the toolbar's execution indicator, kept hidden).
async function idle(page) {
  await page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').waitFor({ state: 'attached' });
}

// JupyterLab may ask which kernel to start (the notebook's own is preselected). It asks nothing about news: the
// image turns news off (trainstack.image.dockerfile.lab_settings_overrides).
async function answerDialogs(page) {
  const select = page.locator('.jp-Dialog').getByRole('button', { name: 'Select', exact: true });
  await select.waitFor({ timeout: 15000 }).then(() => select.click(), () => {});
}

async function main() {
  const { page, close } = await launch();
  try {
    page.setDefaultTimeout(TIMEOUT_MS);

    await page.goto(`${base}/lab/tree/${notebook}`);
    const login = { url: page.url(), password_field: await page.locator('input[name="password"]').count() };

    await page.goto(`${base}/lab/tree/${notebook}?token=${token}`);
    await page.locator('.jp-Notebook .jp-Cell').first().waitFor();
    await answerDialogs(page);
    await idle(page);
    await page.getByRole('menuitem', { name: 'Run', exact: true }).click();
    await page.getByRole('menuitem', { name: /^Run All Cells/ }).click();

    const cell = page.locator('.jp-Notebook .jp-CodeCell').filter({
      has: page.locator('.jp-InputArea-editor', { hasText: cellStart }),
    }).first();
    await cell.locator('.jp-OutputArea-output', { hasText: new RegExp(expect) }).first().waitFor();
    await idle(page);
    // Saved, the notebook's outputs can be read from the server (JupyterLab renders only the cells in view).
    await page.keyboard.press('Control+s');
    await page.locator('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty').waitFor({ state: 'detached' });
    // The checked cell at the top of the view, painted: JupyterLab draws cells brought into view a moment later.
    await cell.evaluate((element) => element.scrollIntoView({ block: 'start' }));
    await page.waitForTimeout(1000);
    await page.screenshot({ path: screenshot });
    console.log(JSON.stringify({
      login,
      cell: {
        source: await cell.locator('.jp-InputArea-editor').innerText(),
        output: await cell.locator('.jp-OutputArea').innerText(),
      },
    }));
  } catch (err) {
    await page.screenshot({ path: screenshot.replace(/\.png$/, '-failed.png') }).catch(() => {});
    throw err;
  } finally {
    await close();
  }
}

main().catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
