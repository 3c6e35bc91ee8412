// Under the submit form, the Python call and the command line for the form's job, kept current
// as the form is edited. The Python text is checked word for word; both are run for real (the
// command line with `sh -c` and the jobgate binary of $JOBGATE_BIN, the Python call with the
// Python of $JOBGATE_TEST_PYTHON and the client's sources) and the jobs they submit must have
// the same spec as the one the form submits. Runs on the Kubernetes API emulator with the RayJob CRD
// (a template with parameters) and service account `trainer` allowed, which tests/dashboard.rs
// starts, so that the form shows every field it has.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { dirname } from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';

import { launchBrowser, openPage, startJobgate, waitFor, waitText } from './harness.mjs';

const JOB_FIELDS = `name namespace template spec {
  image command args env { name value } parallelism completions backoffLimit activeDeadlineSeconds
  parameters idempotencyKey resources { requests { cpu memory } limits { cpu memory } }
  serviceAccountName ttlSecondsAfterFinished queueName dependsOn priority
  retryPolicy { rules { action } backoffLimitPerIndex maxFailedIndexes }
}`;

/** What job `id` is, as the server stored it, without its idempotency key (the form's own). */
async function submitted(jobgate, id) {
  const { job } = await jobgate.gql(`query($id: ID!) { job(id: $id) { ${JOB_FIELDS} } }`, { id });
  delete job.spec.idempotencyKey;
  return job;
}

/** Runs `line` with `sh -c` as a user would, `jobgate` on PATH and pointed at `jobgate`; its output. */
async function runInShell(jobgate, line) {
  const bin = process.env.JOBGATE_BIN;
  const { JOBGATE_TOKEN: _, JOBGATE_CONFIG: __, ...env } = process.env;
  const { stdout } = await promisify(execFile)('sh', ['-c', line], {
    env: { ...env, PATH: `${dirname(bin)}:${env.PATH}`, JOBGATE_SERVER: jobgate.url },
  });
  return stdout.trim();
}

/**
 * Runs `code` with the Python of $JOBGATE_TEST_PYTHON (the client importable through its
 * PYTHONPATH, set by tests/dashboard.rs), pointed at `jobgate`, as a user would run the pasted
 * call; its output.
 */
async function runInPython(jobgate, code) {
  const { JOBGATE_TOKEN: _, ...env } = process.env;
  const { stdout } = await promisify(execFile)(process.env.JOBGATE_TEST_PYTHON, ['-c', code], {
    env: { ...env, JOBGATE_SERVER: jobgate.url },
  });
  return stdout.trim();
}

/** The text of the code block under heading `name`. */
async function snippet(page, name) {
  return page.getByRole('region', { name }).locator('pre').textContent();
}

