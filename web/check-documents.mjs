// Checks every GraphQL document the dashboard sends (src/documents.js) against the server's
// schema (../schema.graphql, which tests/schema.rs keeps equal to the server's): each must
// parse and validate.
// Prints one line per document; exits 1 on the first problem list.
//
//   node web/check-documents.mjs [schema.graphql]

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';
import { buildSchema, parse, validate } from 'graphql';

import * as documents from './src/documents.js';

const here = dirname(fileURLToPath(import.meta.url));
const schemaPath = process.argv[2] || join(here, '..', 'schema.graphql');
const schema = buildSchema(readFileSync(schemaPath, 'utf8'));

let problems = 0;
let checked = 0;
for (const [name, text] of Object.entries(documents)) {
  // Field lists (JOB_FIELDS…) are pieces of documents, checked inside them.
  if (!/^\s*(query|mutation|subscription)\b/.test(text)) continue;
  checked += 1;
  let errors;
  try {
    errors = validate(schema, parse(text));
  } catch (e) {
    errors = [e];
  }
  if (errors.length === 0) {
    console.log(`ok   ${name}`);
  } else {
    problems += errors.length;
    for (const e of errors) console.log(`FAIL ${name}: ${e.message}`);
  }
}
console.log(`${checked} documents checked against ${schemaPath}, ${problems} problems`);
if (checked === 0 || problems > 0) process.exit(1);
