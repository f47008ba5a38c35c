// Opens the built documentation site in Debian's chromium (headless, through playwright-core; no browser is
// downloaded) as a reader would: the front page and a quickstart, the search for each query given, then every page
// the site links to, checking that each internal link reaches a page (and its #anchor) and each image loads.
// Usage: node check_site.js BASE_URL QUICKSTART_PATH SCREENSHOT_DIR QUERY...
// Prints one JSON line: {"front", "quickstart", "searches": {query: [result paths]}, "pages", "broken_links",
// "missing_images", "missing_anchors"}.
'use strict';
const path = require('path');
const { launch } = require('./chromium');

const [base, quickstart, screenshots, ...queries] = process.argv.slice(2);
const TIMEOUT_MS = Number(process.env.BROWSER_TIMEOUT_MS || 60000);

function pagePath(url) {
  const parsed = new URL(url);
  return parsed.pathname;
}

// What a page shows a reader: its title, its first heading, its code blocks and copy buttons.
async function rendered(page) {
  return {
    title: await page.title(),
    heading: (await page.locator('article h1').first().textContent()).trim(),
    code_blocks: await page.locator('article div.highlight').count(),
    copy_buttons: await page.locator('article button.copybtn').count(),
  };
}

// Every image of the page, loaded or not; every link, with its target made absolute.
async function pageFacts(page) {
  return page.evaluate(() => ({
    images: [...document.images].map((img) => ({ src: img.currentSrc || img.src, loaded: img.complete && img.naturalWidth > 0 })),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
    ids: [...document.querySelectorAll('[id]')].map((element) => element.id),
  }));
}

async function search(page, query, screenshot) {
  await page.goto(`${base}/search.html?q=${encodeURIComponent(query)}`);
  // Sphinx's search script fills the summary once every result is listed.
  await page.locator('#search-results p.search-summary').filter({ hasText: /\S/ }).waitFor();
  await page.screenshot({ path: screenshot, fullPage: false });
  return page.locator('#search-results ul.search li a').evaluateAll(
    (anchors) => anchors.map((a) => new URL(a.href).pathname));
}

async function main() {
  const { context, page, close } = await launch();
  page.setDefaultTimeout(TIMEOUT_MS);
  const result = { searches: {}, pages: 0, broken_links: [], missing_images: [], missing_anchors: [] };
  try {
    await page.goto(`${base}/index.html`);
    result.front = await rendered(page);
    await page.screenshot({ path: path.join(screenshots, 'site-front.png') });

    await page.goto(`${base}/${quickstart}`);
    result.quickstart = await rendered(page);
    await page.screenshot({ path: path.join(screenshots, 'site-quickstart.png'), fullPage: false });

    for (const [index, query] of queries.entries()) {
      result.searches[query] = await search(page, query, path.join(screenshots, `site-search-${index + 1}.png`));
    }

    // Every page reachable from the front page, each loaded once; anchors checked against the ids of their page.
    const origin = new URL(base).origin;
    const seen = new Map();  // page path -> its ids, once loaded
    const anchors = [];      // [from, path, fragment]
    const queue = [`${base}/index.html`];
    const queued = new Set([pagePath(queue[0])]);
    while (queue.length) {
      const url = queue.shift();
      const response = await page.goto(url);
      if (!response || !response.ok()) {
        result.broken_links.push({ url: pagePath(url), status: response ? response.status() : 'none' });
        continue;
      }
      const facts = await pageFacts(page);
      seen.set(pagePath(url), new Set(facts.ids));
      result.pages += 1;
      for (const image of facts.images) {
        if (!image.loaded) result.missing_images.push({ page: pagePath(url), src: image.src });
      }
      for (const link of facts.links) {
        const target = new URL(link);
        if (target.origin !== origin) continue;
        if (target.hash.length > 1) anchors.push([pagePath(url), target.pathname, decodeURIComponent(target.hash.slice(1))]);
        if (queued.has(target.pathname)) continue;
        queued.add(target.pathname);
        if (target.pathname.endsWith('.html') || target.pathname.endsWith('/')) {
          queue.push(`${target.origin}${target.pathname}`);
        } else {
          const other = await context.request.get(`${target.origin}${target.pathname}`);
          if (!other.ok()) result.broken_links.push({ url: target.pathname, status: other.status(), from: pagePath(url) });
        }
      }
    }
    for (const [from, target, fragment] of anchors) {
      const ids = seen.get(target);
      if (ids && !ids.has(fragment)) result.missing_anchors.push({ from, target, fragment });
    }
  } finally {
    await close();
  }
  console.log(JSON.stringify(result));
}

main().catch((error) => {
  console.error(error.stack || String(error));
  process.exit(1);
});
