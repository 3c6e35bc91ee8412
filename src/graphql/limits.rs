//! A schema extension that refuses documents whose shape is too large, before they run.
//!
//! It owns the shape limits of one GraphQL document, checked in two hooks:
//!
//! - `prepare_request`, before async-graphql does anything with the document (parsed here
//!   through `bounds::parse`, or the parse the transport cached): fragment cycles, the number
//!   of aliases, and
//!   the number of selections (fields, fragment spreads, inline fragments) the document makes
//!   **once its fragment spreads are expanded**. async-graphql's recursion-depth check,
//!   validation and execution all expand spreads, so a few hundred bytes whose fragments each
//!   spread the previous one twice make millions of selections (2^60 within the recursion
//!   limit of 64); refusing first, with a count that is itself linear (each fragment is
//!   measured once, memoised), keeps that work from starting at all. Cycles are refused here
//!   too, because this runs before async-graphql's `NoFragmentCycles` rule could.
//! - `validation`: depth and complexity, from the values async-graphql computes while it
//!   validates (both expand fragment spreads), refused with messages that say which limit
//!   it was and by how much. async-graphql's own `limit_depth`/`limit_complexity` answer
//!   "Query is too complex." for a query that is only too deep, so they are not used.
//!
//! Every refusal is an uncoded `ServerError`, which the `ErrorCodes` extension (error.rs)
//! codes `BAD_USER_INPUT`. This module must not execute anything or hold state across
//! requests.

use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::extensions::{
    Extension, ExtensionContext, ExtensionFactory, NextPrepareRequest, NextValidation,
};
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{Name, Request, ServerError, ServerResult, ValidationResult};

/// The shape limits of one document; `0` turns off every limit but `max_aliases` (where it
/// allows no alias).
#[derive(Clone, Copy, Debug)]
pub struct ShapeLimits {
    pub max_aliases: usize,
    /// Selections (fields, fragment spreads, inline fragments) once every fragment spread
    /// is expanded.
    pub max_selections: usize,
    pub max_depth: usize,
    pub max_complexity: usize,
}

/// The extension; register it after `PreExecutionFlag`, whose `prepare_request` hook then
/// marks its refusals as pre-execution errors.
pub struct ShapeLimit {
    limits: ShapeLimits,
}

impl ShapeLimit {
    pub fn new(limits: ShapeLimits) -> Self {
        Self { limits }
    }
}

impl ExtensionFactory for ShapeLimit {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(ShapeLimitExtension { limits: self.limits })
    }
}

struct ShapeLimitExtension {
    limits: ShapeLimits,
}

fn count_aliases(set: &SelectionSet) -> usize {
    set.items
        .iter()
        .map(|item| match &item.node {
            Selection::Field(f) => {
                usize::from(f.node.alias.is_some()) + count_aliases(&f.node.selection_set.node)
            }
            Selection::InlineFragment(f) => count_aliases(&f.node.selection_set.node),
            Selection::FragmentSpread(_) => 0,
        })
        .sum()
}

/// Every alias in the document, fragments counted once each.
pub fn aliases_in(doc: &ExecutableDocument) -> usize {
    let in_operations: usize = doc
        .operations
        .iter()
        .map(|(_, op)| count_aliases(&op.node.selection_set.node))
        .sum();
    let in_fragments: usize = doc
        .fragments
        .values()
        .map(|f| count_aliases(&f.node.selection_set.node))
        .sum();
    in_operations + in_fragments
}

/// Why a document's expanded size could not be measured.
#[derive(Debug, PartialEq, Eq)]
pub enum ExpandError {
    /// A fragment spreads itself, directly or through others.
    Cycle(String),
}

/// The sizes of a document once its fragment spreads are expanded, in selections: each
/// field, fragment spread and inline fragment counts one (a spread is work to walk even when
/// it names nothing).
#[derive(Debug, PartialEq, Eq)]
pub struct Expanded {
    /// Selections of all operations together (saturating: `u64::MAX` means "more than can
    /// be counted").
    pub operations: u64,
    /// The most selections any one fragment makes, used or not.
    pub largest_fragment: u64,
}

