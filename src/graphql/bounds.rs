//! The size bounds of a request's document text and of its variables, checked before
//! anything parses or converts them.
//!
//! async-graphql's parser (pest, with a recursive `parse_value`) recurses once per level of
//! `{`, `[` and `(`, and allocates a node for every name and value, before any limit of
//! `limits` can look at the parsed document: a few KB of nested list brackets overflow a
//! thread's stack (which aborts the process), and a 1 MiB list of `{}` costs hundreds of MB.
//! Converting variables from JSON into async-graphql values copies each of them, recursively.
//! So this module owns:
//!
//! - [`check_document`]: one linear pass over the text, with GraphQL's lexical grammar
//!   (strings, block strings, escapes and comments are skipped, so brackets inside them do not
//!   count), that bounds nesting, the items of any one list and the nodes the document makes.
//! - [`parse`]: the only way jobgate parses a request's document (`Request::parsed_query`
//!   after [`check_document`]). The transports call it through `operation`, and the
//!   `ShapeLimit` extension's `prepare_request` calls it for every request the schema runs,
//!   whoever built it, so async-graphql never parses a document itself.
//! - [`check_variables`]: the same bounds on a request's `variables` and `extensions` as
//!   `serde_json` values, walked iteratively, before `serde_json::from_value::<Request>`.
//!
//! The bounds are fixed: they follow from the schema (its longest legitimate lists, `command`,
//! `args` and `env`, take 1,024 items; `submitJobs` 1,000 inputs) and from async-graphql's own
//! recursion limit of 64 selection levels, not from a deployment. Every refusal is an
//! uncoded `ServerError`, which the transports code `BAD_USER_INPUT`.
//!
//! It must not recurse, allocate per item, or interpret a document beyond its tokens.

use async_graphql::parser::types::ExecutableDocument;
use async_graphql::{Pos, Request, ServerError};
use serde_json::Value;

/// Deepest nesting of `{`, `[` and `(` in a document, and of arrays and objects in variables.
pub const MAX_NESTING: usize = 64;
/// Most items of any one list, in a document or in variables.
pub const MAX_LIST_ITEMS: usize = 1_024;
/// Most nodes a document may make (names, numbers, strings, lists, objects and selection
/// sets), and most values the variables may hold (objects' keys included).
pub const MAX_NODES: usize = 100_000;

/// Parses the request's document (cached in the request) once [`check_document`] let it
/// through.
pub fn parse(request: &mut Request) -> Result<&ExecutableDocument, ServerError> {
    check_document(&request.query)?;
    request.parsed_query()
}

/// What an open bracket is, and how many items its list holds so far.
#[derive(Clone, Copy)]
struct Open {
    list: bool,
    items: usize,
}

