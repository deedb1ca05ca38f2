//! Free TCP ports on 127.0.0.1 for etcd members, never handed out twice in one process.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, OnceLock};

use super::TestkitError;

/// Ports this process has already handed out.
///
/// The kernel may give the same ephemeral port to two `bind(0)` calls once the first listener is
/// closed, and tests in one process start clusters in parallel; remembering every port we gave
/// away (a few per cluster, so the set stays tiny) rules out collisions between our own clusters.
/// Collisions with other processes remain possible, which is why the cluster start retries.
static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();

/// How many `bind(0)` attempts before giving up; only reached if the kernel keeps returning
/// ports we already handed out, which would mean the ephemeral range is nearly exhausted.
const ATTEMPTS: usize = 1000;

/// Returns a port on 127.0.0.1 that was free a moment ago and that this process never returned before.
pub(crate) fn free_port() -> Result<u16, TestkitError> {
    let mut handed_out = HANDED_OUT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for _ in 0..ATTEMPTS {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(TestkitError::NoFreePort)?;
        let port = listener
            .local_addr()
            .map_err(TestkitError::NoFreePort)?
            .port();
        // The listener closes here; etcd binds the port a few milliseconds later.
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(TestkitError::NoFreePort(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "every port the kernel offered was already handed out by this process",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_never_repeated() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let unique: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len());
    }
}
