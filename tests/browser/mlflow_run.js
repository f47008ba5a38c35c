// Opens an MLflow run in MLflow's UI in Debian's chromium (headless, through playwright-core; no browser is
// downloaded) as a user would: the run's page, then its "Model metrics" tab, where each metric has a chart card;
// takes a screenshot of each.
// Usage: node mlflow_run.js BASE_URL RUN_ID METRIC SCREENSHOT_PREFIX
// Prints one JSON line: {"run": {"name", "heading", "rows"}, "chart": {"title", "lines"}}: the run's name, the heading
// its page shows, the rows of its metrics and parameters tables ([name, value]), and the metric's card: its title
// and each line the plot draws ({"name", "x", "y"}).
'use strict';
const { launch } = require('./chromium');

const [base, runId, metric, screenshots] = process.argv.slice(2);
const TIMEOUT_MS = Number(process.env.BROWSER_TIMEOUT_MS || 120000);

async function main() {
  const { page, close } = await launch();
  page.setDefaultTimeout(TIMEOUT_MS);
  const result = {};
  try {
    // The run's name and experiment, as the UI's own API gives them.
    const { run } = await (await page.request.get(`${base}/ajax-api/2.0/mlflow/runs/get?run_id=${runId}`)).json();
    const runPage = `${base}/#/experiments/${run.info.experiment_id}/runs/${runId}`;
    await page.goto(runPage);
    const heading = page.getByRole('heading', { name: run.info.run_name });
    await heading.waitFor();
    await page.getByRole('cell', { name: metric, exact: true }).first().waitFor();
    result.run = {
      name: run.info.run_name,
      heading: (await heading.innerText()).trim(),
      rows: await page.getByRole('row').evaluateAll((rows) => rows.map(
        (row) => [...row.querySelectorAll('[role=cell]')].map((cell) => cell.innerText.trim()))),
    };
    await page.screenshot({ path: `${screenshots}-run.png` });

    await page.goto(`${runPage}/model-metrics`);
    // The metric's card, once its plot has drawn a line.
    const card = page.getByTestId('experiment-view-compare-runs-card')
      .filter({ has: page.getByText(metric, { exact: true }) });
    await card.locator('.js-plotly-plot path.js-line').first().waitFor();
    result.chart = await card.evaluate((element) => {
      const plot = element.querySelector('.js-plotly-plot');
      return {
        title: element.innerText.split('\n')[0].trim(),
        lines: plot.data.map((trace) => ({ name: trace.name, x: Array.from(trace.x), y: Array.from(trace.y) })),
      };
    });
    await page.screenshot({ path: `${screenshots}-metrics.png` });
  } finally {
    await close();
  }
  console.log(JSON.stringify(result));
}

main().catch((error) => {
  console.error(error.stack || String(error));
  process.exit(1);
});
