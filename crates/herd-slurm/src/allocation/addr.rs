//! The address other nodes use to reach a node: never a loopback alias.

use std::net::{IpAddr, ToSocketAddrs};

/// Why a node has no address the other nodes can reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddrError {
    /// Name resolution failed.
    #[error("cannot resolve node {node}: {why}")]
    Unresolved {
        /// The node name.
        node: String,
        /// The resolver's message.
        why: String,
    },
    /// The name resolves, but only to loopback addresses (a `127.0.1.1 host` line in
    /// /etc/hosts): other nodes could not connect to it.
    #[error("node {node} resolves only to loopback ({addrs}); other nodes cannot reach that: fix /etc/hosts or DNS for {node}")]
    LoopbackOnly {
        /// The node name.
        node: String,
        /// What it resolved to.
        addrs: String,
    },
}

/// Resolve `node` to an address that is not loopback, preferring IPv4.
pub fn reachable_addr(node: &str) -> Result<IpAddr, AddrError> {
    let addrs: Vec<IpAddr> = (node, 0)
        .to_socket_addrs()
        .map_err(|e| AddrError::Unresolved {
            node: node.to_owned(),
            why: e.to_string(),
        })?
        .map(|a| a.ip())
        .collect();
    pick(node, &addrs)
}

fn pick(node: &str, addrs: &[IpAddr]) -> Result<IpAddr, AddrError> {
    let usable = || {
        addrs
            .iter()
            .filter(|a| !a.is_loopback() && !a.is_unspecified())
    };
    usable()
        .find(|a| a.is_ipv4())
        .or_else(|| usable().next())
        .copied()
        .ok_or_else(|| AddrError::LoopbackOnly {
            node: node.to_owned(),
            addrs: addrs
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefers_ipv4_and_skips_loopback() {
        let a: Vec<IpAddr> = ["127.0.1.1", "fd00::5", "10.0.0.5"]
            .iter()
            .map(|s| s.parse().expect("ip"))
            .collect();
        assert_eq!(pick("n1", &a), Ok("10.0.0.5".parse().expect("ip")));
        assert_eq!(pick("n1", &a[..2]), Ok("fd00::5".parse().expect("ip")));
    }

    #[test]
    fn loopback_only_is_an_error_naming_the_node() {
        let a: Vec<IpAddr> = vec!["127.0.1.1".parse().expect("ip")];
        let e = pick("gpu-a01", &a).expect_err("loopback only");
        assert!(e
            .to_string()
            .contains("gpu-a01 resolves only to loopback (127.0.1.1)"));
    }

    #[test]
    fn localhost_resolves_to_loopback_only() {
        assert!(matches!(
            reachable_addr("localhost"),
            Err(AddrError::LoopbackOnly { .. })
        ));
    }
}
