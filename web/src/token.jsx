// Sign-in: when jobgate refuses the request for want of credentials, ask for an API token.
// It is kept in this browser's localStorage and sent as `Authorization: Bearer` on HTTP and
// in the WebSocket's connection_init payload, as every other client does.

import { useEffect, useRef, useState } from 'preact/hooks';

export function TokenDialog({ message, onSave, onClose }) {
  const dialog = useRef(null);
  const [token, setToken] = useState('');
  useEffect(() => {
    const d = dialog.current;
    if (d && !d.open) d.showModal();
  }, []);
  return (
    <dialog ref={dialog} aria-labelledby="token-heading" onClose={onClose} class="token-dialog">
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          if (token.trim()) onSave(token.trim());
        }}
      >
        <h2 id="token-heading">Sign in to jobgate</h2>
        <p>{message}</p>
        <label for="token-input">API token</label>
        <input id="token-input" type="password" autocomplete="current-password" value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        <div class="form-actions">
          <button type="submit" class="primary">
            Sign in
          </button>
          <button type="button" onClick={() => dialog.current?.close()}>
            Not now
          </button>
        </div>
      </form>
    </dialog>
  );
}
