// jobgate's own queue on the local executor, in the jobs list: with one slot
// (`--max-running 1`), a waiting job's row says why it waits and its place in the queue, live;
// once the job ahead is cancelled it starts and the row says so.

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

  await jobgate.gql('mutation($id: ID!) { cancelJob(id: $id) { job { id } } }', { id: ahead });
  await jobgate.waitPhase(waiting, 'RUNNING');
  await waitText(row, /Running/, 'the row turns Running');
  assert.equal(await row.getByTestId('row-queue').count(), 0);
  assert.deepEqual(page.problems, []);
});
