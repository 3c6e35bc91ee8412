//! The one bound on client-supplied JSON that jobgate stores (a job's `parameters`), checked
//! where the value enters and kept below what every reader of a stored job accepts.
//!
//! A job is stored as JSON text and read back with serde_json, whose parser refuses input
//! nested deeper than 128 levels; the job's own structure wraps `parameters` in a few levels
//! more ([`JOB_NESTING`]). A value accepted here therefore always reads back, after a restart
//! too, and through every other reader (the GraphQL `JSON` scalar, template rendering, JSON
//! Schema validation), each of which recurses once per level. The walk is iterative, so a
//! value of any depth is measured without recursion, and it stops at the first bound crossed.
//!
//! This module does no I/O and decides nothing but whether a value fits.

use serde_json::Value;

/// How deep a stored client value may nest: an object or array is one level, a scalar none.
pub const MAX_JSON_DEPTH: usize = 32;
/// The most bytes the value may take as compact JSON text.
pub const MAX_JSON_BYTES: usize = 64 * 1024;
/// The most members one object, or items one array, may have.
pub const MAX_JSON_MEMBERS: usize = 1024;
/// The longest object key, in bytes.
pub const MAX_JSON_KEY_BYTES: usize = 256;

/// The levels a stored job adds around its `parameters` (the job, its spec, and margin for
/// the event that embeds a job). serde_json reads at most 128 levels.
pub const JOB_NESTING: usize = 8;
const _: () = assert!(MAX_JSON_DEPTH + JOB_NESTING < 128);

/// Why a value does not fit, with the path of the first place it crossed a bound
/// (`a.b[3]`, relative to the value).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JsonBoundError {
    #[error("nests deeper than {MAX_JSON_DEPTH} levels (at {path})")]
    TooDeep { path: String },
    #[error("is larger than {MAX_JSON_BYTES} bytes as JSON")]
    TooLarge,
    #[error("has more than {MAX_JSON_MEMBERS} members in one object or array (at {path})")]
    TooManyMembers { path: String },
    #[error("has a key longer than {MAX_JSON_KEY_BYTES} bytes (at {path})")]
    KeyTooLong { path: String },
}

/// A step from a value to one of its children, for naming where a bound was crossed.
#[derive(Clone)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn path_of(steps: &[Step<'_>]) -> String {
    let mut path = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !path.is_empty() {
                    path.push('.');
                }
                // Keys are bounded, so a path is too (depth × key length).
                path.push_str(k);
            }
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    if path.is_empty() {
        "the top".to_owned()
    } else {
        path
    }
}

/// Checks `value` against every bound: depth, members per container, key length and size.
pub fn check_json(value: &Value) -> Result<(), JsonBoundError> {
    measure(value).map(|_| ())
}

