//! Status rules: how a template maps its kind's status to jobgate's phase, conditions,
//! progress, result and message.
//!
//! Decoding is tolerant by construction: every lookup may find nothing, numbers may be
//! strings, lists may be maps. A status that no phase rule matches is *not understood*: the
//! phase stays as it was and a `StatusUnderstood=False` condition says what was seen. Nothing
//! here can panic on a malformed object.
//!
//! It owns the rule language and its evaluation; it must not do I/O.

use chrono::{DateTime, Utc};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

use crate::model::{Condition, JobPhase, MAX_RESULT_BYTES, MappedPhase, WorkloadStatus, clip};

/// The condition a decoded status carries when no phase rule matched it.
pub const STATUS_UNDERSTOOD: &str = "StatusUnderstood";

/// The `status:` section of a template.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusRules {
    /// Where the kind keeps Kubernetes-style conditions, copied into the job's; rules'
    /// `condition` tests read them. Default `status.conditions`.
    #[serde(default = "default_conditions")]
    pub conditions: String,
    /// Tried in order; the first that matches gives the phase.
    pub phase: Vec<PhaseRule>,
    #[serde(default)]
    pub progress: ProgressRules,
    #[serde(default)]
    pub start_time: Option<String>,
    #[serde(default)]
    pub completion_time: Option<String>,
    /// Where the result is: the first path with a value wins; text as is, anything else as
    /// JSON.
    #[serde(default)]
    pub result: Vec<String>,
}

fn default_conditions() -> String {
    "status.conditions".into()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PhaseRule {
    #[serde(deserialize_with = "phase_name")]
    pub phase: JobPhase,
    /// No `when` always matches (a last, catch-all rule).
    #[serde(default)]
    pub when: Option<When>,
    /// Default: the matched condition's reason, else the matched field's value.
    #[serde(default)]
    pub reason: Option<Text>,
    /// Default: the matched condition's message.
    #[serde(default)]
    pub message: Option<Text>,
}

fn phase_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<JobPhase, D::Error> {
    let s = String::deserialize(d)?;
    JobPhase::parse(&s).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "unknown phase {s:?}; one of PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED"
        ))
    })
}

/// A literal text, or `{from: path}`.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Text {
    Literal(String),
    From { from: String },
}

/// One string or several.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn contains(&self, s: &str) -> bool {
        match self {
            Self::One(one) => one == s,
            Self::Many(many) => many.iter().any(|m| m == s),
        }
    }
}

/// A test on the object; every test given must hold.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct When {
    /// A condition of one of these types is present, with `status` (default "True"; "*"
    /// for any) and, when given, one of `reason`.
    #[serde(default)]
    pub condition: Option<OneOrMany>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub reason: Option<OneOrMany>,
    /// The value at this path (absent reads as "")…
    #[serde(default)]
    pub field: Option<String>,
    /// …is one of these,
    #[serde(default, rename = "in")]
    pub in_: Option<Vec<String>>,
    /// …or is present (true) / absent (false).
    #[serde(default)]
    pub exists: Option<bool>,
    /// The sum of the numbers at this path…
    #[serde(default)]
    pub sum: Option<String>,
    /// …is greater than this.
    #[serde(default)]
    pub gt: Option<i64>,
    #[serde(default)]
    pub all: Option<Vec<When>>,
    #[serde(default)]
    pub any: Option<Vec<When>>,
    #[serde(default)]
    pub not: Option<Box<When>>,
}

/// How to count one progress figure: a constant, or a rule.
#[derive(Clone, Debug)]
pub enum Number {
    Constant(i64),
    Rule(Box<NumberRule>),
}

