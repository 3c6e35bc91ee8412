use super::*;

/// What the policy should answer for one address, written out by hand.
#[derive(Debug)]
enum Expect {
    Public,
    /// Refused as in this block ("prefix/len").
    In(&'static str),
    /// Refused as carrying this IPv4 address, in this IPv4 block.
    Carries(Form, &'static str, &'static str),
}

use Expect::{Carries, In, Public};

/// At least one address in every block of both tables, on both sides of its edges where a
/// neighbour differs, and every form of carried IPv4 address with a public and a refused one.
const PROBES: &[(&str, Expect)] = &[
    // IPv4 special-purpose registry.
    ("0.1.2.3", In("0.0.0.0/8")),
    ("0.0.0.0", In("0.0.0.0/32")),
    ("10.0.0.1", In("10.0.0.0/8")),
    ("10.255.255.255", In("10.0.0.0/8")),
    ("11.0.0.0", Public),
    ("100.63.255.255", Public),
    ("100.64.0.1", In("100.64.0.0/10")),
    ("100.127.255.255", In("100.64.0.0/10")),
    ("100.128.0.0", Public),
    ("127.0.0.1", In("127.0.0.0/8")),
    ("127.255.255.254", In("127.0.0.0/8")),
    ("169.254.169.254", In("169.254.0.0/16")),
    ("169.255.0.1", Public),
    ("172.15.255.255", Public),
    ("172.16.0.1", In("172.16.0.0/12")),
    ("172.31.255.255", In("172.16.0.0/12")),
    ("172.32.0.0", Public),
    ("192.0.0.100", In("192.0.0.0/24")),
    ("192.0.0.1", In("192.0.0.0/29")),
    ("192.0.0.8", In("192.0.0.8/32")),
    ("192.0.0.9", Public),
    ("192.0.0.10", Public),
    ("192.0.0.11", In("192.0.0.0/24")),
    ("192.0.0.170", In("192.0.0.170/32")),
    ("192.0.0.171", In("192.0.0.171/32")),
    ("192.0.2.1", In("192.0.2.0/24")),
    ("192.31.196.1", Public),
    ("192.52.193.1", Public),
    ("192.88.99.1", In("192.88.99.0/24")),
    ("192.88.99.2", In("192.88.99.2/32")),
    ("192.168.1.1", In("192.168.0.0/16")),
    ("192.175.48.1", Public),
    ("198.17.255.255", Public),
    ("198.18.0.1", In("198.18.0.0/15")),
    ("198.19.255.255", In("198.18.0.0/15")),
    ("198.20.0.0", Public),
    ("198.51.100.7", In("198.51.100.0/24")),
    ("203.0.113.9", In("203.0.113.0/24")),
    ("240.0.0.1", In("240.0.0.0/4")),
    ("255.255.255.254", In("240.0.0.0/4")),
    ("255.255.255.255", In("255.255.255.255/32")),
    // IPv4 address space: multicast.
    ("223.255.255.255", Public),
    ("224.0.0.1", In("224.0.0.0/4")),
    ("239.255.255.255", In("224.0.0.0/4")),
    ("8.8.8.8", Public),
    ("93.184.216.34", Public),
    // IPv6 special-purpose registry.
    ("::1", In("::1/128")),
    ("::", In("::/128")),
    ("::ffff:8.8.8.8", In("::ffff:0.0.0.0/96")),
    ("64:ff9b::808:808", Public),
    ("64:ff9b:1::808:808", In("64:ff9b:1::/48")),
    ("100::1", In("100::/64")),
    ("100:0:0:1::1", In("100:0:0:1::/64")),
    ("2001:4::1", In("2001::/23")),
    ("2001:1ff::1", In("2001::/23")),
    ("2001:200::1", Public),
    ("2001:0:808:808::f7f7:f7f7", Public),
    ("2001:1::1", Public),
    ("2001:1::2", Public),
    ("2001:1::3", Public),
    ("2001:1::4", In("2001::/23")),
    ("2001:2::1", In("2001:2::/48")),
    ("2001:2:1::1", In("2001::/23")),
    ("2001:3::1", Public),
    ("2001:4:112::1", Public),
    ("2001:10::1", In("2001:10::/28")),
    ("2001:20::1", Public),
    ("2001:30::1", Public),
    ("2001:db8::1", In("2001:db8::/32")),
    ("2002:808:808::", Public),
    ("2620:4f:8000::1", Public),
    ("3fff::1", In("3fff::/20")),
    ("3fff:fff::1", In("3fff::/20")),
    ("3fff:1000::1", Public),
    ("5f00::1", In("5f00::/16")),
    ("fc00::1", In("fc00::/7")),
    ("fd00::1", In("fc00::/7")),
    ("fe80::1", In("fe80::/10")),
    // IPv6 address space.
    ("::8.8.8.8", In("::/0")),
    ("100:0:0:2::1", In("::/0")),
    ("1fff:ffff::1", In("::/0")),
    ("2000::", Public),
    ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public),
    ("4000::1", In("::/0")),
    ("fec0::1", In("fec0::/10")),
    ("ff02::1", In("ff00::/8")),
    ("2606:2800:220:1::1", Public),
    // Each way an IPv6 address carries an IPv4 address: refused when that address is.
    (
        "::ffff:127.0.0.1",
        Carries(Form::Mapped, "127.0.0.1", "127.0.0.0/8"),
    ),
    (
        "::ffff:169.254.169.254",
        Carries(Form::Mapped, "169.254.169.254", "169.254.0.0/16"),
    ),
    ("::7f00:1", Carries(Form::Compatible, "127.0.0.1", "127.0.0.0/8")),
    ("::2", Carries(Form::Compatible, "0.0.0.2", "0.0.0.0/8")),
    (
        "::ffff:0:7f00:1",
        Carries(Form::Translated, "127.0.0.1", "127.0.0.0/8"),
    ),
    ("::ffff:0:808:808", In("::/0")),
    (
        "64:ff9b::7f00:1",
        Carries(Form::Nat64, "127.0.0.1", "127.0.0.0/8"),
    ),
    (
        "64:ff9b::a9fe:a9fe",
        Carries(Form::Nat64, "169.254.169.254", "169.254.0.0/16"),
    ),
    (
        "64:ff9b::c612:1",
        Carries(Form::Nat64, "198.18.0.1", "198.18.0.0/15"),
    ),
    (
        "64:ff9b:1::a00:1",
        Carries(Form::LocalNat64, "10.0.0.1", "10.0.0.0/8"),
    ),
    (
        "2002:7f00:1::",
        Carries(Form::SixToFour, "127.0.0.1", "127.0.0.0/8"),
    ),
    (
        "2002:a9fe:a9fe::1",
        Carries(Form::SixToFour, "169.254.169.254", "169.254.0.0/16"),
    ),
    (
        "2002:c000:201::",
        Carries(Form::SixToFour, "192.0.2.1", "192.0.2.0/24"),
    ),
    (
        "2001:0:7f00:1::f7f7:f7f7",
        Carries(Form::TeredoServer, "127.0.0.1", "127.0.0.0/8"),
    ),
    (
        "2001:0:808:808::80ff:fffe",
        Carries(Form::TeredoClient, "127.0.0.1", "127.0.0.0/8"),
    ),
    // RFC 4380's example: server 65.54.227.120, client 192.0.2.45.
    (
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        Carries(Form::TeredoClient, "192.0.2.45", "192.0.2.0/24"),
    ),
    (
        "2606:2800:220:1:0:5efe:7f00:1",
        Carries(Form::Isatap, "127.0.0.1", "127.0.0.0/8"),
    ),
    (
        "2606:2800:220:1:200:5efe:a9fe:a9fe",
        Carries(Form::Isatap, "169.254.169.254", "169.254.0.0/16"),
    ),
    ("2606:2800:220:1:200:5efe:808:808", Public),
    ("2606:2800:220:1:100:5efe:7f00:1", Public),
];

