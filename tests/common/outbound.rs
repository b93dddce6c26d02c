//! Connections that reach outside this machine (issue 57: nothing a test runs may). The soak's
//! checker looks, every few seconds, at the sockets of its servers, their nodes' agents and
//! everything those started, in the kernel's tables (`/proc/net/{tcp,udp}{,6}`), and fails on
//! any connected, or connecting, to an address that is not this machine's, a private
//! network's or link-local.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// One row of a kernel socket table: its local and remote addresses and its inode.
#[derive(Debug, PartialEq)]
pub struct Row {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub inode: u64,
}

/// The rows of one `/proc/net/{tcp,udp}{,6}` table (its header and any row it cannot read
/// are left out).
pub fn parse_table(text: &str) -> Vec<Row> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            Some(Row {
                local: address(f.get(1)?)?,
                remote: address(f.get(2)?)?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), each 32-bit word in the host's
/// byte order, as the kernel writes them.
fn address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..ip.len() / 8)
        .map(|i| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok())
        .collect::<Option<_>>()?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let ip = match bytes.len() {
        4 => IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])),
        16 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Whether an address is this side of the machine's edge: unspecified, loopback, a private
/// network's, link-local, or one of `own` (the machine's own addresses).
pub fn inside(ip: IpAddr, own: &HashSet<IpAddr>) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    own.contains(&ip)
        || match ip {
            IpAddr::V4(v4) => {
                v4.is_unspecified() || v4.is_loopback() || v4.is_private() || v4.is_link_local()
            }
            IpAddr::V6(v6) => {
                let first = v6.segments()[0];
                v6.is_unspecified()
                    || v6.is_loopback()
                    || (first & 0xfe00) == 0xfc00
                    || (first & 0xffc0) == 0xfe80
            }
        }
}

/// The sockets of `roots` and of every process they started (their descendants): how many are
/// connected or connecting anywhere (a look that sees none looked at nothing), and those
/// outside, as (pid, remote address).
pub fn outside(roots: &[i32]) -> (usize, Vec<(i32, SocketAddr)>) {
    let pids = descendants(roots);
    let mut owner: HashMap<u64, i32> = HashMap::new();
    for pid in &pids {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
        for fd in fds.into_iter().flatten().flatten() {
            let link = std::fs::read_link(fd.path()).unwrap_or_default();
            let link = link.to_string_lossy();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|l| l.strip_suffix(']'))
            {
                owner.insert(inode.parse().unwrap_or(0), *pid);
            }
        }
    }
    let rows: Vec<Row> = ["tcp", "tcp6", "udp", "udp6"]
        .iter()
        .flat_map(|t| {
            parse_table(&std::fs::read_to_string(format!("/proc/net/{t}")).unwrap_or_default())
        })
        .collect();
    let own: HashSet<IpAddr> = rows.iter().map(|r| r.local.ip()).collect();
    let connected: Vec<(i32, &Row)> = rows
        .iter()
        .filter(|r| r.remote.port() != 0)
        .filter_map(|r| Some((*owner.get(&r.inode)?, r)))
        .collect();
    let out = connected
        .iter()
        .filter(|(_, r)| !inside(r.remote.ip(), &own))
        .map(|(pid, r)| (*pid, r.remote))
        .collect();
    (connected.len(), out)
}

/// `roots` and all their descendants that are alive, by the parent pids in `/proc/*/stat`.
fn descendants(roots: &[i32]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The command's name, in parentheses, may hold spaces: the fields after it count.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut all = roots.to_vec();
    let mut i = 0;
    while i < all.len() {
        all.extend(children.get(&all[i]).into_iter().flatten());
        i += 1;
    }
    all
}

#[test]
fn a_connection_to_a_public_address_is_outside_and_loopback_is_not() {
    let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0
   1: 0100007F:9C40 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1
   2: 0A000002:9C41 08080808:0035 02 00000000:00000000 00:00000000 00000000     0        0 333 1 0 20 4 30 10 -1";
    let rows = parse_table(table);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1].local, "127.0.0.1:40000".parse().unwrap());
    assert_eq!(rows[2].remote, "8.8.8.8:53".parse().unwrap());
    assert_eq!(rows[2].inode, 333);
    let own = HashSet::new();
    let out: Vec<&Row> = rows
        .iter()
        .filter(|r| !inside(r.remote.ip(), &own))
        .collect();
    assert_eq!(out, [&rows[2]]);
    let v6 = "  sl  local_address remote_address st
   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:9C40 01 0 0 0 0 0 444
   1: 00000000000000000000000001000000:1F90 0000000000000000FFFF000008080808:0035 02 0 0 0 0 0 555";
    let rows = parse_table(v6);
    assert!(inside(rows[0].remote.ip(), &own), "{rows:?}");
    assert_eq!(rows[1].remote, "[::ffff:8.8.8.8]:53".parse().unwrap());
    assert!(!inside(rows[1].remote.ip(), &own));
}
