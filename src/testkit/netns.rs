//! Isolated networks: each member in its own Linux network namespace, so it can be cut off from its peers while clients still reach it.
//!
//! Killing or freezing a member (the other faults) takes it away from everyone at once. A
//! network partition is different: the member keeps running and keeps answering the client,
//! but cannot reach its peers, so it loses (or never learns) the leader while the majority
//! elects a new one. Only a real network can do that to real etcd processes; here it is built
//! from namespaces, veth pairs and a bridge with `ip` (iproute2), because this is what every
//! Linux machine has (no iptables or netem needed). It needs root.
//!
//! # The shape of one isolated network
//!
//! ```text
//!  root namespace (the test, the client)           eha-BBBB-PID-br
//!    ehaBBBBc0 10.X.Y.1/30 ─┐                      ┌────────────────┐
//!    ehaBBBBc1 10.X.Y.5/30 ─┼─┐                    │  bridge "br"   │
//!                           │ │                    └──┬──────────┬──┘
//!                           │ │                   port m0      port m1
//!   eha-BBBB-PID-m0         │ │                       │          │
//!    client 10.X.Y.2/30   ──┘ │    peer 10.X.Y.138/25 ┘          │
//!   eha-BBBB-PID-m1           │                                  │
//!    client 10.X.Y.6/30   ────┘    peer 10.X.Y.139/25 ───────────┘
//! ```
//!
//! Member `i` serves clients on `10.X.Y.(4i+2):2379` over its own point-to-point link to the root
//! namespace, and talks raft to its peers on `10.X.Y.(138+i):2380` through the bridge. A
//! partition detaches member `i`'s port from the bridge (`nomaster`): both links stay up, and
//! frames to and from its peers silently vanish, as in a real partition. (Setting the link down
//! instead would hand etcd an immediate "network unreachable", which real partitions do not.)
//! Since every member has its own addresses, ports are fixed and never collide.
//!
//! # Names, address blocks and clean-up
//!
//! `BBBB` is a hex *block* number that picks the cluster's `10.X.Y.0/24` (X in 200..=254), and
//! `PID` is the creating process. A block is claimed by creating the root end of member 0's
//! link, `ehaBBBBc0`: interface names are unique per namespace and the kernel creates them
//! atomically, so two processes can never claim one block. Blocks overlapping any address or
//! route of the root namespace are skipped.
//!
//! Dropping the network deletes every link and namespace it created, by name. A test process
//! killed with SIGKILL cannot do that; its members die with it (see `spawner`), and the next
//! isolated cluster started on the machine deletes every `eha-*` namespace whose PID no longer
//! runs. Deleting a namespace also deletes the veth pairs with an end in it.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

use super::TestkitError;

/// Where `ip netns add` puts its namespace files (iproute2's `NETNS_RUN_DIR`).
const NETNS_DIR: &str = "/var/run/netns";

/// Every namespace name of ours starts with this; the sweep looks at nothing else.
const NAME_PREFIX: &str = "eha-";

/// Second octet of the first address block: 10.200.0.0/24. Private space, far from the
/// 10.0–10.100 ranges that container and cloud networks like to take.
const FIRST_OCTET2: u16 = 200;

/// Number of /24 blocks: 10.200.0.0 up to 10.254.255.0.
const BLOCKS: u16 = 55 * 256;

/// Blocks tried at random before giving up. Only a machine with thousands of concurrent test
/// clusters, or routes over all of 10.200/16–10.254/16, runs out.
const CLAIM_ATTEMPTS: usize = 64;

/// Members per network: member `i`'s /30 at `4i` must stay below the peer half (`.128/25`).
pub(crate) const MAX_MEMBERS: usize = 32;

/// Client port of every member; fixed, since each member has an address of its own.
pub(crate) const CLIENT_PORT: u16 = 2379;

/// Peer port of every member, etcd's default like the client port.
pub(crate) const PEER_PORT: u16 = 2380;

