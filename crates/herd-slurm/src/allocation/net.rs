//! Which network the collectives use on a node with several.
//!
//! GPU nodes have several interfaces: management Ethernet, InfiniBand or RoCE (IPoIB), and
//! bridges such as `docker0` that reach no other node. gloo binds to the address the node's
//! own host name resolves to (on Debian and Ubuntu, `127.0.1.1` in /etc/hosts, so peers get
//! "Connection refused"), and NCCL's sockets to the first interface that is up: either can
//! pick a network the other nodes cannot reach, the classic hang at `init_process_group`.
//! herd asks the kernel instead: the interface holding the local address of the route to
//! the master ([`route_to`]) is the one every worker of this node uses
//! (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`), unless the user named one; a name the user
//! gave must exist on every node ([`check_ifname`]).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use crate::allocation::addr::{reachable_addr, AddrError};

/// The variables that name the collectives' interface, gloo's and NCCL's.
pub const IFNAME_VARS: [&str; 2] = ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"];

/// This node's end of the route to a peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The local address the kernel sends from.
    pub local: IpAddr,
    /// The interface that holds it (`eth0`, `ib0`; `lo` for a loopback peer).
    pub ifname: String,
}

/// The local address and interface this node uses to reach `peer`. No packet is sent:
/// connecting a UDP socket only asks the kernel for the route. A peer that is one of this
/// node's own addresses gives that address and its interface.
pub fn route_to(peer: IpAddr) -> io::Result<Route> {
    let any: SocketAddr = match peer {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(any)?;
    // Port 9 (discard): any port will do, nothing is sent.
    socket.connect((peer, 9))?;
    let local = socket.local_addr()?.ip();
    let ifname = interface_of(local, &interfaces()?).ok_or_else(|| {
        io::Error::other(format!(
            "the route to {peer} leaves from {local}, which no interface of this node holds"
        ))
    })?;
    Ok(Route { local, ifname })
}

/// Why this node's route to the master is not known.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// A node's name does not give an address the other nodes reach.
    #[error(transparent)]
    Addr(#[from] AddrError),
    /// The kernel has no route to the address, or no interface holds its local end.
    #[error("cannot find this node's route to {peer}: {source}")]
    Route {
        /// The address.
        peer: IpAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// How this node reaches the master of a job on `nodes` (node 0 is the master; this node is
/// `node_rank`): the master's address and this node's end of the route to it. One node:
/// loopback. On the master itself its own name may resolve only to loopback (Debian's
/// `127.0.1.1 NAME` line), so there the route to node 1 gives the master's address on the
/// network the nodes share; elsewhere the master's name gives it.
pub fn master_route(nodes: &[String], node_rank: u32) -> Result<(IpAddr, Route), RouteError> {
    let route = |peer: IpAddr| route_to(peer).map_err(|source| RouteError::Route { peer, source });
    let (Some(master), Some(second)) = (nodes.first(), nodes.get(1)) else {
        let lo = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        return Ok((lo, route(lo)?));
    };
    if node_rank == 0 {
        let r = route(reachable_addr(second)?)?;
        return Ok((r.local, r));
    }
    let addr = reachable_addr(master)?;
    Ok((addr, route(addr)?))
}

/// One interface address of this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// Its name.
    pub name: String,
    /// One of its addresses (`None` for an interface without one).
    pub addr: Option<IpAddr>,
}

/// This node's interfaces, one entry per address (an interface without any address once).
pub fn interfaces() -> io::Result<Vec<Interface>> {
    let all = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
    Ok(all
        .map(|a| Interface {
            addr: a.address.as_ref().and_then(|s| {
                s.as_sockaddr_in()
                    .map(|v4| IpAddr::V4(v4.ip()))
                    .or_else(|| s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip())))
            }),
            name: a.interface_name,
        })
        .collect())
}

/// The interface that holds `addr`.
pub fn interface_of(addr: IpAddr, interfaces: &[Interface]) -> Option<String> {
    interfaces
        .iter()
        .find(|i| i.addr == Some(addr))
        .map(|i| i.name.clone())
}

/// The names of `interfaces`, each once, in their order.
pub fn names(interfaces: &[Interface]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for i in interfaces {
        if !names.contains(&i.name) {
            names.push(i.name.clone());
        }
    }
    names
}

