//! Counts every request jobgate makes to the Kubernetes API by verb and status code, as a
//! tower layer on kube-rs's client (`jobgate_kube_requests_total`). It only observes; it never
//! changes or retries a request.

use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::{Method, Request, Response, Uri};
use futures::future::BoxFuture;

use crate::metrics::Metrics;

#[derive(Clone)]
pub(super) struct CountRequestsLayer(pub Arc<Metrics>);

impl<S> tower::Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone)]
pub(super) struct CountRequests<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for CountRequests<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let verb = verb(request.method(), request.uri());
        let metrics = self.metrics.clone();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_owned(),
                Err(_) => "error".to_owned(),
            };
            metrics.kube_request(verb, &code);
            result
        })
    }
}

/// The Kubernetes verb of a request, as the API server's audit log names it.
fn verb(method: &Method, uri: &Uri) -> &'static str {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // After /api/v1 or /apis/<group>/<version>: [namespaces/<ns>/]<resource>[/<name>[/<sub>]].
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return "discovery",
    };
    match rest {
        [] => return "discovery",
        ["namespaces", _, _] | [_] => return collection_verb(method, uri),
        _ => {}
    }
    match *method {
        Method::GET => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::POST => "create",
        _ => "other",
    }
}

fn collection_verb(method: &Method, uri: &Uri) -> &'static str {
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    match *method {
        Method::GET if watch => "watch",
        Method::GET => "list",
        Method::POST => "create",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_follow_the_api_paths() {
        let cases = [
            (Method::GET, "/api/v1/namespaces/a/pods?labelSelector=x", "list"),
            (
                Method::GET,
                "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1",
                "watch",
            ),
            (Method::GET, "/api/v1/namespaces/a/pods/p1/log?tailLines=5", "get"),
            (Method::POST, "/apis/batch/v1/namespaces/a/jobs", "create"),
            (Method::DELETE, "/apis/batch/v1/namespaces/a/jobs/j1", "delete"),
            (
                Method::PATCH,
                "/apis/kubeflow.org/v1/namespaces/a/pytorchjobs/x",
                "patch",
            ),
            (Method::GET, "/apis/batch/v1/jobs?watch=true", "watch"),
            (Method::GET, "/apis/batch/v1", "discovery"),
            (Method::GET, "/api/v1/namespaces/a", "get"),
            (Method::GET, "/apis", "discovery"),
        ];
        for (method, uri, expected) in cases {
            assert_eq!(verb(&method, &uri.parse().unwrap()), expected, "{method} {uri}");
        }
    }
}
