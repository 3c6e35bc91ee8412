// The submit form, built from the server's `templates`: each template lists the SubmitJobInput
// fields it uses (with labels, defaults, limits and choices) and a JSON Schema for its
// `parameters`. The server validates; its BAD_USER_INPUT errors name the field, and the form
// shows each next to its control. One idempotency key per form makes a retried submission
// (after a network error, say) return the same job instead of starting a second one. Under
// the form, the Python call and the command line that submit the same job, rendered from the
// input the form sends (`formInput`), as the user edits it.

import { useEffect, useMemo, useRef, useState } from 'preact/hooks';

import { randomId } from './api.js';
import { navigate } from './nav.js';
import { FROM_QUERY, SUBMIT_MUTATION, TEMPLATES_QUERY } from './documents.js';
import { Equivalents } from './equivalents.jsx';

/** The form's text for a field's value (numbers and lists are edited as text). */
function toText(field, value) {
  if (value == null) return field.type === 'ENV' ? [] : field.type === 'RESOURCES' ? emptyResources() : '';
  switch (field.type) {
    case 'STRING_LIST':
      return value.join('\n');
    case 'INT':
      return String(value);
    case 'ENV':
      return value.map((e) => ({ name: e.name, value: e.value }));
    case 'RESOURCES':
      return {
        requests: { cpu: value.requests?.cpu || '', memory: value.requests?.memory || '' },
        limits: { cpu: value.limits?.cpu || '', memory: value.limits?.memory || '' },
      };
    default:
      return String(value);
  }
}

function emptyResources() {
  return { requests: { cpu: '', memory: '' }, limits: { cpu: '', memory: '' } };
}

/**
 * The input value for a field, or undefined to leave it to the server's default. Only what
 * cannot be sent as typed is checked here (a number that is not one); every rule is the
 * server's, so the form can never disagree with it.
 */
function fromText(field, text) {
  switch (field.type) {
    case 'STRING_LIST': {
      const list = text.split('\n').map((l) => l.replace(/\r$/, ''));
      while (list.length && list[list.length - 1] === '') list.pop();
      return list.length ? list : undefined;
    }
    case 'INT': {
      if (text.trim() === '') return undefined;
      const n = Number(text);
      if (!Number.isInteger(n)) throw new FieldError(field.name, 'must be a whole number');
      return n;
    }
    case 'ENV': {
      const env = text.filter((e) => e.name !== '' || e.value !== '');
      return env.length ? env : undefined;
    }
    case 'RESOURCES': {
      const part = (l) => {
        const out = {};
        if (l.cpu.trim()) out.cpu = l.cpu.trim();
        if (l.memory.trim()) out.memory = l.memory.trim();
        return Object.keys(out).length ? out : undefined;
      };
      const requests = part(text.requests);
      const limits = part(text.limits);
      return requests || limits ? { requests, limits } : undefined;
    }
    default:
      return text.trim() === '' ? undefined : text.trim();
  }
}

class FieldError extends Error {
  constructor(field, message) {
    super(message);
    this.field = field;
  }
}

/**
 * The SubmitJobInput the form's values make, without its idempotency key: what Submit sends
 * and what the Python and command-line calls under the form say. Throws a FieldError for a
 * value that cannot be sent. Parameters left empty are left out, as for any other field (the
 * server reads none as `{}`).
 */
function formInput(template, values, params) {
  const input = { template: template.name };
  for (const field of template.fields) {
    const value = fromText(field, values[field.name] ?? toText(field, null));
    if (value !== undefined) input[field.name] = value;
  }
  if (template.parameterSchema && Object.keys(params).length) input.parameters = params;
  return input;
}

