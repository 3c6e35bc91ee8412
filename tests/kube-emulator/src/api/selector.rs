//! Label and field selectors as the real API server parses and applies them.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`,
//! comma = AND, whitespace allowed around tokens; `!=` and `notin` match objects without the key.
//! Field selectors: `=`, `==`, `!=` over the fields each kind supports (`metadata.name` and
//! `metadata.namespace` everywhere, a few more per kind); anything else is a `400`.
//!
//! Owns parsing and matching only; it must not read the store.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    NotEq,
    In,
    NotIn,
    Exists,
    NotExists,
    Gt,
    Lt,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed `labelSelector`. Empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Eq,
    DoubleEq,
    NotEq,
    Not,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')
}

fn tokenize(s: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '=' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::DoubleEq);
                i += 2;
            }
            '=' => {
                tokens.push(Token::Eq);
                i += 1;
            }
            '!' if chars.get(i + 1) == Some(&'=') => {
                tokens.push(Token::NotEq);
                i += 2;
            }
            '!' => {
                tokens.push(Token::Not);
                i += 1;
            }
            '>' => {
                tokens.push(Token::Gt);
                i += 1;
            }
            '<' => {
                tokens.push(Token::Lt);
                i += 1;
            }
            '(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                i += 1;
            }
            ',' => {
                tokens.push(Token::Comma);
                i += 1;
            }
            c if is_ident_char(c) => {
                let start = i;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                tokens.push(Token::Ident(chars[start..i].iter().collect()));
            }
            other => {
                return Err(format!(
                    "unable to parse requirement: found '{other}', expected: identifier"
                ));
            }
        }
    }
    Ok(tokens)
}

/// A label value: empty, or ≤ 63 chars of `[A-Za-z0-9_.-]` starting and ending alphanumeric.
pub fn valid_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && v.starts_with(|c: char| c.is_ascii_alphanumeric())
            && v.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a non-empty name like a value.
