//! The `port` check, and the port the leader holds open for it: the attempt's
//! `MASTER_PORT` must answer from every node before the workers start.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The `port` check: `addr:port` accepts a connection from this node within `timeout`;
/// the connection is closed at once. What is wrong, when something is.
pub(super) async fn check_port(addr: &str, port: u16, timeout: Duration) -> Result<(), String> {
    let connect = async {
        match addr.parse::<IpAddr>() {
            Ok(ip) => TcpStream::connect(SocketAddr::new(ip, port)).await,
            Err(_) => TcpStream::connect((addr, port)).await,
        }
    };
    let fix = "allow TCP between the compute nodes on the job's ports (a firewall between nodes on high ports is the usual cause), and make node 0's name resolve to the interface the nodes share";
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(stream)) => {
            // This side closes first, so the wait after a closed connection
            // (TIME_WAIT) is this node's, not the master's port's.
            drop(stream);
            Ok(())
        }
        Ok(Err(e)) => Err(format!(
            "the master's port {addr}:{port} cannot be reached from this node ({e}): {fix}"
        )),
        Err(_) => Err(format!(
            "the master's port {addr}:{port} did not answer this node within {} s: {fix}",
            timeout.as_secs()
        )),
    }
}

/// Ports to try for an attempt's `MASTER_PORT`, in order: random ones from the 8,192 just
/// below this node's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`, 32768 by
/// default), then 0 (any free port). A port the kernel hands out for outgoing connections
/// could be taken by one (gloo's, another job's) between herd's check and rank 0's bind;
/// one below that range is taken only by a program that binds it by number.
pub(crate) fn master_port_candidates() -> Vec<u16> {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    let mut out = Vec::new();
    if low > 2048 {
        let span = (low - 1024).min(8192);
        let from = low - span;
        // A different start on every call and node: the time's nanoseconds and the pid.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
            ^ std::process::id().wrapping_mul(2_654_435_761);
        let mut x = seed | 1;
        for _ in 0..32 {
            // xorshift32
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            out.push((from + x % span) as u16);
        }
    }
    out.push(0);
    out
}

/// Bind the first port of [`master_port_candidates`] that is free, on `any`.
fn bind_master_port(any: IpAddr) -> std::io::Result<std::net::TcpListener> {
    let mut last = None;
    for port in master_port_candidates() {
        match std::net::TcpListener::bind(SocketAddr::new(any, port)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port to try")))
}

/// A port nobody holds right now on every IPv4 interface, below the ephemeral range when
/// one is free there, for the workers' TCPStore (rank 0 binds it right after).
pub(crate) fn claim_master_port() -> std::io::Result<u16> {
    Ok(bind_master_port(IpAddr::V4(Ipv4Addr::UNSPECIFIED))?
        .local_addr()?
        .port())
}

/// A port held open on every interface: it accepts connections and drops each once the
/// other side has closed it, until [`HeldPort::release`] or drop. The leader holds the
/// attempt's `MASTER_PORT` so while the agents check that it answers from their nodes.
#[derive(Debug)]
pub(crate) struct HeldPort {
    port: u16,
    task: Option<JoinHandle<()>>,
}

/// Bind a free port ([`master_port_candidates`]) on all interfaces of `master_addr`'s
/// family (IPv4 unless it is an IPv6 address) and hold it; a connection the other side does not close is dropped after
/// `linger`.
pub(super) async fn hold_port(master_addr: &str, linger: Duration) -> std::io::Result<HeldPort> {
    let any = match master_addr.parse::<IpAddr>() {
        Ok(IpAddr::V6(_)) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    };
    let std_listener = bind_master_port(any)?;
    std_listener.set_nonblocking(true)?;
    let listener = TcpListener::from_std(std_listener)?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        // Connections being closed; dropped (and so closed) with this task.
        let mut open = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((mut stream, _)) => {
                        open.spawn(async move {
                            // Wait for the other side to close first: the closed
                            // connection's wait (TIME_WAIT) stays on its node, and the
                            // port is free for the workers as soon as it is released.
                            let mut buf = [0u8; 64];
                            let _ = tokio::time::timeout(linger, async {
                                while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                            })
                            .await;
                        });
                    }
                    // Out of file descriptors, or a connection reset before accept: go on.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                },
                Some(_) = open.join_next(), if !open.is_empty() => {}
            }
        }
    });
    Ok(HeldPort {
        port,
        task: Some(task),
    })
}

impl HeldPort {
    /// The port held.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Stop holding the port: when this returns, its socket is closed and the workers
    /// can bind it.
    pub(crate) async fn release(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for HeldPort {
    /// Stops holding the port soon (at the runtime's next turn); [`HeldPort::release`]
    /// waits until it is closed.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