/// First peer address in the block's upper half: member `i` is at `.(PEER_BASE + i)`.
const PEER_BASE: u8 = 138;

/// Name of the bridge inside the bridge namespace, and of the member's links inside its own
/// namespace. Interface names are per namespace, so these can be the same in every one.
/// (Every `ip link` call below says `name` or `dev` explicitly: a bare "br" would be read as
/// the keyword `broadcast`.)
const BRIDGE: &str = "br0";
const CLIENT_LINK: &str = "client";
const PEER_LINK: &str = "peer";

/// Names (`eha-BBBB-PID`) of the networks this process owns right now, so that the sweep never
/// deletes a network that a parallel test in this process is still building or using, while
/// it does delete one left by an earlier process that had the same pid.
static OWNED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// One cluster's isolated network: the namespaces, links and addresses of its members.
#[derive(Debug)]
pub(crate) struct Network {
    /// The address block: this network uses `10.(200 + block / 256).(block % 256).0/24`.
    block: u16,
    /// `eha-BBBB-PID`: the start of every namespace name of this network.
    name: String,
    /// Number of members.
    members: usize,
    /// Namespaces created so far, deleted on drop. Only what *we* created: a failed claim
    /// must not delete the namespace or link of whoever holds the block.
    namespaces: Vec<String>,
    /// Root-namespace ends of the client links created so far, deleted on drop.
    root_links: Vec<String>,
}

impl Network {
    /// Builds an isolated network for `members` members; blocking (runs `ip` a few dozen times).
    ///
    /// Fails with [`TestkitError::NetnsNeedsRoot`] or [`TestkitError::IpMissing`] rather than
    /// skipping. First deletes namespaces left behind by dead test processes.
    pub(crate) fn create(members: usize) -> Result<Network, TestkitError> {
        // SAFETY: geteuid(2) cannot fail and touches no memory.
        let euid = unsafe { libc::geteuid() };
        if euid != 0 {
            return Err(TestkitError::NetnsNeedsRoot { euid });
        }
        if members > MAX_MEMBERS {
            return Err(TestkitError::TooManyMembers {
                members,
                max: MAX_MEMBERS,
            });
        }
        sweep()?;
        let taken = root_prefixes()?;
        for _ in 0..CLAIM_ATTEMPTS {
            let block = fastrand::u16(..BLOCKS);
            if taken
                .iter()
                .any(|&(net, len)| overlaps(block_net(block), 24, net, len))
            {
                continue;
            }
            if let Some(mut network) = Network::claim(block, members)? {
                network.build()?;
                return Ok(network);
            }
        }
        Err(TestkitError::NoFreeSubnet {
            tried: CLAIM_ATTEMPTS,
        })
    }

    /// Member `i`'s address for clients, at the namespace end of its client link.
    pub(crate) fn client_ip(&self, i: usize) -> Ipv4Addr {
        self.address(4 * i as u8 + 2)
    }

    /// Member `i`'s address for its peers, on the bridge.
    pub(crate) fn peer_ip(&self, i: usize) -> Ipv4Addr {
        self.address(PEER_BASE + i as u8)
    }

    /// The name of member `i`'s namespace, e.g. "eha-01a2-4711-m0".
    pub(crate) fn member_ns(&self, i: usize) -> String {
        format!("{}-m{i}", self.name)
    }

    /// The file of member `i`'s namespace, which a member process enters with setns(2).
    pub(crate) fn member_ns_path(&self, i: usize) -> PathBuf {
        Path::new(NETNS_DIR).join(self.member_ns(i))
    }

    /// Cuts member `i` off from its peers; its client link stays up.
    pub(crate) fn partition(&self, i: usize) -> Result<(), TestkitError> {
        let port = bridge_port(i);
        ip(&[
            "-n",
            &self.bridge_ns(),
            "link",
            "set",
            "dev",
            &port,
            "nomaster",
        ])
    }