/// Checks `query`'s text against the bounds, in one pass and with memory bounded by
/// [`MAX_NESTING`]. Text the parser will refuse (a stray character, an unclosed string) is
/// passed over: the bounds only have to hold for what the parser would read.
pub fn check_document(query: &str) -> Result<(), ServerError> {
    let bytes = query.as_bytes();
    let mut open: Vec<Open> = Vec::with_capacity(MAX_NESTING);
    let mut nodes = 0usize;
    let mut at = Cursor::default();
    while at.offset < bytes.len() {
        let b = bytes[at.offset];
        // Every token but punctuation is a node, and an item of the list it is in.
        let node = match b {
            b'\n' | b'\r' => {
                at.newline(bytes);
                continue;
            }
            b'#' => {
                while at.offset < bytes.len() && !matches!(bytes[at.offset], b'\n' | b'\r') {
                    at.step(1);
                }
                continue;
            }
            b'"' => {
                let start = at;
                if bytes[at.offset..].starts_with(b"\"\"\"") {
                    at.step(3);
                    skip_block_string(bytes, &mut at);
                } else {
                    at.step(1);
                    skip_string(bytes, &mut at);
                }
                Some(start)
            }
            b'{' | b'[' | b'(' => {
                let start = at;
                at.step(1);
                if open.len() == MAX_NESTING {
                    return Err(refuse(
                        format!(
                            "the query nests `{{`, `[` and `(` more than {MAX_NESTING} levels deep; at most {MAX_NESTING} are allowed"
                        ),
                        start,
                    ));
                }
                // A list or an object is an item of the list it is in (a `(` there is a syntax
                // error, counted all the same).
                if let Some(list) = open.last_mut().filter(|o| o.list) {
                    list.items += 1;
                    if list.items > MAX_LIST_ITEMS {
                        return Err(too_many_items(start));
                    }
                }
                open.push(Open {
                    list: b == b'[',
                    items: 0,
                });
                // Arguments make no node of their own; lists, objects and selection sets do.
                if b != b'(' {
                    nodes += 1;
                    if nodes > MAX_NODES {
                        return Err(too_many_nodes(start));
                    }
                }
                continue;
            }
            b'}' | b']' | b')' => {
                // A mismatched closer is a syntax error: the parser stops there, so what
                // follows it cannot reach any deeper than what was already counted.
                open.pop();
                at.step(1);
                None
            }
            _ if is_word(b) => {
                let start = at;
                skip_word(bytes, &mut at);
                Some(start)
            }
            _ => {
                // Spaces, commas, `:`, `$`, `!`, `@`, `=`, `|`, `&`, and anything the parser
                // refuses. A multi-byte character is stepped over one column.
                at.step_char(bytes);
                None
            }
        };
        if let Some(start) = node {
            nodes += 1;
            if nodes > MAX_NODES {
                return Err(too_many_nodes(start));
            }
            if let Some(list) = open.last_mut().filter(|o| o.list) {
                list.items += 1;
                if list.items > MAX_LIST_ITEMS {
                    return Err(too_many_items(start));
                }
            }
        }
    }
    Ok(())
}

/// Where a name or a number may start (and the dots of a spread).
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'+')
}

/// Past one name, or one number's sign or point and the digits after it (with at most one
/// exponent mark). It stops wherever the parser could start another token, so no text counts
/// fewer nodes here than the parser makes of it (a float or a spread counts a few more): the
/// parser reads `-1-1` as two numbers, `00` as two zeros, and `truenull` as a boolean and a
/// null (its `true`, `false` and `null` do not look at what follows them).
fn skip_word(bytes: &[u8], at: &mut Cursor) {
    let rest = &bytes[at.offset..];
    if let Some(keyword) = [&b"true"[..], b"false", b"null"]
        .into_iter()
        .find(|k| rest.starts_with(k))
    {
        at.step(keyword.len());
        return;
    }
    let first = rest[0];
    at.step(1);
    if first.is_ascii_alphabetic() || first == b'_' {
        while at.offset < bytes.len()
            && (bytes[at.offset].is_ascii_alphanumeric() || bytes[at.offset] == b'_')
        {
            at.step(1);
        }
        return;
    }
    // An integer part that starts with 0 is that 0 alone.
    let leading_zero = |at: &Cursor| bytes.get(at.offset) == Some(&b'0');
    if first == b'0' || (first == b'-' && leading_zero(at)) {
        if first == b'-' {
            at.step(1);
        }
        return;
    }
    let mut exponent = false;
    while at.offset < bytes.len() {
        match bytes[at.offset] {
            b'0'..=b'9' => at.step(1),
            b'e' | b'E' if !exponent => {
                exponent = true;
                at.step(1);
            }
            _ => return,
        }
    }
}

/// After the opening `"`: up to and past the closing one. A line break ends the string (the
/// parser refuses it there, so nothing after it counts less than it would here).
fn skip_string(bytes: &[u8], at: &mut Cursor) {
    while at.offset < bytes.len() {
        match bytes[at.offset] {
            b'"' => {
                at.step(1);
                return;
            }
            b'\\' => {
                at.step(1);
                if at.offset < bytes.len() && !matches!(bytes[at.offset], b'\n' | b'\r') {
                    at.step_char(bytes);
                }
            }
            b'\n' | b'\r' => return,
            _ => at.step_char(bytes),
        }
    }
}

