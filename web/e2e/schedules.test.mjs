// The schedules page: a refused rule explained next to the form; a schedule created from the
// form, its next runs listed and its runs appearing with their phases as they happen (pushed);
// paused, run now while paused, resumed and deleted from its row.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { launchBrowser, openPage, startJobgate, waitFor, waitText } from './harness.mjs';

test('a schedule is created, runs, is paused, run now, resumed and deleted from its page', async () => {
  const jobgate = await startJobgate(['--schedule-min-interval-secs', '1']);
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/schedules`);
  await page.getByRole('heading', { name: 'Schedules' }).waitFor();
  await page.getByText('No schedules yet.').waitFor();
  const form = page.getByRole('form', { name: 'New schedule' });

  // The server's refusal of a rule is shown next to the form, and nothing is created.
  await form.getByLabel('Name', { exact: true }).fill('every-second');
  await form.getByLabel('Cron rule').fill('61 * * * *');
  await form.getByLabel('Command (one word a line)').fill('true');
  await form.getByRole('button', { name: 'Create schedule' }).click();
  await waitText(page.locator('#schedule-error'), /cron/i);
  assert.equal((await jobgate.gql('{ schedules { edges { node { id } } } }')).schedules.edges.length, 0);

  // Every second (the optional seconds field), in a named zone.
  await form.getByLabel('Cron rule').fill('* * * * * *');
  await form.getByLabel('Time zone').fill('Europe/Berlin');
  await form.getByRole('button', { name: 'Create schedule' }).click();
  const row = page.locator('tr[data-schedule="every-second"]');
  await waitText(row.getByTestId('schedule-state'), 'Active');
  await waitText(row.getByTestId('schedule-cron'), '* * * * * *');
  await waitText(row.locator('td').first(), /Europe\/Berlin/);
  assert.equal(await row.getByTestId('schedule-next').locator('li').count(), 3);

  // Next runs read on the rule's wall clock, whatever the viewer's zone: a viewer in New York
  // sees Berlin's hour, with the zone named.
  const away = await openPage(browser, `${jobgate.url}/#/schedules`, { timezoneId: 'America/New_York', locale: 'en-GB' });
  const next = away.locator('tr[data-schedule="every-second"]').getByTestId('schedule-next').locator('time').first();
  await next.waitFor();
  const [iso, shown] = [await next.getAttribute('datetime'), await next.textContent()];
  const berlinHour = new Intl.DateTimeFormat('en-GB', { timeZone: 'Europe/Berlin', hour: '2-digit', hourCycle: 'h23' }).format(new Date(iso));
  assert.match(shown, new RegExp(`\\b${berlinHour}:\\d{2}:\\d{2}\\b`), `${shown} shows Berlin's hour ${berlinHour} of ${iso}`);
  assert.match(shown, /CET|CEST|GMT\+[12]/, `${shown} names the zone`);
  await away.context().close();

  // Its ticks' jobs appear in the row, each reaching Succeeded, without a reload.
  await waitFor(async () => (await row.getByTestId('schedule-run').filter({ hasText: 'Succeeded' }).count()) >= 1, 'a succeeded run in the row');

  // Paused: the row says so, and the server agrees.
  await row.getByRole('button', { name: 'Pause every-second' }).click();
  await waitText(row.getByTestId('schedule-state'), 'Paused');
  const { schedules } = await jobgate.gql('{ schedules { edges { node { id suspended } } } }');
  assert.equal(schedules.edges.length, 1);
  assert.equal(schedules.edges[0].node.suspended, true);
  const id = schedules.edges[0].node.id;

  // Run now starts a job outside the ticks, paused or not; it appears as "run now".
  await row.getByRole('button', { name: 'Run now: every-second' }).click();
  const manual = row.getByTestId('schedule-run').filter({ hasText: 'run now' });
  await waitFor(async () => (await manual.filter({ hasText: 'Succeeded' }).count()) === 1, 'the run-now job, succeeded');
  const runs = (await jobgate.gql('query($id: ID!) { schedule(id: $id) { recentRuns(last: 100) { tick job { id schedule { id } } } } }', { id })).schedule.recentRuns;
  const triggered = runs.filter((r) => r.tick === null);
  assert.equal(triggered.length, 1);
  assert.equal(triggered[0].job.schedule.id, id);

  // The run's link opens its job's page.
  const link = manual.getByRole('link');
  await link.click();
  await page.waitForURL(new RegExp(`#/jobs/${triggered[0].job.id}$`));
  await page.goBack();
  await waitText(row.getByTestId('schedule-state'), 'Paused');

  await row.getByRole('button', { name: 'Resume every-second' }).click();
  await waitText(row.getByTestId('schedule-state'), 'Active');

  await row.getByRole('button', { name: 'Delete every-second' }).click();
  await page.getByRole('alertdialog', { name: 'Confirm delete' }).getByRole('button', { name: 'Yes, delete' }).click();
  await page.getByText('No schedules yet.').waitFor();
  assert.equal((await jobgate.gql('{ schedules { edges { node { id } } } }')).schedules.edges.length, 0);
  // The jobs it started stay.
  assert.equal((await jobgate.gql('query($id: ID!) { job(id: $id) { id } }', { id: triggered[0].job.id })).job.id, triggered[0].job.id);
});
