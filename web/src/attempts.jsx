// A job's attempts on its page: a table of its runs (index, number, start, duration, exit code
// or signal, cause) and, for the one selected, its own output, read a page at a time from
// the job's archive (`JobAttempt.logLines`).

import { useEffect, useState } from 'preact/hooks';

import { ATTEMPT_LOG_QUERY } from './documents.js';
import { duration, fullTime, when } from './format.js';

const CAUSES = {
  ERROR: 'Error',
  OOM_KILLED: 'Out of memory',
  EVICTED: 'Evicted',
  PREEMPTED: 'Preempted',
  DEADLINE_EXCEEDED: 'Deadline exceeded',
  GATEWAY_RESTARTED: 'jobgate restarted',
  CANCELLED: 'Cancelled',
};
const STATES = { RUNNING: 'Running', SUCCEEDED: 'Succeeded', FAILED: 'Failed' };
// Lines of an attempt's output shown per page.
const ATTEMPT_LOG_PAGE = 500;

function exitOf(a) {
  if (a.signal != null) return `signal ${a.signal}`;
  return a.exitCode ?? '–';
}

export function Attempts({ api, id, attempts, attemptsOmitted }) {
  const [selected, setSelected] = useState(null);
  return (
    <section class="card" aria-labelledby="attempts-heading">
      <h2 id="attempts-heading">Attempts</h2>
      {attemptsOmitted > 0 && (
        <p class="muted small">{attemptsOmitted} earlier attempt(s) are not listed; their output is in the job's log.</p>
      )}
      <div class="table-wrap" role="region" aria-label="Attempts table" tabIndex={0}>
        <table aria-labelledby="attempts-heading" data-testid="attempts">
          <thead>
            <tr>
              <th scope="col">Index</th>
              <th scope="col">Attempt</th>
              <th scope="col">State</th>
              <th scope="col">Started</th>
              <th scope="col">Duration</th>
              <th scope="col">Exit</th>
              <th scope="col">Cause</th>
              <th scope="col">Run</th>
              <th scope="col">Output</th>
            </tr>
          </thead>
          <tbody>
            {attempts.map((a) => (
              <tr key={a.name} data-attempt={a.name} class={selected === a.name ? 'selected' : undefined}>
                <td>{a.index}</td>
                <th scope="row">#{a.number}</th>
                <td>{STATES[a.state] || a.state}</td>
                <td title={fullTime(a.startedAt)}>{a.startedAt ? when(a.startedAt) : '–'}</td>
                <td>{a.startedAt && a.finishedAt ? duration(Date.parse(a.finishedAt) - Date.parse(a.startedAt)) : '–'}</td>
                <td>{exitOf(a)}</td>
                <td title={a.message || ''}>{a.cause ? CAUSES[a.cause] || a.cause : '–'}</td>
                <td>
                  <code>{a.pod || (a.processId != null ? `pid ${a.processId}` : a.name)}</code>
                </td>
                <td>
                  <button type="button" onClick={() => setSelected(selected === a.name ? null : a.name)}>
                    {selected === a.name ? 'Hide log' : `Show log of attempt #${a.number}${attempts.some((o) => o.index !== a.index) ? ` (index ${a.index})` : ''}`}
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {selected && <AttemptLog api={api} id={id} name={selected} attempt={attempts.find((a) => a.name === selected)} />}
    </section>
  );
}

/** The selected attempt's own lines, a page at a time. */
function AttemptLog({ api, id, name, attempt }) {
  const [lines, setLines] = useState([]);
  const [next, setNext] = useState(null);
  const [state, setState] = useState('loading');

  const load = async (after, earlier) => {
    setState('loading');
    try {
      const data = await api.request(ATTEMPT_LOG_QUERY, { id, first: ATTEMPT_LOG_PAGE, after });
      const mine = (data.job?.attempts ?? []).find((a) => a.name === name);
      if (!mine) {
        setState('This attempt is no longer listed.');
        return;
      }
      const page = mine.logLines;
      setLines([...earlier, ...page.edges.map((e) => e.node)]);
      setNext(page.pageInfo.hasNextPage ? page.pageInfo.endCursor : null);
      setState('ready');
    } catch (e) {
      setState(`error: ${e.message}`);
    }
  };
  useEffect(() => {
    setLines([]);
    load(null, []);
  }, [id, name]);

  const label = attempt ? `attempt #${attempt.number} of index ${attempt.index}` : name;
  return (
    <div class="attempt-log">
      <h3 id="attempt-log-heading">Output of {label}</h3>
      <div class="logs" role="log" aria-label={`Output of ${label}`} tabIndex={0} data-testid="attempt-log">
        {lines.length === 0 ? (
          <span class="muted">{state === 'loading' ? 'Loading…' : state === 'ready' ? 'No output archived.' : state}</span>
        ) : (
          lines.map((l) => (
            <div class="log-line" key={l.cursor} data-cursor={l.cursor}>
              <span class="log-text">{l.text}</span>
            </div>
          ))
        )}
      </div>
      {next != null && (
        <button type="button" disabled={state === 'loading'} onClick={() => load(next, lines)}>
          Show more lines
        </button>
      )}
    </div>
  );
}
