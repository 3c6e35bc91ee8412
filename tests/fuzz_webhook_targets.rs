//! Property harness for the webhook address policy (`webhooks::addresses`), a pure
//! function, against a reference written here from the same IANA registries: the IPv4 and IPv6
//! Special-Purpose Address Registries and the non-unicast parts of both address spaces, as
//! prefix/length strings with the registry's "Globally Reachable" value, and the ways an IPv6
//! address carries an IPv4 address, as bit arithmetic on the whole address.
//!
//! - for random IPv4 and IPv6 addresses (uniform, and drawn in and at the edges of every
//!   block), the policy refuses exactly what the reference refuses;
//! - an IPv6 address carrying a refused IPv4 address, in each form, is refused;
//! - no string makes `Target::parse` panic, and a URL with an IP literal is refused by
//!   `Target::resolve` exactly when the policy refuses its address (no DNS is asked).
//!
//! Cases per property: `JOBGATE_FUZZ_CASES` (default [`DEFAULT_CASES`]). The known bad shapes
//! run every time as seeds.
//!
//! No jobgate runs: the policy and `Target` are called as the library's functions.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use jobgate::webhooks::addresses::refusal;
use jobgate::webhooks::target::{Target, TargetError};
use proptest::prelude::*;
use proptest::test_runner::Config;

/// Some 5 s of a debug build per property on two busy cores.
const DEFAULT_CASES: u32 = 100_000;

fn config() -> Config {
    let cases = std::env::var("JOBGATE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// The registry's "Globally Reachable" column: `T`rue, `F`alse, `N/A` (the block carries
/// IPv4 addresses and is judged by them) or `-` (the allocation was terminated; empty row).
const V4_TABLE: &[(&str, &str)] = &[
    ("0.0.0.0/8", "F"),
    ("0.0.0.0/32", "F"),
    ("10.0.0.0/8", "F"),
    ("100.64.0.0/10", "F"),
    ("127.0.0.0/8", "F"),
    ("169.254.0.0/16", "F"),
    ("172.16.0.0/12", "F"),
    ("192.0.0.0/24", "F"),
    ("192.0.0.0/29", "F"),
    ("192.0.0.8/32", "F"),
    ("192.0.0.9/32", "T"),
    ("192.0.0.10/32", "T"),
    ("192.0.0.170/32", "F"),
    ("192.0.0.171/32", "F"),
    ("192.0.2.0/24", "F"),
    ("192.31.196.0/24", "T"),
    ("192.52.193.0/24", "T"),
    ("192.88.99.0/24", "-"),
    ("192.88.99.2/32", "F"),
    ("192.168.0.0/16", "F"),
    ("192.175.48.0/24", "T"),
    ("198.18.0.0/15", "F"),
    ("198.51.100.0/24", "F"),
    ("203.0.113.0/24", "F"),
    ("240.0.0.0/4", "F"),
    ("255.255.255.255/32", "F"),
    // IPv4 Address Space: multicast.
    ("224.0.0.0/4", "F"),
];

const V6_TABLE: &[(&str, &str)] = &[
    ("::1/128", "F"),
    ("::/128", "F"),
    ("::ffff:0:0/96", "F"),
    ("64:ff9b::/96", "T"),
    ("64:ff9b:1::/48", "F"),
    ("100::/64", "F"),
    ("100:0:0:1::/64", "F"),
    ("2001::/23", "F"),
    ("2001::/32", "N/A"),
    ("2001:1::1/128", "T"),
    ("2001:1::2/128", "T"),
    ("2001:1::3/128", "T"),
    ("2001:2::/48", "F"),
    ("2001:3::/32", "T"),
    ("2001:4:112::/48", "T"),
    ("2001:10::/28", "-"),
    ("2001:20::/28", "T"),
    ("2001:30::/28", "T"),
    ("2001:db8::/32", "F"),
    ("2002::/16", "N/A"),
    ("2620:4f:8000::/48", "T"),
    ("3fff::/20", "F"),
    ("5f00::/16", "F"),
    ("fc00::/7", "F"),
    ("fe80::/10", "F"),
    // IPv6 Address Space: only 2000::/3 is global unicast; outside it, what the table above
    // does not name is reserved by the IETF, multicast or the deprecated site-local block.
    ("::/0", "F"),
    ("2000::/3", "T"),
    ("fec0::/10", "F"),
    ("ff00::/8", "F"),
];

/// A parsed block: its first address and length, as a `width`-bit number.
#[derive(Clone, Copy, Debug)]
struct Prefix {
    first: u128,
    len: u32,
    width: u32,
    reach: &'static str,
}

impl Prefix {
    fn holds(&self, addr: u128) -> bool {
        // With every host bit set, an address in the block is its last one.
        addr | (self.last() ^ self.first) == self.last()
    }

    /// The block's last address.
    fn last(&self) -> u128 {
        let host = self.width - self.len;
        let ones = if host == 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        };
        self.first | ones
    }
}

fn parse(table: &'static [(&'static str, &'static str)], width: u32) -> Vec<Prefix> {
    table
        .iter()
        .map(|(text, reach)| {
            let (addr, len) = text.split_once('/').unwrap();
            let first = if width == 32 {
                u128::from(u32::from(addr.parse::<Ipv4Addr>().unwrap()))
            } else {
                u128::from(addr.parse::<Ipv6Addr>().unwrap())
            };
            Prefix {
                first,
                len: len.parse().unwrap(),
                width,
                reach,
            }
        })
        .collect()
}

fn v4_blocks() -> Vec<Prefix> {
    parse(V4_TABLE, 32)
}

fn v6_blocks() -> Vec<Prefix> {
    parse(V6_TABLE, 128)
}

/// The registry's word on `addr`: that of the longest prefix holding it, if any.
fn reach(blocks: &[Prefix], addr: u128) -> Option<&'static str> {
    blocks
        .iter()
        .filter(|b| b.holds(addr))
        .max_by_key(|b| b.len)
        .map(|b| b.reach)
}

