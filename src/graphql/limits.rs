//! A schema extension that refuses documents with too many aliases.
//!
//! Depth and complexity limits come with async-graphql; alias counting does not, and
//! aliases are how one small request asks for the same expensive field many times.

use std::sync::Arc;

use async_graphql::extensions::{Extension, ExtensionContext, ExtensionFactory, NextParseQuery};
use async_graphql::parser::types::{ExecutableDocument, Selection, SelectionSet};
use async_graphql::{ServerError, ServerResult, Variables};

pub struct AliasLimit {
    max: usize,
}

impl AliasLimit {
    pub fn new(max: usize) -> Self {
        Self { max }
    }
}

impl ExtensionFactory for AliasLimit {
    fn create(&self) -> Arc<dyn Extension> {
        Arc::new(AliasLimitExtension { max: self.max })
    }
}

struct AliasLimitExtension {
    max: usize,
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

#[async_trait::async_trait]
impl Extension for AliasLimitExtension {
    async fn parse_query(
        &self,
        ctx: &ExtensionContext<'_>,
        query: &str,
        variables: &Variables,
        next: NextParseQuery<'_>,
    ) -> ServerResult<ExecutableDocument> {
        let doc = next.run(ctx, query, variables).await?;
        let aliases = aliases_in(&doc);
        if aliases > self.max {
            return Err(ServerError::new(
                format!(
                    "the query uses {aliases} aliases; at most {} are allowed",
                    self.max
                ),
                None,
            ));
        }
        Ok(doc)
    }
}
