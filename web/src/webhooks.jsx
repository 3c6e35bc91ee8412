// The webhooks page: the caller's endpoints with their delivery state, a form to create one
// (its secret is shown once, right after), and deleting one (with a confirm step).
//
// The list is read with `webhooks` when the page opens, after each change made here, and
// again after job events arrive (deliveries follow them), at most once a second
// (`reload.js`; a burst of job events costs one read a second, each counting every
// endpoint's lag on the server); nothing polls. Refresh reads it again at once (retries and
// parking happen without a job event).

import { useEffect, useRef, useState } from 'preact/hooks';

import { fullTime, phaseWord, when } from './format.js';
import { PhaseOptions } from './jobs.jsx';
import { CREATE_WEBHOOK_MUTATION, DELETE_WEBHOOK_MUTATION, WEBHOOKS_QUERY } from './documents.js';
import { useReload } from './reload.js';

const STATE_WORD = { ACTIVE: 'Active', RETRYING: 'Retrying', PARKED: 'Parked', DISABLED: 'Disabled' };

function filterText(filter) {
  const parts = [];
  if (filter.phases?.length) parts.push(`phase ${filter.phases.map(phaseWord).join(' or ')}`);
  if (filter.namespace) parts.push(`namespace ${filter.namespace}`);
  if (filter.nameContains) parts.push(`name contains “${filter.nameContains}”`);
  return parts.length ? parts.join(', ') : 'every job';
}

export function WebhooksView({ api, live }) {
  const [webhooks, setWebhooks] = useState(null);
  const [error, setError] = useState(null);
  const [created, setCreated] = useState(null);
  const load = useReload(
    async () => {
      const data = await api.request(WEBHOOKS_QUERY);
      setWebhooks(data.webhooks);
      setError(null);
    },
    (e) => setError(e.message),
  );

  useEffect(() => {
    load();
    return live.onEvent(() => load());
  }, [api, live]);

  return (
    <section aria-labelledby="webhooks-heading">
      <div class="view-head">
        <h1 id="webhooks-heading" tabIndex={-1}>
          Webhooks
        </h1>
        <div class="actions">
          <button type="button" onClick={() => load()}>
            Refresh
          </button>
        </div>
      </div>
      <p class="muted small">
        Each endpoint receives every status event of the jobs its filter matches in your namespaces, as signed HTTP POSTs
        (Standard Webhooks), at least once and in order.
      </p>
      <CreateForm
        api={api}
        onCreated={(payload) => {
          setCreated(payload);
          load();
        }}
      />
      {created && (
        <div class="card notice" role="status" data-testid="webhook-secret">
          <p>
            Created. Its signing secret is shown only now: keep it to verify the <code>webhook-signature</code> header.
          </p>
          <p>
            <code data-testid="secret-value">{created.secret}</code>
          </p>
          <button type="button" class="link" onClick={() => setCreated(null)}>
            Hide the secret
          </button>
        </div>
      )}
      {error && (
        <p class="error" role="alert">
          Could not load the webhooks: {error}
        </p>
      )}
      <div class="table-wrap" role="region" aria-label="Webhooks table" tabIndex={0}>
        <table>
          <thead>
            <tr>
              <th scope="col">URL</th>
              <th scope="col">Jobs</th>
              <th scope="col">State</th>
              <th scope="col">Waiting</th>
              <th scope="col">Last attempt</th>
              <th scope="col">Next attempt</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {(webhooks || []).map((w) => (
              <WebhookRow key={w.id} webhook={w} api={api} onDeleted={() => load()} />
            ))}
          </tbody>
        </table>
        {webhooks && webhooks.length === 0 && <p class="empty">No webhooks yet.</p>}
      </div>
    </section>
  );
}