/// The value's size as compact JSON text, once it is known to fit every bound.
fn measure(value: &Value) -> Result<usize, JsonBoundError> {
    // Depth-first with an explicit stack of (value, its depth, the path to it); the stack
    // holds at most MAX_JSON_DEPTH levels of MAX_JSON_MEMBERS siblings.
    let mut stack: Vec<(&Value, usize, Vec<Step<'_>>)> = vec![(value, 0, Vec::new())];
    // Compact JSON size, counted as the walk goes so that a large value stops early.
    let mut bytes: usize = 0;
    while let Some((value, depth, path)) = stack.pop() {
        bytes = bytes.saturating_add(scalar_bytes(value));
        match value {
            Value::Object(map) => {
                if depth + 1 > MAX_JSON_DEPTH {
                    return Err(JsonBoundError::TooDeep { path: path_of(&path) });
                }
                if map.len() > MAX_JSON_MEMBERS {
                    return Err(JsonBoundError::TooManyMembers { path: path_of(&path) });
                }
                // Braces, commas, colons and the quoted keys.
                bytes = bytes.saturating_add(2 + map.len().saturating_sub(1));
                for (key, child) in map {
                    if key.len() > MAX_JSON_KEY_BYTES {
                        return Err(JsonBoundError::KeyTooLong { path: path_of(&path) });
                    }
                    bytes = bytes.saturating_add(string_bytes(key) + 1);
                    let mut child_path = path.clone();
                    child_path.push(Step::Key(key));
                    stack.push((child, depth + 1, child_path));
                }
            }
            Value::Array(items) => {
                if depth + 1 > MAX_JSON_DEPTH {
                    return Err(JsonBoundError::TooDeep { path: path_of(&path) });
                }
                if items.len() > MAX_JSON_MEMBERS {
                    return Err(JsonBoundError::TooManyMembers { path: path_of(&path) });
                }
                bytes = bytes.saturating_add(2 + items.len().saturating_sub(1));
                for (i, child) in items.iter().enumerate() {
                    let mut child_path = path.clone();
                    child_path.push(Step::Index(i));
                    stack.push((child, depth + 1, child_path));
                }
            }
            _ => {}
        }
        if bytes > MAX_JSON_BYTES {
            return Err(JsonBoundError::TooLarge);
        }
    }
    Ok(bytes)
}

/// The bytes a scalar takes as compact JSON (containers count their punctuation apart).
fn scalar_bytes(value: &Value) -> usize {
    match value {
        Value::Null => 4,
        Value::Bool(b) => 4 + usize::from(!b),
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => string_bytes(s),
        Value::Object(_) | Value::Array(_) => 0,
    }
}

/// A string's bytes as serde_json writes it: quotes, and escapes for quotes, backslashes and
/// control characters.
fn string_bytes(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    }

    #[test]
    fn depth_is_bounded_exactly() {
        assert_eq!(check_json(&nested(MAX_JSON_DEPTH)), Ok(()));
        let too_deep = check_json(&nested(MAX_JSON_DEPTH + 1)).unwrap_err();
        assert!(matches!(too_deep, JsonBoundError::TooDeep { .. }), "{too_deep}");
        assert!(too_deep.to_string().contains("a.a.a"), "{too_deep}");
        // Arrays count like objects.
        let mut v = json!([]);
        for _ in 0..MAX_JSON_DEPTH {
            v = json!([v]);
        }
        assert!(matches!(check_json(&v), Err(JsonBoundError::TooDeep { .. })));
    }

    #[test]
    fn a_value_far_deeper_than_any_parser_allows_is_measured_without_recursion() {
        // 10,000 levels overflow a recursive walk on this small stack; the value is built and
        // taken apart iteratively too.
        let handle = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(|| {
                let mut v = json!(1);
                for _ in 0..10_000 {
                    // Not `json!([v])`, which serialises `v` again, recursively.
                    v = Value::Array(vec![v]);
                }
                let verdict = check_json(&v);
                // Take it apart from the top, so that dropping recurses no more than once.
                let mut rest = v;
                while let Value::Array(mut items) = rest {
                    rest = items.pop().unwrap_or(Value::Null);
                }
                verdict
            })
            .unwrap();
        assert!(matches!(
            handle.join().unwrap(),
            Err(JsonBoundError::TooDeep { .. })
        ));
    }

    #[test]
    fn members_keys_and_size_are_bounded() {
        let wide: Vec<Value> = (0..=MAX_JSON_MEMBERS).map(|_| json!(0)).collect();
        assert!(matches!(
            check_json(&json!({ "x": wide })),
            Err(JsonBoundError::TooManyMembers { path }) if path == "x"
        ));
        let key = "k".repeat(MAX_JSON_KEY_BYTES + 1);
        assert!(matches!(
            check_json(&json!({ key: 1 })),
            Err(JsonBoundError::KeyTooLong { .. })
        ));
        let big = "x".repeat(MAX_JSON_BYTES);
        assert_eq!(check_json(&json!({ "s": big })), Err(JsonBoundError::TooLarge));
    }

    #[test]
    fn the_counted_size_is_the_compact_text_size() {
        for value in [
            json!({}),
            json!([]),
            json!(null),
            json!({"a": [1, 2.5, -3, 1e300, true, false, null, "q\"\\\n\u{1}\u{8}\u{c}\té"], "b": {"c": {}}}),
            json!([[], {}, "", 0, u64::MAX, i64::MIN]),
        ] {
            let text = serde_json::to_string(&value).unwrap();
            assert_eq!(measure(&value), Ok(text.len()), "{text}");
        }
    }
}
