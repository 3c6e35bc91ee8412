// What the dashboard's browser tests stand on: a real jobgate process (the binary cargo built,
// from $JOBGATE_BIN) on a free port with its own data directory, and headless Chromium driven
// by playwright-core. tests/dashboard.rs runs each *.test.mjs here with node's test runner.
//
// A Rust test that prepares more than a free port (queue.test.mjs: an emulated Kubernetes
// cluster with Kueue) hands every jobgate here its own arguments in $JOBGATE_EXTRA_ARGS (a JSON
// array, after the harness's and the file's own), and takes requests for what only it can do
// through files the test writes with `askTheRustTest` into $JOBGATE_E2E_REQUESTS.

import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';

import { chromium } from 'playwright-core';

export const WAIT_MS = 30_000;

const cleanups = [];

/** Stops every jobgate and browser started here (the test runner calls it after each file). */
export async function cleanUp() {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
}
// Under `node --test` (which sets NODE_TEST_CONTEXT in each file's process) clean up after
// the file; scripts (screenshots, bench) call cleanUp() themselves, since node:test would run
// the hook as soon as it saw no test to wait for.
if (process.env.NODE_TEST_CONTEXT) after(cleanUp);

/**
 * A directory a test and its jobs share (for gate files): not the data directory, which is
 * jobgate's alone (0700), since jobs may run as another user (nobody, when jobgate is root).
 * Removed with everything else at clean-up.
 */