/// Whether `value` of `var` (`GLOO_SOCKET_IFNAME` or `NCCL_SOCKET_IFNAME`) names an
/// interface this node has, as that library reads it: gloo takes a comma-separated list of
/// exact names, every one of which must exist; NCCL a comma-separated list of name prefixes
/// (`=` before the list: exact names; `^` before it: names to leave out), any of which may
/// match. An error says what the node has.
pub fn check_ifname(var: &str, value: &str, have: &[String]) -> Result<(), String> {
    let listed = || have.join(", ");
    if var == "NCCL_SOCKET_IFNAME" {
        let (exclude, rest) = match value.strip_prefix('^') {
            Some(r) => (true, r),
            None => (false, value),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(r) => (true, r),
            None => (false, rest),
        };
        if exclude {
            return Ok(());
        }
        let wanted: Vec<&str> = rest.split(',').filter(|w| !w.is_empty()).collect();
        let matches = |w: &str| {
            have.iter()
                .any(|h| if exact { h == w } else { h.starts_with(w) })
        };
        if wanted.iter().any(|w| matches(w)) {
            return Ok(());
        }
        return Err(format!(
            "{var}={value} matches no interface of this node (it has {}): set it to one of those, or unset it and herd picks the interface on the route to the master",
            listed()
        ));
    }
    let missing: Vec<&str> = value
        .split(',')
        .filter(|w| !w.is_empty() && !have.iter().any(|h| h == w))
        .collect();
    if missing.is_empty() && !value.trim_matches(',').is_empty() {
        return Ok(());
    }
    Err(format!(
        "{var}={value} names {} this node does not have (it has {}): set it to one of those, or unset it and herd picks the interface on the route to the master",
        if missing.is_empty() { "no interface".to_owned() } else { format!("`{}`, which", missing.join("`, `")) },
        listed()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(list: &[(&str, Option<&str>)]) -> Vec<Interface> {
        list.iter()
            .map(|(n, a)| Interface {
                name: (*n).to_owned(),
                addr: a.map(|a| a.parse().expect("ip")),
            })
            .collect()
    }

    /// A GPU node as the bed makes one: `docker0` first, the shared network on eth0.
    fn gpu_node() -> Vec<Interface> {
        node(&[
            ("lo", Some("127.0.0.1")),
            ("docker0", Some("172.17.0.1")),
            ("eth0", Some("10.213.47.11")),
            ("lo", Some("::1")),
            ("ib0", None),
        ])
    }

    #[test]
    fn the_interface_is_the_one_holding_the_routes_local_address() {
        let n = gpu_node();
        assert_eq!(
            interface_of("10.213.47.11".parse().expect("ip"), &n),
            Some("eth0".into())
        );
        assert_eq!(
            interface_of("127.0.0.1".parse().expect("ip"), &n),
            Some("lo".into())
        );
        assert_eq!(interface_of("10.9.9.9".parse().expect("ip"), &n), None);
        assert_eq!(names(&n), ["lo", "docker0", "eth0", "ib0"]);
    }

    #[test]
    fn the_route_to_loopback_and_to_this_nodes_own_address_are_found_here() {
        let lo = route_to("127.0.0.1".parse().expect("ip")).expect("route to loopback");
        assert_eq!(lo.ifname, "lo");
        assert_eq!(lo.local, "127.0.0.1".parse::<IpAddr>().expect("ip"));
        // Any address this machine holds routes to itself, from that very address.
        let own = interfaces()
            .expect("interfaces")
            .into_iter()
            .find(|i| matches!(i.addr, Some(IpAddr::V4(a)) if !a.is_loopback()));
        if let Some(Interface {
            name,
            addr: Some(addr),
        }) = own
        {
            let r = route_to(addr).expect("route to own address");
            assert_eq!((r.local, r.ifname), (addr, name));
        }
    }

    #[test]
    fn one_node_talks_over_loopback() {
        let (addr, route) = master_route(&["gpu-a01".to_owned()], 0).expect("one node");
        assert_eq!(addr, IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        assert_eq!(route.ifname, "lo");
    }

    #[test]
    fn gloo_needs_every_name_it_is_given() {
        let have = names(&gpu_node());
        assert_eq!(check_ifname("GLOO_SOCKET_IFNAME", "eth0", &have), Ok(()));
        assert_eq!(
            check_ifname("GLOO_SOCKET_IFNAME", "eth0,ib0", &have),
            Ok(())
        );
        assert_eq!(
            check_ifname("GLOO_SOCKET_IFNAME", "eth", &have),
            Err("GLOO_SOCKET_IFNAME=eth names `eth`, which this node does not have (it has lo, docker0, eth0, ib0): set it to one of those, or unset it and herd picks the interface on the route to the master".into())
        );
        assert!(check_ifname("GLOO_SOCKET_IFNAME", "eth0,bond0", &have)
            .expect_err("bond0 is missing")
            .contains("names `bond0`, which"));
        assert!(check_ifname("GLOO_SOCKET_IFNAME", "", &have).is_err());
    }

    #[test]
    fn nccl_takes_prefixes_exact_names_and_exclusions() {
        let have = names(&gpu_node());
        assert_eq!(check_ifname("NCCL_SOCKET_IFNAME", "eth", &have), Ok(()));
        assert_eq!(check_ifname("NCCL_SOCKET_IFNAME", "bond,ib", &have), Ok(()));
        assert_eq!(check_ifname("NCCL_SOCKET_IFNAME", "=eth0", &have), Ok(()));
        assert_eq!(
            check_ifname("NCCL_SOCKET_IFNAME", "^docker,lo", &have),
            Ok(())
        );
        assert_eq!(
            check_ifname("NCCL_SOCKET_IFNAME", "=eth", &have),
            Err("NCCL_SOCKET_IFNAME==eth matches no interface of this node (it has lo, docker0, eth0, ib0): set it to one of those, or unset it and herd picks the interface on the route to the master".into())
        );
        assert!(check_ifname("NCCL_SOCKET_IFNAME", "bond", &have).is_err());
    }
}
