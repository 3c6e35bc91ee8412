//! Which IP addresses a webhook may be sent to: the IANA special-purpose address registries
//! (IPv4 and IPv6, RFC 6890 and its updates) and the parts of each address space that are not
//! unicast the Internet routes, written out as data in [`IPV4`] and [`IPV6`]; and the IPv4
//! addresses that IPv6 addresses carry (IPv4-mapped, -compatible and -translated, NAT64, 6to4,
//! Teredo, ISATAP), which are judged too.
//!
//! An address is public when the most specific block of its table that holds it is globally
//! reachable (an address no IPv4 block holds is) and no IPv4 address it carries is refused.
//! The registries' "N/A" blocks (6to4, Teredo) are judged by the addresses they carry alone;
//! blocks whose allocation ended are refused. This module only classifies: no resolution,
//! no I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use Reach::{Carried, Ended, Global, Local};

/// What the registries say of a block's reachability.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// "Globally Reachable: True".
    Global,
    /// "False", or address space that is not unicast the Internet routes (multicast,
    /// reserved by the IETF).
    Local,
    /// "N/A": the block's addresses carry IPv4 addresses (6to4, Teredo) and are as reachable
    /// as those are.
    Carried,
    /// The allocation has ended (the registry's row is empty): nothing should answer there.
    Ended,
}

/// One block of a table: its prefix, the registry's name for it and the RFC that defines it.
#[derive(Debug, PartialEq, Eq)]
pub struct Block<A> {
    pub prefix: A,
    pub len: u8,
    pub name: &'static str,
    pub rfc: &'static str,
    pub reach: Reach,
}

impl<A: fmt::Display> fmt::Display for Block<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} ({}, {}), ", self.prefix, self.len, self.name, self.rfc)?;
        f.write_str(match self.reach {
            Reach::Ended => "an allocation that has ended",
            _ => "not globally reachable",
        })
    }
}

const fn v4(
    prefix: [u8; 4],
    len: u8,
    name: &'static str,
    rfc: &'static str,
    reach: Reach,
) -> Block<Ipv4Addr> {
    let [a, b, c, d] = prefix;
    Block {
        prefix: Ipv4Addr::new(a, b, c, d),
        len,
        name,
        rfc,
        reach,
    }
}
const fn v6(
    prefix: [u16; 8],
    len: u8,
    name: &'static str,
    rfc: &'static str,
    reach: Reach,
) -> Block<Ipv6Addr> {
    let [a, b, c, d, e, f, g, h] = prefix;
    Block {
        prefix: Ipv6Addr::new(a, b, c, d, e, f, g, h),
        len,
        name,
        rfc,
        reach,
    }
}
/// The IANA IPv4 Special-Purpose Address Registry, every entry, and after it the multicast
/// space of the IANA IPv4 Address Space Registry. An address no block holds is public.
#[rustfmt::skip]
pub const IPV4: &[Block<Ipv4Addr>] = &[
    v4([0, 0, 0, 0], 8, "\"This network\"", "RFC 791, section 3.2", Local),
    v4([0, 0, 0, 0], 32, "\"This host on this network\"", "RFC 1122, section 3.2.1.3", Local),
    v4([10, 0, 0, 0], 8, "Private-Use", "RFC 1918", Local),
    v4([100, 64, 0, 0], 10, "Shared Address Space", "RFC 6598", Local),
    v4([127, 0, 0, 0], 8, "Loopback", "RFC 1122, section 3.2.1.3", Local),
    // Where cloud metadata services answer (169.254.169.254).
    v4([169, 254, 0, 0], 16, "Link Local", "RFC 3927", Local),
    v4([172, 16, 0, 0], 12, "Private-Use", "RFC 1918", Local),
    v4([192, 0, 0, 0], 24, "IETF Protocol Assignments", "RFC 6890, section 2.1", Local),
    v4([192, 0, 0, 0], 29, "IPv4 Service Continuity Prefix", "RFC 7335", Local),
    v4([192, 0, 0, 8], 32, "IPv4 dummy address", "RFC 7600", Local),
    v4([192, 0, 0, 9], 32, "Port Control Protocol Anycast", "RFC 7723", Global),
    v4([192, 0, 0, 10], 32, "Traversal Using Relays around NAT Anycast", "RFC 8155", Global),
    v4([192, 0, 0, 170], 32, "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050", Local),
    v4([192, 0, 0, 171], 32, "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050", Local),
    v4([192, 0, 2, 0], 24, "Documentation (TEST-NET-1)", "RFC 5737", Local),
    v4([192, 31, 196, 0], 24, "AS112-v4", "RFC 7535", Global),
    v4([192, 52, 193, 0], 24, "AMT", "RFC 7450", Global),
    v4([192, 88, 99, 0], 24, "Deprecated (6to4 Relay Anycast)", "RFC 7526", Ended),
    v4([192, 88, 99, 2], 32, "6a44-relay anycast address", "RFC 6751", Local),
    v4([192, 168, 0, 0], 16, "Private-Use", "RFC 1918", Local),
    v4([192, 175, 48, 0], 24, "Direct Delegation AS112 Service", "RFC 7534", Global),
    v4([198, 18, 0, 0], 15, "Benchmarking", "RFC 2544", Local),
    v4([198, 51, 100, 0], 24, "Documentation (TEST-NET-2)", "RFC 5737", Local),
    v4([203, 0, 113, 0], 24, "Documentation (TEST-NET-3)", "RFC 5737", Local),
    v4([240, 0, 0, 0], 4, "Reserved", "RFC 1112, section 4", Local),
    v4([255, 255, 255, 255], 32, "Limited Broadcast", "RFC 8190, RFC 919", Local),
    // IPv4 Address Space Registry.
    v4([224, 0, 0, 0], 4, "Multicast", "RFC 5771", Local),
];

