//! The templates jobs are submitted with, as clients see them (`templates`): a view over
//! the service's catalog, with no rules of its own.

use async_graphql::{Enum, Json, Object};

use crate::jobs::catalog::{FieldType, Template, TemplateField};

/// What kind of value a template field takes.
#[derive(Enum, Clone, Copy, PartialEq, Eq)]
pub enum TemplateFieldType {
    String,
    /// A list of strings, e.g. `command`.
    StringList,
    Int,
    /// A list of `{name, value}`.
    Env,
    /// `{requests, limits}` of cpu and memory.
    Resources,
}

/// A named recipe a job may use (`SubmitJobInput.template`).
pub struct TemplateObject(pub Template);

#[Object(name = "Template")]
impl TemplateObject {
    async fn name(&self) -> &str {
        &self.0.name
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    /// What a job of this template becomes: `batch/v1 Job` on Kubernetes, `local process` on
    /// the local executor, or the kind a workload template creates, e.g.
    /// `argoproj.io/v1alpha1 Workflow`.
    async fn kind(&self) -> &str {
        &self.0.kind
    }
    /// Whether jobs can use it now.
    async fn available(&self) -> bool {
        self.0.available
    }
    /// Why jobs cannot use it now (e.g. its kind's CRD is not installed); null when available.
    async fn unavailable_reason(&self) -> Option<&str> {
        self.0.unavailable_reason.as_deref()
    }
    /// The `SubmitJobInput` fields this template uses, in the order a form shows them.
    async fn fields(&self) -> Vec<TemplateFieldObject> {
        self.0.fields.iter().cloned().map(TemplateFieldObject).collect()
    }
    /// JSON Schema (draft 2020-12) of `parameters`; null when the template takes none.
    async fn parameter_schema(&self) -> Option<Json<serde_json::Value>> {
        self.0.parameter_schema.clone().map(Json)
    }
}

/// One `SubmitJobInput` field of a template, described for a form.
pub struct TemplateFieldObject(pub TemplateField);

#[Object(name = "TemplateField")]
impl TemplateFieldObject {
    /// The `SubmitJobInput` field it fills, e.g. `image`, `command`, `resources`.
    async fn name(&self) -> &str {
        self.0.name
    }
    async fn label(&self) -> &str {
        &self.0.label
    }
    async fn description(&self) -> &str {
        &self.0.description
    }
    #[graphql(name = "type")]
    async fn field_type(&self) -> TemplateFieldType {
        match self.0.field_type {
            FieldType::String => TemplateFieldType::String,
            FieldType::StringList => TemplateFieldType::StringList,
            FieldType::Int => TemplateFieldType::Int,
            FieldType::Env => TemplateFieldType::Env,
            FieldType::Resources => TemplateFieldType::Resources,
        }
    }
    async fn required(&self) -> bool {
        self.0.required
    }
    /// The value the server uses when the field is omitted, as JSON; null when none.
    async fn default(&self) -> Option<Json<serde_json::Value>> {
        self.0.default.clone().map(Json)
    }
    /// The only values the server accepts, when it limits them (namespaces, service
    /// accounts).
    async fn choices(&self) -> Option<&[String]> {
        self.0.choices.as_deref()
    }
    async fn minimum(&self) -> Option<i64> {
        self.0.minimum
    }
    async fn maximum(&self) -> Option<i64> {
        self.0.maximum
    }
    /// An example value for a form's placeholder.
    async fn placeholder(&self) -> Option<&str> {
        self.0.placeholder
    }
}
