// The webhooks page: create an endpoint (its secret shown once), follow its delivery state
// while its receiver fails and recovers, delete it. The receiver is a real HTTP server here
// that checks each Standard Webhooks signature with node's own HMAC.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitFor, waitText } from './harness.mjs';

/** A receiver on 127.0.0.1 that answers 500 while `failing`, else checks and keeps events. */
async function startReceiver() {
  const receiver = { failing: true, secret: null, events: [], forged: 0 };
  const server = createServer((request, response) => {
    const chunks = [];
    request.on('data', (c) => chunks.push(c));
    request.on('end', () => {
      if (receiver.failing || !receiver.secret) {
        response.writeHead(500).end();
        return;
      }
      const body = Buffer.concat(chunks).toString('utf8');
      const id = request.headers['webhook-id'];
      const timestamp = request.headers['webhook-timestamp'];
      const key = Buffer.from(receiver.secret.replace(/^whsec_/, ''), 'base64');
      const expected = `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`;
      if (!(request.headers['webhook-signature'] || '').split(' ').includes(expected)) {
        receiver.forged += 1;
        response.writeHead(401).end();
        return;
      }
      receiver.events.push(JSON.parse(body).data);
      response.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${server.address().port}/hook`;
  receiver.close = () => new Promise((resolve) => server.close(resolve));
  return receiver;
}

test('a webhook is created, followed through failures and deleted from its page', async () => {
  const jobgate = await startJobgate([
    '--webhook-allow-private-targets',
    '--webhook-backoff-min-ms',
    '20',
    '--webhook-backoff-max-ms',
    '200',
  ]);
  const receiver = await startReceiver();
  try {
    const browser = await launchBrowser();
    const page = await openPage(browser, `${jobgate.url}/#/webhooks`);
    await page.getByRole('heading', { name: 'Webhooks' }).waitFor();
    await page.getByText('No webhooks yet.').waitFor();

    // A refused target is explained next to the form.
    await page.getByLabel('URL').fill('ftp://example.com/hook');
    await page.getByRole('button', { name: 'Create webhook' }).click();
    await waitText(page.locator('#webhook-error'), /http:\/\/ or https:\/\//);

    await page.getByLabel('URL').fill(receiver.url);
    await page.getByLabel('Name contains').fill('hooked');
    await page.getByRole('button', { name: 'Create webhook' }).click();
    const secret = (await page.getByTestId('secret-value').textContent()).trim();
    assert.match(secret, /^whsec_/);
    receiver.secret = secret;
    const row = page.getByTestId('webhook-row');
    await waitText(row.getByTestId('webhook-state'), 'Active');
    await waitText(row.locator('td').first(), 'name contains “hooked”');

    // The receiver fails: the page shows the retries and the error.
    const id = await jobgate.submit({ name: 'hooked-1', command: ['true'] });
    await jobgate.waitPhase(id, 'SUCCEEDED');
    const state = async () => (await jobgate.gql('{ webhooks { state attempts } }')).webhooks[0];
    await waitFor(async () => (await state()).attempts >= 2, 'failed attempts');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await waitText(row.getByTestId('webhook-state'), 'Retrying');
    await waitText(row.locator('.row-message'), /HTTP 500/);

    // It recovers: every event arrives, and the page shows it caught up.
    receiver.failing = false;
    await waitFor(() => receiver.events.some((e) => e.jobId === id && e.phase === 'SUCCEEDED'), 'the last event');
    assert.equal(receiver.forged, 0);
    await waitFor(async () => (await state()).state === 'ACTIVE', 'the endpoint active again');
    await page.getByRole('button', { name: 'Refresh' }).click();
    await waitText(row.getByTestId('webhook-state'), 'Active');
    await waitText(row.getByTestId('webhook-lag'), '0');

    // Deleting asks first.
    await row.getByRole('button', { name: `Delete webhook ${receiver.url}` }).click();
    await page.getByRole('button', { name: 'Yes, delete' }).click();
    await page.getByText('No webhooks yet.').waitFor();
    assert.deepEqual((await jobgate.gql('{ webhooks { id } }')).webhooks, []);
    assert.deepEqual(page.problems, []);
  } finally {
    await receiver.close();
  }
});