/// The IANA IPv6 Special-Purpose Address Registry, every entry, and after it what the IANA
/// IPv6 Address Space Registry says of the space around it: only 2000::/3 is global unicast;
/// the rest is reserved by the IETF, multicast, or the deprecated site-local block. Every
/// address is held by some block (::/0 at least).
#[rustfmt::skip]
pub const IPV6: &[Block<Ipv6Addr>] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "Loopback Address", "RFC 4291", Local),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "Unspecified Address", "RFC 4291", Local),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "IPv4-mapped Address", "RFC 4291", Local),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "IPv4-IPv6 Translat.", "RFC 6052", Global),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "IPv4-IPv6 Translat.", "RFC 8215", Local),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "Discard-Only Address Block", "RFC 6666", Local),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, "Dummy IPv6 Prefix", "RFC 9780", Local),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "IETF Protocol Assignments", "RFC 2928", Local),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "TEREDO", "RFC 4380, RFC 8190", Carried),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, "Port Control Protocol Anycast", "RFC 7723", Global),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, "Traversal Using Relays around NAT Anycast", "RFC 8155", Global),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, "DNS-SD Service Registration Protocol Anycast", "RFC 9665", Global),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, "Benchmarking", "RFC 5180", Local),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, "AMT", "RFC 7450", Global),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, "AS112-v6", "RFC 7535", Global),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, "Deprecated (previously ORCHID)", "RFC 4843", Ended),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, "ORCHIDv2", "RFC 7343", Global),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", Global),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "Documentation", "RFC 3849", Local),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4", "RFC 3056", Carried),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, "Direct Delegation AS112 Service", "RFC 7534", Global),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "Documentation", "RFC 9637", Local),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "Segment Routing (SRv6) SIDs", "RFC 9602", Local),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "Unique-Local", "RFC 4193, RFC 8190", Local),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "Link-Local Unicast", "RFC 4291", Local),
    // IPv6 Address Space Registry.
    v6([0, 0, 0, 0, 0, 0, 0, 0], 0, "Reserved by IETF", "RFC 4291", Local),
    v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3, "Global Unicast", "RFC 4291", Global),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "Site-Local (deprecated)", "RFC 3879", Local),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "Multicast", "RFC 4291", Local),
];

/// How an IPv6 address carries an IPv4 address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// ::ffff:a.b.c.d (RFC 4291).
    Mapped,
    /// ::a.b.c.d, deprecated (RFC 4291); not :: nor ::1.
    Compatible,
    /// ::ffff:0:a.b.c.d (RFC 2765).
    Translated,
    /// 64:ff9b::a.b.c.d (RFC 6052).
    Nat64,
    /// 64:ff9b:1::/48 (RFC 8215) with the address in the last 32 bits, as a /96 prefix
    /// within it embeds it (RFC 6052).
    LocalNat64,
    /// 2002:AABB:CCDD::/48 (RFC 3056).
    SixToFour,
    /// 2001:0:AABB:CCDD::/64, the Teredo server (RFC 4380).
    TeredoServer,
    /// The last 32 bits of a Teredo address, inverted: its client (RFC 4380).
    TeredoClient,
    /// An interface identifier 0000:5efe:a.b.c.d or 0200:5efe:a.b.c.d under any prefix
    /// (RFC 5214).
    Isatap,
}

