// A job's log view: it starts from the tail of the archived output, pages back through the
// earlier lines, and resumes its live stream after the server drops and returns, right after
// the last line it showed: what it shows in the end is exactly what the archive holds.

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { launchBrowser, openPage, sharedDir, startJobgate, waitFor, waitText } from './harness.mjs';

const PAGE = `query($id: ID!, $after: String) {
  job(id: $id) { logLines(first: 1000, after: $after) { edges { node { text } } pageInfo { hasNextPage endCursor } } }
}`;

/** Every archived line of the job, through `logLines` pages. */
async function archived(jobgate, id) {
  const texts = [];
  let after = null;
  for (;;) {
    const { job } = await jobgate.gql(PAGE, { id, after });
    texts.push(...job.logLines.edges.map((e) => e.node.text));
    if (!job.logLines.pageInfo.hasNextPage) return texts;
    after = job.logLines.pageInfo.endCursor;
  }
}

test('the log view pages its history and resumes after a reconnect with no line lost or repeated', async () => {
  const jobgate = await startJobgate();
  const gate = join(sharedDir(), 'logs-gate');
  const id = await jobgate.submit({
    name: 'chatty',
    command: [
      'sh',
      '-c',
      `i=1; while [ $i -le 2500 ]; do echo line $i; i=$((i+1)); done; ` +
        `while [ ! -e ${gate} ]; do sleep 0.05; done; ` +
        `while [ $i -le 2600 ]; do echo line $i; i=$((i+1)); done`,
    ],
  });
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/jobs/${id}`);
  const log = page.getByRole('log', { name: 'Logs' });
  const texts = () => log.locator('.log-text').allTextContents();
  // The view starts with the last 1,000 lines.
  await waitFor(async () => (await texts()).at(-1) === 'line 2500', 'the view to show line 2500');
  assert.equal((await texts()).length, 1000);
  assert.equal((await texts())[0], 'line 1501');

  // jobgate dies while the job waits; its run is retried after the restart (a second run,
  // whose output follows the first's in the archive). The view resumes after its last line.
  await jobgate.kill();
  await jobgate.restart();
  writeFileSync(gate, '');
  await jobgate.waitPhase(id, 'SUCCEEDED');
  await waitText(page.getByTestId('logs-state'), /this is all its output/, 'the stream to end with the job');

  // Earlier lines, a page at a time, until the first.
  const earlier = page.getByRole('button', { name: 'Show earlier lines' });
  while ((await earlier.count()) > 0) {
    const before = (await texts()).length;
    await earlier.click();
    // Done when the page's lines are in (the button may not have turned disabled yet).
    await waitFor(async () => (await texts()).length > before, 'a page of earlier lines');
  }
  const shown = await texts();
  const expected = await archived(jobgate, id);
  assert.equal(shown[0], 'line 1');
  assert.equal(shown.at(-1), 'line 2600');
  assert.equal(shown.length, expected.length);
  assert.deepEqual(shown, expected);
  const unexpected = page.problems.filter((p) => !/WebSocket|ERR_CONNECTION_REFUSED|Failed to load resource/.test(p));
  assert.deepEqual(unexpected, []);
});
