// The server's validation errors appear next to the field at fault, and nothing is created.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitText } from './harness.mjs';

async function totalCount(jobgate) {
  return (await jobgate.gql('{ jobs { totalCount } }')).jobs.totalCount;
}

test('a value the server refuses is shown next to its field', async () => {
  const jobgate = await startJobgate(['--max-parallelism', '4']);
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/submit`);
  const form = page.getByRole('form', { name: 'Submit a job' });
  await form.locator('[name="command"]').fill('true');
  // The form says the limit the server enforces.
  await waitText(page.locator('#help-parallelism'), /1 to 4/, 'the advertised limit');
  await form.locator('[name="parallelism"]').fill('9');
  await form.getByRole('button', { name: 'Submit' }).click();

  const parallelism = form.locator('[name="parallelism"]');
  await waitText(page.locator('#error-parallelism'), /must be at most 4, got 9/, 'the server message next to the field');
  assert.equal(await parallelism.getAttribute('aria-invalid'), 'true');
  assert.match(await parallelism.getAttribute('aria-describedby'), /\berror-parallelism\b/);
  // The field at fault has the focus, so keyboard users land on it.
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('name')), 'parallelism');
  assert.equal(await totalCount(jobgate), 0);

  // A name that is not a DNS-1123 label: the error moves to that field.
  await parallelism.fill('2');
  await form.locator('[name="name"]').fill('Not A Label');
  await form.getByRole('button', { name: 'Submit' }).click();
  await waitText(page.locator('#error-name'), /DNS-1123/, 'the name error');
  assert.equal(await page.locator('#error-parallelism').count(), 0);
  assert.equal(await totalCount(jobgate), 0);

  // Fixed, it goes through once.
  await form.locator('[name="name"]').fill('a-label');
  await form.getByRole('button', { name: 'Submit' }).click();
  await waitText(page.locator('h1'), 'a-label');
  assert.equal(await totalCount(jobgate), 1);
  assert.deepEqual(page.problems, []);
});
