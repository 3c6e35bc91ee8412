// Refreshes the dashboard's screenshots in docs/screenshots/ (run after a UI change):
//
//   cargo build && npm run screenshots --prefix web
//
// It starts jobgate (JOBGATE_BIN, default target/debug/jobgate) with a fresh data directory,
// submits a few varied jobs and photographs the main views in headless Chromium.

import { spawn } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { cleanUp, launchBrowser, openPage, startJobgate, waitFor, waitText } from './harness.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
process.env.JOBGATE_BIN ||= join(process.env.CARGO_TARGET_DIR || join(root, 'target'), 'debug/jobgate');
const out = join(root, 'docs/screenshots');
mkdirSync(out, { recursive: true });

const jobgate = await startJobgate(['--max-parallelism', '8']);
const sh = (script) => ['sh', '-c', script];
const ids = {};
ids.etl = await jobgate.submit({
  name: 'etl-nightly',
  namespace: 'data',
  command: sh('for t in users orders events; do echo "loading $t"; sleep 0.2; done; echo \'{"rows": 18342}\' > "$JOBGATE_RESULT_FILE"'),
});
ids.report = await jobgate.submit({ name: 'weekly-report', command: sh('echo "rendering"; printf "report.pdf" > "$JOBGATE_RESULT_FILE"') });
ids.flaky = await jobgate.submit({
  name: 'flaky-import',
  namespace: 'data',
  backoffLimit: 1,
  command: sh('echo "connecting to warehouse"; echo "error: connection refused" >&2; exit 3'),
});
ids.cancelled = await jobgate.submit({ name: 'backfill-2019', namespace: 'data', command: ['sleep', '600'] });
ids.train = await jobgate.submit({
  name: 'train-resnet',
  namespace: 'ml',
  completions: 12,
  parallelism: 3,
  command: sh('echo "shard $JOB_COMPLETION_INDEX: epoch 1/3"; sleep 0.5; echo "shard $JOB_COMPLETION_INDEX: epoch 2/3"; sleep 600'),
});
ids.map = await jobgate.submit({
  name: 'word-count-map',
  namespace: 'ml',
  completions: 6,
  parallelism: 6,
  command: sh('echo "mapping part $JOB_COMPLETION_INDEX"; sleep 0.3; echo "part $JOB_COMPLETION_INDEX: 1204 words"; printf "$JOB_COMPLETION_INDEX" > "$JOBGATE_RESULT_FILE"'),
});
await jobgate.waitPhase(ids.etl, 'SUCCEEDED');
await jobgate.waitPhase(ids.flaky, 'FAILED');
await jobgate.waitPhase(ids.map, 'SUCCEEDED');
await jobgate.waitPhase(ids.cancelled, 'RUNNING');
await jobgate.gql('mutation($id: ID!) { cancelJob(id: $id) { job { id } } }', { id: ids.cancelled });
await jobgate.waitPhase(ids.cancelled, 'CANCELLED');
ids.pending = await jobgate.submit({ name: 'ingest-logs', command: ['sleep', '600'] });

// Schedules: a nightly one run once by hand, and a paused one.
const CREATE = 'mutation($input: CreateScheduleInput!) { createSchedule(input: $input) { schedule { id } } }';
const nightly = (await jobgate.gql(CREATE, {
  input: {
    name: 'nightly-etl',
    cron: '30 2 * * *',
    timeZone: 'Europe/Berlin',
    concurrencyPolicy: 'FORBID',
    job: { name: 'nightly-etl', namespace: 'data', command: sh('echo "loading warehouse"; sleep 0.2') },
  },
})).createSchedule.schedule.id;
const triggered = (await jobgate.gql('mutation($id: ID!) { triggerSchedule(id: $id) { job { id } } }', { id: nightly })).triggerSchedule.job.id;
const hourly = (await jobgate.gql(CREATE, {
  input: { name: 'hourly-metrics', cron: '0 * * * *', job: { name: 'hourly-metrics', namespace: 'ml', command: ['true'] } },
})).createSchedule.schedule.id;
await jobgate.gql('mutation($id: ID!) { pauseSchedule(id: $id) { id } }', { id: hourly });
await jobgate.waitPhase(triggered, 'SUCCEEDED');
await new Promise((r) => setTimeout(r, 1200));

const browser = await launchBrowser();
async function shot(name, path, { ready, ...options } = {}) {
  const page = await openPage(browser, `${jobgate.url}${path}`, options);
  await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
  if (ready) await ready(page);
  await page.waitForTimeout(400);
  await page.screenshot({ path: join(out, `${name}.png`) });
  await page.context().close();
  console.log(`docs/screenshots/${name}.png`);
}