/** Clicks Submit and returns the id of the job whose page the form opens. */
async function submitForm(page) {
  const before = page.url();
  await page.getByRole('form', { name: 'Submit a job' }).getByRole('button', { name: 'Submit' }).click();
  await waitFor(async () => page.url() !== before && /#\/jobs\/.+/.test(page.url()), 'the new job page');
  return decodeURIComponent(page.url().split('#/jobs/')[1]);
}

/**
 * Checks the shown Python call and command line each submit the job the form submits; returns
 * the form's job.
 */
async function sameJobFromCodeAndForm(jobgate, page) {
  const line = await snippet(page, 'Submit from the command line');
  const code = await snippet(page, 'Submit from Python');
  const fromShell = await runInShell(jobgate, line);
  const fromPython = await runInPython(jobgate, code);
  const fromForm = await submitForm(page);
  assert.equal(new Set([fromShell, fromPython, fromForm]).size, 3, 'three jobs');
  const job = await submitted(jobgate, fromForm);
  assert.deepEqual(await submitted(jobgate, fromShell), job, `the job of:\n${line}`);
  assert.deepEqual(await submitted(jobgate, fromPython), job, `the job of:\n${code}`);
  return job;
}

test('the Python call and the command line submit the container job the form submits', async () => {
  const jobgate = await startJobgate();
  const dependency = await jobgate.submit({ name: 'first', image: 'busybox:1.36', command: ['true'] });
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/submit`, { permissions: ['clipboard-read', 'clipboard-write'] });
  const form = page.getByRole('form', { name: 'Submit a job' });
  const cli = page.getByRole('region', { name: 'Submit from the command line' }).locator('pre');
  await waitText(cli, 'jobgate submit --template container', 'the command line of the empty form');

  await form.locator('[name="name"]').fill('snippets');
  await form.locator('[name="image"]').fill('busybox:1.36');
  await form.locator('[name="command"]').fill(['sh', '-c', `echo "it's done" > $JOBGATE_RESULT_FILE`].join('\n'));
  await form.locator('[name="args"]').fill(['--verbose', 'two words'].join('\n'));
  for (const [i, [name, value]] of [
    ['GREETING', 'hello world'],
    ['MODE', 'fast'],
  ].entries()) {
    await form.getByRole('button', { name: 'Add variable' }).click();
    await form.getByLabel(`Variable ${i + 1} name`).fill(name);
    await form.getByLabel(`Variable ${i + 1} value`).fill(value);
  }
  await form.locator('[name="completions"]').fill('4');
  await form.locator('[name="backoffLimit"]').fill('3');
  await form.locator('[name="dependsOn"]').fill(dependency);
  await form.locator('[name="activeDeadlineSeconds"]').fill('600');
  await form.locator('[name="priority"]').fill('7');
  await form.getByLabel('CPU request').fill('250m');
  await form.getByLabel('Memory request').fill('64Mi');
  await form.getByLabel('CPU limit').fill('1');
  await form.getByLabel('Memory limit').fill('128Mi');
  await form.locator('[name="serviceAccountName"]').selectOption('trainer');
  await form.locator('[name="ttlSecondsAfterFinished"]').fill('120');
  // A value that cannot be sent: the calls wait for it to be fixed, as Submit does.
  await form.locator('[name="parallelism"]').fill('1.5');
  await waitText(
    page.getByRole('region', { name: 'The same job from code' }).locator('p.muted'),
    'Shown once the form can be sent: Parallelism must be a whole number.',
  );
  await form.locator('[name="parallelism"]').fill('2');

  const python = [
    'import jobgate',
    '',
    'client = jobgate.Client()  # the server and token from JOBGATE_SERVER / JOBGATE_TOKEN',
    'job = client.submit(',
    '    name="snippets",',
    '    template="container",',
    '    image="busybox:1.36",',
    `    command=["sh", "-c", "echo \\"it's done\\" > $JOBGATE_RESULT_FILE"],`,
    '    args=["--verbose", "two words"],',
    '    env={"GREETING": "hello world", "MODE": "fast"},',
    '    parallelism=2,',
    '    completions=4,',
    '    backoff_limit=3,',
    '    active_deadline_seconds=600,',
    '    resources={"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},',
    '    service_account_name="trainer",',
    '    ttl_seconds_after_finished=120,',
    `    depends_on=["${dependency}"],`,
    '    priority=7,',
    ')',
    'print(job.id)',
  ].join('\n');
  await waitFor(async () => (await snippet(page, 'Submit from Python')) === python, 'the Python call of the filled form');
  const line = await snippet(page, 'Submit from the command line');
  assert.match(line, /^jobgate submit \\\n {2}--name snippets \\\n/, 'one flag a line');
  assert.match(line, / {2}--arg=--verbose \\\n {2}--arg 'two words' \\\n/);
  assert.match(line, / {2}-- sh -c 'echo "it'\\''s done" > \$JOBGATE_RESULT_FILE'$/);

  // Copy puts the exact text on the clipboard.
  const pythonRegion = page.getByRole('region', { name: 'Submit from Python' });
  await pythonRegion.getByRole('button', { name: 'Copy the Python call' }).click();
  await waitText(pythonRegion.getByRole('status'), 'Copied');
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), python);

  const job = await sameJobFromCodeAndForm(jobgate, page);
  assert.deepEqual(
    [job.name, job.spec.args, job.spec.parallelism, job.spec.completions, job.spec.resources.limits.memory, job.spec.dependsOn, job.spec.priority],
    ['snippets', ['--verbose', 'two words'], 2, 4, '128Mi', [dependency], 7],
  );
  assert.deepEqual(page.problems, []);
});

test('parameters reach the job as the form sends them, a string that reads as JSON too', async () => {
  const jobgate = await startJobgate();
  const browser = await launchBrowser();
  const page = await openPage(browser, `${jobgate.url}/#/submit`);
  const form = page.getByRole('form', { name: 'Submit a job' });
  await form.locator('#field-template').selectOption('rayjob');
  await form.locator('[name="name"]').fill('ray-snippets');
  await form.locator('[name="image"]').fill('rayproject/ray:2.9.0');
  await form.locator('[name="command"]').fill(['python', '-c', 'print("a b")'].join('\n'));
  // "2.9" is a string the schema wants, and reads as the JSON number 2.9.
  await form.locator('#param-rayVersion').fill('2.9');
  await form.locator('#param-workers').fill('2');

  const python = [
    'import jobgate',
    '',
    'client = jobgate.Client()  # the server and token from JOBGATE_SERVER / JOBGATE_TOKEN',
    'job = client.submit(',
    '    name="ray-snippets",',
    '    template="rayjob",',
    '    image="rayproject/ray:2.9.0",',
    '    command=["python", "-c", "print(\\"a b\\")"],',
    '    parameters={"rayVersion": "2.9", "workers": 2},',
    ')',
    'print(job.id)',
  ].join('\n');
  await waitFor(async () => (await snippet(page, 'Submit from Python')) === python, 'the Python call of the filled form');
  const line = await snippet(page, 'Submit from the command line');
  assert.match(line, /--param 'rayVersion="2\.9"' \\\n {2}--param workers=2 \\\n/);

  const job = await sameJobFromCodeAndForm(jobgate, page);
  assert.deepEqual(job.spec.parameters, { rayVersion: '2.9', workers: 2 });
  assert.equal(job.template, 'rayjob');
  assert.deepEqual(page.problems, []);
});