fn v4_public(ip: Ipv4Addr) -> bool {
    matches!(reach(&v4_blocks(), u128::from(u32::from(ip))), None | Some("T"))
}

/// The IPv4 addresses an IPv6 address carries, each way it can.
fn carried(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let a = u128::from(ip);
    let low = |x: u128| Ipv4Addr::from(x as u32);
    let mut out = Vec::new();
    // IPv4-mapped ::ffff:0:0/96.
    if a >> 32 == 0xffff {
        out.push(low(a));
    }
    // IPv4-compatible ::/96, but :: and ::1.
    if a >> 32 == 0 && a > 1 {
        out.push(low(a));
    }
    // IPv4-translated ::ffff:0:0:0/96.
    if a >> 32 == 0xffff_0000 {
        out.push(low(a));
    }
    // NAT64, well-known 64:ff9b::/96 and local-use 64:ff9b:1::/48 (as a /96 within it).
    if a >> 32 == 0x0064_ff9b_0000_0000_0000_0000 || a >> 80 == 0x0064_ff9b_0001 {
        out.push(low(a));
    }
    // 6to4 2002::/16: bits 16-47.
    if a >> 112 == 0x2002 {
        out.push(low(a >> 80));
    }
    // Teredo 2001::/32: the server in bits 32-63, the client inverted in the last 32.
    if a >> 96 == 0x2001_0000 {
        out.push(low(a >> 64));
        out.push(low(!a));
    }
    // ISATAP interface identifiers 0000:5efe and 0200:5efe.
    if matches!((a >> 32) as u32, 0x0000_5efe | 0x0200_5efe) {
        out.push(low(a));
    }
    out
}

fn v6_public(ip: Ipv6Addr) -> bool {
    carried(ip).into_iter().all(v4_public) && matches!(reach(&v6_blocks(), u128::from(ip)), Some("T" | "N/A"))
}

fn reference_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(ip) => v4_public(ip),
        IpAddr::V6(ip) => v6_public(ip),
    }
}

/// An address in, or just outside, one block of `blocks`: its first or last address, one
/// before or after, or a random one inside.
fn near_blocks(blocks: Vec<Prefix>) -> impl Strategy<Value = u128> {
    (0..blocks.len(), 0..5u8, any::<u128>()).prop_map(move |(i, at, noise)| {
        let b = blocks[i];
        let width_mask = u128::MAX >> (128 - b.width);
        let inside = b.first | (noise & (b.last() - b.first));
        let addr = match at {
            0 => b.first,
            1 => b.last(),
            2 => b.first.wrapping_sub(1),
            3 => b.last().wrapping_add(1),
            _ => inside,
        };
        addr & width_mask
    })
}

