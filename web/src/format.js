// Presentation helpers: phase words, times and durations. No state, no requests.

export const PHASES = ['PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
export const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

const WORDS = {
  PENDING: 'Pending',
  RUNNING: 'Running',
  SUCCEEDED: 'Succeeded',
  FAILED: 'Failed',
  CANCELLED: 'Cancelled',
};

export function phaseWord(phase) {
  return WORDS[phase] || phase;
}

export function shortId(id) {
  return id.length > 12 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

export function jobTitle(job) {
  return job.name || shortId(job.id);
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
  month: 'short',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
});

/** A timestamp as a short local time today, else with its date. */
export function when(iso) {
  if (!iso) return '';
  const date = new Date(iso);
  const today = new Date();
  return date.toDateString() === today.toDateString() ? timeFormat.format(date) : dateTimeFormat.format(date);
}

/**
 * A timestamp on the wall clock of an IANA zone, with the zone's abbreviation (`Nov 28,
 * 02:30 GMT+1`): a schedule's next runs read as its rule says them. Falls back to the
 * viewer's own zone when the browser does not know the zone.
 */
export function zonedWhen(iso, timeZone) {
  if (!iso) return '';
  try {
    return new Intl.DateTimeFormat(undefined, {
      timeZone,
      month: 'short',
      day: 'numeric',
      hour: '2-digit',
      minute: '2-digit',
      second: '2-digit',
      timeZoneName: 'short',
    }).format(new Date(iso));
  } catch {
    return dateTimeFormat.format(new Date(iso));
  }
}

export function fullTime(iso) {
  return iso ? new Date(iso).toLocaleString() : '';
}

/** Milliseconds as `850 ms`, `12 s`, `3 m 04 s`, `2 h 05 m`, `3 d 4 h`. */
export function duration(ms) {
  if (ms == null || Number.isNaN(ms)) return '';
  if (ms < 0) ms = 0;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${String(s % 60).padStart(2, '0')} s`;
  const h = Math.floor(m / 60);
  if (h < 24) return `${h} h ${String(m % 60).padStart(2, '0')} m`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}

/** How long the job has run: to its end, or to `now` while it runs. */
export function runTime(job, now) {
  if (!job.startedAt) return null;
  const end = job.finishedAt ? Date.parse(job.finishedAt) : now;
  return end - Date.parse(job.startedAt);
}

/** Completed share of a job, 0..1, or null when it has no known total. */
export function progressShare(job) {
  const p = job.progress;
  if (job.phase === 'SUCCEEDED') return 1;
  if (!p || !p.total) return null;
  return Math.min(1, p.succeeded / p.total);
}

export function progressText(job) {
  const p = job.progress;
  if (!p) return '';
  const parts = [];
  if (p.total != null) parts.push(`${p.succeeded}/${p.total} done`);
  else if (p.succeeded) parts.push(`${p.succeeded} done`);
  if (p.active) parts.push(`${p.active} active`);
  if (p.failed) parts.push(`${p.failed} failed`);
  return parts.join(', ');
}
