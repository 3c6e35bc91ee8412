// One job: its state, conditions, event timeline, result, logs streamed live, Cancel and
// Resubmit.
//
// The job and its history are read once; then `jobStatus` pushes its phase changes and the
// live model's `jobEvents` its progress updates. Both may carry the same event: it is applied
// once, by cursor. `jobLogs` streams the output until the job has finished.

import { useEffect, useRef, useState } from 'preact/hooks';

import { ApiError } from './api.js';
import { TERMINAL, duration, fullTime, jobTitle, phaseWord, runTime, when } from './format.js';
import { Attempts } from './attempts.jsx';
import { TimeSpent } from './timespent.jsx';
import { PhaseBadge, ProgressBar, useNow } from './jobs.jsx';
import { navigate } from './nav.js';
import { CANCEL_MUTATION, JOB_QUERY, LOG_LINES_QUERY, LOGS_SUBSCRIPTION, JOB_REREAD_QUERY, STATUS_SUBSCRIPTION } from './documents.js';

const MAX_TIMELINE = 500;
// A queued job's state in Kueue, in words (the Job's `queue.state`).
const QUEUE_STATES = {
  PENDING: 'waiting for admission',
  QUOTA_RESERVED: 'quota reserved',
  ADMITTED: 'admitted',
  EVICTED: 'evicted, requeued',
  PREEMPTED: 'preempted, requeued',
  FINISHED: 'finished',
};

