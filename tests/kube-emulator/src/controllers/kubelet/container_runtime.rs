//! What a container runtime reports and the kubelet prints: normalized image references, stable
//! image ids, random container ids, and Go's `time.Duration` format for back-off messages.
//!
//! Pure string functions: they must not know pods or their status.

use std::time::Duration;

/// Go's `time.Duration` formatting for the durations the kubelet prints (`10s`, `20ms`, `1m20s`).
pub(super) fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        let s = format!("{secs:.3}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        return format!("{s}s");
    }
    let whole = d.as_secs();
    format!("{}m{}s", whole / 60, whole % 60)
}

/// `busybox:1.36` → `docker.io/library/busybox:1.36`, as container runtimes report images.
pub(super) fn normalize_image(image: &str) -> String {
    if image.is_empty() {
        return String::new();
    }
    let (first, rest) = image.split_once('/').unwrap_or(("", image));
    let qualified = if first.is_empty() {
        format!("docker.io/library/{rest}")
    } else if first.contains('.') || first.contains(':') || first == "localhost" {
        image.to_owned()
    } else {
        format!("docker.io/{image}")
    };
    let last = qualified.rsplit('/').next().unwrap_or_default();
    if qualified.contains('@') || last.contains(':') {
        qualified
    } else {
        format!("{qualified}:latest")
    }
}

/// A stable digest-style image id for an image reference.
pub(super) fn image_id(image: &str) -> String {
    let normalized = normalize_image(image);
    let repo = match normalized.split_once('@') {
        Some((repo, _)) => repo.to_owned(),
        None => {
            let cut = normalized.rfind(':').filter(|&i| !normalized[i..].contains('/'));
            cut.map_or(normalized.clone(), |i| normalized[..i].to_owned())
        }
    };
    format!("{repo}@sha256:{}", stable_hex(&normalized, 64))
}

/// `n` hex digits derived from `s` (FNV-1a with varying seeds): the same image always gets the
/// same id.
fn stable_hex(s: &str, n: usize) -> String {
    let mut out = String::with_capacity(n);
    let mut seed: u64 = 0xcbf2_9ce4_8422_2325;
    while out.len() < n {
        let mut h = seed;
        for b in s.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        out.push_str(&format!("{h:016x}"));
        seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    }
    out.truncate(n);
    out
}

pub(super) fn random_hex(n: usize) -> String {
    let mut out = String::with_capacity(n);
    while out.len() < n {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_normalized_like_a_runtime_reports_them() {
        assert_eq!(normalize_image("busybox:1.36"), "docker.io/library/busybox:1.36");
        assert_eq!(normalize_image("busybox"), "docker.io/library/busybox:latest");
        assert_eq!(normalize_image("org/app:v1"), "docker.io/org/app:v1");
        assert_eq!(normalize_image("ghcr.io/o/a"), "ghcr.io/o/a:latest");
        assert_eq!(normalize_image("localhost:5000/a:1"), "localhost:5000/a:1");
        let id = image_id("busybox:1.36");
        assert!(id.starts_with("docker.io/library/busybox@sha256:"), "{id}");
        assert_eq!(id, image_id("busybox:1.36"));
        assert_eq!(id.rsplit(':').next().map(str::len), Some(64));
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(go_duration(Duration::from_millis(50)), "50ms");
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
    }
}