const tableReady = (page) => waitText(page.getByTestId('count-CANCELLED'), '1');
await shot('jobs', '/#/', { ready: tableReady });
await shot('jobs-dark', '/#/', { ready: tableReady, colorScheme: 'dark' });
await shot('detail', `/#/jobs/${ids.train}`, {
  ready: (page) => waitText(page.getByRole('log', { name: 'Logs' }), /epoch 2\/3/, 'log lines'),
});
await shot('submit', '/#/submit', {
  ready: async (page) => {
    const form = page.getByRole('form', { name: 'Submit a job' });
    await form.locator('[name="name"]').fill('Nightly Report');
    await form.locator('[name="command"]').fill('sh\n-c\n./report.sh > "$JOBGATE_RESULT_FILE"');
    await form.getByRole('button', { name: 'Submit' }).click();
    await page.locator('#error-name').waitFor();
    await page.locator('#field-name').scrollIntoViewIfNeeded();
  },
});
await shot('submit-code', '/#/submit', {
  ready: async (page) => {
    const form = page.getByRole('form', { name: 'Submit a job' });
    await form.locator('[name="name"]').fill('train');
    await form.locator('[name="command"]').fill('python\ntrain.py\n--note\nfirst "real" run');
    await form.getByRole('button', { name: 'Add variable' }).click();
    await form.getByLabel('Variable 1 name').fill('EPOCHS');
    await form.getByLabel('Variable 1 value').fill('3');
    await form.locator('[name="parallelism"]').fill('2');
    await form.locator('[name="completions"]').fill('4');
    await page.getByRole('heading', { name: 'The same job from code' }).scrollIntoViewIfNeeded();
    await page.getByRole('heading', { name: 'The same job from code' }).evaluate((h) => h.scrollIntoView({ block: 'start' }));
  },
});
await shot('attempts', `/#/jobs/${ids.flaky}`, {
  ready: async (page) => {
    await page.getByRole('button', { name: 'Show log of attempt #1' }).click();
    await waitText(page.getByTestId('attempt-log'), /connection refused/, 'the first attempt\'s output');
    await page.getByRole('heading', { name: 'Attempts' }).scrollIntoViewIfNeeded();
  },
});
await shot('schedules', '/#/schedules', {
  ready: async (page) => {
    await waitText(page.locator('tr[data-schedule="nightly-etl"]').getByTestId('schedule-run'), /Succeeded/, 'the run-now job');
    await waitText(page.locator('tr[data-schedule="hourly-metrics"]').getByTestId('schedule-state'), 'Paused');
  },
});
await shot('phone-dark', '/#/', { ready: tableReady, colorScheme: 'dark', viewport: { width: 390, height: 844 } });

// A job on Kubernetes, with its pods: jobgate --executor kubernetes against the API emulator
// (tests/kube-emulator; `cargo build -p kube-emulator` first).
const emulatorBin = join(dirname(process.env.JOBGATE_BIN), 'kube-emulator');
if (existsSync(emulatorBin)) {
  const port = await freePort();
  const kubeconfig = join(jobgate.dataDir, 'emulator.kubeconfig');
  const emulator = spawn(emulatorBin, ['--listen', `127.0.0.1:${port}`, '--kubeconfig', kubeconfig], { stdio: 'ignore' });
  try {
    await waitFor(() => existsSync(kubeconfig), 'the emulator');
    const onKube = await startJobgate(['--executor', 'kubernetes', '--kubeconfig', kubeconfig]);
    const id = await onKube.submit({
      name: 'train-shards',
      image: 'registry.example/trainer:2.1',
      completions: 4,
      parallelism: 2,
      command: ['python', 'train.py'],
      env: [
        { name: 'EMULATOR_LOG', value: 'loading shard\nepoch 1/3 loss=0.82\nepoch 2/3 loss=0.61' },
        { name: 'EMULATOR_RUN_MS', value: '60000' },
      ],
    });
    const kubeShot = async (name, path, ready) => {
      const page = await openPage(browser, `${onKube.url}${path}`);
      await waitText(page.getByRole('status', { name: 'Connection' }), 'Live');
      await ready(page);
      await page.waitForTimeout(400);
      await page.screenshot({ path: join(out, `${name}.png`) });
      await page.context().close();
      console.log(`docs/screenshots/${name}.png`);
    };
    await kubeShot('detail-kubernetes', `/#/jobs/${id}`, async (page) => {
      await waitText(page.getByRole('log', { name: 'Logs' }), /epoch 2\/3[\s\S]*epoch 2\/3/, 'both pods\' logs');
      await page.getByRole('heading', { name: 'Pods' }).scrollIntoViewIfNeeded();
    });
  } finally {
    emulator.kill('SIGKILL');
  }
} else {
  console.log(`skipped docs/screenshots/detail-kubernetes.png: no ${emulatorBin} (cargo build -p kube-emulator)`);
}
await cleanUp();

function freePort() {
  return new Promise((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}
