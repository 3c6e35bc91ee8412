//! Which operation a GraphQL request will run, and whether it failed before execution.
//!
//! This module owns two things that both transports (HTTP in `http`, WebSocket in `ws`) need
//! and that async-graphql does not expose:
//!
//! - [`operation_kind`]: the type of the operation a request selects, decided *before*
//!   execution with async-graphql's own selection rules and error messages, so the HTTP handler
//!   can refuse a subscription or a mutation over `GET`, and the WebSocket server knows whether
//!   to expect one result or a stream.
//! - [`PreExecutionFlag`] and [`PreExecFailed`]: `Schema::execute_stream*` reports parse and
//!   validation failures (including depth, complexity, recursion and directive limits) as an
//!   ordinary `Response` with errors, indistinguishable from a resolver error by shape. The
//!   extension marks the request's [`PreExecFailed`] when its `prepare_request`, `parse_query`
//!   or `validation` hook fails (the first covers refusals by later extensions made before
//!   parsing, such as the shape limits in `limits`), so a transport can answer with
//!   graphql-transport-ws `error` (or HTTP 400) instead of an execution result.
//!
//! It must not execute anything, hold state across requests, or know about a transport.
//!
//! Usage: register the extension **first** on the schema (`.extension(PreExecutionFlag)`), so
//! that it wraps every other extension's `parse_query`/`validation` hook and sees their errors
//! too; then insert an `Arc<PreExecFailed>` into each request's data and read it after the
//! first response.

use std::any::TypeId;
use std::collections::{BTreeSet, HashSet};

use async_graphql_value::Value as GqlValue;
use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use async_graphql::{
    Name, Positioned, Request, ServerError, ServerResult, ValidationResult, Variables,
    extensions::{
        Extension, ExtensionContext, ExtensionFactory, NextParseQuery, NextPrepareRequest, NextValidation,
    },
    parser::types::{
        Directive, DocumentOperations, ExecutableDocument, OperationDefinition, OperationType, Selection,
        SelectionSet,
    },
};

use crate::graphql::bounds;

/// The type of the operation a request selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationKind {
    Query,
    Mutation,
    Subscription,
}

impl OperationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Query => "query",
            Self::Mutation => "mutation",
            Self::Subscription => "subscription",
        }
    }
}

impl From<OperationType> for OperationKind {
    fn from(ty: OperationType) -> Self {
        match ty {
            OperationType::Query => Self::Query,
            OperationType::Mutation => Self::Mutation,
            OperationType::Subscription => Self::Subscription,
        }
    }
}

/// Parses the request's query once it is within `bounds` (the document is cached in the
/// request, so execution does not parse it again) and returns the type of the operation that
/// `operation_name` selects.
///
/// The selection follows async-graphql 7.2's `prepare_request` exactly, messages included:
/// a name given for a document with one anonymous operation, or a name not in the document,
/// is `Unknown operation named "…"`; no name for a document with several named operations
/// is `Operation name required in request.`. A syntax error is returned as the parser's
/// `ServerError`, with its location; a document out of bounds as `bounds`' refusal.
pub fn operation_kind(req: &mut Request) -> Result<OperationKind, ServerError> {
    let operation_name = req.operation_name.clone();
    let doc = bounds::parse(req)?;
    Ok(selected_operation(doc, operation_name.as_deref())?.ty.into())
}

/// The operation `name` selects in `doc`, by async-graphql's rules (see [`operation_kind`]).
fn selected_operation<'d>(
    doc: &'d ExecutableDocument,
    name: Option<&str>,
) -> Result<&'d OperationDefinition, ServerError> {
    match (&doc.operations, name) {
        (DocumentOperations::Single(op), None) => Ok(&op.node),
        (DocumentOperations::Multiple(ops), None) if ops.len() == 1 => {
            // `len() == 1` guarantees the iterator yields one item.
            ops.values().next().map(|op| &op.node).ok_or_else(name_required)
        }
        (DocumentOperations::Multiple(_), None) => Err(name_required()),
        (DocumentOperations::Multiple(ops), Some(name)) => ops
            .get(name)
            .map(|op| &op.node)
            .ok_or_else(|| unknown_operation(name)),
        // async-graphql refuses a name even if the document's only operation is anonymous.
        (DocumentOperations::Single(_), Some(name)) => Err(unknown_operation(name)),
    }
}

