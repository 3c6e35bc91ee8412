//! Certificates for the tests' TLS servers (PostgreSQL taking TLS only, a TLS front before
//! jobgate), made with Debian's `openssl`: a CA of their own, a server certificate it signs,
//! and a CA that signs nothing (for a client that must refuse the server). It makes files; it
//! must not decide who trusts them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The files [`make`] wrote.
pub struct Certificates {
    /// The CA that signed the server's certificate.
    pub ca: PathBuf,
    /// A CA that signed nothing here.
    pub untrusted_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
}

/// Writes into `dir` (which must exist) a CA, a server certificate for `san` (an openssl
/// subjectAltName value such as `IP:127.0.0.1` or `DNS:localhost`) that it signs, and a CA that
/// signs nothing.
pub fn make(dir: &Path, san: &str) -> Certificates {
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .expect("running openssl (apt-get install openssl)");
        assert!(
            output.status.success(),
            "openssl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let new_ca = |key: &str, cert: &str, name: &str| {
        openssl(&[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", key, "-out", cert,
            "-subj", name,
        ]);
    };
    new_ca("ca.key", "ca.crt", "/CN=jobgate test CA");
    new_ca("other-ca.key", "other-ca.crt", "/CN=jobgate untrusted CA");
    let common_name = san.split_once(':').map_or(san, |(_, name)| name);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        &format!("/CN={common_name}"),
    ]);
    std::fs::write(dir.join("san.ext"), format!("subjectAltName={san}\n")).unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "san.ext",
        "-out",
        "server.crt",
    ]);
    Certificates {
        ca: dir.join("ca.crt"),
        untrusted_ca: dir.join("other-ca.crt"),
        server_cert: dir.join("server.crt"),
        server_key: dir.join("server.key"),
    }
}