fn any_v4() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        any::<u32>().prop_map(Ipv4Addr::from),
        near_blocks(v4_blocks()).prop_map(|a| Ipv4Addr::from(a as u32)),
    ]
}

fn any_v6() -> impl Strategy<Value = Ipv6Addr> {
    prop_oneof![
        any::<u128>().prop_map(Ipv6Addr::from),
        near_blocks(v6_blocks()).prop_map(Ipv6Addr::from),
        (0..FORMS, any_v4(), any::<u128>()).prop_map(|(form, v4, noise)| carrying(form, v4, noise)),
    ]
}

const FORMS: usize = 9;

/// `v4` carried in form number `form`, the other bits from `noise` where the form leaves any.
fn carrying(form: usize, v4: Ipv4Addr, noise: u128) -> Ipv6Addr {
    let v4 = u128::from(u32::from(v4));
    Ipv6Addr::from(match form {
        0 => 0xffff_0000_0000 | v4,
        1 => v4,
        2 => 0xffff_0000_0000_0000 | v4,
        3 => 0x0064_ff9b_0000_0000_0000_0000_0000_0000 | v4,
        4 => (0x0064_ff9b_0001u128 << 80) | (noise & (0xffff_ffff_ffff << 32)) | v4,
        5 => (0x2002u128 << 112) | (v4 << 80) | (noise & ((1u128 << 80) - 1)),
        6 => (0x2001_0000u128 << 96) | (v4 << 64) | (noise & ((1u128 << 64) - 1)),
        7 => (0x2001_0000u128 << 96) | (noise & (((1u128 << 64) - 1) << 32)) | (!v4 & 0xffff_ffff),
        _ => {
            (noise & (u128::MAX << 64)) | (if noise & 1 == 0 { 0x0000_5efe } else { 0x0200_5efe } << 32) | v4
        }
    })
}

fn check(ip: IpAddr) {
    let expected = reference_public(ip);
    let got = refusal(ip);
    assert_eq!(got.is_none(), expected, "{ip}: the policy says {got:?}");
}

/// Known shapes that were accepted, or that carry loopback or metadata addresses, and the
/// public addresses of the same shapes.
const SEEDS: &[&str] = &[
    "2002:7f00:1::",
    "2002:a9fe:a9fe::",
    "2002:808:808::",
    "2001:0:7f00:1::f7f7:f7f7",
    "2001:0:808:808::80ff:fffe",
    "2001:0:808:808::f7f7:f7f7",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "64:ff9b::7f00:1",
    "64:ff9b::a9fe:a9fe",
    "64:ff9b::808:808",
    "64:ff9b:1::7f00:1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "::ffff:8.8.8.8",
    "::ffff:0:7f00:1",
    "::7f00:1",
    "fec0::1",
    "2001:db8::1",
    "198.18.0.1",
    "192.0.0.1",
    "192.0.0.9",
    "192.0.2.1",
    "198.51.100.1",
    "203.0.113.1",
    "2606:2800:220:1:200:5efe:a9fe:a9fe",
    "169.254.169.254",
    "127.0.0.1",
    "::1",
    "8.8.8.8",
];

#[test]
fn seeds_agree_with_the_reference() {
    for seed in SEEDS {
        check(seed.parse().unwrap());
    }
    for refused in [
        "2002:7f00:1::",
        "64:ff9b::a9fe:a9fe",
        "2001:0:808:808::80ff:fffe",
        "198.18.0.1",
    ] {
        assert!(refusal(refused.parse().unwrap()).is_some(), "{refused}");
    }
    for public in [
        "2002:808:808::",
        "64:ff9b::808:808",
        "2001:0:808:808::f7f7:f7f7",
        "192.0.0.9",
    ] {
        assert!(refusal(public.parse().unwrap()).is_none(), "{public}");
    }
}

