// The Python call (the `jobgate` package's `Client.submit`) and the command line (`jobgate
// submit`) that submit the same job as the submit form. Both are rendered from the one
// SubmitJobInput object the form sends, so neither can say anything the form would not.
//
// The form's idempotency key is left out of both: it makes the form's own retries return its
// one job, and a pasted call carrying it would return that job too instead of submitting.
// Pure functions of the input: no DOM, no requests.

/** The order fields are written in: SubmitJobInput's, as the schema lists them. */
const ORDER = [
  'name',
  'namespace',
  'template',
  'image',
  'command',
  'args',
  'env',
  'parallelism',
  'completions',
  'backoffLimit',
  'activeDeadlineSeconds',
  'parameters',
  'resources',
  'serviceAccountName',
  'ttlSecondsAfterFinished',
  'dependsOn',
  'queueName',
  'priority',
  'retryPolicy',
];

/** The input's fields to write, in ORDER (then any other), without undefined ones. */
function fields(input) {
  const keys = Object.keys(input).filter((k) => k !== 'idempotencyKey' && input[k] !== undefined);
  const rank = (k) => (ORDER.includes(k) ? ORDER.indexOf(k) : ORDER.length);
  return keys.sort((a, b) => rank(a) - rank(b)).map((k) => [k, input[k]]);
}

/** `backoffLimitPerIndex` → `backoff_limit_per_index`. */
export function snakeCase(name) {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * `value` as a Python literal. A JSON string is a valid Python string literal, and JSON
 * numbers are Python numbers. Object keys are snake_cased when `snake` (GraphQL input
 * objects, whose fields the client takes in snake_case), kept as they are otherwise (JSON).
 */
export function pythonLiteral(value, snake = false) {
  if (value === null || value === undefined) return 'None';
  if (value === true) return 'True';
  if (value === false) return 'False';
  if (typeof value === 'number') return Number.isFinite(value) ? String(value) : 'None';
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => pythonLiteral(v, snake)).join(', ')}]`;
  const entries = Object.entries(value).filter(([, v]) => v !== undefined);
  return `{${entries.map(([k, v]) => `${JSON.stringify(snake ? snakeCase(k) : k)}: ${pythonLiteral(v, snake)}`).join(', ')}}`;
}

/** The Python argument for an input field's value. */
function pythonArgument(key, value) {
  switch (key) {
    case 'env':
      // The client takes a dict; the server refuses a name given twice anyway.
      return `{${value.map((e) => `${JSON.stringify(e.name)}: ${JSON.stringify(e.value)}`).join(', ')}}`;
    case 'parameters':
      return pythonLiteral(value, false);
    default:
      return pythonLiteral(value, true);
  }
}

/** The Python program that submits `input` (a SubmitJobInput) and prints the job's id. */
export function pythonCall(input) {
  const args = fields(input).map(([k, v]) => `    ${snakeCase(k)}=${pythonArgument(k, v)},\n`);
  return [
    'import jobgate',
    '',
    'client = jobgate.Client()  # the server and token from JOBGATE_SERVER / JOBGATE_TOKEN',
    args.length ? `job = client.submit(\n${args.join('')})` : 'job = client.submit()',
    'print(job.id)',
  ].join('\n');
}

/** Words a POSIX shell reads as they are, with nothing to expand or split. */
const PLAIN = /^[A-Za-z0-9_@%+=:,./-]+$/;

/** `word` as one POSIX shell word: as it is when plain, else in single quotes. */
export function shellQuote(word) {
  return PLAIN.test(word) ? word : `'${word.replaceAll("'", "'\\''")}'`;
}

/** `--flag value`, or `--flag=value` when the value starts with `-` (so it is not a flag). */
function flag(name, value) {
  const text = String(value);
  return text.startsWith('-') ? `${name}=${shellQuote(text)}` : `${name} ${shellQuote(text)}`;
}

/**
 * A parameter's value as `--param` reads it back: a value that reads as JSON is sent as that
 * JSON, any other as a string. So every value is written as JSON, except a string that does
 * not read as JSON, which is written as it is (`mode=fast`, but `version="2.9"`).
 */
function paramValue(value) {
  if (typeof value !== 'string') return JSON.stringify(value);
  try {
    JSON.parse(value);
    return JSON.stringify(value);
  } catch {
    return value;
  }
}

const SIMPLE_FLAGS = {
  name: '--name',
  namespace: '--namespace',
  template: '--template',
  image: '--image',
  parallelism: '--parallelism',
  completions: '--completions',
  backoffLimit: '--backoff-limit',
  activeDeadlineSeconds: '--active-deadline-seconds',
  serviceAccountName: '--service-account',
  ttlSecondsAfterFinished: '--ttl-seconds-after-finished',
  queueName: '--queue',
  priority: '--priority',
};

/** The `jobgate submit` flags for one input field (the command goes after `--` instead). */
function cliFlags(key, value) {
  if (key in SIMPLE_FLAGS) return [flag(SIMPLE_FLAGS[key], value)];
  switch (key) {
    case 'args':
      return value.map((a) => flag('--arg', a));
    case 'env':
      return value.map((e) => flag('--env', `${e.name}=${e.value}`));
    case 'dependsOn':
      return value.map((id) => flag('--depends-on', id));
    case 'parameters':
      return Object.entries(value)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => flag('--param', `${k}=${paramValue(v)}`));
    case 'resources': {
      const out = [];
      for (const part of ['requests', 'limits']) {
        for (const resource of ['cpu', 'memory']) {
          const quantity = value[part]?.[resource];
          if (quantity != null) out.push(flag(`--${resource}-${part.replace(/s$/, '')}`, quantity));
        }
      }
      return out;
    }
    case 'retryPolicy':
      return [flag('--retry-policy', JSON.stringify(value))];
    default:
      return null;
  }
}

/** Lines longer than this are broken after each flag. */
const WIDTH = 80;

/** The shell command line that submits `input` (a SubmitJobInput) and prints the job's id. */
export function cliCall(input) {
  const parts = ['jobgate submit'];
  const unsupported = [];
  let command = null;
  for (const [key, value] of fields(input)) {
    if (key === 'command') {
      command = ['--', ...value.map(shellQuote)].join(' ');
      continue;
    }
    const flags = cliFlags(key, value);
    if (flags) parts.push(...flags);
    else unsupported.push(key);
  }
  if (command) parts.push(command);
  const oneLine = parts.join(' ');
  const text = oneLine.length <= WIDTH && !oneLine.includes('\n') ? oneLine : parts.join(' \\\n  ');
  const note = unsupported.length ? `\n# jobgate submit has no flag for: ${unsupported.join(', ')}` : '';
  return `${text}${note}`;
}
