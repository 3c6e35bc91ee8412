// The dashboard's entry point: the connection, the live model, the router and the page frame.
// Routes live in the URL's hash (#/, #/jobs/<id>, #/submit, #/schedules, #/webhooks) so that jobgate serves one page
// and every view can be bookmarked and reloaded.

import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';

import { Api } from './api.js';
import { LiveModel } from './live.js';
import { Header } from './header.jsx';
import { JobsView } from './jobs.jsx';
import { JobDetail } from './detail.jsx';
import { SubmitForm } from './submit.jsx';
import { TokenDialog } from './token.jsx';
import { SchedulesView } from './schedules.jsx';
import { WebhooksView } from './webhooks.jsx';

function parseRoute(hash) {
  const raw = hash.replace(/^#/, '') || '/';
  const [path, query = ''] = raw.split('?');
  const params = new URLSearchParams(query);
  const job = path.match(/^\/jobs\/([^/]+)$/);
  if (job) return { view: 'job', id: decodeURIComponent(job[1]), params };
  if (path === '/submit') return { view: 'submit', params };
  if (path === '/schedules') return { view: 'schedules', params };
  if (path === '/webhooks') return { view: 'webhooks', params };
  return { view: 'jobs', params };
}

function useRoute() {
  const [route, setRoute] = useState(() => parseRoute(window.location.hash));
  useEffect(() => {
    const onChange = () => setRoute(parseRoute(window.location.hash));
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

function App() {
  const [connection, setConnection] = useState('connecting');
  const [authMessage, setAuthMessage] = useState(null);
  const [, setTick] = useState(0);
  const services = useRef(null);
  if (!services.current) {
    const api = new Api({
      onState: (state) => {
        setConnection(state);
        // A first load that failed while the server was away is retried now that it answers.
        if (state === 'live') services.current?.live.start();
      },
      onAuthRequired: (message) => setAuthMessage(message),
    });
    services.current = { api, live: new LiveModel(api) };
  }
  const { api, live } = services.current;
  const route = useRoute();

  useEffect(() => {
    live.start();
    return live.onChange(() => setTick((t) => t + 1));
  }, [live]);

  // Move focus to the new view's heading so keyboard and screen-reader users land on it. A
  // view may render its heading late (after loading), so watch for it for a moment, without
  // taking the focus from anything the user has moved it to inside the view.
  const main = useRef(null);
  const firstRoute = useRef(true);
  useEffect(() => {
    if (firstRoute.current) {
      firstRoute.current = false;
      return undefined;
    }
    const focusHeading = () => {
      const heading = main.current?.querySelector('h1');
      const active = document.activeElement;
      const free = !active || active === document.body || active.tagName === 'H1' || !main.current.contains(active);
      if (heading && active !== heading && free) heading.focus();
    };
    focusHeading();
    const observer = new MutationObserver(focusHeading);
    observer.observe(main.current, { childList: true, subtree: true });
    const stop = setTimeout(() => observer.disconnect(), 3000);
    return () => {
      observer.disconnect();
      clearTimeout(stop);
    };
  }, [route.view, route.id, route.params.get('from')]);

  let view;
  if (route.view === 'job') view = <JobDetail key={route.id} id={route.id} api={api} live={live} />;
  else if (route.view === 'submit') view = <SubmitForm key={route.params.get('from') || 'new'} api={api} from={route.params.get('from')} />;
  else if (route.view === 'schedules') view = <SchedulesView api={api} live={live} />;
  else if (route.view === 'webhooks') view = <WebhooksView api={api} live={live} />;
  else view = <JobsView api={api} live={live} params={route.params} />;

  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); main.current?.querySelector('h1')?.focus(); }}>
        Skip to content
      </a>
      <Header route={route} connection={connection} live={live} />
      <main id="main" ref={main}>
        {view}
      </main>
      {authMessage && (
        <TokenDialog
          message={authMessage}
          onSave={(token) => api.setToken(token)}
          onClose={() => setAuthMessage(null)}
        />
      )}
    </>
  );
}

render(<App />, document.getElementById('app'));
