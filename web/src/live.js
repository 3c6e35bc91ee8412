// The dashboard's live model: counts by phase, the last hour's activity, and one `jobEvents`
// subscription that every view listens to.
//
// It starts from `jobStats`, a snapshot with the cursor of the newest event it includes, and
// subscribes to `jobEvents(after: cursor)`; each event moves the cursor, and the subscription
// re-sends it after a reconnect, so the figures stay exact: no event is missed or counted twice.
//
// When the server answers CURSOR_EXPIRED (retention deleted events after our cursor while we
// were away: a resume would have gaps), it takes a fresh snapshot and follows on from its
// cursor; `generation` counts the snapshots, so that views holding data of their own (the
// jobs table) reload with it.

import { PHASES, TERMINAL } from './format.js';
import { EVENTS_SUBSCRIPTION, STATS_QUERY } from './documents.js';

export const WINDOW_MINUTES = 60;
export const BUCKET_SECONDS = 60;

function bucketStart(ms) {
  const size = BUCKET_SECONDS * 1000;
  return Math.floor(ms / size) * size;
}

export class LiveModel {
  constructor(api) {
    this.api = api;
    this.counts = null; // { PENDING: n, ... }
    this.buckets = []; // [{ start: ms, submitted, succeeded, failed, cancelled }]
    this.variables = { after: null };
    this.loaded = false;
    // True once the first snapshot has been tried, whether it loaded or failed: views that
    // hold data of their own wait for it rather than load twice.
    this.tried = false;
    this.generation = 0;
    this.loading = null;
    this.error = null;
    this.listeners = new Set();
    this.changeListeners = new Set();
    this.unsubscribe = null;
    this.frame = 0;
    // The chart's window moves with the clock; this only re-draws, it asks the server nothing.
    this.clock = setInterval(() => this.roll(Date.now()), 5_000);
  }

  /** Loads the snapshot once (again after a failure) and then follows `jobEvents`. */
  async start() {
    if (this.loaded || this.loading) return this.loading;
    this.loading = (async () => {
      try {
        const data = await this.api.request(STATS_QUERY, {
          windowMinutes: WINDOW_MINUTES,
          bucketSeconds: BUCKET_SECONDS,
        });
        const stats = data.jobStats;
        this.counts = Object.fromEntries(PHASES.map((p) => [p, stats.counts[p.toLowerCase()]]));
        this.buckets = stats.activity.map((b) => ({ ...b, start: Date.parse(b.start) }));
        this.variables.after = stats.cursor;
        this.loaded = true;
        this.generation += 1;
        this.error = null;
        this.unsubscribe = this.api.subscribe(EVENTS_SUBSCRIPTION, this.variables, {
          onNext: (data) => this.apply(data.jobEvents),
          onError: (error) => {
            if (error.code === 'CURSOR_EXPIRED') {
              this.resnapshot();
              return;
            }
            this.error = error;
            this.changed();
          },
        });
      } catch (error) {
        this.error = error;
      } finally {
        this.loading = null;
        this.tried = true;
        this.changed();
      }
    })();
    return this.loading;
  }

  /** Drops the subscription and the figures, and starts again from a fresh snapshot. */
  resnapshot() {
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.loaded = false;
    this.changed();
    this.start();
  }

  apply(event) {
    // Resume after this event if the connection drops (see Api.subscribe).
    this.variables.after = event.cursor;
    const { phase, previousPhase } = event;
    if (previousPhase !== phase) {
      if (previousPhase) this.counts[previousPhase] -= 1;
      this.counts[phase] += 1;
    }
    this.roll(Date.now());
    if (previousPhase == null) this.bump(Date.parse(event.job.submittedAt), 'submitted');
    if (TERMINAL.has(phase) && previousPhase !== phase) this.bump(Date.parse(event.at), phase.toLowerCase());
    for (const listener of this.listeners) listener(event);
    this.changed();
  }

  bump(ms, key) {
    const start = bucketStart(ms);
    const bucket = this.buckets.find((b) => b.start === start);
    if (bucket) bucket[key] += 1;
  }

  /** Moves the chart's window to end at the bucket of `now`, adding empty buckets. */
  roll(now) {
    if (!this.buckets.length) return;
    const current = bucketStart(now);
    let last = this.buckets[this.buckets.length - 1].start;
    if (last >= current) return;
    while (last < current) {
      last += BUCKET_SECONDS * 1000;
      this.buckets.push({ start: last, submitted: 0, succeeded: 0, failed: 0, cancelled: 0 });
    }
    const keep = Math.ceil((WINDOW_MINUTES * 60) / BUCKET_SECONDS);
    this.buckets = this.buckets.slice(-keep);
    this.changed();
  }

  /** `listener(event)` hears every job event, after the counts have taken it in. */
  onEvent(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** `listener()` hears any change of counts, activity or state. */
  onChange(listener) {
    this.changeListeners.add(listener);
    return () => this.changeListeners.delete(listener);
  }

  /** Tells the listeners once per frame at most: a burst of events costs one render. */
  changed() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      for (const listener of this.changeListeners) listener();
    });
  }
}
