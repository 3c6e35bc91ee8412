// Where a job's time went: its `timeline` segments (queued, launching, each attempt,
// finishing) as bars on one scale, each with its length. An open segment (the one the job is
// in) runs to now. The same segments are the spans of the job's trace (docs/TRACING.md).

import { duration, fullTime } from './format.js';

const KIND_WORDS = { QUEUED: 'Queued', LAUNCHING: 'Launching', ATTEMPT: 'Attempt', FINISHING: 'Finishing' };

export function TimeSpent({ job, now }) {
  const segments = job.timeline || [];
  if (segments.length === 0) return null;
  const start = Date.parse(segments[0].startedAt);
  const endOf = (s) => (s.endedAt ? Date.parse(s.endedAt) : now);
  const end = Math.max(start + 1, ...segments.map(endOf));
  const span = end - start;
  return (
    <section class="card" aria-labelledby="time-spent-heading" data-testid="time-spent">
      <h2 id="time-spent-heading">Where the time went</h2>
      {job.traceId && (
        <p class="muted small">
          Trace <code data-testid="trace-id">{job.traceId}</code>
        </p>
      )}
      <ol class="time-spent">
        {segments.map((s) => {
          const from = Date.parse(s.startedAt);
          const to = endOf(s);
          const left = ((from - start) / span) * 100;
          const width = Math.max(((to - from) / span) * 100, 0.5);
          const label = s.kind === 'ATTEMPT' ? `${KIND_WORDS[s.kind]} ${s.attempt}` : KIND_WORDS[s.kind] || s.name;
          return (
            <li key={s.name} class={`segment segment-${s.kind.toLowerCase()}${s.failed ? ' segment-failed' : ''}`} data-testid="time-segment" data-kind={s.kind}>
              <span class="segment-name">{label}</span>
              <span class="segment-track" title={`${fullTime(s.startedAt)} → ${s.endedAt ? fullTime(s.endedAt) : 'now'}`}>
                <span class="segment-bar" style={{ marginLeft: `${left}%`, width: `${width}%` }} />
              </span>
              <span class="segment-length">
                {duration(to - from)}
                {!s.endedAt && ' so far'}
                {s.exitCode != null && <span class="muted"> · exit {s.exitCode}</span>}
              </span>
            </li>
          );
        })}
      </ol>
    </section>
  );
}