export function JobDetail({ id, api, live }) {
  const [job, setJob] = useState(null);
  const [spec, setSpec] = useState(null);
  const [pods, setPods] = useState([]);
  const [attempts, setAttempts] = useState({ attempts: [], attemptsOmitted: 0 });
  // Pods change with the job's events: re-read them after each (one request at a time), with
  // the fields only jobStatus carries. It pushes phase changes only, and the live model's
  // events lack those fields: without this, a change in Kueue that keeps the phase (the
  // pending reason, an admission seen after the start) would never show.
  const podsRead = useRef({ busy: false, again: false });
  const readPods = () => {
    const state = podsRead.current;
    if (state.busy) {
      state.again = true;
      return;
    }
    state.busy = true;
    api
      .request(JOB_REREAD_QUERY, { id })
      .then((data) => {
        if (!data.job) return;
        const { pods: p, attempts: a, attemptsOmitted, ...fresh } = data.job;
        setPods(p);
        setAttempts({ attempts: a, attemptsOmitted });
        // Taken unless what is shown is newer (a push may have overtaken this answer).
        const current = jobRef.current;
        const cursor = Number(fresh.lastEventCursor || 0);
        if (current && cursor >= Number(current.lastEventCursor || 0) && cursor >= fullCursor.current) {
          fullCursor.current = cursor;
          jobRef.current = { ...current, ...fresh };
          setJob(jobRef.current);
        }
      })
      .catch(() => {})
      .finally(() => {
        state.busy = false;
        if (state.again) {
          state.again = false;
          readPods();
        }
      });
  };
  const [timeline, setTimeline] = useState([]);
  const [error, setError] = useState(null);
  const [cancelState, setCancelState] = useState({ confirming: false, busy: false, error: null });
  const jobRef = useRef(null);
  const seen = useRef(new Set());
  const confirmButton = useRef(null);
  // The confirm step takes the focus when it opens, so Enter confirms and Tab reaches "Keep running".
  useEffect(() => {
    if (cancelState.confirming && !cancelState.busy) confirmButton.current?.focus();
  }, [cancelState.confirming]);

  // The cursor up to which conditions and result (which only jobStatus carries) are current.
  const fullCursor = useRef(0);

  // Takes in an event from either source: the job's fields if it is newer than what is shown
  // (a jobStatus event also when the live model's copy of the same event came first: it
  // carries more fields), the timeline entry once.
  const takeEvent = (event, full) => {
    const cursor = Number(event.cursor);
    const current = jobRef.current;
    const have = Number(current?.lastEventCursor || 0);
    if (current && (cursor > have || (full && cursor >= have && cursor > fullCursor.current))) {
      const next = { ...current, ...event.job, lastEventCursor: String(Math.max(cursor, have)) };
      if (full) fullCursor.current = cursor;
      jobRef.current = next;
      setJob(next);
    }
    if (seen.current.has(event.cursor)) return;
    seen.current.add(event.cursor);
    readPods();
    setTimeline((t) => {
      const entry = { cursor: event.cursor, phase: event.phase, previousPhase: event.previousPhase, at: event.at, reason: event.reason, message: event.message };
      const last = t[t.length - 1];
      // Consecutive progress updates collapse into the newest: the timeline stays readable
      // for a job with thousands of completions.
      const isProgress = isProgressUpdate(entry);
      const lastIsProgress = last && isProgressUpdate(last);
      const next = isProgress && lastIsProgress ? [...t.slice(0, -1), { ...entry, merged: (last.merged || 1) + 1 }] : [...t, entry];
      return next.slice(-MAX_TIMELINE);
    });
  };

  useEffect(() => {
    let stop = null;
    let stopEvents = null;
    let cancelled = false;
    api
      .request(JOB_QUERY, { id })
      .then((data) => {
        if (cancelled) return;
        if (!data.job) {
          setError(new ApiError(`There is no job with id ${id}.`, { code: 'NOT_FOUND' }));
          return;
        }
        const { spec: s, events, pods: p, attempts: a, attemptsOmitted, ...j } = data.job;
        setPods(p);
        setAttempts({ attempts: a, attemptsOmitted });
        jobRef.current = j;
        fullCursor.current = Number(j.lastEventCursor || 0);
        setJob(j);
        setSpec(s);
        const entries = [];
        for (const e of events) {
          seen.current.add(e.cursor);
          const last = entries[entries.length - 1];
          if (isProgressUpdate(e) && last && isProgressUpdate(last)) {
            entries[entries.length - 1] = { ...e, merged: (last.merged || 1) + 1 };
          } else entries.push(e);
        }
        setTimeline(entries);
        stopEvents = live.onEvent((event) => event.job.id === id && takeEvent(event, false));
        if (!TERMINAL.has(j.phase)) {
          stop = api.subscribe(STATUS_SUBSCRIPTION, { id }, { onNext: (d) => takeEvent(d.jobStatus, true), onError: setError });
        }
      })
      .catch((e) => !cancelled && setError(e));
    return () => {
      cancelled = true;
      stop?.();
      stopEvents?.();
    };
  }, [id]);

  const running = job && !TERMINAL.has(job.phase);
  const now = useNow(running && job.startedAt);

  if (error && !job) {
    return (
      <section>
        <h1 tabIndex={-1}>Job {id}</h1>
        <p class="error" role="alert">
          {error.code === 'NOT_FOUND' ? error.message : `Could not load the job: ${error.message}`}
        </p>
        <a href="#/">Back to jobs</a>
      </section>
    );
  }
  if (!job) {
    return (
      <section aria-busy="true">
        <h1 tabIndex={-1}>Loading job…</h1>
      </section>
    );
  }

  const cancel = async () => {
    setCancelState({ confirming: true, busy: true, error: null });
    try {
      const data = await api.request(CANCEL_MUTATION, { id });
      const next = { ...jobRef.current, ...data.cancelJob.job };
      if (Number(next.lastEventCursor) >= Number(jobRef.current.lastEventCursor || 0)) {
        jobRef.current = next;
        setJob(next);
      }
      setCancelState({ confirming: false, busy: false, error: null });
    } catch (e) {
      setCancelState({ confirming: true, busy: false, error: e.message });
    }
  };

  return (
    <article class="detail" aria-labelledby="job-heading">
      <nav class="crumbs" aria-label="Breadcrumb">
        <a href="#/">Jobs</a> <span aria-hidden="true">/</span> <span>{jobTitle(job)}</span>
      </nav>
      <div class="view-head">
        <h1 id="job-heading" tabIndex={-1}>
          {jobTitle(job)}
        </h1>
        <PhaseBadge phase={job.phase} testId="job-phase" />
        <div class="actions">
          {running && !cancelState.confirming && (
            <button type="button" class="danger" onClick={() => setCancelState({ confirming: true, busy: false, error: null })}>
              Cancel job
            </button>
          )}
          <button type="button" onClick={() => navigate(`/submit?from=${encodeURIComponent(id)}`)}>
            Resubmit
          </button>
        </div>
      </div>
      {cancelState.confirming && running && (
        <div class="confirm" role="alertdialog" aria-labelledby="confirm-text">
          <p id="confirm-text">Cancel this job? Its work is stopped and it ends Cancelled.</p>
          <button type="button" class="danger" disabled={cancelState.busy} onClick={cancel} ref={confirmButton}>
            Yes, cancel
          </button>
          <button type="button" disabled={cancelState.busy} onClick={() => setCancelState({ confirming: false, busy: false, error: null })}>
            Keep running
          </button>
          {cancelState.error && (
            <p class="error" role="alert">
              {cancelState.error}
            </p>
          )}
        </div>
      )}
      {error && (
        <p class="error" role="alert">
          {error.message}
        </p>
      )}

      <div class="detail-grid">
        <section aria-labelledby="state-heading" class="card">
          <h2 id="state-heading">State</h2>
          <dl class="facts">
            <dt>Id</dt>
            <dd>
              <code>{job.id}</code>
            </dd>
            <dt>Namespace</dt>
            <dd>{job.namespace}</dd>
            <dt>Template</dt>
            <dd>{job.template}</dd>
            <dt>Submitted</dt>
            <dd>
              <time datetime={job.submittedAt}>{fullTime(job.submittedAt)}</time>
              {job.submitter && <span class="muted"> by {job.submitter}</span>}
            </dd>
            <dt>Started</dt>
            <dd>{job.startedAt ? <time datetime={job.startedAt}>{fullTime(job.startedAt)}</time> : '–'}</dd>
            <dt>Finished</dt>
            <dd>{job.finishedAt ? <time datetime={job.finishedAt}>{fullTime(job.finishedAt)}</time> : '–'}</dd>
            <dt>Duration</dt>
            <dd>{duration(runTime(job, now)) || '–'}</dd>
            <dt>Progress</dt>
            <dd>
              <ProgressBar job={job} />
            </dd>
            {job.queue && [
              <dt key="queue-t">{job.queue.clusterQueue || spec?.queueName ? 'Kueue queue' : 'Queue'}</dt>,
              <dd key="queue-d" data-testid="job-queue">
                {job.queue.name}: <strong data-testid="job-queue-state">{QUEUE_STATES[job.queue.state] || job.queue.state}</strong>
                {job.queue.clusterQueue && <span class="muted"> (ClusterQueue {job.queue.clusterQueue})</span>}
                {job.queue.since && <span class="muted"> since <time datetime={job.queue.since}>{fullTime(job.queue.since)}</time></span>}
                {(job.queue.reason || job.queue.message) && (
                  <div class="muted small" data-testid="job-queue-reason">
                    {[job.queue.reason, job.queue.message].filter(Boolean).join(': ')}
                  </div>
                )}
                {job.phase === 'PENDING' && (job.queue.position || job.queue.estimate) && (
                  <div class="muted small" data-testid="job-queue-place">
                    {[
                      job.queue.position && `#${job.queue.position} in line`,
                      job.queue.localQueuePosition && `#${job.queue.localQueuePosition} in ${job.queue.name}`,
                      job.queue.estimatedStartAt && `may start around ${fullTime(job.queue.estimatedStartAt)}`,
                      job.queue.estimate,
                    ]
                      .filter(Boolean)
                      .join(' · ')}
                  </div>
                )}
              </dd>,
            ]}
            {job.dependencies?.length > 0 && [
              <dt key="deps-t">Depends on</dt>,
              <dd key="deps-d">
                <ul class="dependencies" data-testid="job-dependencies">
                  {job.dependencies.map((d) => (
                    <li key={d.id}>
                      <a href={`#/jobs/${encodeURIComponent(d.id)}`}>{d.name || d.id}</a> <PhaseBadge phase={d.phase} testId="dependency-phase" />
                    </li>
                  ))}
                </ul>
              </dd>,
            ]}
          </dl>
          {job.message && (
            <div class={job.phase === 'FAILED' ? 'failure' : 'message'}>
              <h3>{job.phase === 'FAILED' ? 'Failure reason' : 'Message'}</h3>
              <p data-testid="job-message">{job.message}</p>
            </div>
          )}
          <h3>Result</h3>
          {job.result != null ? (
            <pre class="result" data-testid="job-result">
              {job.result}
            </pre>
          ) : (
            <p class="muted">{TERMINAL.has(job.phase) ? 'The job wrote no result.' : 'Not yet: the job writes it to $JOBGATE_RESULT_FILE.'}</p>
          )}
        </section>

        <section aria-labelledby="timeline-heading" class="card">
          <h2 id="timeline-heading">Timeline</h2>
          {/* Scrollable, so reachable from the keyboard. */}
          <ol class="timeline" tabIndex={0} aria-labelledby="timeline-heading">
            {timeline.map((e) => (
              <li key={e.cursor} class={`timeline-${e.phase}`}>
                <time datetime={e.at} title={fullTime(e.at)}>
                  {when(e.at)}
                </time>{' '}
                {isAttemptEnd(e) ? (
                  <span>Attempt ended</span>
                ) : e.previousPhase === e.phase ? (
                  <span>
                    Progress update{e.merged > 1 ? ` (${e.merged})` : ''}
                  </span>
                ) : (
                  <strong>{phaseWord(e.phase)}</strong>
                )}
                {e.reason && <span class="reason"> · {e.reason}</span>}
                {e.message && <div class="timeline-message">{e.message}</div>}
              </li>
            ))}
          </ol>
          <h2>Conditions</h2>
          <div class="table-wrap" role="region" aria-label="Conditions" tabIndex={0}>
            <table class="conditions" aria-label="Conditions">
              <thead>
                <tr>
                  <th scope="col">Type</th>
                  <th scope="col">Status</th>
                  <th scope="col">Reason</th>
                  <th scope="col">Since</th>
                </tr>
              </thead>
              <tbody>
                {job.conditions.map((c) => (
                  <tr key={c.type}>
                    <th scope="row" title={c.message || ''}>
                      {c.type}
                    </th>
                    <td>{c.status}</td>
                    <td>
                      {c.reason}
                      {c.message && <div class="muted small">{c.message}</div>}
                    </td>
                    <td>{c.lastTransitionTime ? when(c.lastTransitionTime) : ''}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </section>
      </div>

      {pods.length > 0 && <Pods pods={pods} />}
      <TimeSpent job={job} now={now} />
      {attempts.attempts.length > 0 && <Attempts api={api} id={id} {...attempts} />}
      <Logs api={api} id={id} />
      {spec && <Spec spec={spec} />}
    </article>
  );
}

/** An event recording an attempt's end (`AttemptFailed`, `AttemptSucceeded`): shown on its own. */
function isAttemptEnd(e) {
  return e.reason === 'AttemptFailed' || e.reason === 'AttemptSucceeded';
}

/** A progress update, which the timeline collapses with the ones next to it. */
function isProgressUpdate(e) {
  return e.previousPhase === e.phase && !isAttemptEnd(e);
}

/** The job's pods on Kubernetes, as jobgate's watch sees them. */
function Pods({ pods }) {
  return (
    <section class="card" aria-labelledby="pods-heading">
      <h2 id="pods-heading">Pods</h2>
      <div class="table-wrap" role="region" aria-label="Pods table" tabIndex={0}>
        <table aria-labelledby="pods-heading">
          <thead>
            <tr>
              <th scope="col">Pod</th>
              <th scope="col">Index</th>
              <th scope="col">Phase</th>
              <th scope="col">Exit code</th>
              <th scope="col">Reason</th>
              <th scope="col">Created</th>
              <th scope="col">Finished</th>
            </tr>
          </thead>
          <tbody>
            {pods.map((p) => (
              <tr key={p.name}>
                <th scope="row">
                  <code>{p.name}</code>
                  {p.message && <div class="muted small">{p.message}</div>}
                </th>
                <td>{p.index ?? '–'}</td>
                <td>{p.phase}</td>
                <td>{p.exitCode ?? '–'}</td>
                <td>{p.reason || '–'}</td>
                <td>{p.createdAt ? when(p.createdAt) : '–'}</td>
                <td>{p.finishedAt ? when(p.finishedAt) : '–'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

// Lines the view holds at most; older ones are dropped as new ones stream in (and paged
// back in with "Show earlier lines").
const MAX_LOG_LINES = 20000;
// Lines the stream starts with, and each page of earlier lines.
const LOG_PAGE = 1000;

function Logs({ api, id }) {
  const [lines, setLines] = useState([]);
  const [state, setState] = useState('streaming');
  const [archive, setArchive] = useState(null);
  const [loadingEarlier, setLoadingEarlier] = useState(false);
  const loadingRef = useRef(false);
  const buffer = useRef([]);
  const frame = useRef(0);
  const box = useRef(null);
  const stick = useRef(true);

  useEffect(() => {
    buffer.current = [];
    setLines([]);
    setState('streaming');
    setArchive(null);
    const flush = () => {
      frame.current = 0;
      setLines(buffer.current.slice());
    };
    const schedule = () => {
      if (!frame.current) frame.current = requestAnimationFrame(flush);
    };
    // Every line carries its cursor. graphql-ws sends these same variables again after a
    // reconnect, so moving `after` to each line's cursor resumes the stream right after the
    // last line shown: nothing twice, nothing missed.
    const variables = { id, tailLines: LOG_PAGE, after: null };
    const stop = api.subscribe(LOGS_SUBSCRIPTION, variables, {
      onNext: (data) => {
        const line = data.jobLogs;
        if (line.cursor != null) variables.after = line.cursor;
        buffer.current.push(line);
        if (buffer.current.length > MAX_LOG_LINES) buffer.current.splice(0, buffer.current.length - MAX_LOG_LINES);
        schedule();
      },
      onError: (e) => setState(`error: ${e.message}`),
      onComplete: () => {
        setState('complete');
        api
          .request(LOG_LINES_QUERY, { id, first: 1, after: null })
          .then((data) => setArchive(data.job?.logArchive ?? null))
          .catch(() => {});
      },
    });
    return () => {
      stop();
      cancelAnimationFrame(frame.current);
    };
  }, [id]);

  useEffect(() => {
    if (stick.current && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines]);

  // The cursor of the first line shown: earlier lines are in the archive.
  const first = lines.length > 0 && lines[0].cursor != null ? Number(lines[0].cursor) : 0;
  const loadEarlier = async () => {
    // One page at a time: a second click before the button shows it is busy would load the
    // same page again.
    if (loadingRef.current) return;
    loadingRef.current = true;
    setLoadingEarlier(true);
    try {
      const start = Math.max(0, first - LOG_PAGE);
      const data = await api.request(LOG_LINES_QUERY, {
        id,
        first: first - start,
        after: start > 0 ? String(start - 1) : null,
      });
      const earlier = (data.job?.logLines.edges ?? []).map((e) => e.node).filter((l) => Number(l.cursor) < first);
      stick.current = false;
      buffer.current = [...earlier, ...buffer.current];
      setLines(buffer.current.slice());
    } catch (e) {
      setState(`error: ${e.message}`);
    } finally {
      loadingRef.current = false;
      setLoadingEarlier(false);
    }
  };

  const sources = new Set(lines.map((l) => l.source).filter(Boolean));
  // A local job's one run needs no column; its runs (`index-<i>-run-<n>`), or pods, do.
  const showSources = sources.size > 1 || [...sources].some((s) => !/^index-\d+-run-\d+$/.test(s));
  // Pod names share the Job's long name; show what tells them apart (the full name on hover).
  const prefix = commonPrefix([...sources]);
  return (
    <section class="card logs-card" aria-labelledby="logs-heading">
      <div class="view-head">
        <h2 id="logs-heading">Logs</h2>
        <span class="muted small" data-testid="logs-state">
          {state === 'streaming' ? 'streaming live' : state === 'complete' ? 'the job has finished; this is all its output' : state}
          {archive?.truncated && ' · truncated: the archive keeps the start of the output only'}
        </span>
        {first > 0 && (
          <button type="button" disabled={loadingEarlier} onClick={loadEarlier}>
            {loadingEarlier ? 'Loading…' : 'Show earlier lines'}
          </button>
        )}
      </div>
      <div
        class="logs"
        role="log"
        aria-label="Logs"
        aria-live="off"
        tabIndex={0}
        ref={box}
        onScroll={(e) => {
          const el = e.currentTarget;
          stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24;
        }}
      >
        {lines.length === 0 ? (
          <span class="muted">No output yet.</span>
        ) : (
          lines.map((l, i) => (
            <div class="log-line" key={l.cursor ?? i} data-cursor={l.cursor ?? undefined}>
              {showSources && (
                <span class="log-source" title={l.source || ''}>
                  {(l.source || '').slice(prefix.length)}
                </span>
              )}
              <span class="log-text">{l.text}</span>
            </div>
          ))
        )}
      </div>
    </section>
  );
}

/** The longest prefix, ending with '-', shared by all of `names` (when there are several). */
function commonPrefix(names) {
  if (names.length < 2) {
    const name = names[0] || '';
    // One pod: keep its index and suffix, e.g. `0-c57nk` of `jobgate-<id>-0-c57nk`.
    const parts = name.split('-');
    return parts.length > 3 ? `${parts.slice(0, -2).join('-')}-` : '';
  }
  let prefix = names[0];
  for (const name of names) {
    while (!name.startsWith(prefix)) prefix = prefix.slice(0, -1);
  }
  return prefix.slice(0, prefix.lastIndexOf('-') + 1);
}

function Spec({ spec }) {
  const rows = [];
  if (spec.image) rows.push(['Image', <code>{spec.image}</code>]);
  rows.push(['Command', <code>{[...spec.command, ...spec.args].map(quote).join(' ') || '(the image’s own)'}</code>]);
  if (spec.env.length) rows.push(['Environment', <code>{spec.env.map((e) => `${e.name}=${e.value}`).join('\n')}</code>]);
  rows.push(['Parallelism', spec.parallelism], ['Completions', spec.completions], ['Backoff limit', spec.backoffLimit]);
  if (spec.activeDeadlineSeconds != null) rows.push(['Deadline', `${spec.activeDeadlineSeconds} s`]);
  const r = spec.resources;
  if (r) {
    const list = (l) => [l.cpu && `cpu ${l.cpu}`, l.memory && `memory ${l.memory}`].filter(Boolean).join(', ') || '–';
    rows.push(['Requests', list(r.requests)], ['Limits', list(r.limits)]);
  }
  if (spec.priority) rows.push(['Priority', spec.priority]);
  if (spec.serviceAccountName) rows.push(['Service account', spec.serviceAccountName]);
  if (spec.ttlSecondsAfterFinished != null) rows.push(['Kept after finishing', `${spec.ttlSecondsAfterFinished} s`]);
  if (spec.parameters != null) rows.push(['Parameters', <code>{JSON.stringify(spec.parameters, null, 2)}</code>]);
  return (
    <section class="card" aria-labelledby="spec-heading">
      <h2 id="spec-heading">Specification</h2>
      <dl class="facts spec">
        {rows.map(([k, v]) => [<dt key={`${k}-t`}>{k}</dt>, <dd key={`${k}-d`}>{v}</dd>])}
      </dl>
    </section>
  );
}

function quote(arg) {
  return /^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`;
}
