//! Rendering a template's manifest: `${path}` expressions replaced by values of the job.
//!
//! The substitution is structural, never textual: a string that is exactly `${path}` becomes
//! the value itself (a list, an object, a number), so a job's input can never inject YAML or
//! JSON into the object; a value that is null or absent removes its key (or list item), so
//! optional fields simply disappear. A string with text around expressions interpolates
//! scalars, and goes as a whole when one of them is absent. `${path | string}` asks for the
//! value as text (a ConfigMap's data, an annotation). `$${` writes a literal `${`.
//!
//! It owns the expression syntax and its checks at load time; it must not know what the
//! values mean.

use serde_json::{Map, Value};

/// Where an expression is wrong: the manifest path and the problem.
#[derive(Debug, thiserror::Error)]
#[error("manifest {at}: {problem}")]
pub struct ExpressionError {
    pub at: String,
    pub problem: String,
}

/// One piece of a string: literal text or an expression's path.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Text(String),
    Path(&'a str),
}

/// Splits `s` into text and `${...}` expressions.
fn pieces(s: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(tail) = after.strip_prefix("$${") {
            text.push_str("${");
            rest = tail;
        } else if let Some(tail) = after.strip_prefix("${") {
            let end = tail
                .find('}')
                .ok_or_else(|| format!("unclosed expression in {s:?}"))?;
            let path = tail[..end].trim();
            if path.is_empty() {
                return Err(format!("empty expression in {s:?}"));
            }
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Path(path));
            rest = &tail[end + 1..];
        } else {
            text.push('$');
            rest = &after[1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// The value at a dotted `path` of `context`; `None` when absent.
fn lookup<'a>(context: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(context, |v, key| match v {
        Value::Object(m) => m.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    })
}

/// An expression's path and whether it asks for text (`${path | string}`).
pub fn split_filter(expression: &str) -> Result<(&str, bool), String> {
    match expression.split_once('|') {
        None => Ok((expression.trim(), false)),
        Some((path, filter)) if filter.trim() == "string" => Ok((path.trim(), true)),
        Some((_, filter)) => Err(format!(
            "unknown filter {:?}; the one filter is `string`",
            filter.trim()
        )),
    }
}

/// The value of an expression: its path's value, as text with `| string`.
fn evaluate(context: &Value, expression: &str) -> Option<Value> {
    let (path, as_text) = split_filter(expression).ok()?;
    let value = lookup(context, path).filter(|v| !v.is_null())?;
    Some(match value {
        Value::String(_) => value.clone(),
        other if as_text => Value::String(other.to_string()),
        other => other.clone(),
    })
}

