//! Every built-in workload template against the upstream schema of its kind. Each template is
//! rendered (jobgate's own rendering, in the test's process) for a job that sets every field the
//! template takes, and once more queued in a Kueue LocalQueue where Kueue can queue the kind;
//! the object is created through kube-rs on the Kubernetes API emulator, whose bundled CRDs
//! carry upstream's structural schemas. The API server must accept it and read it back exactly
//! as sent: a field the real CRD lacks would be pruned, a value of the wrong type refused (422).
//! A template that stops its workload by a patch has the patch applied the same way. A field
//! no CRD has, added to each object, must be pruned: the control that the schemas are in force.
//! And the check itself can fail: two wrong templates in a user's template directory (a
//! misspelled field, a number written as a string) are reported, the pruned field by its path
//! and the refusal as the server's 422 naming the field.

mod common;

use std::collections::BTreeMap;

use common::cluster::Cluster;
use jobgate::model::{EnvVar, Job, JobSpec, ResourceList, ResourceRequirements};
use jobgate::templates::{Stamp, TemplateSet, WorkloadTemplate};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// A job that sets every field a template may take.
fn typical_job(id: &str, template: &WorkloadTemplate, queue: Option<&str>) -> Job {
    let parameters = (template.name == "sparkapplication").then(|| {
        json!({
            "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
            "mainClass": "org.apache.spark.examples.SparkPi",
        })
    });
    let spec = JobSpec {
        name: Some("train".into()),
        namespace: "default".into(),
        template: template.name.clone(),
        image: Some("ghcr.io/example/train:1.0".into()),
        command: vec!["python3".into(), "train.py".into()],
        args: vec!["--epochs".into(), "3".into()],
        env: vec![EnvVar {
            name: "LEVEL".into(),
            value: "3".into(),
        }],
        parallelism: 2,
        completions: 1,
        backoff_limit: 2,
        active_deadline_seconds: Some(600),
        parameters,
        resources: Some(ResourceRequirements {
            requests: ResourceList {
                cpu: Some("500m".into()),
                memory: Some("256Mi".into()),
            },
            limits: ResourceList {
                cpu: Some("1".into()),
                memory: Some("1Gi".into()),
            },
        }),
        service_account_name: Some("runner".into()),
        ttl_seconds_after_finished: Some(300),
        depends_on: Vec::new(),
        queue_name: queue.map(str::to_owned),
        retry_policy: None,
        priority: 0,
    };
    Job::accepted(id.into(), spec, None, chrono::Utc::now())
}

fn stamp(job: &Job) -> Stamp {
    Stamp {
        name: format!("jobgate-{}", job.id),
        labels: BTreeMap::from([
            ("app.kubernetes.io/managed-by".to_owned(), "jobgate".to_owned()),
            ("jobgate.io/job-id".to_owned(), job.id.clone()),
        ]),
        annotations: BTreeMap::from([("jobgate.io/template".to_owned(), job.spec.template.clone())]),
        env: vec![("JOBGATE_JOB_ID".into(), job.id.clone())],
        default_ttl_seconds: None,
    }
}

fn objects(cluster: &Cluster, template: &WorkloadTemplate) -> Api<DynamicObject> {
    let (group, version) = template.group_version();
    let gvk = GroupVersionKind::gvk(group, version, &template.kind);
    let plural = format!("{}s", template.kind.to_ascii_lowercase());
    Api::namespaced_with(
        cluster.client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, &plural),
    )
}

