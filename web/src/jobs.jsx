// The jobs table: one page of `jobs`, filtered, kept current by the live model's events.
//
// The page is loaded once per filter or page change, after the live model's first snapshot;
// afterwards each `jobEvents` event updates its row in place (only if it is newer than what
// the row shows, by cursor), adds a new job at the top of the first page, adds a job that
// changed into the filtered phase where the loaded rows reach, or removes a job that no longer
// matches the filter.
//
// The server looks at a bounded number of jobs per request: a filter that few jobs match (a
// name with a namespace none of its jobs are in) answers short or empty pages that still have
// a next one. A page asks on from where the last answer stopped until it has PAGE_SIZE rows or
// the server has no more, but at most FOLLOW_UPS times by itself; then it shows what it found
// and offers to search further (each click, as many requests again), so that a search through
// a million jobs never hammers the server unasked. Every page before the current one is full:
// "Older" waits until the current page is (or the server has nothing more).

import { useEffect, useRef, useState } from 'preact/hooks';

import { PHASES, TERMINAL, duration, fullTime, jobTitle, phaseWord, progressShare, progressText, runTime, when } from './format.js';
import { navigate } from './nav.js';
import { JOBS_QUERY, NAMESPACES_QUERY } from './documents.js';

const PAGE_SIZE = 25;
// With a name filter the server counts matches among at most this many candidates
// (`totalCount` is then a lower bound): the count shows as "5000+".
const NAME_COUNT_CAP = 5000;
// Requests a page makes by itself after the first, when answers come back short.
const FOLLOW_UPS = 4;

/**
 * Jobs from after `cursor` (null: the newest) until `have` rows and these make a page, the
 * server has no more, `requests` requests were made, or `stopped()` says the answer is no
 * longer wanted. `total` is the first answer's.
 */
async function readOn(api, filter, cursor, have, requests, stopped) {
  const rows = [];
  let hasNext = true;
  let endCursor = cursor;
  let total = null;
  for (let i = 0; i < requests && hasNext && have + rows.length < PAGE_SIZE; i++) {
    if (stopped()) break;
    const data = await api.request(JOBS_QUERY, { first: PAGE_SIZE - have - rows.length, after: endCursor, filter });
    const c = data.jobs;
    rows.push(...c.edges.map((e) => e.node));
    hasNext = c.pageInfo.hasNextPage;
    endCursor = c.pageInfo.endCursor;
    if (total === null) total = c.totalCount;
  }
  return { rows, hasNext, endCursor, total };
}

function filterFrom(params) {
  return {
    phase: params.get('phase') || '',
    namespace: params.get('namespace') || '',
    name: params.get('name') || '',
  };
}

function hashFor(filter) {
  const params = new URLSearchParams();
  if (filter.phase) params.set('phase', filter.phase);
  if (filter.namespace) params.set('namespace', filter.namespace);
  if (filter.name) params.set('name', filter.name);
  const query = params.toString();
  return query ? `/?${query}` : '/';
}

function apiFilter(filter) {
  const f = {};
  if (filter.phase) f.phases = [filter.phase];
  if (filter.namespace) f.namespace = filter.namespace;
  if (filter.name) f.nameContains = filter.name;
  return f;
}

/** The same rule as the server's JobFilter, for jobs that change while shown. */
function matches(filter, job) {
  if (filter.phase && job.phase !== filter.phase) return false;
  if (filter.namespace && job.namespace !== filter.namespace) return false;
  if (filter.name && !(job.name || '').includes(filter.name)) return false;
  return true;
}

function newestFirst(a, b) {
  const d = Date.parse(b.submittedAt) - Date.parse(a.submittedAt);
  return d !== 0 ? d : a.id < b.id ? 1 : -1;
}

export function useNow(active, every = 1000) {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    if (!active) return undefined;
    const timer = setInterval(() => setNow(Date.now()), every);
    return () => clearInterval(timer);
  }, [active, every]);
  return now;
}

export function PhaseBadge({ phase, testId = 'phase' }) {
  return (
    <span class={`badge phase-${phase}`} data-testid={testId}>
      {phaseWord(phase)}
    </span>
  );
}

// A phase filter's choices: any phase, or one of them, in words.
export function PhaseOptions() {
  return (
    <>
      <option value="">Any</option>
      {PHASES.map((p) => (
        <option key={p} value={p}>
          {phaseWord(p)}
        </option>
      ))}
    </>
  );
}