/// Every expression path in `manifest`, with where it is, for checks at load time.
pub fn expressions(manifest: &Value) -> Result<Vec<(String, String)>, ExpressionError> {
    fn walk(v: &Value, at: &str, out: &mut Vec<(String, String)>) -> Result<(), ExpressionError> {
        match v {
            Value::String(s) => {
                let parts = pieces(s).map_err(|problem| ExpressionError {
                    at: at.to_owned(),
                    problem,
                })?;
                for p in parts {
                    if let Piece::Path(expression) = p {
                        let (path, _) = split_filter(expression).map_err(|problem| ExpressionError {
                            at: at.to_owned(),
                            problem,
                        })?;
                        out.push((at.to_owned(), path.to_owned()));
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{at}[{i}]"), out)?;
                }
            }
            Value::Object(m) => {
                for (k, item) in m {
                    let at = if at.is_empty() {
                        k.clone()
                    } else {
                        format!("{at}.{k}")
                    };
                    walk(item, &at, out)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(manifest, "", &mut out)?;
    Ok(out)
}

/// `template` with every expression replaced by its value in `context`; `None` when the
/// whole value is an expression whose value is null or absent (its key is then dropped).
pub fn render(template: &Value, context: &Value) -> Option<Value> {
    match template {
        Value::String(s) => render_string(s, context),
        Value::Array(items) => Some(Value::Array(
            items.iter().filter_map(|item| render(item, context)).collect(),
        )),
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                if let Some(v) = render(v, context) {
                    out.insert(k.clone(), v);
                }
            }
            Some(Value::Object(out))
        }
        other => Some(other.clone()),
    }
}

fn render_string(s: &str, context: &Value) -> Option<Value> {
    // Checked at load time; a string that no longer parses stays as written.
    let Ok(parts) = pieces(s) else {
        return Some(Value::String(s.to_owned()));
    };
    if let [Piece::Path(expression)] = parts.as_slice() {
        return evaluate(context, expression);
    }
    // Text around an absent value would be half a value (`"s"` for `"${deadline}s"`): the
    // whole value goes, as a lone absent expression does.
    let mut out = String::new();
    for p in parts {
        match p {
            Piece::Text(t) => out.push_str(&t),
            Piece::Path(expression) => match evaluate(context, expression)? {
                Value::String(v) => out.push_str(&v),
                other => out.push_str(&other.to_string()),
            },
        }
    }
    Some(Value::String(out))
}

/// `words` as one POSIX shell command line (for kinds that take a command as a string, such
/// as a RayJob's entrypoint): each word quoted when it needs to be.
pub fn shell_join<'a>(words: impl IntoIterator<Item = &'a String>) -> String {
    let quote = |w: &str| {
        let plain = !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
        if plain {
            w.to_owned()
        } else {
            format!("'{}'", w.replace('\'', r"'\''"))
        }
    };
    words.into_iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn whole_expressions_keep_their_type_and_null_removes_the_key() {
        let context = json!({"job": {"command": ["sh", "-c", "echo hi"], "deadline": null, "n": 3}});
        let template = json!({
            "command": "${job.command}",
            "deadline": "${job.deadline}",
            "missing": "${job.nothing}",
            "replicas": "${ job.n }",
            "list": ["a", "${job.deadline}", "${job.n}"],
        });
        assert_eq!(
            render(&template, &context).unwrap(),
            json!({"command": ["sh", "-c", "echo hi"], "replicas": 3, "list": ["a", 3]})
        );
    }

    #[test]
    fn text_around_expressions_interpolates_and_escapes() {
        let context = json!({"workload": {"name": "jobgate-1"}, "n": 2, "none": null});
        let template = json!("svc-${workload.name}:${n} costs $5 and $${literal}");
        assert_eq!(
            render(&template, &context).unwrap(),
            json!("svc-jobgate-1:2 costs $5 and ${literal}")
        );
        let partial = json!({"timeout": "${none}s", "kept": "${n}s"});
        assert_eq!(render(&partial, &context).unwrap(), json!({"kept": "2s"}));
        let text = json!({"n": "${n | string}", "s": "${workload.name|string}", "none": "${none | string}"});
        assert_eq!(
            render(&text, &context).unwrap(),
            json!({"n": "2", "s": "jobgate-1"})
        );
        assert!(
            expressions(&json!("${n | upper}"))
                .unwrap_err()
                .problem
                .contains("unknown filter")
        );
    }

    #[test]
    fn a_value_with_expression_syntax_is_not_evaluated_again() {
        // A job's input that looks like an expression stays text: no second pass.
        let context = json!({"job": {"name": "${job.secret}", "secret": "s3cr3t"}});
        assert_eq!(
            render(&json!("${job.name}"), &context).unwrap(),
            json!("${job.secret}")
        );
    }

    #[test]
    fn malformed_expressions_are_reported_with_their_place() {
        let e = expressions(&json!({"spec": {"a": ["${job.x"]}})).unwrap_err();
        assert_eq!(e.at, "spec.a[0]");
        assert!(e.problem.contains("unclosed"), "{e}");
        let found = expressions(&json!({"spec": {"a": "${job.x} and ${params.y}"}})).unwrap();
        assert_eq!(
            found,
            vec![
                ("spec.a".to_owned(), "job.x".to_owned()),
                ("spec.a".to_owned(), "params.y".to_owned())
            ]
        );
    }

    #[test]
    fn shell_join_quotes_what_a_shell_would_split() {
        let words: Vec<String> = ["python", "-c", "print('hi there')", "a=b"]
            .map(String::from)
            .to_vec();
        assert_eq!(shell_join(&words), r#"python -c 'print('\''hi there'\'')' a=b"#);
    }
}