/// Measures the document in time linear in its size: each fragment's expanded size is
/// computed once and reused at every spread. A spread of an unknown fragment counts one
/// (validation refuses it).
pub fn expanded_size(doc: &ExecutableDocument) -> Result<Expanded, ExpandError> {
    let mut memo = Memo {
        doc,
        sizes: HashMap::new(),
    };
    let mut largest_fragment = 0;
    for name in doc.fragments.keys() {
        largest_fragment = largest_fragment.max(memo.fragment(name)?);
    }
    let mut operations = 0u64;
    for (_, op) in doc.operations.iter() {
        operations = operations.saturating_add(memo.selection_set(&op.node.selection_set.node)?);
    }
    Ok(Expanded {
        operations,
        largest_fragment,
    })
}

struct Memo<'d> {
    doc: &'d ExecutableDocument,
    /// `None` while the fragment is being measured: meeting it again is a cycle.
    sizes: HashMap<&'d Name, Option<u64>>,
}

impl<'d> Memo<'d> {
    fn fragment(&mut self, name: &'d Name) -> Result<u64, ExpandError> {
        match self.sizes.get(name) {
            Some(Some(size)) => return Ok(*size),
            Some(None) => return Err(ExpandError::Cycle(name.to_string())),
            None => {}
        }
        let Some(fragment) = self.doc.fragments.get(name) else {
            return Ok(0);
        };
        self.sizes.insert(name, None);
        let size = self.selection_set(&fragment.node.selection_set.node)?;
        self.sizes.insert(name, Some(size));
        Ok(size)
    }

    /// Recursion follows the document's nesting, which `bounds` limited before the document
    /// was parsed; fragments are entered once each.
    fn selection_set(&mut self, set: &'d SelectionSet) -> Result<u64, ExpandError> {
        let mut total = 0u64;
        for item in &set.items {
            let size = match &item.node {
                Selection::Field(f) => self.selection_set(&f.node.selection_set.node)?,
                Selection::InlineFragment(f) => self.selection_set(&f.node.selection_set.node)?,
                Selection::FragmentSpread(s) => self.fragment(&s.node.fragment_name.node)?,
            }
            .saturating_add(1);
            total = total.saturating_add(size);
        }
        Ok(total)
    }
}

fn refuse(message: String) -> ServerError {
    ServerError::new(message, None)
}

fn count_text(n: u64) -> String {
    if n == u64::MAX {
        "more than 18 quintillion".to_owned()
    } else {
        n.to_string()
    }
}

impl ShapeLimits {
    /// The checks made before anything else: cycles, expanded size, aliases.
    pub fn check_document(&self, doc: &ExecutableDocument) -> Result<(), ServerError> {
        let expanded = expanded_size(doc).map_err(|ExpandError::Cycle(name)| {
            refuse(format!(
                "fragment {name} spreads itself, directly or through other fragments"
            ))
        })?;
        if self.max_selections > 0 {
            let max = self.max_selections as u64;
            let size = expanded.operations.max(expanded.largest_fragment);
            if size > max {
                return Err(refuse(format!(
                    "the query makes {} selections (fields and fragments) once its fragments are expanded; at most {max} are allowed",
                    count_text(size)
                )));
            }
        }
        // Zero means none allowed here, as it always has.
        let aliases = aliases_in(doc);
        if aliases > self.max_aliases {
            return Err(refuse(format!(
                "the query uses {aliases} aliases; at most {} are allowed",
                self.max_aliases
            )));
        }
        Ok(())
    }