export function ProgressBar({ job }) {
  const share = progressShare(job);
  const text = progressText(job);
  if (share == null && !text) return <span class="muted">–</span>;
  return (
    <div class="progress" title={text}>
      {share != null && (
        <div
          class="meter"
          role="progressbar"
          aria-valuemin="0"
          aria-valuemax="100"
          aria-valuenow={Math.round(share * 100)}
          aria-label={`Progress: ${text || `${Math.round(share * 100)} %`}`}
        >
          <div class={`meter-fill${share >= 1 ? ' done' : ''}`} style={{ width: `${share * 100}%` }} />
        </div>
      )}
      <span class="progress-text">{text}</span>
    </div>
  );
}

export function JobsView({ api, live, params }) {
  const filter = filterFrom(params);
  const filterKey = JSON.stringify(filter);
  // Cursors of the pages before this one ([] on the first page), for the current filter.
  const [pager, setPager] = useState({ key: filterKey, pages: [] });
  const pages = pager.key === filterKey ? pager.pages : [];
  const setPages = (next) => setPager({ key: filterKey, pages: next });
  const [state, setState] = useState({
    rows: [],
    total: 0,
    hasNext: false,
    endCursor: null,
    loading: true,
    searching: false,
    error: null,
  });
  const [newJobs, setNewJobs] = useState(0);
  const [namespaces, setNamespaces] = useState([]);
  const rowsRef = useRef(state);
  const after = pages.length ? pages[pages.length - 1] : null;
  // Until the live model's first snapshot is in (or has failed), a page loaded now would load
  // again when it arrives: the table waits for it and loads once.
  const waiting = !live.loaded && !live.tried;

  useEffect(() => {
    let cancelled = false;
    buffered.current = [];
    if (!rowsRef.current.loading) {
      rowsRef.current = { ...rowsRef.current, loading: true };
      setState(rowsRef.current);
    }
    setNewJobs(0);
    if (waiting) return undefined;
    readOn(api, apiFilter(filter), after, 0, 1 + FOLLOW_UPS, () => cancelled)
      .then((read) => {
        if (cancelled) return;
        let loaded = {
          rows: read.rows,
          total: read.total,
          hasNext: read.hasNext,
          endCursor: read.endCursor,
          loading: false,
          searching: false,
          error: null,
        };
        for (const event of buffered.current.splice(0)) loaded = applyEvent(loaded, event);
        rowsRef.current = loaded;
        setState(loaded);
      })
      .catch((error) => {
        if (cancelled) return;
        rowsRef.current = { ...rowsRef.current, loading: false, error };
        setState(rowsRef.current);
      });
    return () => {
      cancelled = true;
    };
    // The page reloads when the filter or the page changes, and when the live model has
    // (re)loaded (a first load that failed while the server was away, or a fresh snapshot
    // after the server said our cursor had expired).
  }, [filterKey, after, live.loaded, live.generation, waiting]);

  useEffect(() => {
    api
      .request(NAMESPACES_QUERY)
      .then((data) => setNamespaces(data.namespaces))
      .catch(() => {});
  }, [live.loaded]);

  // Events that arrive while a page loads wait for it, then apply like any other: the
  // cursor check drops those the loaded page already shows.
  const buffered = useRef([]);
  const applyEvent = (current, event) => {
    const job = { ...event.job, lastEventCursor: event.cursor };
    const at = current.rows.findIndex((r) => r.id === job.id);
    if (at >= 0) {
      if (Number(event.cursor) <= Number(current.rows[at].lastEventCursor)) return current;
      const rows = current.rows.slice();
      if (matches(filter, job)) {
        rows[at] = job;
        return { ...current, rows };
      }
      rows.splice(at, 1);
      return { ...current, rows, total: current.total - 1 };
    }
    // A job enters the view when it is new, or when it changes into the filtered phase; one
    // that matched before and is not shown lies beyond the rows loaded, and stays there.
    const isNew = event.previousPhase == null;
    const entering = isNew || !matches(filter, { ...job, phase: event.previousPhase });
    if (!matches(filter, job) || !entering) return current;
    if (pages.length > 0) {
      if (isNew) setNewJobs((n) => n + 1);
      return current;
    }
    // It shows only where the rows loaded reach: older than the last of a page that stopped
    // short (the server had more to look at), it belongs to a later answer.
    const last = current.rows[current.rows.length - 1];
    if (!isNew && current.hasNext && !(last && newestFirst(job, last) < 0)) {
      return { ...current, total: current.total + 1 };
    }
    const rows = [...current.rows, job].sort(newestFirst);
    const hasNext = current.hasNext || rows.length > PAGE_SIZE;
    return { ...current, rows: rows.slice(0, PAGE_SIZE), total: current.total + 1, hasNext };
  };

  // Events are applied once per animation frame, in order: a burst of hundreds of events a
  // second costs one render per frame, not one per event.
  const queued = useRef([]);
  useEffect(() => {
    let frame = 0;
    const flush = () => {
      frame = 0;
      const events = queued.current.splice(0);
      let current = rowsRef.current;
      if (current.loading) {
        buffered.current.push(...events);
        return;
      }
      for (const event of events) current = applyEvent(current, event);
      if (current !== rowsRef.current) {
        rowsRef.current = current;
        setState(current);
      }
    };
    const stop = live.onEvent((event) => {
      queued.current.push(event);
      if (!frame) frame = requestAnimationFrame(flush);
    });
    return () => {
      stop();
      cancelAnimationFrame(frame);
      // Whatever was queued belongs to the old filter or page, which reloads anyway.
      queued.current = [];
    };
  }, [live, filterKey, pages.length]);

  const anyRunning = state.rows.some((r) => !TERMINAL.has(r.phase) && r.startedAt);
  const now = useNow(anyRunning);

  const setFilter = (change) => navigate(hashFor({ ...filter, ...change }));
  const tableRef = useRef(null);

  // Keyboard: "/" focuses the name filter; j/k move between rows.
  useEffect(() => {
    const onKey = (e) => {
      if (e.target.closest('input, textarea, select, [contenteditable]') || e.metaKey || e.ctrlKey || e.altKey) return;
      if (e.key === '/') {
        e.preventDefault();
        document.getElementById('filter-name')?.focus();
      } else if (e.key === 'j' || e.key === 'k') {
        const links = Array.from(tableRef.current?.querySelectorAll('tbody a.job-link') || []);
        if (!links.length) return;
        const i = links.indexOf(document.activeElement);
        const next = e.key === 'j' ? Math.min(links.length - 1, i + 1) : Math.max(0, i < 0 ? 0 : i - 1);
        links[next].focus();
        e.preventDefault();
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);

  // The page stopped short of PAGE_SIZE rows where the server has more to look at.
  const short = !state.loading && !state.error && state.hasNext && state.rows.length < PAGE_SIZE;
  const load = useRef(0);
  useEffect(() => {
    load.current += 1;
  }, [filterKey, after, live.loaded, live.generation, waiting]);
  // On the user's request: as many requests again, from where the page stopped, appending.
  const searchFurther = () => {
    const mine = load.current;
    const from = rowsRef.current;
    rowsRef.current = { ...from, searching: true };
    setState(rowsRef.current);
    readOn(api, apiFilter(filter), from.endCursor, from.rows.length, 1 + FOLLOW_UPS, () => mine !== load.current)
      .then((read) => {
        if (mine !== load.current) return;
        const current = rowsRef.current;
        const known = new Set(current.rows.map((r) => r.id));
        rowsRef.current = {
          ...current,
          rows: [...current.rows, ...read.rows.filter((r) => !known.has(r.id))],
          hasNext: read.hasNext,
          endCursor: read.endCursor,
          searching: false,
        };
        setState(rowsRef.current);
      })
      .catch((error) => {
        if (mine !== load.current) return;
        rowsRef.current = { ...rowsRef.current, searching: false, error };
        setState(rowsRef.current);
      });
  };

  const first = pages.length * PAGE_SIZE + (state.rows.length ? 1 : 0);
  const last = pages.length * PAGE_SIZE + state.rows.length;

  return (
    <section aria-labelledby="jobs-heading">
      <div class="view-head">
        <h1 id="jobs-heading" tabIndex={-1}>
          Jobs
        </h1>
        <a class="button primary" href="#/submit">
          Submit job
        </a>
      </div>
      <form class="filters" role="search" aria-label="Filter jobs" onSubmit={(e) => e.preventDefault()}>
        <label>
          <span>Phase</span>
          <select id="filter-phase" value={filter.phase} onChange={(e) => setFilter({ phase: e.currentTarget.value })}>
            <PhaseOptions />
          </select>
        </label>
        <label>
          <span>Namespace</span>
          <input
            id="filter-namespace"
            list="namespace-list"
            value={filter.namespace}
            placeholder="any"
            autocomplete="off"
            onChange={(e) => setFilter({ namespace: e.currentTarget.value.trim() })}
          />
          <datalist id="namespace-list">
            {namespaces.map((n) => (
              <option key={n} value={n} />
            ))}
          </datalist>
        </label>
        <label>
          <span>Name contains</span>
          <NameFilter value={filter.name} onChange={(name) => setFilter({ name })} />
        </label>
        {(filter.phase || filter.namespace || filter.name) && (
          <button type="button" class="link" onClick={() => navigate('/')}>
            Clear filters
          </button>
        )}
      </form>

      {newJobs > 0 && (
        <p class="notice" role="status">
          {newJobs} new {newJobs === 1 ? 'job' : 'jobs'} since this page was loaded.{' '}
          <button type="button" class="link" onClick={() => setPages([])}>
            Show newest
          </button>
        </p>
      )}
      {state.error && (
        <p class="error" role="alert">
          Could not load jobs: {state.error.message}
        </p>
      )}

      <div class="table-wrap" role="region" aria-label="Jobs table" tabIndex={0}>
        <table ref={tableRef} aria-labelledby="jobs-heading" aria-describedby="jobs-count" aria-busy={state.loading ? 'true' : 'false'}>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col" class="col-namespace">Namespace</th>
              <th scope="col" class="col-template">Template</th>
              <th scope="col">Phase</th>
              <th scope="col" class="col-progress">Progress</th>
              <th scope="col" class="col-submitted">Submitted</th>
              <th scope="col" class="col-started">Started</th>
              <th scope="col" class="col-duration">Duration</th>
            </tr>
          </thead>
          <tbody>
            {state.rows.map((job) => (
              <tr key={job.id} data-job-id={job.id} class={`row-${job.phase}`}>
                <th scope="row">
                  <a class="job-link" href={`#/jobs/${encodeURIComponent(job.id)}`}>
                    {jobTitle(job)}
                  </a>
                  {job.phase === 'FAILED' && job.message && <div class="row-message">{job.message}</div>}
                  {job.phase === 'PENDING' && job.queue && (job.queue.reason || job.queue.position) && (
                    <div class="row-queue" data-testid="row-queue">
                      {[job.queue.reason, job.queue.position && `#${job.queue.position} in queue ${job.queue.name}`]
                        .filter(Boolean)
                        .join(' · ')}
                    </div>
                  )}
                </th>
                <td class="col-namespace">{job.namespace}</td>
                <td class="col-template">{job.template}</td>
                <td>
                  <PhaseBadge phase={job.phase} />
                </td>
                <td class="col-progress">
                  <ProgressBar job={job} />
                </td>
                <td class="col-submitted">
                  <time datetime={job.submittedAt} title={fullTime(job.submittedAt)}>
                    {when(job.submittedAt)}
                  </time>
                </td>
                <td class="col-started">
                  {job.startedAt ? (
                    <time datetime={job.startedAt} title={fullTime(job.startedAt)}>
                      {when(job.startedAt)}
                    </time>
                  ) : (
                    <span class="muted">–</span>
                  )}
                </td>
                <td class="col-duration">{duration(runTime(job, now)) || <span class="muted">–</span>}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {short && (
          <p class="searching" id="jobs-searching">
            {state.rows.length === 0
              ? 'No match among the jobs searched so far.'
              : `${state.rows.length} found among the jobs searched so far.`}{' '}
            <button type="button" disabled={state.searching} onClick={searchFurther}>
              {state.searching ? 'Searching…' : 'Search further'}
            </button>
          </p>
        )}
        {!state.loading && !state.error && !short && state.rows.length === 0 && (
          <p class="empty">
            {filter.phase || filter.namespace || filter.name ? 'No job matches these filters.' : 'No jobs yet. '}
            {!(filter.phase || filter.namespace || filter.name) && <a href="#/submit">Submit the first one.</a>}
          </p>
        )}
      </div>

      <nav class="pager" aria-label="Pages">
        <span id="jobs-count" class="muted">
          {state.total === 0 ? 'No jobs' : `${first}–${last} of ${state.total}${filter.name && state.total >= NAME_COUNT_CAP ? '+' : ''}`}
        </span>
        <button type="button" disabled={pages.length === 0} onClick={() => setPages([])}>
          Newest
        </button>
        <button type="button" disabled={pages.length === 0} onClick={() => setPages(pages.slice(0, -1))}>
          Newer
        </button>
        <button type="button" disabled={!state.hasNext || short} onClick={() => setPages([...pages, state.endCursor])}>
          Older
        </button>
      </nav>
    </section>
  );
}

/** The name filter applies a moment after typing stops, not on every key. */
function NameFilter({ value, onChange }) {
  const [text, setText] = useState(value);
  const timer = useRef(null);
  useEffect(() => setText(value), [value]);
  useEffect(() => () => clearTimeout(timer.current), []);
  return (
    <input
      id="filter-name"
      type="search"
      value={text}
      placeholder="press / to search"
      autocomplete="off"
      onInput={(e) => {
        const next = e.currentTarget.value;
        setText(next);
        clearTimeout(timer.current);
        timer.current = setTimeout(() => onChange(next), 250);
      }}
    />
  );
}
