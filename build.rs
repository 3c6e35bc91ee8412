//! Prepares the browser assets the binary embeds: the dashboard (bundled from `web/src` by
//! esbuild) and GraphiQL with its React, so that jobgate serves them itself and fetches nothing
//! at run time.
//!
//! The packages come from the npm registry, pinned by `web/package-lock.json`. If
//! `web/node_modules` is already installed it is used as it is; otherwise they are installed
//! with `npm ci` into the build's own output directory, leaving the source tree untouched.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// (file in node_modules, name it is served under)
const ASSETS: [(&str, &str); 4] = [
    ("graphiql/graphiql.min.js", "graphiql.min.js"),
    ("graphiql/graphiql.min.css", "graphiql.min.css"),
    ("react/umd/react.production.min.js", "react.production.min.js"),
    (
        "react-dom/umd/react-dom.production.min.js",
        "react-dom.production.min.js",
    ),
];

fn main() {
    println!("cargo:rerun-if-changed=web/package.json");
    println!("cargo:rerun-if-changed=web/package-lock.json");
    println!("cargo:rerun-if-changed=web/src");
    // An installed web/node_modules is used as it is, so a reinstall must rebuild. Cargo
    // counts a watched path that does not exist as changed on every build (which rebuilt
    // jobgate on every `cargo test` without one), so then watch `web`, where it would appear.
    let installed = Path::new("web/node_modules/.package-lock.json");
    if installed.exists() {
        println!("cargo:rerun-if-changed={}", installed.display());
    } else {
        println!("cargo:rerun-if-changed=web");
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let local = Path::new("web/node_modules");
    let modules = if ASSETS.iter().all(|(file, _)| local.join(file).exists()) {
        local.to_owned()
    } else {
        install(&out.join("web"))
    };
    let assets = out.join("assets");
    std::fs::create_dir_all(&assets).expect("creating the assets directory");
    for (file, name) in ASSETS {
        let from = modules.join(file);
        std::fs::copy(&from, assets.join(name)).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
    }
    bundle_dashboard(&modules, &assets);
}

/// Bundles and minifies the dashboard (`web/src/main.jsx` and `styles.css`) with esbuild into
/// `dashboard.js` and `dashboard.css`, and writes `dashboard.html` with a version that changes
/// with them, so that browsers never mix an old page with new scripts.
fn bundle_dashboard(modules: &Path, assets: &Path) {
    let esbuild = modules.join("esbuild/bin/esbuild");
    for (entry, out) in [
        ("web/src/main.jsx", "dashboard.js"),
        ("web/src/styles.css", "dashboard.css"),
    ] {
        let status = Command::new("node")
            .arg(&esbuild)
            .args([
                entry,
                "--bundle",
                "--minify",
                "--format=esm",
                "--target=es2020,chrome100,firefox100,safari15",
                "--jsx=automatic",
                "--jsx-import-source=preact",
                "--legal-comments=none",
                "--log-level=warning",
            ])
            .arg(format!("--outfile={}", assets.join(out).display()))
            // The packages may live in the build's own directory rather than beside the sources.
            .env("NODE_PATH", modules)
            .status()
            .unwrap_or_else(|e| panic!("running esbuild with node ({e}); jobgate needs Node.js to build"));
        assert!(status.success(), "esbuild failed to bundle {entry} ({status})");
    }
    // Only needs to change when the bundles do; DefaultHasher::new() has fixed keys.
    let mut hash = DefaultHasher::new();
    for out in ["dashboard.js", "dashboard.css"] {
        std::fs::read(assets.join(out))
            .expect("reading the bundle")
            .hash(&mut hash);
    }
    let version = format!("{:016x}", hash.finish());
    let page = std::fs::read_to_string("web/src/index.html").expect("reading web/src/index.html");
    std::fs::write(
        assets.join("dashboard.html"),
        page.replace("__VERSION__", &version),
    )
    .expect("writing dashboard.html");
}

/// Runs `npm ci` for web/package.json in `dir`; returns its node_modules.
fn install(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("creating the npm directory");
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(Path::new("web").join(file), dir.join(file)).expect("copying the npm manifest");
    }
    let modules = dir.join("node_modules");
    if ASSETS.iter().all(|(file, _)| modules.join(file).exists()) {
        return modules;
    }
    let status = Command::new("npm")
        .args([
            "ci",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--loglevel=error",
        ])
        .current_dir(dir)
        .status();
    match status {
        Ok(s) if s.success() => modules,
        Ok(s) => panic!("`npm ci` for the web assets failed ({s}); is the npm registry reachable?"),
        Err(e) => panic!(
            "jobgate embeds GraphiQL from npm packages and needs Node.js and npm to build ({e}); \
             install them, or run `npm ci --prefix web` on a machine that has them"
        ),
    }
}