    /// Connects member `i` to its peers again.
    pub(crate) fn heal(&self, i: usize) -> Result<(), TestkitError> {
        let port = bridge_port(i);
        ip(&[
            "-n",
            &self.bridge_ns(),
            "link",
            "set",
            "dev",
            &port,
            "master",
            BRIDGE,
        ])
    }

    /// Claims `block` by creating member 0's namespace and then its client link, whose root
    /// end is named after the block. `None` if another network holds the block.
    fn claim(block: u16, members: usize) -> Result<Option<Network>, TestkitError> {
        let name = format!("{NAME_PREFIX}{block:04x}-{}", std::process::id());
        {
            let mut owned = owned();
            // A parallel test in this process picked the same block a moment ago.
            if owned.contains(&name) {
                return Ok(None);
            }
            owned.push(name.clone());
        }
        // From here on, dropping `network` removes whatever it created, and its name.
        let mut network = Network {
            block,
            name,
            members,
            namespaces: Vec::new(),
            root_links: Vec::new(),
        };
        match network.add_namespace(network.member_ns(0)) {
            Err(e) if is_exists(&e) => return Ok(None),
            other => other?,
        }
        match network.add_client_link(0) {
            Err(e) if is_exists(&e) => Ok(None),
            Err(e) => Err(e),
            Ok(()) => Ok(Some(network)),
        }
    }

    /// Everything after the claim: the bridge, the other namespaces, addresses, links up.
    fn build(&mut self) -> Result<(), TestkitError> {
        let bridge_ns = self.bridge_ns();
        self.add_namespace(bridge_ns.clone())?;
        ip(&[
            "-n", &bridge_ns, "link", "add", "name", BRIDGE, "type", "bridge",
        ])?;
        ip(&["-n", &bridge_ns, "link", "set", "dev", BRIDGE, "up"])?;
        for i in 0..self.members {
            let ns = self.member_ns(i);
            if i > 0 {
                self.add_namespace(ns.clone())?;
                self.add_client_link(i)?;
            }
            ip(&["-n", &ns, "link", "set", "dev", "lo", "up"])?;

            let root_link = self.root_link(i);
            let host = format!("{}/30", self.address(4 * i as u8 + 1));
            ip(&["addr", "add", &host, "dev", &root_link])?;
            ip(&["link", "set", "dev", &root_link, "up"])?;
            let client = format!("{}/30", self.client_ip(i));
            ip(&["-n", &ns, "addr", "add", &client, "dev", CLIENT_LINK])?;
            ip(&["-n", &ns, "link", "set", "dev", CLIENT_LINK, "up"])?;

            let port = bridge_port(i);
            ip(&[
                "-n", &ns, "link", "add", "name", PEER_LINK, "type", "veth", "peer", "name", &port,
                "netns", &bridge_ns,
            ])?;
            let peer = format!("{}/25", self.peer_ip(i));
            ip(&["-n", &ns, "addr", "add", &peer, "dev", PEER_LINK])?;
            ip(&["-n", &ns, "link", "set", "dev", PEER_LINK, "up"])?;
            ip(&[
                "-n", &bridge_ns, "link", "set", "dev", &port, "master", BRIDGE, "up",
            ])?;
        }
        Ok(())
    }

    /// Creates a namespace and remembers it for teardown.
    fn add_namespace(&mut self, ns: String) -> Result<(), TestkitError> {
        ip(&["netns", "add", &ns])?;
        self.namespaces.push(ns);
        Ok(())
    }

    /// Creates member `i`'s client link: a veth pair from the root namespace into the member's
    /// namespace, both ends in one atomic step; remembers the root end for teardown.
    fn add_client_link(&mut self, i: usize) -> Result<(), TestkitError> {
        let ns = self.member_ns(i);
        let root_link = self.root_link(i);
        ip(&[
            "link",
            "add",
            "name",
            &root_link,
            "type",
            "veth",
            "peer",
            "name",
            CLIENT_LINK,
            "netns",
            &ns,
        ])?;
        self.root_links.push(root_link);
        Ok(())
    }

