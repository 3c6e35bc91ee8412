// Under the submit form: the Python call and the command line that submit the form's job,
// rendered by snippets.js from the input the form would send, each with a Copy button.

import { useEffect, useRef, useState } from 'preact/hooks';

import { cliCall, pythonCall } from './snippets.js';

/**
 * The calls for `input` (the form's SubmitJobInput), or `problem` (why the form's values
 * cannot be sent yet) in their place.
 */
export function Equivalents({ input, problem }) {
  return (
    <section class="equivalents" aria-labelledby="equivalents-heading">
      <h2 id="equivalents-heading">The same job from code</h2>
      <p class="help">
        Both submit exactly this form's job. They read the server from <code>JOBGATE_SERVER</code> (this one is{' '}
        <code>{location.origin}</code>) and, when it asks for one, an API token from <code>JOBGATE_TOKEN</code>.
      </p>
      {problem ? (
        <p class="muted">Shown once the form can be sent: {problem}</p>
      ) : (
        <>
          <Snippet id="python" title="Submit from Python" what="the Python call" text={pythonCall(input)} />
          <Snippet id="cli" title="Submit from the command line" what="the command line" text={cliCall(input)} />
        </>
      )}
    </section>
  );
}

/** A titled code block with a Copy button that says whether the text reached the clipboard. */
function Snippet({ id, title, what, text }) {
  const [copied, setCopied] = useState('');
  const codeRef = useRef(null);
  useEffect(() => setCopied(''), [text]);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      setCopied('Copied');
    } catch {
      // No Clipboard API outside a secure context (plain http to another host), or no
      // permission: select the text and copy it the older way.
      const range = document.createRange();
      range.selectNodeContents(codeRef.current);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      const done = document.execCommand('copy');
      setCopied(done ? 'Copied' : 'Could not copy: the text is selected, copy it with the keyboard');
    }
  };
  return (
    <section class="snippet" aria-labelledby={`snippet-${id}`}>
      <div class="snippet-head">
        <h3 id={`snippet-${id}`}>{title}</h3>
        <button type="button" aria-label={`Copy ${what}`} onClick={copy}>
          Copy
        </button>
        <span class="muted small" role="status">
          {copied}
        </span>
      </div>
      <pre>
        <code ref={codeRef}>{text}</code>
      </pre>
    </section>
  );
}