/// After the opening `"""`: up to and past the closing `"""`; `\"""` is an escaped quote.
fn skip_block_string(bytes: &[u8], at: &mut Cursor) {
    while at.offset < bytes.len() {
        let rest = &bytes[at.offset..];
        if rest.starts_with(b"\\\"\"\"") {
            at.step(4);
        } else if rest.starts_with(b"\"\"\"") {
            at.step(3);
            return;
        } else if matches!(rest[0], b'\n' | b'\r') {
            at.newline(bytes);
        } else {
            at.step_char(bytes);
        }
    }
}

/// A position in the text, for the refusal's location.
#[derive(Clone, Copy)]
struct Cursor {
    offset: usize,
    line: usize,
    column: usize,
}

impl Default for Cursor {
    fn default() -> Self {
        Self {
            offset: 0,
            line: 1,
            column: 1,
        }
    }
}

impl Cursor {
    fn step(&mut self, n: usize) {
        self.offset += n;
        self.column += n;
    }

    /// Past one character, however many bytes it takes.
    fn step_char(&mut self, bytes: &[u8]) {
        self.offset += 1;
        while self.offset < bytes.len() && bytes[self.offset] & 0xC0 == 0x80 {
            self.offset += 1;
        }
        self.column += 1;
    }

    /// Past a line terminator (`\r\n` is one).
    fn newline(&mut self, bytes: &[u8]) {
        if bytes[self.offset..].starts_with(b"\r\n") {
            self.offset += 1;
        }
        self.offset += 1;
        self.line += 1;
        self.column = 1;
    }

    fn pos(self) -> Pos {
        Pos {
            line: self.line,
            column: self.column,
        }
    }
}

fn refuse(message: String, at: Cursor) -> ServerError {
    ServerError::new(message, Some(at.pos()))
}

fn too_many_items(at: Cursor) -> ServerError {
    refuse(
        format!(
            "a list in the query has more than {MAX_LIST_ITEMS} items; at most {MAX_LIST_ITEMS} are allowed"
        ),
        at,
    )
}

fn too_many_nodes(at: Cursor) -> ServerError {
    refuse(
        format!(
            "the query is made of more than {MAX_NODES} names, values and selection sets; at most {MAX_NODES} are allowed"
        ),
        at,
    )
}

/// Checks a request's `variables` and `extensions` (each a JSON value, named by `what` in
/// refusals) against the bounds, iteratively: the nesting of arrays and objects in each, the
/// items of each array, and the values of all together (an object's keys count one each, as
/// their names are allocated too).
pub fn check_variables<'v>(
    values: impl IntoIterator<Item = (&'static str, &'v Value)>,
) -> Result<(), ServerError> {
    let mut total = 0usize;
    // Values still to look at, with their depth (0 for `variables` itself). Everything pushed
    // was counted first, so the stack never holds more than MAX_NODES entries.
    let mut pending: Vec<(&Value, usize)> = Vec::new();
    for (what, value) in values {
        total += 1;
        pending.push((value, 0));
        while let Some((value, depth)) = pending.pop() {
            let children = match value {
                Value::Array(items) => items.len(),
                Value::Object(map) => 2 * map.len(),
                _ => continue,
            };
            if depth >= MAX_NESTING {
                return Err(ServerError::new(
                    format!(
                        "the request's {what} nest lists and objects more than {MAX_NESTING} levels deep; at most {MAX_NESTING} are allowed"
                    ),
                    None,
                ));
            }
            if let Value::Array(items) = value
                && items.len() > MAX_LIST_ITEMS
            {
                return Err(ServerError::new(
                    format!(
                        "a list in the request's {what} has {} items; at most {MAX_LIST_ITEMS} are allowed",
                        items.len()
                    ),
                    None,
                ));
            }
            total += children;
            if total > MAX_NODES {
                return Err(ServerError::new(
                    format!(
                        "the request's {what} hold more than {MAX_NODES} values (keys included); at most {MAX_NODES} are allowed"
                    ),
                    None,
                ));
            }
            match value {
                Value::Array(items) => pending.extend(items.iter().map(|v| (v, depth + 1))),
                Value::Object(map) => pending.extend(map.values().map(|v| (v, depth + 1))),
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
