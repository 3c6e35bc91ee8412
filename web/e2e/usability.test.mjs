// Usable by everyone: no accessibility violations axe-core can find (names on every control,
// contrast, structure) in each main view, light and dark, at 1280×800 and at phone width;
// nothing wider than a phone's screen; and the keyboard reaches everything.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitText } from './harness.mjs';

const axePath = createRequire(import.meta.url).resolve('axe-core/axe.min.js');

async function violations(page) {
  await page.addScriptTag({ path: axePath });
  return page.evaluate(async () => {
    const result = await window.axe.run(document, { runOnly: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] });
    return result.violations.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  });
}

test('every view passes axe-core in light and dark, at desktop and phone width', async () => {
  const jobgate = await startJobgate();
  const done = await jobgate.submit({ name: 'done', command: ['sh', '-c', 'echo hi; printf ok > "$JOBGATE_RESULT_FILE"'] });
  // It depends on `done`, so its page shows its dependencies too.
  const failed = await jobgate.submit({ name: 'failed', command: ['sh', '-c', 'exit 3'], backoffLimit: 0, dependsOn: [done] });
  const running = await jobgate.submit({ name: 'running', command: ['sleep', '600'], completions: 3 });
  await jobgate.waitPhase(done, 'SUCCEEDED');
  await jobgate.waitPhase(failed, 'FAILED');
  await jobgate.waitPhase(running, 'RUNNING');
  // A paused schedule with one run, so its page shows a full row.
  const created = await jobgate.gql(
    'mutation($input: CreateScheduleInput!) { createSchedule(input: $input) { schedule { id } } }',
    { input: { name: 'nightly', cron: '30 2 * * *', timeZone: 'Europe/Berlin', suspended: true, job: { name: 'nightly', command: ['true'] } } },
  );
  const run = await jobgate.gql('mutation($id: ID!) { triggerSchedule(id: $id) { job { id } } }', { id: created.createSchedule.schedule.id });
  await jobgate.waitPhase(run.triggerSchedule.job.id, 'SUCCEEDED');
  const browser = await launchBrowser();
  const views = [
    // `done` and the schedule's run.
    ['jobs', '/#/', (page) => waitText(page.getByTestId('count-SUCCEEDED'), '2')],
    ['detail', `/#/jobs/${done}`, (page) => waitText(page.getByTestId('job-result'), 'ok')],
    [
      'failed detail',
      `/#/jobs/${failed}`,
      async (page) => {
        await waitText(page.getByTestId('job-phase'), 'Failed');
        await waitText(page.getByTestId('job-dependencies'), /^done\s*Succeeded$/);
      },
    ],
    ['submit', '/#/submit', (page) => page.getByRole('form', { name: 'Submit a job' }).waitFor()],
    ['schedules', '/#/schedules', (page) => waitText(page.getByTestId('schedule-run'), /Succeeded/)],
  ];
  const problems = [];
  for (const colorScheme of ['light', 'dark']) {
    for (const viewport of [
      { width: 1280, height: 800 },
      { width: 390, height: 844 },
    ]) {
      for (const [name, path, ready] of views) {
        // axe is injected as an inline script, which the dashboard's CSP rightly refuses.
        const page = await openPage(browser, `${jobgate.url}${path}`, { colorScheme, viewport, bypassCSP: true });
        await ready(page);
        await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
        const where = `${name}, ${colorScheme}, ${viewport.width}px`;
        for (const v of await violations(page)) problems.push(`${where}: ${v}`);
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        if (overflow > 0) problems.push(`${where}: the page is ${overflow}px wider than the window`);
        problems.push(...page.problems.map((p) => `${where}: ${p}`));
        await page.context().close();
      }
    }
  }
  assert.deepEqual(problems, []);
});

test('the keyboard reaches the jobs, their pages and the form', async () => {
  const jobgate = await startJobgate();
  const id = await jobgate.submit({ name: 'by-keyboard', command: ['true'] });
  await jobgate.waitPhase(id, 'SUCCEEDED');
  const browser = await launchBrowser();
  const page = await openPage(browser, jobgate.url);
  const row = page.locator(`tr[data-job-id="${id}"]`);
  await waitText(row.getByTestId('phase'), 'Succeeded');

  // "/" jumps to the name filter; typing filters the table.
  await page.keyboard.press('/');
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'filter-name');
  await page.keyboard.type('nothing-like-this');
  await waitText(page.locator('.empty'), /No job matches/, 'the empty filtered table');
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Backspace');
  await waitText(row.getByTestId('phase'), 'Succeeded');

  // "j" moves to the first job; Enter opens it, and the focus lands on its heading.
  await page.locator('body').click({ position: { x: 5, y: 400 } });
  await page.keyboard.press('j');
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'by-keyboard');
  await page.keyboard.press('Enter');
  await waitText(page.getByTestId('job-phase'), 'Succeeded');
  assert.equal(await page.evaluate(() => document.activeElement?.tagName), 'H1');

  // Tab from the heading reaches Resubmit, which opens the form filled in from the job.
  let reached = false;
  for (let i = 0; i < 15 && !reached; i++) {
    await page.keyboard.press('Tab');
    reached = (await page.evaluate(() => document.activeElement?.textContent?.trim())) === 'Resubmit';
  }
  assert.ok(reached, 'Tab never reached Resubmit');
  await page.keyboard.press('Enter');
  const form = page.getByRole('form', { name: 'Submit a job' });
  await form.waitFor();
  await waitText(page.locator('h1'), 'Resubmit a job');
  assert.equal(await form.locator('[name="name"]').inputValue(), 'by-keyboard');
  assert.equal(await form.locator('[name="command"]').inputValue(), 'true');
  assert.deepEqual(page.problems, []);
});
