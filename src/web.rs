//! Browser assets served by jobgate itself: the dashboard (bundled from `web/src`) and
//! GraphiQL (with its React), embedded in the binary at build time by `build.rs`, so that
//! nothing is fetched from the internet at run time.
//!
//! It owns the asset routes under `/assets/`, the dashboard page and the GraphiQL page. It must
//! not talk to the job service: pages use the public GraphQL API like any client.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

macro_rules! asset {
    ($name:literal) => {
        include_bytes!(concat!(env!("OUT_DIR"), "/assets/", $name))
    };
}

/// (name, content type, bytes)
const ASSETS: [(&str, &str, &[u8]); 6] = [
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        asset!("dashboard.js"),
    ),
    (
        "dashboard.css",
        "text/css; charset=utf-8",
        asset!("dashboard.css"),
    ),
    (
        "graphiql.min.js",
        "text/javascript; charset=utf-8",
        asset!("graphiql.min.js"),
    ),
    (
        "graphiql.min.css",
        "text/css; charset=utf-8",
        asset!("graphiql.min.css"),
    ),
    (
        "react.production.min.js",
        "text/javascript; charset=utf-8",
        asset!("react.production.min.js"),
    ),
    (
        "react-dom.production.min.js",
        "text/javascript; charset=utf-8",
        asset!("react-dom.production.min.js"),
    ),
];

/// Routes for the embedded assets, to merge into the app's router.
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/assets/{name}", get(asset))
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, bytes)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                // The file names do not change with versions, so browsers revalidate daily.
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=86400"),
                ),
            ],
            *bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

/// The dashboard's page. Its scripts and styles are versioned in their URLs, so the page
/// itself is revalidated on every visit and the assets may be cached.
pub async fn dashboard_page() -> Response {
    (
        [
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            // Everything comes from jobgate itself; nothing inline, no frames.
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'self'; connect-src 'self'; img-src 'self' data:; \
                     object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
                ),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        ],
        Html(DASHBOARD_HTML),
    )
        .into_response()
}

const DASHBOARD_HTML: &str = include_str!(concat!(env!("OUT_DIR"), "/assets/dashboard.html"));

/// The GraphiQL page, with subscriptions over graphql-transport-ws on the same URL.
pub fn graphiql_page() -> Html<&'static str> {
    Html(GRAPHIQL_HTML)
}

const GRAPHIQL_HTML: &str = r#"<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <title>jobgate · GraphiQL</title>
    <style>body { margin: 0; height: 100vh; } #graphiql { height: 100vh; }</style>
    <link rel="stylesheet" href="/assets/graphiql.min.css">
    <script src="/assets/react.production.min.js"></script>
    <script src="/assets/react-dom.production.min.js"></script>
    <script src="/assets/graphiql.min.js"></script>
  </head>
  <body>
    <div id="graphiql">Loading GraphiQL…</div>
    <script>
      const http = new URL('/graphql', window.location.href);
      const ws = new URL('/graphql', window.location.href);
      ws.protocol = ws.protocol === 'https:' ? 'wss:' : 'ws:';
      const fetcher = GraphiQL.createFetcher({ url: http.href, subscriptionUrl: ws.href });
      const defaultQuery = `# Submit a job, then watch it: copy its id into the jobStatus subscription.
mutation Submit {
  submitJob(input: {
    name: "hello"
    command: ["sh", "-c", "for i in 1 2 3; do echo step $i; sleep 1; done; echo done > $JOBGATE_RESULT_FILE"]
  }) {
    job { id phase }
  }
}

subscription Watch($id: ID!) {
  jobStatus(id: $id) {
    phase
    reason
    at
    job { progress { succeeded total } result }
  }
}

query Recent {
  jobs(first: 10) {
    totalCount
    edges { node { id name phase submittedAt } }
  }
}
`;
      ReactDOM.createRoot(document.getElementById('graphiql')).render(
        React.createElement(GraphiQL, { fetcher, defaultQuery, defaultEditorToolsVisibility: true }),
      );
    </script>
  </body>
</html>
"#;
