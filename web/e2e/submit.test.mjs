// Submitting from the form, then watching the job move to Succeeded with its result and logs,
// all without a reload; and a job submitted elsewhere appearing in the table live.

import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';

import { launchBrowser, openPage, sharedDir, startJobgate, waitFor, waitText } from './harness.mjs';

test('a job submitted from the form appears and reaches Succeeded without a reload', async () => {
  const jobgate = await startJobgate();
  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
  // Set on this document: a reload or a navigation away would lose it.
  await page.evaluate(() => {
    window.__sameDocument = true;
  });

  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Submit job' }).click();
  const form = page.getByRole('form', { name: 'Submit a job' });
  await form.locator('[name="name"]').fill('from-the-form');
  await form
    .locator('[name="command"]')
    .fill(['sh', '-c', 'echo first line; sleep 1; echo second line; printf 42 > "$JOBGATE_RESULT_FILE"'].join('\n'));
  await form.getByRole('button', { name: 'Submit' }).click();

  // The detail page of the new job, live.
  await waitFor(async () => /#\/jobs\/.+/.test(page.url()), 'the job detail URL');
  const id = decodeURIComponent(page.url().split('#/jobs/')[1]);
  await waitText(page.locator('h1'), 'from-the-form');
  await waitText(page.getByTestId('job-phase'), 'Succeeded', 'the phase to reach Succeeded');
  await waitText(page.getByTestId('job-result'), '42');
  const logs = page.getByRole('log', { name: 'Logs' });
  await waitText(logs, /first line\s*second line/, 'both log lines');
  assert.equal(await jobgate.phase(id), 'SUCCEEDED');

  // Back in the table, its row says Succeeded, and the counts took it in.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Jobs' }).click();
  const row = page.getByRole('table', { name: 'Jobs' }).locator(`tr[data-job-id="${id}"]`);
  await waitText(row.getByTestId('phase'), 'Succeeded');
  await waitText(page.getByTestId('count-SUCCEEDED'), '1');
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
  assert.deepEqual(page.problems, []);
});

test('a job submitted through the API appears in the table and moves live', async () => {
  const jobgate = await startJobgate();
  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
  await waitText(page.getByTestId('count-SUCCEEDED'), '0');
  await page.evaluate(() => {
    window.__sameDocument = true;
  });
  // Held at Running until the test lets it finish, so both phases are seen.
  const gate = join(sharedDir(), 'gate');
  const id = await jobgate.submit({
    name: 'elsewhere',
    command: ['sh', '-c', `while [ ! -e ${gate} ]; do sleep 0.05; done; echo done`],
  });
  const row = page.getByRole('table', { name: 'Jobs' }).locator(`tr[data-job-id="${id}"]`);
  await waitText(row.getByRole('link'), 'elsewhere');
  await waitText(row.getByTestId('phase'), 'Running');
  await waitText(page.getByTestId('count-RUNNING'), '1');
  const { writeFileSync } = await import('node:fs');
  writeFileSync(gate, '');
  await waitText(row.getByTestId('phase'), 'Succeeded');
  await waitText(page.getByTestId('count-RUNNING'), '0');
  await waitText(page.getByTestId('count-SUCCEEDED'), '1');
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
  assert.deepEqual(page.problems, []);
});
