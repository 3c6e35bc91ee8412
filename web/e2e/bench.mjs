// How the dashboard keeps up with a burst: N jobs submitted at once through the API (each
// PENDING → RUNNING → SUCCEEDED, ~3 events), with the jobs table and the header open in
// headless Chromium. Prints how long after the server the page showed the last completion,
// the page's main-thread long tasks while it took the events in, and its JS heap.
//
//   cargo build --release && JOBGATE_BIN=target/release/jobgate node web/e2e/bench.mjs [N]

import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { cleanUp, launchBrowser, openPage, startJobgate, waitFor, waitText } from './harness.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
process.env.JOBGATE_BIN ||= join(root, 'target/release/jobgate');
const jobs = Number(process.argv[2] || 2000);
const concurrency = 32;

const jobgate = await startJobgate();
const browser = await launchBrowser();
const page = await openPage(browser, jobgate.url);
await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
await page.evaluate(() => {
  window.__longTasks = [];
  new PerformanceObserver((list) => window.__longTasks.push(...list.getEntries().map((e) => e.duration))).observe({ entryTypes: ['longtask'] });
});

process.on('uncaughtException', (e) => {
  console.error(e.message, '\njobgate log (tail):\n', jobgate.log.slice(-30).join('\n'));
  process.exit(1);
});
process.on('unhandledRejection', (e) => {
  console.error(e?.message, '\njobgate log (tail):\n', jobgate.log.slice(-30).join('\n'));
  process.exit(1);
});
const started = performance.now();
let next = 0;
await Promise.all(
  Array.from({ length: concurrency }, async () => {
    while (next < jobs) {
      next += 1;
      await jobgate.submit({ command: ['true'] });
    }
  }),
);
const submitted = performance.now();
let serverDone = 0;
await waitFor(async () => {
  const { jobStats } = await jobgate.gql('{ jobStats { counts { succeeded } } }');
  if (jobStats.counts.succeeded === jobs) serverDone ||= performance.now();
  return serverDone > 0;
}, 'the server to finish every job', 600_000);
let pageDone = 0;
await waitFor(async () => {
  const shown = Number((await page.getByTestId('count-SUCCEEDED').textContent()).trim());
  if (shown === jobs) pageDone = performance.now();
  return pageDone > 0;
}, 'the page to show every completion', 600_000);
const { longTasks, heap } = await page.evaluate(() => ({
  longTasks: window.__longTasks,
  heap: performance.memory?.usedJSHeapSize ?? null,
}));
const rows = await page.locator('tbody tr').count();
const events = (await jobgate.gql('{ jobStats { cursor } }')).jobStats.cursor;

const ms = (t) => `${Math.round(t)} ms`;
console.log(`jobs submitted:                 ${jobs} (${concurrency} at a time) in ${ms(submitted - started)}`);
console.log(`events pushed to the page:      ${events}`);
console.log(`server: last job succeeded at   ${ms(serverDone - started)} (polled every 50 ms by this script)`);
console.log(`page: header showed it at       ${ms(pageDone - started)} (checked every 50 ms)`);
console.log(`page behind the server by       ${ms(pageDone - serverDone)} (resolution ~50 ms)`);
console.log(`main-thread long tasks (>50 ms): ${longTasks.length}, longest ${ms(Math.max(0, ...longTasks))}, total ${ms(longTasks.reduce((a, b) => a + b, 0))}`);
console.log(`table rows shown:               ${rows} (one page)`);
if (heap != null) console.log(`JS heap used:                   ${(heap / 1048576).toFixed(1)} MiB`);
console.log(`console problems:               ${page.problems.length}`);
await cleanUp();
