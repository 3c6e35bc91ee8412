// The schedules page: the caller's schedules with their next fire times and recent runs (each
// run's job with its phase, linked to its page), pause, resume, run now and delete (with a
// confirm step), and a form to create one.
//
// The list is read with `schedules` when the page opens, and again after each schedule event
// (`scheduleEvents`: changes and ticks, pushed) and each job event (a run's phase), at most
// once a second (`reload.js`); nothing polls.

import { useEffect, useRef, useState } from 'preact/hooks';

import { fullTime, jobTitle, phaseWord, when, zonedWhen } from './format.js';
import {
  CREATE_SCHEDULE_MUTATION,
  DELETE_SCHEDULE_MUTATION,
  PAUSE_SCHEDULE_MUTATION,
  RESUME_SCHEDULE_MUTATION,
  SCHEDULE_EVENTS_SUBSCRIPTION,
  SCHEDULES_QUERY,
  TRIGGER_SCHEDULE_MUTATION,
} from './documents.js';
import { useReload } from './reload.js';

const POLICY_WORD = { ALLOW: 'Allow overlap', FORBID: 'Skip while running', REPLACE: 'Replace the running one' };

export function SchedulesView({ api, live }) {
  const [schedules, setSchedules] = useState(null);
  const [error, setError] = useState(null);
  const load = useReload(
    async () => {
      const data = await api.request(SCHEDULES_QUERY, { first: 100 });
      setSchedules(data.schedules.edges.map((e) => e.node));
      setError(null);
    },
    (e) => setError(e.message),
  );

  useEffect(() => {
    load();
    const stopJobs = live.onEvent(() => load());
    const unsubscribe = api.subscribe(SCHEDULE_EVENTS_SUBSCRIPTION, {}, {
      onNext: () => load(),
      onError: (e) => setError(e.message),
    });
    // Events missed while the WebSocket was down are read with the list.
    const stopReconnect = api.onReconnect(() => load());
    return () => {
      stopJobs();
      unsubscribe();
      stopReconnect();
    };
  }, [api, live]);

  return (
    <section aria-labelledby="schedules-heading">
      <div class="view-head">
        <h1 id="schedules-heading" tabIndex={-1}>
          Schedules
        </h1>
      </div>
      <p class="muted small">
        A schedule submits its job at every tick of its cron rule, in its time zone, once per tick whatever restarts or
        replicas.
      </p>
      <CreateForm api={api} onCreated={() => load()} />
      {error && (
        <p class="error" role="alert">
          Could not load the schedules: {error}
        </p>
      )}
      <div class="table-wrap" role="region" aria-label="Schedules table" tabIndex={0}>
        <table>
          <thead>
            <tr>
              <th scope="col">Schedule</th>
              <th scope="col">Rule</th>
              <th scope="col">State</th>
              <th scope="col">Next runs</th>
              <th scope="col">Recent runs</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {(schedules || []).map((s) => (
              <ScheduleRow key={s.id} schedule={s} api={api} onChanged={() => load()} />
            ))}
          </tbody>
        </table>
        {schedules && schedules.length === 0 && <p class="empty">No schedules yet.</p>}
      </div>
    </section>
  );
}

/** A time in the viewer's zone, or on the wall clock of `zone` when given. */
function Time({ iso, zone }) {
  return (
    <time dateTime={iso} title={fullTime(iso)}>
      {zone ? zonedWhen(iso, zone) : when(iso)}
    </time>
  );
}

