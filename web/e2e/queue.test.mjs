// A job queued in Kueue, on its detail page: while the queue's quota is taken it says that it
// waits for admission and Kueue's reason; once the job ahead finishes, the page shows it
// admitted and running without a reload. Runs against the Kubernetes API emulator's simulated
// Kueue (quota: one pod), which tests/dashboard.rs starts; the emulated pods run until the
// test asks it to open their gate.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { askTheRustTest, launchBrowser, openPage, startJobgate, waitText } from './harness.mjs';

/** A job in LocalQueue `team-a` whose emulated pod runs until gate `gate` opens. */
const queued = (name, gate) => ({
  name,
  image: 'busybox:1.36',
  command: ['echo', 'hello'],
  env: [{ name: 'EMULATOR_GATE', value: gate }],
  queueName: 'team-a',
});

test("a queued job's page says why it waits, then shows it admitted and running live", async () => {
  assert.ok(
    process.env.JOBGATE_E2E_REQUESTS,
    'run through `cargo nextest run --test dashboard a_queued`: it starts the emulated cluster',
  );
  const jobgate = await startJobgate();
  const first = await jobgate.submit(queued('queue-first', 'first'));
  // Kueue admits in queue order: the first one takes the only pod of quota.
  await jobgate.waitPhase(first, 'RUNNING');

  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
  // Set on this document: a reload or a navigation away would lose it.
  await page.evaluate(() => {
    window.__sameDocument = true;
  });

  // The second one appears in the table; its page is opened at once, as Kueue takes it in.
  const second = await jobgate.submit(queued('queue-second', 'second'));
  await page.getByRole('table', { name: 'Jobs' }).locator(`tr[data-job-id="${second}"]`).getByRole('link').click();
  await waitText(page.locator('h1'), 'queue-second');

  // It waits in the queue, and says why in Kueue's words.
  await waitText(page.getByTestId('job-phase'), 'Pending');
  const queue = page.getByTestId('job-queue');
  await waitText(page.locator('dt').filter({ hasText: /queue$/i }), 'Kueue queue', 'the Kueue label');
  await waitText(queue.getByTestId('job-queue-state'), 'waiting for admission');
  assert.match(await queue.textContent(), /^team-a: waiting for admission/);
  await waitText(
    queue.getByTestId('job-queue-reason'),
    /^Pending: .*insufficient unused quota for pods in flavor default-flavor, 1 more needed/,
    "Kueue's pending message",
  );

  // The job ahead finishes: its quota goes to this one, and the page follows live.
  askTheRustTest('open-gate-first');
  await waitText(page.getByTestId('job-phase'), 'Running', 'the phase to reach Running');
  await waitText(queue.getByTestId('job-queue-state'), 'admitted', 'the queue state to say admitted');
  await waitText(queue, /\(ClusterQueue cluster-queue\)/);
  await jobgate.waitPhase(first, 'SUCCEEDED');

  // And it finishes in turn.
  askTheRustTest('open-gate-second');
  await waitText(page.getByTestId('job-phase'), 'Succeeded', 'the phase to reach Succeeded');
  assert.equal(await page.evaluate(() => window.__sameDocument), true, 'the page was reloaded');
  assert.deepEqual(page.problems, []);
});
