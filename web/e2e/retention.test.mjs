// Retention while the page is away: when it comes back, its cursor is older than what
// retention deleted meanwhile, so the server answers CURSOR_EXPIRED; the page takes a fresh
// snapshot by itself (no reload): its counts equal the server's, the deleted jobs leave the
// table, and what happens next shows live.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitFor, waitHeaderCounts, waitText } from './harness.mjs';

// 0.0001 days (8.64 s): long enough that the page has seen `seen` finish before it can go.
const RETENTION = ['--retention-days', '0.0001', '--retention-interval-ms', '100'];

test('after retention deleted events the page missed, it starts again from a snapshot', async () => {
  const jobgate = await startJobgate(RETENTION);
  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  const connection = page.getByRole('status', { name: 'Connection' });
  await waitText(connection, 'Live');
  const table = page.getByRole('table', { name: 'Jobs' });
  const row = (id) => table.locator(`tr[data-job-id="${id}"]`);
  await page.evaluate(() => {
    window.__sameDocument = true;
  });

  // Kept, and seen live: the page's cursor moves past its events.
  const kept = await jobgate.submit({ name: 'kept', command: ['sleep', '600'] });
  const seen = await jobgate.submit({ name: 'seen', command: ['true'] });
  await waitText(row(seen).getByTestId('phase'), 'Succeeded');
  await waitText(row(kept).getByTestId('phase'), 'Running');

  // jobgate goes away, and the browser with it, until retention has deleted a job the page
  // never heard of (and `seen`): resuming after the page's cursor would miss those events.
  await jobgate.kill();
  await waitText(connection, /^(Reconnecting…|Offline)$/, 'the connection state to show the drop');
  await page.context().setOffline(true);
  await jobgate.restart();
  const missed = await jobgate.submit({ name: 'missed', command: ['true'] });
  await jobgate.waitPhase(missed, 'SUCCEEDED');
  const gone = async (id) => (await jobgate.gql('query($id: ID!) { job(id: $id) { id } }', { id })).job === null;
  await waitFor(async () => (await gone(missed)) && (await gone(seen)), 'retention to delete the finished jobs');
  // The sleeping job ran through the kill: it is retried, still unfinished, so it stays.
  await jobgate.waitPhase(kept, 'RUNNING');

  await page.context().setOffline(false);
  await waitText(connection, 'Live', 'the page to reconnect by itself');
  // The fresh snapshot: the deleted job has left the table, the kept one is there.
  await waitFor(async () => (await row(seen).count()) === 0, 'the deleted job to leave the table');
  assert.equal(await row(missed).count(), 0);
  await waitText(row(kept).getByTestId('phase'), 'Running');
  const expected = await jobgate.counts();
  assert.deepEqual(expected, { pending: 0, running: 1, succeeded: 0, failed: 0, cancelled: 0 });
  await waitHeaderCounts(page, expected);

  // Live again, from the snapshot's cursor.
  const after = await jobgate.submit({ name: 'after', command: ['true'] });
  await waitText(row(after).getByTestId('phase'), 'Succeeded');
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
  // No error shown: the expiry was handled, not reported.
  assert.equal(await page.getByRole('alert').count(), 0);
  const unexpected = page.problems.filter((p) => !/WebSocket|ERR_INTERNET_DISCONNECTED|ERR_CONNECTION_REFUSED|Failed to load resource/.test(p));
  assert.deepEqual(unexpected, []);
});