function ScheduleRow({ schedule, api, onChanged }) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const confirmButton = useRef(null);
  useEffect(() => {
    if (confirming) confirmButton.current?.focus();
  }, [confirming]);

  async function act(mutation) {
    setBusy(true);
    setError(null);
    try {
      await api.request(mutation, { id: schedule.id });
      setConfirming(false);
      onChanged();
    } catch (e) {
      setError(e.message);
    } finally {
      setBusy(false);
    }
  }

  const runs = schedule.recentRuns || [];
  return (
    <tr data-testid="schedule-row" data-schedule={schedule.name}>
      <th scope="row">
        {schedule.name}
        <div class="muted small">
          {schedule.namespace} · by {schedule.owner}
        </div>
      </th>
      <td>
        <code data-testid="schedule-cron">{schedule.cron}</code>
        <div class="muted small">
          {schedule.timeZone} · {POLICY_WORD[schedule.concurrencyPolicy] || schedule.concurrencyPolicy}
          {schedule.startingDeadlineSeconds != null && ` · ${schedule.startingDeadlineSeconds} s late at most`}
        </div>
      </td>
      <td>
        <span class={`badge schedule-${schedule.suspended ? 'paused' : 'active'}`} data-testid="schedule-state">
          {schedule.suspended ? 'Paused' : 'Active'}
        </span>
        {schedule.blockedReason && (
          <div class="row-message" title={schedule.blockedReason}>
            {schedule.blockedReason}
          </div>
        )}
      </td>
      <td>
        <ul class="plain" data-testid="schedule-next">
          {schedule.nextFireTimes.map((t) => (
            <li key={t}>
              <Time iso={t} zone={schedule.timeZone} />
            </li>
          ))}
        </ul>
      </td>
      <td>
        {runs.length === 0 ? (
          <span class="muted">none yet</span>
        ) : (
          <ul class="plain" data-testid="schedule-runs">
            {runs.map((r) => (
              <li key={r.job.id} data-testid="schedule-run">
                <a href={`#/jobs/${encodeURIComponent(r.job.id)}`}>{jobTitle(r.job)}</a>{' '}
                <span class={`badge phase-${r.job.phase}`}>{phaseWord(r.job.phase)}</span>{' '}
                <span class="muted small">{r.tick ? <Time iso={r.tick} /> : 'run now'}</span>
              </li>
            ))}
          </ul>
        )}
      </td>
      <td>
        {!confirming && (
          <div class="row-actions">
            {schedule.suspended ? (
              <button type="button" disabled={busy} aria-label={`Resume ${schedule.name}`} onClick={() => act(RESUME_SCHEDULE_MUTATION)}>
                Resume
              </button>
            ) : (
              <button type="button" disabled={busy} aria-label={`Pause ${schedule.name}`} onClick={() => act(PAUSE_SCHEDULE_MUTATION)}>
                Pause
              </button>
            )}
            <button type="button" disabled={busy} aria-label={`Run now: ${schedule.name}`} onClick={() => act(TRIGGER_SCHEDULE_MUTATION)}>
              Run now
            </button>
            <button type="button" class="danger" aria-label={`Delete ${schedule.name}`} onClick={() => setConfirming(true)}>
              Delete
            </button>
          </div>
        )}
        {confirming && (
          <div class="confirm" role="alertdialog" aria-label="Confirm delete">
            <button type="button" class="danger" disabled={busy} onClick={() => act(DELETE_SCHEDULE_MUTATION)} ref={confirmButton}>
              Yes, delete
            </button>
            <button type="button" disabled={busy} onClick={() => setConfirming(false)}>
              Keep
            </button>
          </div>
        )}
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
      </td>
    </tr>
  );
}

function CreateForm({ api, onCreated }) {
  const [name, setName] = useState('');
  const [namespace, setNamespace] = useState('');
  const [cron, setCron] = useState('');
  const [timeZone, setTimeZone] = useState('UTC');
  const [policy, setPolicy] = useState('ALLOW');
  const [command, setCommand] = useState('');
  const [paused, setPaused] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);

  async function submit(e) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    // One word a line, as on the submit page: no shell quoting to get wrong.
    const words = command.split('\n').map((l) => l.replace(/\r$/, ''));
    while (words.length && words[words.length - 1] === '') words.pop();
    const job = { name: name.trim() };
    if (namespace.trim()) job.namespace = namespace.trim();
    if (words.length) job.command = words;
    const input = { name: name.trim(), cron: cron.trim(), timeZone: timeZone.trim(), concurrencyPolicy: policy, suspended: paused, job };
    try {
      await api.request(CREATE_SCHEDULE_MUTATION, { input });
      setName('');
      setCron('');
      setCommand('');
      onCreated();
    } catch (err) {
      setError(err.message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="card filters" aria-label="New schedule" onSubmit={submit}>
      <label>
        Name
        <input required value={name} onInput={(e) => setName(e.currentTarget.value)} />
      </label>
      <label>
        Namespace
        <input value={namespace} placeholder="default" onInput={(e) => setNamespace(e.currentTarget.value)} />
      </label>
      <label>
        Cron rule
        <input
          required
          value={cron}
          spellcheck={false}
          placeholder="30 2 * * *"
          aria-invalid={error ? 'true' : undefined}
          aria-describedby={error ? 'schedule-error' : undefined}
          onInput={(e) => setCron(e.currentTarget.value)}
        />
      </label>
      <label>
        Time zone
        <input value={timeZone} spellcheck={false} onInput={(e) => setTimeZone(e.currentTarget.value)} />
      </label>
      <label>
        While a run is active
        <select value={policy} onChange={(e) => setPolicy(e.currentTarget.value)}>
          {Object.entries(POLICY_WORD).map(([value, word]) => (
            <option key={value} value={value}>
              {word}
            </option>
          ))}
        </select>
      </label>
      <label>
        Command (one word a line)
        <textarea rows={3} value={command} spellcheck={false} onInput={(e) => setCommand(e.currentTarget.value)} />
      </label>
      <label class="check">
        <input type="checkbox" checked={paused} onChange={(e) => setPaused(e.currentTarget.checked)} /> Start paused
      </label>
      <button type="submit" class="primary" disabled={busy}>
        Create schedule
      </button>
      {error && (
        <p id="schedule-error" class="error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}
