// The page header: navigation, the connection state, counts by phase and the activity chart.

import { PHASES, phaseWord } from './format.js';
import { BUCKET_SECONDS, WINDOW_MINUTES } from './live.js';

const CONNECTION_TEXT = {
  connecting: 'Connecting…',
  live: 'Live',
  reconnecting: 'Reconnecting…',
  offline: 'Offline',
  unauthenticated: 'Signed out',
};

const CONNECTION_HELP = {
  connecting: 'Opening the live connection to jobgate.',
  live: 'Connected: every change is pushed as it happens.',
  reconnecting: 'The connection dropped; reconnecting. Updates made meanwhile will be caught up.',
  offline: 'jobgate cannot be reached; retrying.',
  unauthenticated: 'jobgate refused the credentials; sign in with an API token.',
};

export function Header({ route, connection, live }) {
  return (
    <header class="top">
      <div class="bar">
        <a class="brand" href="#/">
          <span aria-hidden="true" class="logo">◆</span> jobgate
        </a>
        <nav aria-label="Main">
          <a href="#/" aria-current={route.view === 'jobs' ? 'page' : undefined}>
            Jobs
          </a>
          <a href="#/submit" aria-current={route.view === 'submit' ? 'page' : undefined}>
            Submit job
          </a>
          <a href="#/schedules" aria-current={route.view === 'schedules' ? 'page' : undefined}>
            Schedules
          </a>
          <a href="#/webhooks" aria-current={route.view === 'webhooks' ? 'page' : undefined}>
            Webhooks
          </a>
          <a href="/graphiql">GraphiQL</a>
        </nav>
        <span
          role="status"
          aria-label="Connection"
          class={`connection connection-${connection}`}
          title={CONNECTION_HELP[connection]}
        >
          {CONNECTION_TEXT[connection] || connection}
        </span>
      </div>
      <div class="summary">
        <Counts live={live} />
        <ActivityChart buckets={live.buckets} />
      </div>
      {live.error && !live.loaded && (
        <p class="error summary-error" role="alert">
          Could not load the summary: {live.error.message}
        </p>
      )}
    </header>
  );
}

function Counts({ live }) {
  const counts = live.counts;
  return (
    <ul class="counts" aria-label="Jobs by phase">
      {PHASES.map((phase) => (
        <li key={phase}>
          <a href={`#/?phase=${phase}`} class={`count phase-${phase}`} title={`Show ${phaseWord(phase).toLowerCase()} jobs`}>
            <span class="count-label">{phaseWord(phase)}</span>{' '}
            <span class="count-value" data-testid={`count-${phase}`}>
              {counts ? counts[phase] : '–'}
            </span>
          </a>
        </li>
      ))}
    </ul>
  );
}

/** Submissions (bars) and completions (stacked: succeeded, failed, cancelled) per minute. */
function ActivityChart({ buckets }) {
  const width = 360;
  const height = 64;
  const n = Math.max(buckets.length, 1);
  const max = Math.max(1, ...buckets.map((b) => Math.max(b.submitted, b.succeeded + b.failed + b.cancelled)));
  const slot = width / n;
  const bar = Math.max(1, slot / 2 - 0.3);
  const y = (v) => (v / max) * (height - 4);
  const submitted = buckets.reduce((a, b) => a + b.submitted, 0);
  const completed = buckets.reduce((a, b) => a + b.succeeded + b.failed + b.cancelled, 0);
  const failed = buckets.reduce((a, b) => a + b.failed, 0);
  const summary = `Last ${WINDOW_MINUTES} minutes: ${submitted} submitted, ${completed} finished (${failed} failed).`;
  return (
    <figure class="activity">
      <svg viewBox={`0 0 ${width} ${height}`} role="img" aria-label={summary} preserveAspectRatio="none">
        {buckets.map((b, i) => {
          const x = i * slot;
          const s = y(b.submitted);
          const ok = y(b.succeeded);
          const bad = y(b.failed);
          const cancelled = y(b.cancelled);
          const title = `${new Date(b.start).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}: ${b.submitted} submitted, ${b.succeeded} succeeded, ${b.failed} failed, ${b.cancelled} cancelled`;
          return (
            <g key={b.start}>
              <title>{title}</title>
              <rect class="bar-submitted" x={x} y={height - s} width={bar} height={s} />
              <rect class="bar-succeeded" x={x + bar} y={height - ok} width={bar} height={ok} />
              <rect class="bar-failed" x={x + bar} y={height - ok - bad} width={bar} height={bad} />
              <rect class="bar-cancelled" x={x + bar} y={height - ok - bad - cancelled} width={bar} height={cancelled} />
            </g>
          );
        })}
      </svg>
      <div class="activity-axis" aria-hidden="true">
        <span>{WINDOW_MINUTES} min ago</span>
        <span>now</span>
      </div>
      <figcaption>
        <span class="key key-submitted">{submitted} submitted</span>
        <span class="key key-succeeded">{completed} finished</span>
        <span class="key key-failed">{failed} failed</span>
        <span class="muted">last {WINDOW_MINUTES} min, per {BUCKET_SECONDS / 60} min</span>
      </figcaption>
    </figure>
  );
}