export function sharedDir() {
  const dir = mkdtempSync(join(tmpdir(), 'jobgate-e2e-shared-'));
  chmodSync(dir, 0o755);
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A jobgate process. `restart()` brings it back on the same port and data directory. */
class Jobgate {
  constructor(args, dataDir, port) {
    this.args = args;
    this.dataDir = dataDir;
    this.port = port;
    this.log = [];
    this.child = null;
  }

  async start() {
    const bin = process.env.JOBGATE_BIN;
    if (!bin) throw new Error('run through `cargo nextest run --test dashboard`, or set JOBGATE_BIN to a jobgate binary');
    const child = spawn(
      bin,
      [
        '--listen',
        `127.0.0.1:${this.port}`,
        '--data-dir',
        this.dataDir,
        '--local-retry-delay-ms',
        '20',
        '--local-kill-grace-ms',
        '300',
        '--log',
        'info,tower_http=warn',
        ...this.args,
        ...extraArgs(),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], env: withoutToken(process.env) },
    );
    this.child = child;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    this.exited = exited;
    const address = await new Promise((resolve, reject) => {
      let buffered = '';
      const timer = setTimeout(() => reject(new Error(`jobgate did not start:\n${this.log.join('\n')}`)), WAIT_MS);
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk) => {
        buffered += chunk;
        let newline;
        while ((newline = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          this.log.push(line);
          const match = line.match(/listening on http:\/\/([\d.]+:\d+)/);
          if (match) {
            clearTimeout(timer);
            resolve(match[1]);
          }
        }
      });
      exited.then((code) => {
        clearTimeout(timer);
        reject(new Error(`jobgate exited (${code}) before listening:\n${this.log.join('\n')}`));
      });
    });
    this.port = Number(address.split(':')[1]);
    this.url = `http://${address}`;
    return this;
  }

  async kill() {
    if (!this.child || this.child.exitCode !== null) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }

  async stop() {
    if (!this.child || this.child.exitCode !== null) return;
    this.child.kill('SIGTERM');
    await this.exited;
  }

  /** Starts again on the same port and data directory (after `kill` or `stop`). */
  async restart() {
    await this.kill();
    return this.start();
  }

  /** Runs a GraphQL operation over HTTP; returns `data`, throwing on errors. */
  async gql(query, variables = {}) {
    const response = await fetch(`${this.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query, variables }),
    });
    const body = await response.json();
    if (body.errors) throw new Error(`GraphQL errors: ${JSON.stringify(body.errors)}`);
    return body.data;
  }

  async submit(input) {
    const data = await this.gql('mutation($input: SubmitJobInput!) { submitJob(input: $input) { job { id } } }', { input });
    return data.submitJob.job.id;
  }

  /** The server's `jobStats` counts, by phase in lower case. */
  async counts() {
    return (await this.gql('{ jobStats { counts { pending running succeeded failed cancelled } } }')).jobStats.counts;
  }

  async phase(id) {
    return (await this.gql('query($id: ID!) { job(id: $id) { phase } }', { id })).job.phase;
  }

  /** Waits until the job is in `phase`, from the server's own answer. */
  async waitPhase(id, phase) {
    await waitFor(async () => (await this.phase(id)) === phase, `job ${id} to be ${phase}`);
  }
}

/** The arguments the Rust test adds to every jobgate ($JOBGATE_EXTRA_ARGS, a JSON array). */
function extraArgs() {
  const extra = process.env.JOBGATE_EXTRA_ARGS;
  if (!extra) return [];
  const args = JSON.parse(extra);
  if (!Array.isArray(args) || !args.every((a) => typeof a === 'string')) {
    throw new Error(`JOBGATE_EXTRA_ARGS must be a JSON array of strings, not ${extra}`);
  }
  return args;
}

/**
 * Asks the Rust test that runs this file to do `request` (e.g. `open-gate-first` for the
 * emulated cluster), by creating a file of that name in $JOBGATE_E2E_REQUESTS. Fire and forget:
 * the test then waits for what the request changes, as a user would.
 */
export function askTheRustTest(request) {
  const dir = process.env.JOBGATE_E2E_REQUESTS;
  if (!dir) throw new Error(`no Rust test takes requests here (JOBGATE_E2E_REQUESTS unset) for ${request}`);
  writeFileSync(join(dir, request), '');
}

/** The environment without an API token the caller may have set: tests choose their own. */
function withoutToken(env) {
  const { JOBGATE_API_TOKEN: _, ...rest } = env;
  return rest;
}

/** Starts jobgate with `args`; it is killed and its data removed when the test file ends. */
export async function startJobgate(args = []) {
  const dataDir = mkdtempSync(join(tmpdir(), 'jobgate-e2e-'));
  const jobgate = new Jobgate(args, dataDir, 0);
  cleanups.push(async () => {
    await jobgate.kill();
    rmSync(dataDir, { recursive: true, force: true });
  });
  await jobgate.start();
  return jobgate;
}

/** Polls `condition` (a test's own check, not the dashboard's) until it holds. */
export async function waitFor(condition, what, timeout = WAIT_MS) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      if (await condition()) return;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Headless Chromium as this machine allows it (root, no network beyond loopback). */
export async function launchBrowser() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  cleanups.push(() => browser.close());
  return browser;
}

/**
 * A page at `url`, collecting its console errors and uncaught exceptions in `page.problems`.
 * Resource errors while jobgate is deliberately down are the test's to expect.
 */
export async function openPage(browser, url, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
  const page = await context.newPage();
  page.problems = [];
  page.on('pageerror', (e) => page.problems.push(`page error: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') page.problems.push(`console error: ${m.text()}`);
  });
  page.setDefaultTimeout(WAIT_MS);
  await page.goto(url);
  return page;
}

/**
 * Waits until the page's header shows the counts `expected` (from `jobgate.counts()`), every
 * phase at once.
 */
export async function waitHeaderCounts(page, expected) {
  await waitFor(async () => {
    for (const [phase, count] of Object.entries(expected)) {
      const shown = (await page.getByTestId(`count-${phase.toUpperCase()}`).textContent()).trim();
      if (shown !== String(count)) return false;
    }
    return true;
  }, `the header counts to equal ${JSON.stringify(expected)}`);
}

/** Waits until `locator`'s text is `expected` (a string, or a RegExp it matches). */
export async function waitText(locator, expected, what = `text ${expected}`) {
  await waitFor(async () => {
    const text = (await locator.textContent({ timeout: 1000 }))?.trim();
    return expected instanceof RegExp ? expected.test(text) : text === expected;
  }, what);
}
