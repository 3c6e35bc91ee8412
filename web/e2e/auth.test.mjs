// With an API token configured, the dashboard asks for it once, keeps it in the browser and
// then works like any authenticated client (HTTP header and WebSocket connection_init).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitText } from './harness.mjs';

test('the dashboard asks for the API token, then works with it', async () => {
  const jobgate = await startJobgate(['--api-token', 'e2e-secret-token']);
  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  const dialog = page.getByRole('dialog', { name: 'Sign in to jobgate' });
  await dialog.waitFor();
  await waitText(page.getByRole('status', { name: 'Connection' }), 'Signed out');

  await dialog.getByLabel('API token').fill('wrong');
  await dialog.getByRole('button', { name: 'Sign in' }).click();
  // Refused again: the dialog comes back after the reload.
  await page.getByRole('dialog', { name: 'Sign in to jobgate' }).waitFor();
  await page.getByRole('dialog', { name: 'Sign in to jobgate' }).getByLabel('API token').fill('e2e-secret-token');
  await page.getByRole('dialog', { name: 'Sign in to jobgate' }).getByRole('button', { name: 'Sign in' }).click();

  await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
  await waitText(page.getByTestId('count-PENDING'), '0');
  assert.equal(await page.getByRole('dialog').count(), 0);
  // The unauthenticated attempts are the expected console errors (HTTP 401, WebSocket 4403).
  const unexpected = page.problems.filter((p) => !/401|Unauthorized|WebSocket/.test(p));
  assert.deepEqual(unexpected, []);
});
