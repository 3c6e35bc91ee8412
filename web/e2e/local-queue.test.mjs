// jobgate's own queue on the local executor, in the jobs list and on the job's page: with one
// slot (`--max-running 1`), a waiting job's row says why it waits and its place in the queue,
// live, and its page adds its place in its namespace and the estimate; once the job ahead is
// cancelled it starts and the row says so.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitText } from './harness.mjs';

test("a waiting job's row shows its reason and position, then that it runs", async () => {
  const jobgate = await startJobgate(['--max-running', '1']);
  const ahead = await jobgate.submit({ name: 'ahead', command: ['sleep', '600'] });
  await jobgate.waitPhase(ahead, 'RUNNING');
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/`);
  const waiting = await jobgate.submit({ name: 'behind', command: ['sleep', '600'] });
  const row = page.locator(`tr[data-job-id="${waiting}"]`);
  await waitText(row.getByTestId('row-queue'), /WaitingForCapacity · #1 in queue default/, 'the reason and position');

  // Its page says the same, with its place in its namespace and why no start time is given.
  const detail = await openPage(browser, `${jobgate.url}/#/jobs/${encodeURIComponent(waiting)}`);
  const queue = detail.getByTestId('job-queue');
  await waitText(detail.locator('dt').filter({ hasText: /queue$/i }), 'Queue', 'the local queue, not Kueue');
  await waitText(queue.getByTestId('job-queue-reason'), /WaitingForCapacity/, 'the reason');
  await waitText(queue.getByTestId('job-queue-place'), /#1 in line · #1 in default · .+/, 'the place and the estimate');
  assert.deepEqual(detail.problems, []);

  await jobgate.gql('mutation($id: ID!) { cancelJob(id: $id) { job { id } } }', { id: ahead });
  await jobgate.waitPhase(waiting, 'RUNNING');
  await waitText(row, /Running/, 'the row turns Running');
  assert.equal(await row.getByTestId('row-queue').count(), 0);
  assert.deepEqual(page.problems, []);
});