/// The reference itself, on addresses whose answers are known, so that the properties below
/// compare the policy with something that is right.
#[test]
fn the_reference_knows_the_registries() {
    for (ip, public) in [
        ("127.0.0.1", false),
        ("192.0.0.9", true),
        ("192.0.0.11", false),
        ("192.88.99.1", false),
        ("224.0.0.1", false),
        ("8.8.8.8", true),
        ("2001:1::1", true),
        ("2001:1::4", false),
        ("2002:808:808::", true),
        ("2002:7f00:1::", false),
        ("2001:0:808:808::80ff:fffe", false),
        ("fec0::1", false),
        ("2606:2800:220:1::1", true),
        ("::ffff:8.8.8.8", false),
    ] {
        assert_eq!(reference_public(ip.parse().unwrap()), public, "{ip}");
    }
    for form in 0..FORMS {
        let ip = carrying(form, Ipv4Addr::new(127, 0, 0, 1), u128::MAX);
        assert!(
            carried(ip).contains(&Ipv4Addr::new(127, 0, 0, 1)),
            "form {form}: {ip}"
        );
    }
}

/// URLs that are nearly valid, or valid with an IP literal in one of its spellings.
fn url_text() -> impl Strategy<Value = String> {
    let literal = prop_oneof![
        any_v4().prop_map(|ip| ip.to_string()),
        any_v6().prop_map(|ip| format!("[{ip}]")),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<u32>().prop_map(|n| format!("0x{n:x}")),
        "[0-9a-fA-FxX:.%\\[\\]]{0,40}",
    ];
    prop_oneof![
        ".{0,120}",
        (
            "(https?|ftp|file|HTTP|)(://|:/|:|//)?",
            literal,
            "(:[0-9]{0,6})?",
            "(/[ -~]{0,30})?"
        )
            .prop_map(|(scheme, host, port, path)| format!("{scheme}{host}{port}{path}")),
        "[a-z]{1,6}://[ -~]{0,60}",
    ]
}

const URL_SEEDS: &[&str] = &[
    "http://[2002:7f00:1::]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://198.18.0.1/",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0x7f.1/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://[::1%25eth0]/",
    "http://[",
    "http://]/",
    "http://a@b@c/",
    "http://:80/",
    "https://[::]:65535/",
    "http://[::ffff:0:7f00:1]:99999/",
    "HTTP://[2001:0:808:808::80FF:FFFE]/",
    "http://%5b::1%5d/",
];

/// Parses `text`; for an IP literal, checks that `resolve` refuses exactly what the policy
/// refuses (no DNS is asked: a literal is not resolved).
fn parse_and_resolve(runtime: &tokio::runtime::Runtime, text: &str) {
    let Ok(target) = Target::parse(text) else { return };
    let ip: IpAddr = match target.url.host() {
        Some(url::Host::Ipv4(ip)) => ip.into(),
        Some(url::Host::Ipv6(ip)) => ip.into(),
        _ => return,
    };
    let resolved = runtime.block_on(target.resolve(false));
    match (refusal(ip), resolved) {
        (None, Ok(r)) => assert_eq!(r.addr.ip(), ip, "{text}"),
        (Some(why), Err(TargetError::RefusedAddress { addr, why: said })) => {
            assert_eq!((addr, said), (ip, why), "{text}");
        }
        (expected, got) => panic!("{text}: the policy says {expected:?}, resolve {got:?}"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = runtime();
}

#[test]
fn url_seeds_parse_without_panic() {
    let runtime = runtime();
    for seed in URL_SEEDS {
        parse_and_resolve(&runtime, seed);
    }
    let long = format!("http://example.com/{}", "a".repeat(5000));
    assert!(Target::parse(&long).is_err());
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ipv4_verdicts_match_the_registry(ip in any_v4()) {
        check(ip.into());
    }

    #[test]
    fn ipv6_verdicts_match_the_registry(ip in any_v6()) {
        check(ip.into());
    }

    #[test]
    fn an_ipv6_address_carrying_a_refused_ipv4_address_is_refused(
        form in 0..FORMS,
        v4 in any_v4(),
        noise in any::<u128>(),
    ) {
        let ip = carrying(form, v4, noise);
        if !v4_public(v4) {
            prop_assert!(refusal(ip.into()).is_some(), "{ip} carries {v4}");
        }
    }

    #[test]
    fn no_url_panics_and_literals_are_judged_by_the_policy(text in url_text()) {
        RUNTIME.with(|runtime| parse_and_resolve(runtime, &text));
    }
}