impl<'de> Deserialize<'de> for Number {
    // By hand rather than `untagged`, so that a wrong rule says what is wrong with it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Number(n) => n
                .as_i64()
                .map(Self::Constant)
                .ok_or_else(|| serde::de::Error::custom(format!("{n} is not a whole number"))),
            other => serde_json::from_value(other)
                .map(|r| Self::Rule(Box::new(r)))
                .map_err(serde::de::Error::custom),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NumberRule {
    /// The sum of the numbers (or numeric strings) at this path.
    #[serde(default)]
    pub sum: Option<String>,
    /// How many values are at this path (those in `in`, when given).
    #[serde(default)]
    pub count: Option<String>,
    #[serde(default, rename = "in")]
    pub in_: Option<Vec<String>>,
    /// The number captured by `pattern`'s first group in the first text at `of`.
    #[serde(default)]
    pub pattern: Option<Pattern>,
    #[serde(default)]
    pub of: Option<String>,
    #[serde(default)]
    pub plus: Vec<Number>,
    #[serde(default)]
    pub minus: Vec<Number>,
}

/// A regular expression, compiled when the template loads.
#[derive(Clone, Debug)]
pub struct Pattern(pub Regex);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let re = Regex::new(&s).map_err(serde::de::Error::custom)?;
        if re.captures_len() < 2 {
            return Err(serde::de::Error::custom(format!(
                "pattern {s:?} needs a capture group for the number"
            )));
        }
        Ok(Pattern(re))
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProgressRules {
    #[serde(default)]
    pub active: Option<Number>,
    #[serde(default)]
    pub ready: Option<Number>,
    #[serde(default)]
    pub succeeded: Option<Number>,
    #[serde(default)]
    pub failed: Option<Number>,
    /// Unknown (null) when absent or nothing counts.
    #[serde(default)]
    pub total: Option<Number>,
}

/// Every value at a dotted path; `*` stands for every item of a list or value of a map.
pub fn values<'a>(root: &'a Value, path: &str) -> Vec<&'a Value> {
    let mut current = vec![root];
    for key in path.split('.') {
        let mut next = Vec::new();
        for v in current {
            match (v, key) {
                (Value::Object(m), "*") => next.extend(m.values()),
                (Value::Array(items), "*") => next.extend(items),
                (Value::Object(m), _) => next.extend(m.get(key)),
                (Value::Array(items), _) => next.extend(key.parse::<usize>().ok().and_then(|i| items.get(i))),
                _ => {}
            }
        }
        current = next;
    }
    current.retain(|v| !v.is_null());
    current
}

