// Reading a page's list again when something changed: one read at a time; asking for
// another while one runs reads once more, a second after it, so a burst of events (job
// events, schedule events) costs one read a second. Pages call the function `useReload`
// returns when they open, after their own changes and on each event; nothing polls.
//
// It owns only the pacing: what is read, and what is shown of it or of an error, is the
// page's (`read`, `onError`).

import { useRef } from 'preact/hooks';

// How long after a read the next one waits when more were asked for meanwhile.
export const RELOAD_GAP_MS = 1000;

// A function that runs `read` (async) as described above; a failed read is given to
// `onError` and ends the round. The latest `read` and `onError` of the page's render are
// the ones run.
export function useReload(read, onError) {
  const latest = useRef({ read, onError });
  latest.current = { read, onError };
  const reload = useRef(null);
  if (!reload.current) {
    let loading = false;
    let again = false;
    reload.current = async () => {
      if (loading) {
        again = true;
        return;
      }
      loading = true;
      try {
        for (;;) {
          again = false;
          await latest.current.read();
          if (!again) break;
          await new Promise((resolve) => setTimeout(resolve, RELOAD_GAP_MS));
        }
      } catch (e) {
        latest.current.onError(e);
      } finally {
        loading = false;
      }
    };
  }
  return reload.current;
}
