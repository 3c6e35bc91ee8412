// A search that few jobs match: the server looks at a bounded number of jobs per request (here
// 10, `--page-scan-budget`), so its answers come back short or empty with more to look at. The
// table asks on by itself a bounded number of times (5 requests in all), then says what it
// found so far and offers to search further; the click finds the rest, and the table ends
// with exactly the matching jobs. Unasked, it never keeps requesting. The two matching jobs
// run and finish while the table shows its short answer: their events must not bring jobs
// the search has not reached into it.

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { launchBrowser, openPage, sharedDir, startJobgate, waitFor, waitText } from './harness.mjs';

test('a search the server answers in short pages asks on, a bounded number of times', async () => {
  const jobgate = await startJobgate(['--page-scan-budget', '10']);
  // 80 jobs named nightly-…, the two oldest in team-b: 5 requests of 10 candidates each look
  // at the 50 newest, none in team-b.
  const gate = join(sharedDir(), 'gate');
  const inputs = Array.from({ length: 80 }, (_, i) => ({
    name: `nightly-${i}`,
    namespace: i < 2 ? 'team-b' : 'team-a',
    command: i < 2 ? ['sh', '-c', `while [ ! -e ${gate} ]; do sleep 0.05; done`] : ['true'],
  }));
  const data = await jobgate.gql(
    'mutation($inputs: [SubmitJobInput!]!) { submitJobs(inputs: $inputs) { jobs { id } } }',
    { inputs },
  );
  const [oldest, second] = data.submitJobs.jobs.map((j) => j.id);

  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/`);
  const table = page.getByRole('table', { name: 'Jobs' });
  const rows = table.locator('tbody tr');
  await waitFor(async () => (await rows.count()) === 25, 'the first page');
  // The table waited for the live model's snapshot and loaded once: nothing reloads the
  // unfiltered page from here on, and the search's requests are all its own.
  let requests = 0;
  let unfiltered = 0;
  page.on('request', (request) => {
    const body = request.postData() || '';
    if (!request.url().endsWith('/graphql') || !body.includes('query Jobs(')) return;
    if (body.includes('"team-b"')) requests += 1;
    else unfiltered += 1;
  });
  await page.evaluate(() => {
    window.location.hash = '#/?namespace=team-b&name=nightly';
  });
  const searching = page.locator('#jobs-searching');
  await waitText(searching, /^No match among the jobs searched so far\./, 'the table to stop and say so');
  assert.equal(requests, 5, 'the first request and 4 more, by itself');
  assert.equal(unfiltered, 0, 'the unfiltered page loaded again');
  assert.equal(await rows.count(), 0);
  // Not "no job matches": the server has more to look at. "Older" waits for a full page.
  assert.equal(await page.getByText('No job matches these filters.').count(), 0);
  assert.equal(await page.getByRole('button', { name: 'Older' }).isDisabled(), true);

  // The two team-b jobs finish: the header counts them, the table leaves them where they are.
  await jobgate.waitPhase(oldest, 'RUNNING');
  await jobgate.waitPhase(second, 'RUNNING');
  writeFileSync(gate, '');
  await jobgate.waitPhase(oldest, 'SUCCEEDED');
  await jobgate.waitPhase(second, 'SUCCEEDED');
  await waitFor(
    async () => (await page.getByTestId('count-SUCCEEDED').textContent()).trim() === '80',
    'the page to hear that every job succeeded',
  );
  assert.equal(await rows.count(), 0);
  await waitText(searching, /^No match among the jobs searched so far\./, 'the short answer to stand');
  assert.equal(requests, 5, 'no request since');

  await searching.getByRole('button', { name: 'Search further' }).click();
  await waitFor(async () => (await rows.count()) === 2, 'the two matching jobs to show');
  await waitFor(async () => (await searching.count()) === 0, 'the search to end');
  const ids = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.jobId));
  assert.deepEqual(ids, [second, oldest]);
  assert.ok(requests > 5 && requests <= 10, `${requests} requests`);
  assert.equal(await page.getByRole('button', { name: 'Older' }).isDisabled(), true);
  assert.deepEqual(page.problems, []);
});