/** The form field a server error's `extensions.field` (e.g. `input.env[1].name`) belongs to. */
function fieldOf(path) {
  if (!path) return null;
  const rest = path.replace(/^input\./, '');
  return rest.split(/[.[]/)[0] || null;
}

export function SubmitForm({ api, from }) {
  const [templates, setTemplates] = useState(null);
  const [loadError, setLoadError] = useState(null);
  const [templateName, setTemplateName] = useState(null);
  const [values, setValues] = useState({});
  const [params, setParams] = useState({});
  const [errors, setErrors] = useState({});
  const [formError, setFormError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [fromJob, setFromJob] = useState(null);
  const idempotencyKey = useRef(randomId());
  const formRef = useRef(null);

  useEffect(() => {
    const loads = [api.request(TEMPLATES_QUERY)];
    if (from) loads.push(api.request(FROM_QUERY, { id: from }));
    Promise.all(loads)
      .then(([t, f]) => {
        setTemplates(t.templates);
        const job = f?.job || null;
        setFromJob(job);
        const chosen = t.templates.find((x) => x.name === job?.template) || t.templates.find((x) => x.available) || t.templates[0];
        setTemplateName(chosen?.name || null);
        if (chosen) {
          const source = job ? { name: job.name, namespace: job.namespace, ...job.spec } : {};
          const v = {};
          for (const field of chosen.fields) v[field.name] = toText(field, source[field.name]);
          setValues(v);
          setParams(job?.spec.parameters || {});
        }
      })
      .catch(setLoadError);
  }, [from]);

  const template = useMemo(() => templates?.find((t) => t.name === templateName) || null, [templates, templateName]);

  const chooseTemplate = (name) => {
    setTemplateName(name);
    const t = templates.find((x) => x.name === name);
    const v = {};
    for (const field of t.fields) v[field.name] = field.name in values ? values[field.name] : toText(field, null);
    setValues(v);
    setParams({});
    setErrors({});
  };

  const submit = async (e) => {
    e.preventDefault();
    if (busy || !template) return;
    setErrors({});
    setFormError(null);
    let input;
    try {
      input = { ...formInput(template, values, params), idempotencyKey: idempotencyKey.current };
    } catch (error) {
      if (error instanceof FieldError) {
        setErrors({ [error.field]: error.message });
        focusField(error.field);
        return;
      }
      throw error;
    }
    setBusy(true);
    try {
      const data = await api.request(SUBMIT_MUTATION, { input });
      navigate(`/jobs/${encodeURIComponent(data.submitJob.job.id)}`);
    } catch (error) {
      setBusy(false);
      const field = fieldOf(error.field);
      const known = field === 'parameters' || template.fields.some((f) => f.name === field);
      if (error.code === 'BAD_USER_INPUT' && known) {
        // The server's message starts with the field's path; next to the field it is redundant.
        const message = error.message.replace(/^input\.[^:]*:\s*/, '');
        setErrors({ [field]: message });
        focusField(field);
      } else {
        setFormError(error.message);
        if (error.code === 'BAD_USER_INPUT' && field === 'idempotencyKey') idempotencyKey.current = randomId();
      }
    }
  };

  const focusField = (name) => {
    requestAnimationFrame(() => formRef.current?.querySelector(`[name="${name}"]`)?.focus());
  };

  if (loadError) {
    return (
      <section>
        <h1 tabIndex={-1}>Submit a job</h1>
        <p class="error" role="alert">
          Could not load the templates: {loadError.message}
        </p>
      </section>
    );
  }
  if (!templates) {
    return (
      <section aria-busy="true">
        <h1 tabIndex={-1}>Submit a job</h1>
        <p class="muted">Loading templates…</p>
      </section>
    );
  }

  const set = (name, value) => {
    setValues((v) => ({ ...v, [name]: value }));
    if (errors[name]) setErrors((e) => ({ ...e, [name]: undefined }));
  };

  return (
    <section class="submit" aria-labelledby="submit-heading">
      <h1 id="submit-heading" tabIndex={-1}>
        {from ? 'Resubmit a job' : 'Submit a job'}
      </h1>
      {fromJob && (
        <p class="muted">
          Filled in from <a href={`#/jobs/${encodeURIComponent(from)}`}>{fromJob.name || from}</a>; change anything before submitting.
        </p>
      )}
      <form ref={formRef} aria-label="Submit a job" onSubmit={submit} novalidate>
        <div class="field">
          <label for="field-template">Template</label>
          <select id="field-template" name="template" value={templateName} onChange={(e) => chooseTemplate(e.currentTarget.value)} aria-describedby="help-template">
            {templates.map((t) => (
              <option key={t.name} value={t.name} disabled={!t.available} title={t.unavailableReason || undefined}>
                {t.name}
                {t.available ? '' : ' (not available)'}
              </option>
            ))}
          </select>
          <p id="help-template" class="help">
            {template?.description} <span class="muted">({template?.kind})</span>
          </p>
        </div>
        {template?.fields.map((field) => (
          <Field key={field.name} field={field} value={values[field.name]} error={errors[field.name]} onChange={(v) => set(field.name, v)} />
        ))}
        {template?.parameterSchema && (
          <Parameters schema={template.parameterSchema} value={params} error={errors.parameters} onChange={setParams} />
        )}
        {formError && (
          <p class="error" role="alert" id="form-error">
            {formError}
          </p>
        )}
        <div class="form-actions">
          <button type="submit" class="primary" disabled={busy || !template?.available}>
            {busy ? 'Submitting…' : 'Submit'}
          </button>
          <a href="#/">Cancel</a>
        </div>
      </form>
      {template && <Equivalents {...sendable(template, values, params)} />}
    </section>
  );
}

/** `{input}` for the form's values, or `{problem}`: why they cannot be sent as they are. */
function sendable(template, values, params) {
  try {
    return { input: formInput(template, values, params) };
  } catch (error) {
    if (!(error instanceof FieldError)) throw error;
    const field = template.fields.find((f) => f.name === error.field);
    return { problem: `${field?.label || error.field} ${error.message}.` };
  }
}

function describedBy(name, error) {
  return [`help-${name}`, error ? `error-${name}` : null].filter(Boolean).join(' ');
}

function ErrorText({ name, error }) {
  return error ? (
    <p class="field-error" id={`error-${name}`}>
      {error}
    </p>
  ) : null;
}

function Help({ field }) {
  const limits = [];
  if (field.minimum != null && field.maximum != null) limits.push(`${field.minimum} to ${field.maximum}`);
  else if (field.minimum != null) limits.push(`at least ${field.minimum}`);
  else if (field.maximum != null) limits.push(`at most ${field.maximum}`);
  if (field.default != null && field.type !== 'ENV' && field.type !== 'RESOURCES') limits.push(`default: ${field.default}`);
  return (
    <p class="help" id={`help-${field.name}`}>
      {field.description}
      {limits.length > 0 && <span class="muted"> ({limits.join('; ')})</span>}
    </p>
  );
}

function Field({ field, value, error, onChange }) {
  const id = `field-${field.name}`;
  const common = {
    id,
    name: field.name,
    'aria-invalid': error ? 'true' : undefined,
    'aria-describedby': describedBy(field.name, error),
    'aria-required': field.required ? 'true' : undefined,
  };
  const label = (
    <label for={id}>
      {field.label}
      {field.required && <span class="required" aria-hidden="true"> *</span>}
    </label>
  );
  let control;
  switch (field.type) {
    case 'STRING_LIST':
      control = (
        <textarea
          {...common}
          rows={Math.min(10, Math.max(3, (value || '').split('\n').length + 1))}
          placeholder={field.placeholder || 'one argument per line'}
          value={value}
          spellcheck={false}
          onInput={(e) => onChange(e.currentTarget.value)}
        />
      );
      break;
    case 'INT':
      control = (
        <input
          {...common}
          type="number"
          inputMode="numeric"
          min={field.minimum ?? undefined}
          max={field.maximum ?? undefined}
          placeholder={field.placeholder || (field.default != null ? String(field.default) : '')}
          value={value}
          onInput={(e) => onChange(e.currentTarget.value)}
        />
      );
      break;
    case 'ENV':
      return <EnvField field={field} value={value || []} error={error} onChange={onChange} />;
    case 'RESOURCES':
      return <ResourcesField field={field} value={value || emptyResources()} error={error} onChange={onChange} />;
    default:
      control = field.choices?.length ? (
        <select {...common} value={value} onChange={(e) => onChange(e.currentTarget.value)}>
          {!field.required && <option value="">{field.default != null ? `default (${field.default})` : '—'}</option>}
          {field.choices.map((c) => (
            <option key={c} value={c}>
              {c}
            </option>
          ))}
        </select>
      ) : (
        <input
          {...common}
          type="text"
          autocomplete="off"
          spellcheck={false}
          placeholder={field.placeholder || (field.default != null ? String(field.default) : '')}
          value={value}
          onInput={(e) => onChange(e.currentTarget.value)}
        />
      );
  }
  return (
    <div class={`field${error ? ' invalid' : ''}`}>
      {label}
      {control}
      <Help field={field} />
      <ErrorText name={field.name} error={error} />
    </div>
  );
}

function EnvField({ field, value, error, onChange }) {
  const update = (i, key, v) => onChange(value.map((e, j) => (j === i ? { ...e, [key]: v } : e)));
  return (
    <fieldset class={`field${error ? ' invalid' : ''}`} aria-describedby={describedBy(field.name, error)}>
      <legend>{field.label}</legend>
      {value.map((e, i) => (
        <div class="env-row" key={i}>
          <input
            name={i === 0 ? field.name : undefined}
            aria-label={`Variable ${i + 1} name`}
            aria-invalid={error ? 'true' : undefined}
            placeholder="NAME"
            value={e.name}
            spellcheck={false}
            onInput={(ev) => update(i, 'name', ev.currentTarget.value)}
          />
          <input aria-label={`Variable ${i + 1} value`} placeholder="value" value={e.value} spellcheck={false} onInput={(ev) => update(i, 'value', ev.currentTarget.value)} />
          <button type="button" class="link" aria-label={`Remove variable ${i + 1}`} onClick={() => onChange(value.filter((_, j) => j !== i))}>
            Remove
          </button>
        </div>
      ))}
      <button type="button" onClick={() => onChange([...value, { name: '', value: '' }])}>
        Add variable
      </button>
      <Help field={field} />
      <ErrorText name={field.name} error={error} />
    </fieldset>
  );
}

function ResourcesField({ field, value, error, onChange }) {
  const update = (part, key, v) => onChange({ ...value, [part]: { ...value[part], [key]: v } });
  const input = (part, key, label, placeholder, first) => (
    <label class="inline">
      <span>{label}</span>
      <input
        name={first ? field.name : undefined}
        aria-invalid={error ? 'true' : undefined}
        placeholder={placeholder}
        value={value[part][key]}
        spellcheck={false}
        onInput={(e) => update(part, key, e.currentTarget.value)}
      />
    </label>
  );
  return (
    <fieldset class={`field${error ? ' invalid' : ''}`} aria-describedby={describedBy(field.name, error)}>
      <legend>{field.label}</legend>
      <div class="resources">
        {input('requests', 'cpu', 'CPU request', '500m', true)}
        {input('requests', 'memory', 'Memory request', '256Mi')}
        {input('limits', 'cpu', 'CPU limit', '1')}
        {input('limits', 'memory', 'Memory limit', '512Mi')}
      </div>
      <Help field={field} />
      <ErrorText name={field.name} error={error} />
    </fieldset>
  );
}

/** A form for a template's parameters from its JSON Schema's top-level properties. */
function Parameters({ schema, value, error, onChange }) {
  const properties = schema.properties || {};
  const required = new Set(schema.required || []);
  const names = Object.keys(properties);
  const set = (name, v) => {
    const next = { ...value };
    if (v === undefined) delete next[name];
    else next[name] = v;
    onChange(next);
  };
  return (
    <fieldset class={`field${error ? ' invalid' : ''}`} aria-describedby={error ? 'error-parameters' : undefined}>
      <legend>Parameters</legend>
      {names.length === 0 && <p class="muted">This template takes no named parameters.</p>}
      {names.map((name, i) => {
        const p = properties[name];
        const id = `param-${name}`;
        const label = (
          <label for={id}>
            {p.title || name}
            {required.has(name) && <span class="required" aria-hidden="true"> *</span>}
          </label>
        );
        const common = { id, name: i === 0 ? 'parameters' : `parameters.${name}`, 'aria-invalid': error ? 'true' : undefined, 'aria-required': required.has(name) ? 'true' : undefined };
        let control;
        if (Array.isArray(p.enum)) {
          control = (
            <select {...common} value={value[name] ?? ''} onChange={(e) => set(name, e.currentTarget.value === '' ? undefined : p.enum[e.currentTarget.selectedIndex - 1])}>
              <option value="">{p.default != null ? `default (${p.default})` : '—'}</option>
              {p.enum.map((v) => (
                <option key={String(v)} value={String(v)}>
                  {String(v)}
                </option>
              ))}
            </select>
          );
        } else if (p.type === 'boolean') {
          control = <input {...common} type="checkbox" checked={value[name] ?? p.default ?? false} onChange={(e) => set(name, e.currentTarget.checked)} />;
        } else if (p.type === 'integer' || p.type === 'number') {
          control = (
            <input
              {...common}
              type="number"
              step={p.type === 'integer' ? 1 : 'any'}
              min={p.minimum}
              max={p.maximum}
              placeholder={p.default != null ? String(p.default) : ''}
              value={value[name] ?? ''}
              onInput={(e) => set(name, e.currentTarget.value === '' ? undefined : Number(e.currentTarget.value))}
            />
          );
        } else if (p.type === 'string' || p.type === undefined) {
          control = (
            <input {...common} type="text" placeholder={p.default != null ? String(p.default) : ''} value={value[name] ?? ''} onInput={(e) => set(name, e.currentTarget.value === '' ? undefined : e.currentTarget.value)} />
          );
        } else {
          control = <JsonInput common={common} value={value[name]} onChange={(v) => set(name, v)} />;
        }
        return (
          <div class="field" key={name}>
            {label}
            {control}
            {p.description && <p class="help">{p.description}</p>}
          </div>
        );
      })}
      <ErrorText name="parameters" error={error} />
    </fieldset>
  );
}

function JsonInput({ common, value, onChange }) {
  const [text, setText] = useState(value === undefined ? '' : JSON.stringify(value));
  const [bad, setBad] = useState(false);
  return (
    <textarea
      {...common}
      aria-invalid={bad || common['aria-invalid'] ? 'true' : undefined}
      placeholder="JSON"
      value={text}
      onInput={(e) => {
        const t = e.currentTarget.value;
        setText(t);
        if (t.trim() === '') {
          setBad(false);
          onChange(undefined);
          return;
        }
        try {
          onChange(JSON.parse(t));
          setBad(false);
        } catch {
          setBad(true);
        }
      }}
    />
  );
}