fn block_text<A: fmt::Display>(b: &Block<A>) -> String {
    format!("{}/{}", b.prefix, b.len)
}

#[test]
fn every_probe_gets_its_verdict() {
    for (text, expect) in PROBES {
        let ip: IpAddr = text.parse().expect("an address");
        let got = refusal(ip);
        let ok = match (expect, got) {
            (Public, None) => true,
            (In(block), Some(Refusal::V4(b))) => block_text(b) == *block,
            (In(block), Some(Refusal::V6(b))) => block_text(b) == *block,
            (
                Carries(form, v4, block),
                Some(Refusal::Carries {
                    form: f,
                    v4: a,
                    block: b,
                }),
            ) => f == *form && a.to_string() == *v4 && block_text(b) == *block,
            _ => false,
        };
        assert!(ok, "{text}: expected {expect:?}, got {got:?}");
    }
}

/// Every block of both tables decides at least one probe, so a block added to a table comes
/// with a probe of its own.
#[test]
fn every_block_is_probed() {
    let probes: Vec<IpAddr> = PROBES.iter().map(|(t, _)| t.parse().unwrap()).collect();
    for block in IPV4 {
        let decided = probes.iter().any(|ip| match ip {
            IpAddr::V4(ip) => {
                let held = |b: &Block<Ipv4Addr>| {
                    within(u32::from(*ip).into(), u32::from(b.prefix).into(), b.len, 32)
                };
                most_specific(IPV4, held) == Some(block)
            }
            IpAddr::V6(_) => false,
        });
        assert!(decided, "no probe in {block}");
    }
    for block in IPV6 {
        let decided = probes.iter().any(|ip| match ip {
            IpAddr::V6(ip) => {
                let held = |b: &Block<Ipv6Addr>| within(u128::from(*ip), u128::from(b.prefix), b.len, 128);
                most_specific(IPV6, held) == Some(block)
            }
            IpAddr::V4(_) => false,
        });
        assert!(decided, "no probe in {block}");
    }
}

#[test]
fn every_prefix_is_aligned_to_its_length() {
    for b in IPV4 {
        let host_bits = 32 - u32::from(b.len);
        assert_eq!(
            u32::from(b.prefix).checked_shl(32 - host_bits).unwrap_or(0),
            0,
            "{b}"
        );
    }
    for b in IPV6 {
        let host_bits = 128 - u32::from(b.len);
        assert_eq!(
            u128::from(b.prefix).checked_shl(128 - host_bits).unwrap_or(0),
            0,
            "{b}"
        );
    }
}

#[test]
fn refusals_name_the_block_and_the_carried_address() {
    let says = |ip: &str| refusal(ip.parse().unwrap()).unwrap().to_string();
    assert_eq!(
        says("2002:7f00:1::"),
        "a 6to4 address embedding 127.0.0.1, which is in 127.0.0.0/8 (Loopback, RFC 1122, section 3.2.1.3), \
         not globally reachable"
    );
    assert_eq!(
        says("198.18.0.1"),
        "in 198.18.0.0/15 (Benchmarking, RFC 2544), not globally reachable"
    );
    assert_eq!(
        says("2001:10::1"),
        "in 2001:10::/28 (Deprecated (previously ORCHID), RFC 4843), an allocation that has ended"
    );
    assert_eq!(
        says("2001:0:808:808::80ff:fffe"),
        "a Teredo address whose client is 127.0.0.1, which is in 127.0.0.0/8 (Loopback, RFC 1122, section \
         3.2.1.3), not globally reachable"
    );
}