pub fn valid_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    let prefix_ok =
        prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && super::kinds::is_dns_subdomain(p));
    prefix_ok && !name.is_empty() && valid_label_value(name)
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let tokens = tokenize(s)?;
        let mut reqs = Vec::new();
        let mut i = 0;
        let expect_key = |t: Option<&Token>| -> Result<String, String> {
            match t {
                Some(Token::Ident(k)) if valid_label_key(k) => Ok(k.clone()),
                Some(Token::Ident(k)) => Err(format!("unable to parse requirement: invalid label key {k:?}")),
                other => Err(format!(
                    "unable to parse requirement: found {other:?}, expected: identifier"
                )),
            }
        };
        let check_value = |v: &str| -> Result<(), String> {
            if valid_label_value(v) {
                Ok(())
            } else {
                Err(format!(
                    "unable to parse requirement: invalid label value: {v:?}: must be no more than 63 characters and consist of alphanumerics, '-', '_' or '.'"
                ))
            }
        };
        while i < tokens.len() {
            if tokens[i] == Token::Not {
                let key = expect_key(tokens.get(i + 1))?;
                reqs.push(Requirement {
                    key,
                    op: Op::NotExists,
                    values: vec![],
                });
                i += 2;
            } else {
                let key = expect_key(tokens.get(i))?;
                i += 1;
                match tokens.get(i) {
                    None | Some(Token::Comma) => reqs.push(Requirement {
                        key,
                        op: Op::Exists,
                        values: vec![],
                    }),
                    Some(t @ (Token::Eq | Token::DoubleEq | Token::NotEq | Token::Gt | Token::Lt)) => {
                        let op = match t {
                            Token::NotEq => Op::NotEq,
                            Token::Gt => Op::Gt,
                            Token::Lt => Op::Lt,
                            _ => Op::Eq,
                        };
                        i += 1;
                        // An empty value (`k=`) is legal for equality.
                        let value = match tokens.get(i) {
                            Some(Token::Ident(v)) => {
                                i += 1;
                                v.clone()
                            }
                            None | Some(Token::Comma) if matches!(op, Op::Eq | Op::NotEq) => String::new(),
                            other => {
                                return Err(format!(
                                    "unable to parse requirement: found {other:?}, expected: identifier"
                                ));
                            }
                        };
                        if matches!(op, Op::Gt | Op::Lt) && value.parse::<i64>().is_err() {
                            return Err(format!(
                                "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer, got {value:?}"
                            ));
                        }
                        check_value(&value)?;
                        reqs.push(Requirement {
                            key,
                            op,
                            values: vec![value],
                        });
                    }
                    Some(Token::Ident(word)) if word == "in" || word == "notin" => {
                        let op = if word == "in" { Op::In } else { Op::NotIn };
                        i += 1;
                        if tokens.get(i) != Some(&Token::Open) {
                            return Err("unable to parse requirement: expected '(' after set operator".into());
                        }
                        i += 1;
                        let mut values = Vec::new();
                        loop {
                            match tokens.get(i) {
                                Some(Token::Ident(v)) => {
                                    check_value(v)?;
                                    values.push(v.clone());
                                    i += 1;
                                }
                                // `k in ()`-style empty members are empty strings.
                                Some(Token::Comma | Token::Close) => values.push(String::new()),
                                other => {
                                    return Err(format!(
                                        "unable to parse requirement: found {other:?}, expected: ',', ')' or identifier"
                                    ));
                                }
                            }
                            match tokens.get(i) {
                                Some(Token::Comma) => i += 1,
                                Some(Token::Close) => {
                                    i += 1;
                                    break;
                                }
                                other => {
                                    return Err(format!(
                                        "unable to parse requirement: found {other:?}, expected: ',' or ')'"
                                    ));
                                }
                            }
                        }
                        reqs.push(Requirement { key, op, values });
                    }
                    Some(other) => {
                        return Err(format!(
                            "unable to parse requirement: found {other:?}, expected: in, notin, =, ==, !=, gt, lt"
                        ));
                    }
                }
            }
            match tokens.get(i) {
                None => {}
                Some(Token::Comma) => {
                    i += 1;
                    if i == tokens.len() {
                        return Err("unable to parse requirement: found trailing ','".into());
                    }
                }
                Some(other) => {
                    return Err(format!(
                        "unable to parse requirement: found {other:?}, expected: ','"
                    ));
                }
            }
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether an object (with `metadata.labels`) matches.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels").and_then(Value::as_object);
        self.0.iter().all(|r| {
            let value = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match r.op {
                Op::Eq | Op::In => value.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEq | Op::NotIn => value.is_none_or(|v| r.values.iter().all(|x| x != v)),
                Op::Exists => value.is_some(),
                Op::NotExists => value.is_none(),
                Op::Gt | Op::Lt => {
                    let bound: Option<i64> = r.values.first().and_then(|v| v.parse().ok());
                    match (value.and_then(|v| v.parse::<i64>().ok()), bound) {
                        (Some(v), Some(b)) => (r.op == Op::Gt && v > b) || (r.op == Op::Lt && v < b),
                        _ => false,
                    }
                }
            }
        })
    }
}

/// A parsed `fieldSelector`. Empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The field paths a kind supports in field selectors, and where each lives in the object.
fn field_path(resource: &str, field: &str) -> Option<&'static str> {
    let common = match field {
        "metadata.name" => Some("/metadata/name"),
        "metadata.namespace" => Some("/metadata/namespace"),
        _ => None,
    };
    common.or(match (resource, field) {
        ("pods", "spec.nodeName") => Some("/spec/nodeName"),
        ("pods", "spec.restartPolicy") => Some("/spec/restartPolicy"),
        ("pods", "spec.schedulerName") => Some("/spec/schedulerName"),
        ("pods", "spec.serviceAccountName") => Some("/spec/serviceAccountName"),
        ("pods", "status.phase") => Some("/status/phase"),
        ("pods", "status.podIP") => Some("/status/podIP"),
        ("pods", "status.nominatedNodeName") => Some("/status/nominatedNodeName"),
        ("jobs.batch", "status.successful") => Some("/status/succeeded"),
        ("namespaces", "status.phase") => Some("/status/phase"),
        ("events", "involvedObject.kind") => Some("/involvedObject/kind"),
        ("events", "involvedObject.namespace") => Some("/involvedObject/namespace"),
        ("events", "involvedObject.name") => Some("/involvedObject/name"),
        ("events", "involvedObject.uid") => Some("/involvedObject/uid"),
        ("events", "involvedObject.apiVersion") => Some("/involvedObject/apiVersion"),
        ("events", "involvedObject.resourceVersion") => Some("/involvedObject/resourceVersion"),
        ("events", "involvedObject.fieldPath") => Some("/involvedObject/fieldPath"),
        ("events", "reason") => Some("/reason"),
        ("events", "reportingComponent") => Some("/reportingComponent"),
        ("events", "source") => Some("/source/component"),
        ("events", "type") => Some("/type"),
        _ => None,
    })
}