/// The variables the selected operation uses anywhere but in the arguments of its root fields
/// (in directives, in nested fields' arguments): with the document and the caller's scope,
/// what can change how a root field's value is rendered. A subscription's root arguments
/// (a filter, a cursor, a job id) only choose which events its source yields, so subscriptions
/// that differ only there may share renderings (`ws` fanout). `None` when the document does not
/// parse or select an operation (the caller then keeps every variable).
///
/// Each fragment is walked at most once at the root and once below it, so a document is
/// walked in time linear in its size, even a hostile one that spreads fragments in a cycle
/// (validation, which refuses cycles, has not run yet).
pub fn selection_variables(req: &mut Request) -> Option<BTreeSet<String>> {
    let operation_name = req.operation_name.clone();
    let doc = bounds::parse(req).ok()?;
    let op = selected_operation(doc, operation_name.as_deref()).ok()?;
    let mut walk = VariableWalk {
        doc,
        used: BTreeSet::new(),
        seen: HashSet::new(),
    };
    walk.directives(&op.directives);
    walk.selections(&op.selection_set.node, true);
    Some(walk.used)
}

struct VariableWalk<'d> {
    doc: &'d ExecutableDocument,
    used: BTreeSet<String>,
    /// Fragments walked, and whether at the root.
    seen: HashSet<(&'d str, bool)>,
}

impl<'d> VariableWalk<'d> {
    /// A selection set; at the `root` type its fields' arguments are left out.
    fn selections(&mut self, set: &'d SelectionSet, root: bool) {
        for item in &set.items {
            match &item.node {
                Selection::Field(field) => {
                    if !root {
                        self.arguments(&field.node.arguments);
                    }
                    self.directives(&field.node.directives);
                    self.selections(&field.node.selection_set.node, false);
                }
                Selection::FragmentSpread(spread) => {
                    self.directives(&spread.node.directives);
                    let name = spread.node.fragment_name.node.as_str();
                    if self.seen.insert((name, root))
                        && let Some(fragment) = self.doc.fragments.get(name)
                    {
                        self.directives(&fragment.node.directives);
                        self.selections(&fragment.node.selection_set.node, root);
                    }
                }
                Selection::InlineFragment(inline) => {
                    self.directives(&inline.node.directives);
                    self.selections(&inline.node.selection_set.node, root);
                }
            }
        }
    }

    fn directives(&mut self, directives: &[Positioned<Directive>]) {
        for directive in directives {
            self.arguments(&directive.node.arguments);
        }
    }

    fn arguments(&mut self, arguments: &[(Positioned<Name>, Positioned<GqlValue>)]) {
        for (_, value) in arguments {
            self.value(&value.node);
        }
    }

    fn value(&mut self, value: &GqlValue) {
        match value {
            GqlValue::Variable(name) => {
                self.used.insert(name.to_string());
            }
            GqlValue::List(items) => items.iter().for_each(|v| self.value(v)),
            GqlValue::Object(fields) => fields.values().for_each(|v| self.value(v)),
            _ => {}
        }
    }
}

