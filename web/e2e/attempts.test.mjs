// A job's attempts on its page: a job whose first run fails and whose second succeeds shows
// both attempts in the table (number, state, exit code, cause), and selecting one shows its
// own output, not the other's; where its time went shows queued, launching, both attempts
// (the failed one marked) and finishing, with the job's trace id.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitFor, waitText } from './harness.mjs';

test("a retried job's page lists both attempts, each with its own log", async () => {
  const jobgate = await startJobgate();
  const id = await jobgate.submit({
    name: 'flaky',
    backoffLimit: 2,
    command: [
      'sh',
      '-c',
      'if [ -e tried ]; then echo "second run: all good"; else touch tried; echo "first run: broken"; exit 3; fi',
    ],
  });
  await jobgate.waitPhase(id, 'SUCCEEDED');
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/jobs/${id}`);
  const table = page.getByTestId('attempts');
  const rows = table.locator('tbody tr');
  await waitFor(async () => (await rows.count()) === 2, 'two attempts in the table');
  const cells = async (i) => (await rows.nth(i).locator('th, td').allTextContents()).map((t) => t.trim());
  const first = await cells(0);
  const second = await cells(1);
  // Index, number, state, …, exit, cause.
  assert.deepEqual([first[0], first[1], first[2], first[5], first[6]], ['0', '#1', 'Failed', '3', 'Error']);
  assert.deepEqual([second[0], second[1], second[2], second[5], second[6]], ['0', '#2', 'Succeeded', '0', '–']);

  // Each attempt's own output.
  await page.getByRole('button', { name: 'Show log of attempt #1' }).click();
  const log = page.getByTestId('attempt-log');
  await waitText(log, 'first run: broken', "the first attempt's line");
  assert.deepEqual(await log.locator('.log-text').allTextContents(), ['first run: broken']);
  await page.getByRole('button', { name: 'Show log of attempt #2' }).click();
  await waitText(log, 'second run: all good', "the second attempt's line");
  assert.deepEqual(await log.locator('.log-text').allTextContents(), ['second run: all good']);

  // Where the time went, from Job.timeline.
  const segments = page.getByTestId('time-segment');
  await waitFor(async () => (await segments.count()) === 5, 'five segments of where the time went');
  const kinds = [];
  for (let i = 0; i < 5; i++) kinds.push(await segments.nth(i).getAttribute('data-kind'));
  assert.deepEqual(kinds, ['QUEUED', 'LAUNCHING', 'ATTEMPT', 'ATTEMPT', 'FINISHING']);
  assert.match(await segments.nth(2).textContent(), /Attempt index-0-run-1.*exit 3/);
  assert.equal(await segments.nth(2).getAttribute('class'), 'segment segment-attempt segment-failed');
  assert.match(await page.getByTestId('trace-id').textContent(), /^[0-9a-f]{32}$/);
  assert.deepEqual(page.problems, []);
});