impl FieldSelector {
    /// Parses a selector for objects stored under `storage_key` (`"pods"`, `"jobs.batch"`, …).
    pub fn parse(s: &str, storage_key: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, negate, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, false, v)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{term}'"));
            };
            let field = field.trim();
            if field_path(storage_key, field).is_none() {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_owned(), negate, value.trim().to_owned()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a stored object of kind `storage_key` matches (absent fields read as `""`, Job
    /// `status.successful` as `"0"`).
    pub fn matches(&self, storage_key: &str, object: &Value) -> bool {
        self.0.iter().all(|(field, negate, want)| {
            let actual = field_path(storage_key, field).and_then(|p| object.pointer(p));
            let actual = match actual {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None if field == "status.successful" => "0".to_owned(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *want) != *negate
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {}, "status": {"succeeded": 2}})
    }

    fn m(sel: &str, labels: Value) -> bool {
        LabelSelector::parse(sel).expect(sel).matches(&obj(labels))
    }

    #[test]
    fn label_operators() {
        let l = json!({"env": "dev", "tier": "web", "n": "5"});
        assert!(m("", l.clone()));
        assert!(m("env=dev", l.clone()));
        assert!(m("env==dev,tier=web", l.clone()));
        assert!(!m("env=prod", l.clone()));
        assert!(m("env!=prod", l.clone()));
        assert!(m("missing!=x", l.clone()), "!= matches a missing key");
        assert!(m("env in (dev, prod)", l.clone()));
        assert!(!m("env in (a,b),tier", l.clone()));
        assert!(m("env notin (prod)", l.clone()));
        assert!(m("missing notin (prod)", l.clone()));
        assert!(m("env", l.clone()));
        assert!(m("!missing", l.clone()));
        assert!(!m("!env", l.clone()));
        assert!(m("n>4,n<6", l.clone()));
        assert!(!m("n>5", l.clone()));
        assert!(m(" env = dev , app.kubernetes.io/managed-by!=x ", l.clone()));
        assert!(m("env in (dev)", l));
    }

    #[test]
    fn label_syntax_errors() {
        for bad in [
            "env=dev,",
            "=x",
            "env in dev",
            "env in (a",
            "env==",
            "a b",
            "env=x y",
            "n>x",
            "env=(x)",
            "-x=1",
        ] {
            if bad == "env==" {
                // `env==` is an equality with an empty value, which is legal.
                assert!(LabelSelector::parse(bad).is_ok());
                continue;
            }
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = obj(json!({}));
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=x", "jobs.batch").expect("parse");
        assert!(f.matches("jobs.batch", &o));
        assert!(
            FieldSelector::parse("status.successful=2", "jobs.batch")
                .expect("p")
                .matches("jobs.batch", &o)
        );
        assert!(
            !FieldSelector::parse("metadata.name==b", "pods")
                .expect("p")
                .matches("pods", &o)
        );
        assert!(FieldSelector::parse("spec.foo=1", "jobs.batch").is_err());
        assert!(FieldSelector::parse("status.phase=Running", "jobs.batch").is_err());
        assert!(FieldSelector::parse("status.phase=Running", "pods").is_ok());
        assert!(FieldSelector::parse("nonsense", "pods").is_err());
    }
}
