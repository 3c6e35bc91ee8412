// The dashboard's only way to the server: jobgate's public GraphQL API.
//
// Queries and mutations go over HTTP POST /graphql; subscriptions over one WebSocket
// (graphql-transport-ws, through the graphql-ws client). Nothing here polls: after the first
// queries every change arrives pushed. The WebSocket reconnects by itself with capped,
// jittered back-off, and every subscription resumes where it left off (see `subscribe`).

import { createClient } from 'graphql-ws';

const TOKEN_KEY = 'jobgate.token';

/** A GraphQL error answer, with the server's `extensions.code` and, for bad input, the field. */
export class ApiError extends Error {
  constructor(message, { code = null, field = null, status = null, errors = [] } = {}) {
    super(message);
    this.code = code;
    this.field = field;
    this.status = status;
    this.errors = errors;
  }
}

export function storedToken() {
  try {
    return localStorage.getItem(TOKEN_KEY) || '';
  } catch {
    return '';
  }
}

export function storeToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    // Private windows may refuse storage; the token then lasts for this page only.
  }
}

/** A random id for idempotency keys (crypto.randomUUID needs a secure context; this does not). */
export function randomId() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function errorFrom(errors, status) {
  const first = errors[0] || {};
  const ext = first.extensions || {};
  return new ApiError(first.message || `request failed (HTTP ${status})`, {
    code: ext.code || (status === 401 ? 'UNAUTHENTICATED' : null),
    field: ext.field || null,
    status,
    errors,
  });
}

/**
 * The connection to one jobgate: HTTP requests and the shared WebSocket.
 * `onState` hears the WebSocket's state: 'connecting' | 'live' | 'reconnecting' | 'offline',
 * and 'unauthenticated' when the server refuses the credentials.
 */
export class Api {
  constructor({ onState, onAuthRequired }) {
    this.token = storedToken();
    this.onState = onState;
    this.onAuthRequired = onAuthRequired;
    this.ws = null;
    this.reconnectListeners = new Set();
    this.openWs();
  }

  authHeader() {
    return this.token ? { authorization: `Bearer ${this.token}` } : {};
  }

  /** Keeps new credentials and starts afresh with them (a new page, a new WebSocket). */
  setToken(token) {
    storeToken(token);
    window.location.reload();
  }

  /** Runs a query or mutation over HTTP; resolves to `data` or throws an ApiError. */
  async request(query, variables = {}) {
    let response;
    try {
      response = await fetch('/graphql', {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/graphql-response+json, application/json',
          ...this.authHeader(),
        },
        body: JSON.stringify({ query, variables }),
      });
    } catch (e) {
      throw new ApiError(`jobgate is unreachable (${e.message})`, { code: 'UNAVAILABLE' });
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      throw new ApiError(`jobgate answered HTTP ${response.status} without a GraphQL body`, {
        code: response.status >= 500 ? 'UNAVAILABLE' : null,
        status: response.status,
      });
    }
    if (body.errors?.length) {
      const error = errorFrom(body.errors, response.status);
      if (error.code === 'UNAUTHENTICATED') this.onAuthRequired?.(error.message);
      throw error;
    }
    return body.data;
  }

  openWs() {
    const url = new URL('/graphql', window.location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    // Failed attempts since the connection was last up: after a few, say Offline rather
    // than Reconnecting…, but keep trying.
    let failures = 0;
    let everConnected = false;
    const down = () => (failures >= 3 ? 'offline' : 'reconnecting');
    this.ws = createClient({
      url: url.href,
      // Connect at once and stay connected, so that the state shown is the real one.
      lazy: false,
      connectionParams: () => this.authHeader(),
      retryAttempts: Infinity,
      // Retry after any drop except a refusal of our credentials.
      shouldRetry: (event) => event?.code !== 4403 && event?.code !== 4401,
      retryWait: async (retries) => {
        // 0.5 s, 1 s, 2 s, capped at 5 s, each with up to 50 % jitter so that many
        // dashboards do not all come back at the same instant after a restart.
        const base = Math.min(500 * 2 ** retries, 5000);
        await new Promise((r) => setTimeout(r, base + Math.random() * base * 0.5));
      },
      keepAlive: 15_000,
      onNonLazyError: (error) => this.refused(error),
      on: {
        connecting: () => this.onState(everConnected || failures > 0 ? down() : 'connecting'),
        connected: (_socket, _payload, wasRetry) => {
          failures = 0;
          everConnected = true;
          this.onState('live');
          // Before graphql-ws re-sends the subscriptions, so listeners can reset their views.
          if (wasRetry) for (const listener of this.reconnectListeners) listener();
        },
        closed: (event) => {
          failures += 1;
          if (!this.refused(event)) this.onState(down());
        },
      },
    });
  }

  /** Calls `listener` each time the WebSocket is back after a drop; returns its remover. */
  onReconnect(listener) {
    this.reconnectListeners.add(listener);
    return () => this.reconnectListeners.delete(listener);
  }

  /** Whether the server refused our credentials (close 4401/4403); asks for new ones if so. */
  refused(event) {
    if (event?.code !== 4403 && event?.code !== 4401) return false;
    this.onState('unauthenticated');
    this.onAuthRequired?.(event.reason || 'the server refused the credentials');
    return true;
  }

  /**
   * Subscribes over the WebSocket. `variables` is the live object sent with every
   * (re)subscription: graphql-ws re-sends the same payload after a reconnect, so a caller that
   * moves `variables.after` to each event's cursor resumes with no gap and no duplicate.
   * `onNext(data)`, `onError(ApiError)`, `onComplete()`. Returns an unsubscribe function.
   */
  subscribe(query, variables, { onNext, onError, onComplete }) {
    const payload = { query, variables };
    return this.ws.subscribe(payload, {
      next: (result) => {
        if (result.errors?.length) onError?.(errorFrom(result.errors, null));
        else onNext(result.data);
      },
      error: (error) => {
        if (Array.isArray(error)) onError?.(errorFrom(error, null));
        else if (error?.code === 4403 || error?.code === 4401) {
          onError?.(new ApiError(error.reason || 'not signed in', { code: 'UNAUTHENTICATED' }));
        } else onError?.(new ApiError(error?.message || error?.reason || 'subscription failed'));
      },
      complete: () => onComplete?.(),
    });
  }
}