    /// The bridge namespace, e.g. "eha-01a2-4711-br".
    fn bridge_ns(&self) -> String {
        format!("{}-br", self.name)
    }

    /// The root-namespace end of member `i`'s client link, e.g. "eha01a2c0" (at most 15 bytes,
    /// the kernel's limit for interface names, hence no pid in it).
    fn root_link(&self, i: usize) -> String {
        format!("eha{:04x}c{i}", self.block)
    }

    /// `10.X.Y.last` in this network's block.
    fn address(&self, last: u8) -> Ipv4Addr {
        let [_, b, c, _] = block_net(self.block).octets();
        Ipv4Addr::new(10, b, c, last)
    }
}

impl Drop for Network {
    /// Deletes every link and namespace this network created, by name; never panics. The
    /// member processes must be dead by now (the cluster kills them first): a namespace only
    /// really goes away with its last process.
    fn drop(&mut self) {
        // Deleting the root end deletes the pair; done first so the addresses are free at once,
        // not when the kernel gets round to destroying the namespace.
        for link in &self.root_links {
            let _ = ip(&["link", "del", "dev", link]);
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        owned().retain(|name| *name != self.name);
    }
}

/// Makes `command` run in the network namespace at `netns`: the child enters it with setns(2)
/// after fork and before exec, so the process we track is etcd itself (no `ip netns exec`
/// wrapper whose pid could differ).
#[cfg(target_os = "linux")]
pub(crate) fn enter_in_child(command: &mut Command, netns: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    // Opened here, so a missing namespace is reported with its path. The file moves into the
    // closure and stays open until the command is dropped; O_CLOEXEC keeps it out of etcd.
    let file = File::open(netns)?;
    // SAFETY: the closure runs in the forked child before exec and only calls setns(2), which
    // is async-signal-safe; the fd belongs to `file`, which the closure owns.
    unsafe {
        command.pre_exec(move || {
            if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

/// Network namespaces are Linux only.
#[cfg(not(target_os = "linux"))]
pub(crate) fn enter_in_child(_command: &mut Command, netns: &Path) -> io::Result<()> {
    let _ = File::open(netns)?;
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "network namespaces need Linux",
    ))
}

/// Deletes `eha-*` namespaces whose creating process is gone (killed before its clusters could
/// clean up), and those of an earlier process that had our pid; then the root ends of client
/// links left without a namespace. Best effort per item: a concurrent sweep in another process
/// may delete the same one first.
fn sweep() -> Result<(), TestkitError> {
    let me = std::process::id();
    let owned = owned();
    for name in namespaces()? {
        let Some((network, _, pid)) = parse_name(&name) else {
            continue;
        };
        let stale = if pid == me {
            !owned.iter().any(|n| n == network)
        } else {
            !Path::new(&format!("/proc/{pid}")).exists()
        };
        if stale {
            let _ = ip(&["netns", "del", &name]);
        }
    }
    // Deleting a namespace's name does not always destroy it: a kernel reference (such as a
    // socket a killed member left closing) can keep it, and with it the veth pairs into the
    // root namespace, alive. A live network creates a namespace before its links and deletes
    // its links before its namespaces, so a link whose block has no namespace is an orphan.
    // Links are listed first for the same reason.
    let links = ip_output(&["-o", "link", "show"])?;
    let namespaces = namespaces()?;
    let blocks: Vec<&str> = namespaces
        .iter()
        .filter_map(|name| parse_name(name).map(|(_, block, _)| block))
        .collect();
    for line in links.lines() {
        // "27: eha16edc0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 ..."
        let Some(word) = line.split_whitespace().nth(1) else {
            continue;
        };
        let link = word.trim_end_matches(':').split('@').next().unwrap_or("");
        if let Some(block) = parse_link_name(link)
            && !blocks.contains(&block)
        {
            let _ = ip(&["link", "del", "dev", link]);
        }
    }
    Ok(())
}

/// The namespace names on this machine.
fn namespaces() -> Result<Vec<String>, TestkitError> {
    let listing = ip_output(&["netns", "list"])?;
    // Lines look like "eha-01a2-4711-m0 (id: 3)" or just the name.
    Ok(listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(String::from)
        .collect())
}

/// Splits "eha-01a2-4711-m0" into the network name "eha-01a2-4711", the block "01a2" and the
/// pid 4711.
fn parse_name(name: &str) -> Option<(&str, &str, u32)> {
    let rest = name.strip_prefix(NAME_PREFIX)?;
    let mut parts = rest.splitn(3, '-');
    let block = parts.next()?;
    let pid = parts.next()?;
    let role = parts.next()?;
    if !is_block(block) || role.is_empty() {
        return None;
    }
    let pid: u32 = pid.parse().ok()?;
    let network_len = name.len() - role.len() - 1;
    Some((&name[..network_len], block, pid))
}

/// The block of a client link's root end, "eha01a2c0" -> "01a2".
fn parse_link_name(link: &str) -> Option<&str> {
    let rest = link.strip_prefix("eha")?;
    let (block, member) = rest.split_at_checked(4)?;
    let member = member.strip_prefix('c')?;
    let is_index = !member.is_empty() && member.bytes().all(|b| b.is_ascii_digit());
    (is_block(block) && is_index).then_some(block)
}

/// Four lower-case hex digits, as `{:04x}` writes a block.
fn is_block(word: &str) -> bool {
    word.len() == 4 && word.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The IPv4 prefixes of the root namespace's addresses and main routes (the default route
/// excepted), which a new block must not overlap.
fn root_prefixes() -> Result<Vec<(Ipv4Addr, u8)>, TestkitError> {
    let mut prefixes = Vec::new();
    // "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\ ..."
    for line in ip_output(&["-4", "-o", "addr", "show"])?.lines() {
        let mut words = line.split_whitespace();
        if words.any(|w| w == "inet") {
            prefixes.extend(words.next().and_then(parse_prefix));
        }
    }
    // "192.0.2.0/24 dev eth0 ...", "10.1.2.3 via ...", "blackhole 10.9.0.0/16", "default via ..."
    for line in ip_output(&["-4", "route", "show"])?.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("default");
        let prefix = match parse_prefix(first) {
            Some(prefix) => Some(prefix),
            None if first == "default" => None,
            // A route type ("blackhole", "unreachable", ...) comes before the prefix.
            None => words.next().and_then(parse_prefix),
        };
        prefixes.extend(prefix);
    }
    Ok(prefixes)
}

/// Parses "10.1.2.0/24" or "10.1.2.3" (a /32).
fn parse_prefix(word: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, len) = match word.split_once('/') {
        Some((addr, len)) => (addr, len.parse().ok()?),
        None => (word, 32),
    };
    (len <= 32).then_some((addr.parse().ok()?, len))
}

/// True if the prefixes `a/a_len` and `b/b_len` share an address.
fn overlaps(a: Ipv4Addr, a_len: u8, b: Ipv4Addr, b_len: u8) -> bool {
    let len = a_len.min(b_len);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(a) & mask == u32::from(b) & mask
}

/// The network address of `block`: 10.(200 + block / 256).(block % 256).0.
fn block_net(block: u16) -> Ipv4Addr {
    let b = FIRST_OCTET2 + block / 256;
    Ipv4Addr::new(10, b as u8, (block % 256) as u8, 0)
}

/// Member `i`'s port on the bridge, inside the bridge namespace.
fn bridge_port(i: usize) -> String {
    format!("m{i}")
}

/// True if `ip` failed because the name already exists.
fn is_exists(error: &TestkitError) -> bool {
    matches!(error, TestkitError::IpCommand { stderr, .. } if stderr.contains("exists"))
}

fn owned() -> MutexGuard<'static, Vec<String>> {
    OWNED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `ip args...`; its output is captured so that nothing reaches the test's output.
fn ip(args: &[&str]) -> Result<(), TestkitError> {
    ip_output(args).map(drop)
}

/// Runs `ip args...` and returns its stdout.
fn ip_output(args: &[&str]) -> Result<String, TestkitError> {
    let output = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => TestkitError::IpMissing(e),
            _ => TestkitError::io("run", "ip", e),
        })?;
    if !output.status.success() {
        return Err(TestkitError::IpCommand {
            command: format!("ip {}", args.join(" ")),
            status: output.status,
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_into_network_block_and_pid() {
        assert_eq!(
            parse_name("eha-01a2-4711-m0"),
            Some(("eha-01a2-4711", "01a2", 4711))
        );
        assert_eq!(parse_name("eha-ffff-1-br"), Some(("eha-ffff-1", "ffff", 1)));
        assert_eq!(parse_name("eha-01a2-4711"), None);
        assert_eq!(parse_name("eha-xyz1-4711-m0"), None);
        assert_eq!(parse_name("eha-01a2-pid-m0"), None);
        assert_eq!(parse_name("other-01a2-4711-m0"), None);
    }

    #[test]
    fn link_names_parse_into_block() {
        assert_eq!(parse_link_name("eha01a2c0"), Some("01a2"));
        assert_eq!(parse_link_name("eha01a2c31"), Some("01a2"));
        assert_eq!(parse_link_name("eha01a2c"), None);
        assert_eq!(parse_link_name("eha01a2x0"), None);
        assert_eq!(parse_link_name("eha01ac0"), None);
        assert_eq!(parse_link_name("eth0"), None);
        let network = Network {
            block: 0x1a2,
            name: String::from("test"),
            members: 0,
            namespaces: Vec::new(),
            root_links: Vec::new(),
        };
        assert_eq!(parse_link_name(&network.root_link(7)), Some("01a2"));
    }

    #[test]
    fn prefixes_parse_and_overlap() {
        let lo = Ipv4Addr::new(10, 200, 1, 0);
        assert_eq!(
            parse_prefix("10.200.1.4/30"),
            Some((Ipv4Addr::new(10, 200, 1, 4), 30))
        );
        assert_eq!(
            parse_prefix("10.200.1.4"),
            Some((Ipv4Addr::new(10, 200, 1, 4), 32))
        );
        assert_eq!(parse_prefix("dev"), None);
        assert_eq!(parse_prefix("10.0.0.0/33"), None);
        assert!(overlaps(lo, 24, Ipv4Addr::new(10, 200, 1, 5), 30));
        assert!(overlaps(lo, 24, Ipv4Addr::new(10, 0, 0, 0), 8));
        assert!(!overlaps(lo, 24, Ipv4Addr::new(10, 200, 2, 0), 24));
        assert!(!overlaps(lo, 24, Ipv4Addr::new(192, 0, 2, 0), 24));
        assert!(overlaps(lo, 24, Ipv4Addr::new(0, 0, 0, 0), 0));
    }

    #[test]
    fn addresses_stay_inside_the_block() {
        let network = Network {
            block: BLOCKS - 1,
            name: String::from("test"),
            members: 0,
            namespaces: Vec::new(),
            root_links: Vec::new(),
        };
        let last = MAX_MEMBERS - 1;
        assert_eq!(network.client_ip(0), Ipv4Addr::new(10, 254, 255, 2));
        assert_eq!(network.client_ip(last), Ipv4Addr::new(10, 254, 255, 126));
        assert_eq!(network.peer_ip(0), Ipv4Addr::new(10, 254, 255, 138));
        assert!(network.peer_ip(last).octets()[3] < 255);
        assert!(network.root_link(last).len() <= 15);
        assert_eq!(block_net(0), Ipv4Addr::new(10, 200, 0, 0));
        // Created nothing, so dropping deletes nothing.
    }
}