fn unknown_operation(name: &str) -> ServerError {
    ServerError::new(format!(r#"Unknown operation named "{name}""#), None)
}

fn name_required() -> ServerError {
    ServerError::new("Operation name required in request.", None)
}

/// Set when a request failed before execution (parse or validation). Insert an
/// `Arc<PreExecFailed>` into `Request::data`; [`PreExecutionFlag`] finds it there.
#[derive(Debug, Default)]
pub struct PreExecFailed {
    failed: AtomicBool,
    /// Set when the `parse_query` hook ran at all, whatever its outcome. Still false after the
    /// first response means the extension is not registered on the schema (or an earlier
    /// `prepare_request` hook failed), so `failed` says nothing; see [`PreExecFailed::observed`].
    observed: AtomicBool,
}

impl PreExecFailed {
    /// Whether parsing or validation returned an error for this request.
    pub fn is_set(&self) -> bool {
        // Acquire pairs with the Release in `set`; the hooks may run on another thread than
        // the reader when the executor's stream is polled elsewhere.
        self.failed.load(Ordering::Acquire)
    }

    /// Whether [`PreExecutionFlag`] saw this request's `parse_query` phase. When false, the
    /// caller cannot trust [`is_set`](Self::is_set) and must fall back to another test.
    pub fn observed(&self) -> bool {
        self.observed.load(Ordering::Acquire)
    }

    fn set(&self) {
        self.failed.store(true, Ordering::Release);
    }

    fn mark_observed(&self) {
        self.observed.store(true, Ordering::Release);
    }
}

/// Schema extension that marks the request's [`PreExecFailed`] when parsing or validation
/// fails. Register it first: `Schema::build(..).extension(PreExecutionFlag)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PreExecutionFlag;

impl ExtensionFactory for PreExecutionFlag {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(PreExecutionFlagExtension)
    }
}

struct PreExecutionFlagExtension;

#[async_trait::async_trait]
impl Extension for PreExecutionFlagExtension {
    /// Every refusal by a later extension's `prepare_request` (such as the shape limits,
    /// which run before parsing) is a pre-execution error too. The request's data is not yet
    /// the context's query data here, so the flag is taken from the request itself.
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        let flag = request
            .data
            .get(&TypeId::of::<Arc<PreExecFailed>>())
            .and_then(|d| d.downcast_ref::<Arc<PreExecFailed>>())
            .cloned();
        let result = next.run(ctx, request).await;
        if let (Err(_), Some(flag)) = (&result, flag) {
            flag.mark_observed();
            flag.set();
        }
        result
    }

    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let flag = ctx.data_opt::<Arc<PreExecFailed>>();
        if let Some(flag) = flag {
            flag.mark_observed();
        }
        let result = next.run(ctx, query, variables).await;
        if let (Err(_), Some(flag)) = (&result, flag) {
            flag.set();
        }
        result
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await;
        if let (Err(_), Some(flag)) = (&result, ctx.data_opt::<Arc<PreExecFailed>>()) {
            flag.set();
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn selection_variables_leave_out_the_root_fields_arguments() {
        let used = |query: &str| {
            let mut request = async_graphql::Request::new(query);
            super::operation_kind(&mut request).expect("a valid operation");
            super::selection_variables(&mut request)
                .expect("the operation is found")
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(
            used(
                "subscription($a: String, $f: JobFilter, $n: Int!, $s: Boolean!) { jobEvents(after: $a, filter: $f) \
                 { cursor job { events(last: $n) { phase } } phase @skip(if: $s) } }"
            ),
            ["n", "s"]
        );
        // Through fragments at the root and below, and directives anywhere.
        assert_eq!(
            used(
                "subscription($a: String, $b: Int!, $c: Boolean!, $d: Boolean!) { ...R @include(if: $c) } \
                 fragment R on Subscription { jobEvents(after: $a) { ...E } } \
                 fragment E on JobStatusEvent { job { events(last: $b) { phase } } ... @skip(if: $d) { cursor } }"
            ),
            ["b", "c", "d"]
        );
        // Fragments spreading each other in a cycle (refused later by validation) end the walk.
        assert_eq!(
            used(
                "subscription($x: Int!) { ...A } fragment A on Subscription { ...B } \
                 fragment B on Subscription { ...A jobEvents(after: $x) { cursor } }"
            ),
            Vec::<String>::new()
        );
    }

    use async_graphql::{EmptyMutation, Object, Schema, SimpleObject, Subscription};
    use futures::{Stream, StreamExt};

    use super::*;

    fn kind(query: &str, name: Option<&str>) -> Result<OperationKind, ServerError> {
        let mut req = Request::new(query);
        req.operation_name = name.map(str::to_owned);
        operation_kind(&mut req)
    }

    #[test]
    fn anonymous_single_operation() {
        assert_eq!(kind("{ a }", None).unwrap(), OperationKind::Query);
        assert_eq!(kind("mutation { a }", None).unwrap(), OperationKind::Mutation);
        assert_eq!(
            kind("subscription { a }", None).unwrap(),
            OperationKind::Subscription
        );
    }

    #[test]
    fn single_named_operation_without_name() {
        assert_eq!(kind("mutation M { a }", None).unwrap(), OperationKind::Mutation);
    }

    #[test]
    fn named_operation_selected_by_name() {
        let doc = "query Q { a } mutation M { a } subscription S { a }";
        assert_eq!(kind(doc, Some("Q")).unwrap(), OperationKind::Query);
        assert_eq!(kind(doc, Some("M")).unwrap(), OperationKind::Mutation);
        assert_eq!(kind(doc, Some("S")).unwrap(), OperationKind::Subscription);
    }

    #[test]
    fn multiple_operations_need_a_name() {
        let err = kind("query Q { a } mutation M { a }", None).unwrap_err();
        assert_eq!(err.message, "Operation name required in request.");
    }

    #[test]
    fn unknown_name_is_rejected() {
        let err = kind("query Q { a } mutation M { a }", Some("X")).unwrap_err();
        assert_eq!(err.message, r#"Unknown operation named "X""#);
    }

    #[test]
    fn name_for_anonymous_operation_is_rejected() {
        // Mirrors async-graphql: a name never matches an anonymous operation.
        let err = kind("{ a }", Some("Q")).unwrap_err();
        assert_eq!(err.message, r#"Unknown operation named "Q""#);
    }

    #[test]
    fn syntax_error_is_an_error_with_location() {
        let err = kind("{ a ", None).unwrap_err();
        assert!(!err.message.is_empty());
        assert!(!err.locations.is_empty());
        let err = kind("", None).unwrap_err();
        assert!(!err.message.is_empty());
    }

    #[test]
    fn parsed_document_is_kept_in_the_request() {
        let mut req = Request::new("{ a }");
        operation_kind(&mut req).unwrap();
        // A second call finds the cached document (and so does execution).
        assert_eq!(operation_kind(&mut req).unwrap(), OperationKind::Query);
    }

    struct Query;

    #[derive(SimpleObject)]
    struct Nested {
        inner: Option<Box<Nested>>,
        leaf: i32,
    }

    #[Object]
    impl Query {
        async fn a(&self) -> i32 {
            1
        }
        async fn fails(&self) -> async_graphql::Result<i32> {
            Err("boom".into())
        }
        async fn nested(&self) -> Nested {
            Nested { inner: None, leaf: 0 }
        }
    }

    struct Sub;

    #[Subscription]
    impl Sub {
        async fn ticks(&self) -> impl Stream<Item = i32> {
            futures::stream::iter([1, 2])
        }
    }

    async fn first_response(query: &str) -> (async_graphql::Response, Arc<PreExecFailed>) {
        let schema = Schema::build(Query, EmptyMutation, Sub)
            .extension(PreExecutionFlag)
            .limit_depth(3)
            .finish();
        let flag = Arc::new(PreExecFailed::default());
        let req = Request::new(query).data(flag.clone());
        let resp = schema.execute_stream(req).next().await.expect("one response");
        (resp, flag)
    }

    #[tokio::test]
    async fn flag_marks_parse_validation_and_limit_errors() {
        for query in [
            "{ a ",
            "{ nope }",
            "{ nested { inner { inner { inner { leaf } } } } }",
        ] {
            let (resp, flag) = first_response(query).await;
            assert!(!resp.errors.is_empty(), "{query}");
            assert!(flag.observed(), "{query}");
            assert!(flag.is_set(), "{query}");
        }
    }

    #[tokio::test]
    async fn flag_stays_clear_for_success_and_resolver_errors() {
        for query in ["{ a }", "{ fails }", "subscription { ticks }"] {
            let (_, flag) = first_response(query).await;
            assert!(flag.observed(), "{query}");
            assert!(!flag.is_set(), "{query}");
        }
    }
}