/// The object's content that the API server must keep as sent: all but its server-set metadata
/// and the status, with only the labels and annotations jobgate set (the simulated operator may
/// add its own, as the real one does).
fn content(object: &Value, sent: &Value) -> Value {
    let mut content = object.clone();
    let meta = content["metadata"].take();
    let ours = |key: &str| -> Value {
        let sent_keys = sent["metadata"][key].as_object().cloned().unwrap_or_default();
        sent_keys
            .keys()
            .map(|k| (k.clone(), meta[key][k].clone()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    content["metadata"] = json!({
        "name": meta["name"], "namespace": meta["namespace"],
        "labels": ours("labels"), "annotations": ours("annotations"),
    });
    if let Some(map) = content.as_object_mut() {
        map.remove("status");
    }
    content
}

/// RFC 7386: what a JSON merge patch makes of `target`.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in fields {
        if value.is_null() {
            target.as_object_mut().map(|t| t.remove(key));
        } else {
            merge_patch(&mut target[key], value);
        }
    }
}

/// What the API server did to an object it had to keep as sent.
#[derive(Debug)]
enum Altered {
    /// It refused the object: the HTTP status and the server's message (naming the field).
    Refused { code: u16, message: String },
    /// It kept the object, but not as sent (`how`: "as created" or "read back"): the fields
    /// it dropped and those it changed or added, as dotted paths (`spec.runPolicy.x`).
    Changed {
        how: &'static str,
        pruned: Vec<String>,
        changed: Vec<String>,
    },
}

impl std::fmt::Display for Altered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Altered::Refused { code, message } => write!(f, "the API server refused it ({code}): {message}"),
            Altered::Changed { how, pruned, changed } => write!(
                f,
                "the object {how} differs from what was sent: pruned {pruned:?}, changed {changed:?}"
            ),
        }
    }
}

/// The dotted paths of the fields of `sent` that `got` lacks (`pruned`) or holds otherwise
/// (`changed`, with those `got` has in addition).
fn differences(sent: &Value, got: &Value, path: &str, pruned: &mut Vec<String>, changed: &mut Vec<String>) {
    let at = |key: &str| {
        if path.is_empty() {
            key.to_owned()
        } else {
            format!("{path}.{key}")
        }
    };
    match (sent, got) {
        (Value::Object(sent), Value::Object(got)) => {
            for (key, value) in sent {
                match got.get(key) {
                    None => pruned.push(at(key)),
                    Some(kept) => differences(value, kept, &at(key), pruned, changed),
                }
            }
            changed.extend(got.keys().filter(|k| !sent.contains_key(*k)).map(|k| at(k)));
        }
        (Value::Array(sent), Value::Array(got)) if sent.len() == got.len() => {
            for (i, (a, b)) in sent.iter().zip(got).enumerate() {
                differences(a, b, &at(&i.to_string()), pruned, changed);
            }
        }
        _ if sent == got => {}
        _ => changed.push(path.to_owned()),
    }
}

/// Creates `object`, then reads it back; both must equal what was sent, or the answer says
/// what the API server did to it.
async fn create_unchanged(api: &Api<DynamicObject>, object: &Value) -> Result<(), Altered> {
    let sent: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
    let created = match api.create(&PostParams::default(), &sent).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) => {
            return Err(Altered::Refused {
                code: status.code,
                message: status.message.clone(),
            });
        }
        Err(e) => panic!("creating the object: {e}"),
    };
    let read = api
        .get(&created.metadata.name.clone().unwrap())
        .await
        .expect("read back");
    for (how, got) in [("as created", created), ("read back", read)] {
        let got = content(&serde_json::to_value(&got).expect("JSON"), object);
        let (mut pruned, mut changed) = (Vec::new(), Vec::new());
        differences(&content(object, object), &got, "", &mut pruned, &mut changed);
        if !pruned.is_empty() || !changed.is_empty() {
            return Err(Altered::Changed { how, pruned, changed });
        }
    }
    Ok(())
}

