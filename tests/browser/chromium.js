// Debian's chromium as the browser tests start it (never a downloaded browser): headless, without a sandbox or a
// GPU, nothing fetched in the background, a fresh profile that close() removes.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'trainstack-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update'],
    viewport: { width: 1280, height: 900 },
  });
  const page = context.pages()[0] || await context.newPage();
  async function close() {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  return { context, page, close };
}

module.exports = { launch };