    /// The validation-time checks, over what async-graphql measured.
    pub fn check_validated(&self, result: &ValidationResult) -> Result<(), ServerError> {
        if self.max_depth > 0 && result.depth > self.max_depth {
            return Err(refuse(format!(
                "the query is nested {} levels deep; at most {} are allowed",
                result.depth, self.max_depth
            )));
        }
        if self.max_complexity > 0 && result.complexity > self.max_complexity {
            return Err(refuse(format!(
                "the query's complexity is {}; at most {} is allowed",
                result.complexity, self.max_complexity
            )));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Extension for ShapeLimitExtension {
    async fn prepare_request(
        &self,
        ctx: &ExtensionContext<'_>,
        mut request: Request,
        next: NextPrepareRequest<'_>,
    ) -> ServerResult<Request> {
        // Within bounds and cached in the request: async-graphql does not parse it again, for
        // any request the schema runs, whichever transport or part of jobgate built it.
        let doc = crate::graphql::bounds::parse(&mut request)?;
        self.limits.check_document(doc)?;
        next.run(ctx, request).await
    }

    async fn validation(
        &self,
        ctx: &ExtensionContext<'_>,
        next: NextValidation<'_>,
    ) -> Result<ValidationResult, Vec<ServerError>> {
        let result = next.run(ctx).await?;
        self.limits.check_validated(&result).map_err(|e| vec![e])?;
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use async_graphql::parser::parse_query;

    use super::*;

    fn doubling(levels: usize) -> String {
        let mut query = String::from("query { ...F0 }\nfragment F0 on Query { __typename }\n");
        for i in 1..=levels {
            query.push_str(&format!(
                "fragment F{i} on Query {{ ...F{p} ...F{p} }}\n",
                p = i - 1
            ));
        }
        query.replace("{ ...F0 }", &format!("{{ ...F{levels} }}"))
    }

    #[test]
    fn spreads_are_expanded_and_memoised() {
        let doc = parse_query(doubling(22)).unwrap();
        let size = expanded_size(&doc).unwrap();
        // The field, plus a spread per node of the binary tree, plus the operation's spread.
        assert_eq!(size.operations, (1 << 22) + (1 << 23) - 1);
        assert_eq!(size.largest_fragment, (1 << 22) + (1 << 23) - 2);
        // Far past u64: saturates instead of overflowing, in linear time.
        let doc = parse_query(doubling(200)).unwrap();
        assert_eq!(expanded_size(&doc).unwrap().operations, u64::MAX);
    }

    #[test]
    fn spreads_of_nothing_count() {
        let query = doubling(40).replace("{ __typename }", "{ ...Unknown }");
        let doc = parse_query(query).unwrap();
        assert!(expanded_size(&doc).unwrap().operations > 1 << 40);
    }

    #[test]
    fn fields_inline_fragments_and_unused_fragments_count() {
        let doc = parse_query(
            "{ a { b c } ... on Query { d } ...F } fragment F on Query { e { f } } \
             fragment Unused on Query { x { y { z } } }",
        )
        .unwrap();
        assert_eq!(
            expanded_size(&doc).unwrap(),
            Expanded {
                operations: 8,
                largest_fragment: 3
            }
        );
    }

    #[test]
    fn graphiqls_introspection_query_is_far_below_the_default() {
        let doc = parse_query(include_str!("../../tests/fixtures/introspection.graphql")).unwrap();
        let size = expanded_size(&doc).unwrap();
        // 2000 is the default of --max-query-selections (config.rs).
        assert!(size.operations < 500, "{size:?}");
    }

    #[test]
    fn cycles_are_found() {
        let doc =
            parse_query("{ ...A } fragment A on Query { ...B } fragment B on Query { a { ...A } }").unwrap();
        assert!(matches!(expanded_size(&doc), Err(ExpandError::Cycle(_))));
        let doc = parse_query("{ ...A } fragment A on Query { ...A }").unwrap();
        assert_eq!(expanded_size(&doc), Err(ExpandError::Cycle("A".into())));
    }

    #[test]
    fn refusals_say_which_limit() {
        let limits = ShapeLimits {
            max_aliases: 30,
            max_selections: 1000,
            max_depth: 16,
            max_complexity: 2000,
        };
        let doc = parse_query(doubling(22)).unwrap();
        let e = limits.check_document(&doc).unwrap_err();
        assert_eq!(
            e.message,
            "the query makes 12582911 selections (fields and fragments) once its fragments are expanded; at most 1000 are allowed"
        );
        let deep = ValidationResult {
            cache_control: Default::default(),
            complexity: 5000,
            depth: 20,
        };
        assert_eq!(
            limits.check_validated(&deep).unwrap_err().message,
            "the query is nested 20 levels deep; at most 16 are allowed"
        );
    }
}