#[tokio::test]
async fn every_built_in_template_renders_what_its_crd_accepts_unchanged() {
    let Some(cluster) = Cluster::emulated_as("serves the bundled CRDs", "workload-kinds").await else {
        return;
    };
    cluster
        .emu()
        .register_all_workload_crds()
        .expect("the bundled CRDs");
    let templates = TemplateSet::load(None).expect("the built-in templates");
    let mut checked = Vec::new();
    for template in templates.iter().filter(|t| t.name != "container") {
        let api = objects(&cluster, template);
        let job = typical_job(&format!("{}-1", template.name), template, None);
        let object = template.render(&job, &stamp(&job));
        if let Err(altered) = create_unchanged(&api, &object).await {
            panic!("{}: {altered}", template.name);
        }

        // The control: the same object with a field no CRD has loses it, so the comparisons
        // above would see a field the real CRD lacks.
        let control = typical_job(&format!("{}-3", template.name), template, None);
        let mut control_object = template.render(&control, &stamp(&control));
        let spec = control_object["spec"].clone();
        control_object["spec"]["notInTheCrd"] = json!(true);
        let sent: DynamicObject = serde_json::from_value(control_object).expect("an object");
        let created = api
            .create(&PostParams::default(), &sent)
            .await
            .expect("the control is created");
        assert_eq!(
            created.data["spec"], spec,
            "{}: an unknown field was kept",
            template.name
        );

        if template.kueue_suspend_field().is_ok() {
            let queued = typical_job(&format!("{}-2", template.name), template, Some("team-queue"));
            let object = template.render(&queued, &stamp(&queued));
            if let Err(altered) = create_unchanged(&api, &object).await {
                panic!("{} (queued): {altered}", template.name);
            }
        }

        if let Some(patch) = &template.cancel.patch {
            let name = format!("jobgate-{}", job.id);
            let patched = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .unwrap_or_else(|e| panic!("{}: the cancel patch was refused: {e}", template.name));
            let mut expected = content(&object, &object);
            merge_patch(&mut expected, patch);
            assert_eq!(
                content(&serde_json::to_value(&patched).expect("JSON"), &object),
                expected,
                "{}: the cancelled object differs from the patch",
                template.name
            );
        }
        checked.push(template.name.clone());
    }
    checked.sort();
    assert_eq!(
        checked,
        [
            "argo-workflow",
            "mpijob",
            "pytorchjob",
            "rayjob",
            "sparkapplication",
            "tekton-pipelinerun",
            "tfjob",
            "trainjob",
        ]
    );
}

/// The built-in PyTorchJob template, made wrong as a user's template directory could: a new
/// template `name` whose text has `wrong` in place of `right`.
fn wrong_pytorchjob(name: &str, right: &str, wrong: &str) -> String {
    let builtin = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/pytorchjob.yaml"))
        .expect("the built-in PyTorchJob template");
    let renamed = builtin.replacen("\nname: pytorchjob\n", &format!("\nname: {name}\n"), 1);
    let text = renamed.replacen(right, wrong, 1);
    assert!(
        text != renamed && renamed != builtin,
        "{name}: the built-in template no longer has {right:?}"
    );
    text
}

#[tokio::test]
async fn the_check_reports_a_field_the_crd_lacks_and_a_value_of_the_wrong_type() {
    let Some(cluster) = Cluster::emulated("serves the bundled CRDs").await else {
        return;
    };
    cluster
        .emu()
        .register_all_workload_crds()
        .expect("the bundled CRDs");
    // Two wrong templates in a user's template directory, loaded and rendered as jobgate does.
    let dir = tempfile::tempdir().expect("a template directory");
    for (name, right, wrong) in [
        (
            "pytorchjob-misspelled",
            "cleanPodPolicy: Running",
            "cleanupPodPolicy: Running",
        ),
        (
            "pytorchjob-mistyped",
            "      Master:\n        replicas: 1\n",
            "      Master:\n        replicas: \"1\"\n",
        ),
    ] {
        std::fs::write(
            dir.path().join(format!("{name}.yaml")),
            wrong_pytorchjob(name, right, wrong),
        )
        .expect("write the template");
    }
    let templates = TemplateSet::load(Some(dir.path())).expect("the templates load");
    let check = async |name: &str| {
        let template = templates.get(name).expect("the wrong template is loaded");
        let job = typical_job(&format!("{name}-1"), template, None);
        create_unchanged(&objects(&cluster, template), &template.render(&job, &stamp(&job))).await
    };

    match check("pytorchjob-misspelled").await {
        Err(Altered::Changed { pruned, changed, .. }) => {
            assert_eq!(
                pruned,
                ["spec.runPolicy.cleanupPodPolicy"],
                "changed: {changed:?}"
            );
            assert_eq!(changed, Vec::<String>::new());
        }
        other => panic!("a field the CRD lacks must be reported pruned, got {other:?}"),
    }
    match check("pytorchjob-mistyped").await {
        Err(Altered::Refused { code, message }) => {
            assert_eq!(code, 422, "{message}");
            assert!(
                message.contains("spec.pytorchReplicaSpecs.Master.replicas"),
                "the refusal names the field: {message}"
            );
        }
        other => panic!("a value of the wrong type must be refused, got {other:?}"),
    }
}