function WebhookRow({ webhook, api, onDeleted }) {
  const [confirming, setConfirming] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const confirmButton = useRef(null);
  useEffect(() => {
    if (confirming) confirmButton.current?.focus();
  }, [confirming]);

  async function remove() {
    setBusy(true);
    try {
      await api.request(DELETE_WEBHOOK_MUTATION, { id: webhook.id });
      onDeleted();
    } catch (e) {
      setError(e.message);
      setBusy(false);
    }
  }

  return (
    <tr data-testid="webhook-row">
      <th scope="row">
        <code class="webhook-url">{webhook.url}</code>
        <div class="muted small">created {when(webhook.createdAt)}</div>
      </th>
      <td>{filterText(webhook.filter)}</td>
      <td>
        <span class={`badge webhook-${webhook.state}`} data-testid="webhook-state">
          {STATE_WORD[webhook.state] || webhook.state}
        </span>
        {webhook.disabledReason && <div class="row-message" title={webhook.disabledReason}>{webhook.disabledReason}</div>}
        {webhook.lastError && <div class="row-message" title={webhook.lastError}>{webhook.lastError}</div>}
        {webhook.attempts > 0 && <div class="muted small">{webhook.attempts} failed attempts</div>}
      </td>
      <td data-testid="webhook-lag">{webhook.lag}</td>
      <td>{webhook.lastAttemptAt ? <time dateTime={webhook.lastAttemptAt} title={fullTime(webhook.lastAttemptAt)}>{when(webhook.lastAttemptAt)}</time> : <span class="muted">–</span>}</td>
      <td>{webhook.nextAttemptAt ? <time dateTime={webhook.nextAttemptAt} title={fullTime(webhook.nextAttemptAt)}>{when(webhook.nextAttemptAt)}</time> : <span class="muted">–</span>}</td>
      <td>
        {!confirming && (
          <button type="button" class="danger" aria-label={`Delete webhook ${webhook.url}`} onClick={() => setConfirming(true)}>
            Delete
          </button>
        )}
        {confirming && (
          <div class="confirm" role="alertdialog" aria-label="Confirm delete">
            <button type="button" class="danger" disabled={busy} onClick={remove} ref={confirmButton}>
              Yes, delete
            </button>
            <button type="button" disabled={busy} onClick={() => setConfirming(false)}>
              Keep
            </button>
            {error && (
              <p class="error" role="alert">
                {error}
              </p>
            )}
          </div>
        )}
      </td>
    </tr>
  );
}

function CreateForm({ api, onCreated }) {
  const [url, setUrl] = useState('');
  const [phase, setPhase] = useState('');
  const [namespace, setNamespace] = useState('');
  const [name, setName] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);

  async function submit(e) {
    e.preventDefault();
    setBusy(true);
    setError(null);
    const filter = {};
    if (phase) filter.phases = [phase];
    if (namespace.trim()) filter.namespace = namespace.trim();
    if (name) filter.nameContains = name;
    try {
      const data = await api.request(CREATE_WEBHOOK_MUTATION, { input: { url: url.trim(), filter } });
      setUrl('');
      onCreated(data.createWebhook);
    } catch (err) {
      setError(err.message);
    } finally {
      setBusy(false);
    }
  }

  return (
    <form class="card filters" aria-label="New webhook" onSubmit={submit}>
      <label>
        URL
        <input
          type="url"
          required
          value={url}
          placeholder="https://example.com/hooks/jobgate"
          aria-invalid={error ? 'true' : undefined}
          aria-describedby={error ? 'webhook-error' : undefined}
          onInput={(e) => setUrl(e.currentTarget.value)}
        />
      </label>
      <label>
        Phase
        <select value={phase} onChange={(e) => setPhase(e.currentTarget.value)}>
          <PhaseOptions />
        </select>
      </label>
      <label>
        Namespace
        <input value={namespace} onInput={(e) => setNamespace(e.currentTarget.value)} />
      </label>
      <label>
        Name contains
        <input value={name} onInput={(e) => setName(e.currentTarget.value)} />
      </label>
      <button type="submit" class="primary" disabled={busy}>
        Create webhook
      </button>
      {error && (
        <p id="webhook-error" class="error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}