fn first_text(root: &Value, path: &str) -> Option<String> {
    values(root, path).into_iter().find_map(text_of)
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn number_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn time_at(root: &Value, path: &str) -> Option<DateTime<Utc>> {
    let s = first_text(root, path)?;
    DateTime::parse_from_rfc3339(&s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

impl Number {
    fn eval(&self, obj: &Value) -> Option<i64> {
        match self {
            Self::Constant(n) => Some(*n),
            Self::Rule(rule) => rule.eval(obj),
        }
    }
}

impl NumberRule {
    fn eval(&self, obj: &Value) -> Option<i64> {
        let base = if let Some(path) = &self.sum {
            let found: Vec<i64> = values(obj, path).into_iter().filter_map(number_of).collect();
            (!found.is_empty()).then(|| found.iter().sum())
        } else if let Some(path) = &self.count {
            let found = values(obj, path);
            (!found.is_empty()).then(|| {
                found
                    .into_iter()
                    .filter(|v| match &self.in_ {
                        Some(set) => text_of(v).is_some_and(|t| set.contains(&t)),
                        None => true,
                    })
                    .count() as i64
            })
        } else if let (Some(Pattern(re)), Some(of)) = (&self.pattern, &self.of) {
            values(obj, of)
                .into_iter()
                .filter_map(text_of)
                .find_map(|t| re.captures(&t)?.get(1)?.as_str().parse().ok())
        } else {
            Some(0)
        }?;
        let plus: i64 = self.plus.iter().filter_map(|n| n.eval(obj)).sum();
        let minus: i64 = self.minus.iter().filter_map(|n| n.eval(obj)).sum();
        Some(base + plus - minus)
    }

    /// What makes this rule well-formed, for checks at load time.
    pub fn check(&self) -> Result<(), String> {
        let kinds = [self.sum.is_some(), self.count.is_some(), self.pattern.is_some()]
            .iter()
            .filter(|k| **k)
            .count();
        if kinds != 1 {
            return Err("a number needs exactly one of sum, count or pattern".into());
        }
        if self.pattern.is_some() != self.of.is_some() {
            return Err("pattern and of go together".into());
        }
        if self.in_.is_some() && self.count.is_none() {
            return Err("`in` applies to count only".into());
        }
        for n in self.plus.iter().chain(&self.minus) {
            if let Number::Rule(r) = n {
                r.check()?;
            }
        }
        Ok(())
    }
}

/// What a matching test saw, for the rule's default reason and message.
#[derive(Default)]
struct Seen<'a> {
    condition: Option<&'a Value>,
    field: Option<String>,
}

impl When {
    fn eval<'a>(&self, obj: &'a Value, conditions: &'a [Value]) -> Option<Seen<'a>> {
        let mut seen = Seen::default();
        if let Some(types) = &self.condition {
            let status = self.status.as_deref().unwrap_or("True");
            let found = conditions.iter().find(|c| {
                let text = |k: &str| c.get(k).and_then(Value::as_str);
                text("type").is_some_and(|t| types.contains(t))
                    && (status == "*" || text("status") == Some(status))
                    && self
                        .reason
                        .as_ref()
                        .is_none_or(|r| text("reason").is_some_and(|x| r.contains(x)))
            })?;
            seen.condition = Some(found);
        }
        if let Some(path) = &self.field {
            let found = values(obj, path);
            let value = found.iter().copied().find_map(text_of);
            if !found.is_empty() && value.is_none() {
                return None; // there, but not text: nothing a field test can vouch for
            }
            if let Some(set) = &self.in_ {
                let v = value.clone().unwrap_or_default();
                if !set.contains(&v) {
                    return None;
                }
            }
            if let Some(exists) = self.exists
                && exists != value.is_some()
            {
                return None;
            }
            seen.field = value.filter(|v| !v.is_empty());
        }
        if let Some(path) = &self.sum {
            let sum: i64 = values(obj, path).into_iter().filter_map(number_of).sum();
            if sum <= self.gt.unwrap_or(0) {
                return None;
            }
        }
        if let Some(all) = &self.all {
            for w in all {
                let s = w.eval(obj, conditions)?;
                seen.condition = seen.condition.or(s.condition);
                seen.field = seen.field.or(s.field);
            }
        }
        if let Some(any) = &self.any {
            let s = any.iter().find_map(|w| w.eval(obj, conditions))?;
            seen.condition = seen.condition.or(s.condition);
            seen.field = seen.field.or(s.field);
        }
        if let Some(not) = &self.not
            && not.eval(obj, conditions).is_some()
        {
            return None;
        }
        Some(seen)
    }

    /// What makes this test well-formed, for checks at load time.
    pub fn check(&self) -> Result<(), String> {
        let tests = [
            self.condition.is_some(),
            self.field.is_some(),
            self.sum.is_some(),
            self.all.is_some(),
            self.any.is_some(),
            self.not.is_some(),
        ];
        if !tests.contains(&true) {
            return Err("`when` needs a test: condition, field, sum, all, any or not".into());
        }
        if (self.status.is_some() || self.reason.is_some()) && self.condition.is_none() {
            return Err("status and reason refine a condition test".into());
        }
        if (self.in_.is_some() || self.exists.is_some()) && self.field.is_none() {
            return Err("`in` and `exists` refine a field test".into());
        }
        if self.field.is_some() && self.in_.is_none() && self.exists.is_none() {
            return Err("a field test needs `in` or `exists`".into());
        }
        if self.gt.is_some() && self.sum.is_none() {
            return Err("`gt` refines a sum test".into());
        }
        for w in self.all.iter().flatten().chain(self.any.iter().flatten()) {
            w.check()?;
        }
        if let Some(not) = &self.not {
            not.check()?;
        }
        Ok(())
    }
}

impl Text {
    fn eval(&self, obj: &Value) -> Option<String> {
        match self {
            Self::Literal(s) => Some(s.clone()),
            Self::From { from } => first_text(obj, from).filter(|s| !s.is_empty()),
        }
    }
}

fn condition_of(v: &Value) -> Option<Condition> {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(Condition {
        type_: text("type")?,
        status: text("status").unwrap_or_else(|| "Unknown".into()),
        reason: text("reason").filter(|s| !s.is_empty()),
        message: text("message").filter(|s| !s.is_empty()),
        last_transition_time: text("lastTransitionTime")
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
    })
}

/// The largest excerpt of a status quoted in a `StatusUnderstood` condition.
const QUOTED_STATUS_BYTES: usize = 512;

impl StatusRules {
    /// Checks what serde cannot: each test and number is well-formed.
    pub fn check(&self) -> Result<(), String> {
        if self.phase.is_empty() {
            return Err("status.phase needs at least one rule".into());
        }
        for (i, rule) in self.phase.iter().enumerate() {
            if let Some(w) = &rule.when {
                w.check().map_err(|e| format!("status.phase[{i}].when: {e}"))?;
            }
        }
        let p = &self.progress;
        for (name, n) in [
            ("active", &p.active),
            ("ready", &p.ready),
            ("succeeded", &p.succeeded),
            ("failed", &p.failed),
            ("total", &p.total),
        ] {
            if let Some(Number::Rule(r)) = n {
                r.check().map_err(|e| format!("status.progress.{name}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Decodes `obj` (the whole object: rules may read its spec too). `previous` is the phase
    /// last decoded for it, kept when this status is not understood.
    pub fn decode(&self, obj: &Value, previous: &MappedPhase) -> WorkloadStatus {
        let raw_conditions: Vec<Value> = values(obj, &self.conditions)
            .into_iter()
            .flat_map(|v| match v {
                Value::Array(items) => items.clone(),
                _ => Vec::new(),
            })
            .collect();
        let mut conditions: Vec<Condition> = raw_conditions.iter().filter_map(condition_of).collect();
        // An object or a status that is not a map is malformed, whatever the rules say.
        let well_formed = obj.is_object() && obj.get("status").is_none_or(|s| s.is_object() || s.is_null());
        let matched = self.phase.iter().filter(|_| well_formed).find_map(|rule| {
            let seen = match &rule.when {
                Some(w) => w.eval(obj, &raw_conditions)?,
                None => Seen::default(),
            };
            let from_condition = |k: &str| {
                seen.condition
                    .and_then(|c| c.get(k))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
            };
            Some(MappedPhase {
                phase: rule.phase,
                reason: match &rule.reason {
                    Some(t) => t.eval(obj),
                    None => from_condition("reason").or(seen.field.clone()),
                },
                message: match &rule.message {
                    Some(t) => t.eval(obj),
                    None => from_condition("message"),
                },
            })
        });
        let mapped = match matched {
            Some(m) => m,
            None => {
                let status = obj.get("status").map(Value::to_string).unwrap_or_default();
                let status = clip(status, QUOTED_STATUS_BYTES);
                conditions.push(Condition {
                    type_: STATUS_UNDERSTOOD.into(),
                    status: "False".into(),
                    reason: Some("UnknownStatus".into()),
                    message: Some(format!(
                        "no rule of the template matches this status, so the phase stays {}: {status}",
                        previous.phase
                    )),
                    last_transition_time: None,
                });
                previous.clone()
            }
        };
        let p = &self.progress;
        let count = |n: &Option<Number>| n.as_ref().and_then(|n| n.eval(obj)).unwrap_or(0).max(0) as i32;
        // A result is what a successful workload produced; a failed one's text is its message.
        let succeeded = mapped.phase == JobPhase::Succeeded;
        let result = self.result.iter().filter(|_| succeeded).find_map(|path| {
            let v = values(obj, path).into_iter().next()?;
            match v {
                Value::String(s) if s.is_empty() => None,
                Value::String(s) => Some(s.clone()),
                Value::Array(a) if a.is_empty() => None,
                other => Some(other.to_string()),
            }
        });
        WorkloadStatus {
            conditions,
            start_time: self.start_time.as_deref().and_then(|p| time_at(obj, p)),
            completion_time: self.completion_time.as_deref().and_then(|p| time_at(obj, p)),
            active: count(&p.active),
            ready: count(&p.ready),
            succeeded: count(&p.succeeded),
            failed: count(&p.failed),
            total: p
                .total
                .as_ref()
                .and_then(|n| n.eval(obj))
                .map(|t| t.clamp(0, i32::MAX as i64) as i32),
            result: result.map(|r| clip(r, MAX_RESULT_BYTES)),
            mapped: Some(mapped),
            ..WorkloadStatus::default()
        }
    }
}
