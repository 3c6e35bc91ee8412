// Cancelling a running job from its detail page, with the confirm step.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitText } from './harness.mjs';

test('a running job is cancelled from its detail page', async () => {
  const jobgate = await startJobgate();
  const id = await jobgate.submit({ name: 'long-one', command: ['sleep', '600'] });
  await jobgate.waitPhase(id, 'RUNNING');
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/jobs/${id}`);
  await waitText(page.getByTestId('job-phase'), 'Running');

  await page.getByRole('button', { name: 'Cancel job' }).click();
  // Nothing happens until it is confirmed.
  const confirm = page.getByRole('button', { name: 'Yes, cancel' });
  await confirm.waitFor();
  assert.equal(await jobgate.phase(id), 'RUNNING');
  // The confirm button has the focus: Enter confirms from the keyboard.
  await page.keyboard.press('Enter');

  await waitText(page.getByTestId('job-phase'), 'Cancelled');
  assert.equal(await jobgate.phase(id), 'CANCELLED');
  await waitText(page.locator('.timeline li').last(), /Cancelled/, 'the Cancelled event in the timeline');
  // A finished job has nothing left to cancel.
  assert.equal(await page.getByRole('button', { name: 'Cancel job' }).count(), 0);
  await waitText(page.getByTestId('count-CANCELLED'), '1');
  assert.deepEqual(page.problems, []);
});