impl fmt::Display for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Form::Mapped => "an IPv4-mapped address embedding",
            Form::Compatible => "an IPv4-compatible address embedding",
            Form::Translated => "an IPv4-translated address embedding",
            Form::Nat64 => "a NAT64 address embedding",
            Form::LocalNat64 => "a local-use NAT64 address embedding",
            Form::SixToFour => "a 6to4 address embedding",
            Form::TeredoServer => "a Teredo address whose server is",
            Form::TeredoClient => "a Teredo address whose client is",
            Form::Isatap => "an ISATAP address embedding",
        })
    }
}

/// Why an address may not be a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    V4(&'static Block<Ipv4Addr>),
    V6(&'static Block<Ipv6Addr>),
    /// An IPv6 address carrying a refused IPv4 address.
    Carries {
        form: Form,
        v4: Ipv4Addr,
        block: &'static Block<Ipv4Addr>,
    },
}

/// Reads "`<address>` is …".
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::V4(block) => write!(f, "in {block}"),
            Refusal::V6(block) => write!(f, "in {block}"),
            Refusal::Carries { form, v4, block } => write!(f, "{form} {v4}, which is in {block}"),
        }
    }
}

/// Why `ip` may not be a webhook target, or `None` for a public address.
pub fn refusal(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(ip) => refusal_v4(ip).map(Refusal::V4),
        IpAddr::V6(ip) => {
            // The carried address first: it says more than the block around it (an
            // IPv4-mapped loopback address is named as loopback).
            if let Some((form, v4, block)) = carried(ip)
                .into_iter()
                .find_map(|(form, v4)| refusal_v4(v4).map(|block| (form, v4, block)))
            {
                return Some(Refusal::Carries { form, v4, block });
            }
            let block = most_specific(IPV6, |b| within(u128::from(ip), u128::from(b.prefix), b.len, 128))?;
            matches!(block.reach, Reach::Local | Reach::Ended).then_some(Refusal::V6(block))
        }
    }
}

fn refusal_v4(ip: Ipv4Addr) -> Option<&'static Block<Ipv4Addr>> {
    let block = most_specific(IPV4, |b| {
        within(
            u128::from(u32::from(ip)),
            u128::from(u32::from(b.prefix)),
            b.len,
            32,
        )
    })?;
    matches!(block.reach, Reach::Local | Reach::Ended).then_some(block)
}

fn most_specific<A>(
    table: &'static [Block<A>],
    holds: impl Fn(&Block<A>) -> bool,
) -> Option<&'static Block<A>> {
    table.iter().filter(|b| holds(b)).max_by_key(|b| b.len)
}

/// Whether the `width`-bit address `addr` is in the block `prefix`/`len`.
fn within(addr: u128, prefix: u128, len: u8, width: u32) -> bool {
    let host_bits = width - u32::from(len);
    addr.checked_shr(host_bits).unwrap_or(0) == prefix.checked_shr(host_bits).unwrap_or(0)
}

/// The IPv4 addresses `ip` carries, with how it carries each.
pub fn carried(ip: Ipv6Addr) -> Vec<(Form, Ipv4Addr)> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let mut found = Vec::new();
    if s[..5] == [0; 5] && s[5] == 0xffff {
        found.push((Form::Mapped, v4(s[6], s[7])));
    }
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        found.push((Form::Compatible, v4(s[6], s[7])));
    }
    if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        found.push((Form::Translated, v4(s[6], s[7])));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        found.push((Form::Nat64, v4(s[6], s[7])));
    }
    if s[..3] == [0x64, 0xff9b, 1] {
        found.push((Form::LocalNat64, v4(s[6], s[7])));
    }
    if s[0] == 0x2002 {
        found.push((Form::SixToFour, v4(s[1], s[2])));
    }
    if s[..2] == [0x2001, 0] {
        found.push((Form::TeredoServer, v4(s[2], s[3])));
        found.push((Form::TeredoClient, v4(!s[6], !s[7])));
    }
    if matches!(s[4], 0 | 0x0200) && s[5] == 0x5efe {
        found.push((Form::Isatap, v4(s[6], s[7])));
    }
    found
}

#[cfg(test)]
#[path = "addresses_tests.rs"]
mod tests;
