// Dropping the server: the page says so, reconnects by itself when jobgate is back, and
// catches up on everything that happened meanwhile from its last cursor, without a reload.

import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { launchBrowser, openPage, sharedDir, startJobgate, waitHeaderCounts, waitText } from './harness.mjs';


test('after the server drops and returns, the view catches up with no update lost', async () => {
  const jobgate = await startJobgate();
  const gate = join(sharedDir(), 'gate');
  const held = await jobgate.submit({
    name: 'held',
    command: ['sh', '-c', `while [ ! -e ${gate} ]; do sleep 0.05; done; echo released`],
  });
  await jobgate.waitPhase(held, 'RUNNING');

  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  const connection = page.getByRole('status', { name: 'Connection' });
  await waitText(connection, 'Live');
  const table = page.getByRole('table', { name: 'Jobs' });
  const row = (id) => table.locator(`tr[data-job-id="${id}"]`);
  await waitText(row(held).getByTestId('phase'), 'Running');
  await page.evaluate(() => {
    window.__sameDocument = true;
  });
  // Events the page has seen live before the drop: after it, it must resume after them,
  // neither missing what followed nor counting these twice.
  const early = await jobgate.submit({ name: 'early', command: ['true'] });
  await waitText(row(early).getByTestId('phase'), 'Succeeded');
  await waitText(page.getByTestId('count-SUCCEEDED'), '1');

  // jobgate dies; the page says so. The browser is then taken offline so that it cannot
  // come back before the changes below have happened: they are surely missed live.
  await jobgate.kill();
  await waitText(connection, /^(Reconnecting…|Offline)$/, 'the connection state to show the drop');
  await page.context().setOffline(true);
  await jobgate.restart();
  writeFileSync(gate, '');
  const quick = await jobgate.submit({ name: 'quick', command: ['true'] });
  const broken = await jobgate.submit({ name: 'broken', command: ['sh', '-c', 'exit 2'], backoffLimit: 0 });
  await jobgate.waitPhase(quick, 'SUCCEEDED');
  await jobgate.waitPhase(broken, 'FAILED');
  // The held job's run was cut by the kill; it is retried and now finishes.
  await jobgate.waitPhase(held, 'SUCCEEDED');
  assert.notEqual((await connection.textContent()).trim(), 'Live');

  await page.context().setOffline(false);
  await waitText(connection, 'Live', 'the page to reconnect by itself');
  await waitText(row(held).getByTestId('phase'), 'Succeeded');
  await waitText(row(quick).getByTestId('phase'), 'Succeeded');
  await waitText(row(broken).getByTestId('phase'), 'Failed');

  // The header's counts, kept by events alone since the page loaded, equal the server's.
  const expected = await jobgate.counts();
  await waitHeaderCounts(page, expected);
  assert.deepEqual(expected, { pending: 0, running: 0, succeeded: 3, failed: 1, cancelled: 0 });
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
  // Only the failed attempts to reach the server while it was away may complain.
  const unexpected = page.problems.filter((p) => !/WebSocket|ERR_INTERNET_DISCONNECTED|ERR_CONNECTION_REFUSED|Failed to load resource/.test(p));
  assert.deepEqual(unexpected, []);
});
