//! How herd's agents (one per node) find their leader and talk to it.
//!
//! - **No shared storage, no guessed port.** Every agent derives the same short list of
//!   candidate ports from the job's identity ([`port_candidates`]). The leader (node 0)
//!   binds the first one that is free; followers try them in order against node 0's address
//!   until one answers as the leader of *this* job. A port held by another program costs a
//!   follower one short handshake timeout, never a hang.
//! - **Same job only.** Both sides prove knowledge of the per-job secret on fresh nonces
//!   (SHA-256 over secret and nonces, [`Proof`]); anything else is dropped.
//! - **Bounded.** Messages are length-prefixed JSON of at most [`MAX_FRAME`] bytes; every
//!   read during the handshake has a deadline.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Protocol version; agents of different herd versions refuse each other.
pub const PROTOCOL: u32 = 1;
/// Largest message accepted (bytes of JSON).
pub const MAX_FRAME: usize = 1 << 20;
/// How long a handshake step may take before the other side is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(2);

/// Errors of the rendezvous.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    /// Socket trouble.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The other side broke the protocol (bad frame, wrong message, failed proof).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A deadline passed.
    #[error("{0}")]
    Timeout(String),
    /// Every candidate port is taken on the leader's node.
    #[error(
        "no free rendezvous port: all {count} candidates from {first} are in use on this node"
    )]
    NoFreePort {
        /// The first candidate.
        first: u16,
        /// How many were tried.
        count: usize,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RendezvousError {
    let what = what.into();
    move |source| RendezvousError::Io { what, source }
}

/// What identifies a job's agents to each other.
#[derive(Clone)]
pub struct JobKey {
    /// Public identity (e.g. `slurm-<job>.<step>`); selects the candidate ports.
    pub id: String,
    /// Secret shared by the job's agents (from the environment), never sent.
    pub secret: Vec<u8>,
}

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobKey")
            .field("id", &self.id)
            .field("secret", &"<hidden>")
            .finish()
    }
}

/// Candidate rendezvous ports for `id`: `count` distinct ports in 20000–59999, the same on
/// every node, spread so that two jobs rarely share their first choice.
pub fn port_candidates(id: &str, count: usize) -> Vec<u16> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 40_000;
    let digest = Sha256::digest(id.as_bytes());
    let seed = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let mut out = Vec::with_capacity(count);
    let mut k: u32 = 0;
    while out.len() < count.min(SPAN as usize) {
        // 7919 is prime and coprime with SPAN: the walk visits every port before repeating.
        let port = (LOW + (seed.wrapping_add(k.wrapping_mul(7919))) % SPAN) as u16;
        if !out.contains(&port) {
            out.push(port);
        }
        k += 1;
    }
    out
}

/// A proof of knowing the secret, bound to both nonces and to the prover's role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof(pub String);

impl Proof {
    fn new(key: &JobKey, role: &str, leader_nonce: &str, follower_nonce: &str) -> Proof {
        let mut h = Sha256::new();
        for part in [
            b"herd-rendezvous-v1".as_slice(),
            role.as_bytes(),
            key.id.as_bytes(),
            leader_nonce.as_bytes(),
            follower_nonce.as_bytes(),
        ] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        h.update(&key.secret);
        Proof(hex(&h.finalize()))
    }

    /// Compare without stopping at the first difference.
    fn matches(&self, other: &Proof) -> bool {
        let (a, b) = (self.0.as_bytes(), other.0.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 16 random bytes, hex-encoded, from the kernel.
pub fn nonce() -> std::io::Result<String> {
    let mut buf = [0u8; 16];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut buf)?;
    Ok(hex(&buf))
}

/// A fresh random secret for a job (hex).
pub fn new_secret() -> std::io::Result<String> {
    Ok(format!("{}{}", nonce()?, nonce()?))
}

/// What a follower tells the leader about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Node rank (0 is the leader).
    pub node_rank: u32,
    /// Host name.
    pub host: String,
    /// Workers this node will run.
    pub nproc: u32,
    /// The agent's pid (for reports).
    pub pid: u32,
}

/// Handshake messages; what agents say afterwards is the caller's type `M`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Handshake {
    Challenge {
        protocol: u32,
        job: String,
        nonce: String,
    },
    Hello {
        protocol: u32,
        node: NodeInfo,
        nonce: String,
        proof: Proof,
    },
    Welcome {
        proof: Proof,
    },
    Reject {
        reason: String,
    },
}

/// One side of an authenticated connection between two agents.
#[derive(Debug)]
pub struct Link {
    stream: TcpStream,
    /// The other side's address.
    pub peer: SocketAddr,
    /// This side's address on the connection (for the leader: the address the follower
    /// reached it at, which is what other nodes can reach).
    pub local: SocketAddr,
}

/// Write one frame: 4-byte big-endian length, then JSON.
pub async fn write_frame<W: AsyncWriteExt + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> Result<(), RendezvousError> {
    let body = serde_json::to_vec(msg).map_err(|e| RendezvousError::Protocol(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(RendezvousError::Protocol(format!(
            "message of {} bytes exceeds the {MAX_FRAME}-byte limit",
            body.len()
        )));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame).await.map_err(io("sending a message"))
}

/// Read one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncReadExt + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> Result<Option<T>, RendezvousError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io("receiving a message")(e)),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(RendezvousError::Protocol(format!(
            "announced message of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .await
        .map_err(io("receiving a message"))?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| RendezvousError::Protocol(format!("undecodable message: {e}")))
}

async fn within<T>(
    what: &str,
    fut: impl std::future::Future<Output = Result<T, RendezvousError>>,
) -> Result<T, RendezvousError> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, fut)
        .await
        .map_err(|_| {
            RendezvousError::Timeout(format!("{what}: no answer within {HANDSHAKE_TIMEOUT:?}"))
        })?
}

impl Link {
    /// Split into independent read and write halves.
    pub fn into_split(
        self,
    ) -> (
        tokio::net::tcp::OwnedReadHalf,
        tokio::net::tcp::OwnedWriteHalf,
    ) {
        self.stream.into_split()
    }
}

/// The leader's listening side.
#[derive(Debug)]
pub struct Leader {
    listener: TcpListener,
    key: JobKey,
    /// The port it holds.
    pub port: u16,
}

impl Leader {
    /// Bind the first free candidate port of `key` on `ip` (all interfaces when
    /// unspecified), trying `count` candidates.
    pub async fn bind(key: JobKey, ip: IpAddr, count: usize) -> Result<Leader, RendezvousError> {
        let candidates = port_candidates(&key.id, count);
        for &port in &candidates {
            match TcpListener::bind(SocketAddr::new(ip, port)).await {
                Ok(listener) => {
                    return Ok(Leader {
                        listener,
                        key,
                        port,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(io(format!("binding rendezvous port {port}"))(e)),
            }
        }
        Err(RendezvousError::NoFreePort {
            first: candidates.first().copied().unwrap_or(0),
            count: candidates.len(),
        })
    }

    /// Accept and authenticate one follower. Connections that fail the handshake (other
    /// programs, other jobs, stale agents) are dropped and the next one is awaited.
    pub async fn accept(&self) -> Result<(Link, NodeInfo), RendezvousError> {
        loop {
            let (stream, peer) = self
                .listener
                .accept()
                .await
                .map_err(io("accepting a follower"))?;
            let _ = stream.set_nodelay(true);
            match self.handshake(stream, peer).await {
                Ok(done) => return Ok(done),
                Err(e) => eprintln!("herd: rendezvous: dropped connection from {peer}: {e}"),
            }
        }
    }

    async fn handshake(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
    ) -> Result<(Link, NodeInfo), RendezvousError> {
        let local = stream.local_addr().map_err(io("local address"))?;
        let leader_nonce = nonce().map_err(io("reading /dev/urandom"))?;
        write_frame(
            &mut stream,
            &Handshake::Challenge {
                protocol: PROTOCOL,
                job: self.key.id.clone(),
                nonce: leader_nonce.clone(),
            },
        )
        .await?;
        let hello = within("waiting for the follower's hello", read_frame(&mut stream)).await?;
        let Some(Handshake::Hello {
            protocol,
            node,
            nonce: follower_nonce,
            proof,
        }) = hello
        else {
            return Err(RendezvousError::Protocol("expected a hello".into()));
        };
        let reject = |reason: String| Handshake::Reject { reason };
        if protocol != PROTOCOL {
            let reason = format!(
                "protocol {protocol}, this leader speaks {PROTOCOL} (mixed herd versions?)"
            );
            let _ = write_frame(&mut stream, &reject(reason.clone())).await;
            return Err(RendezvousError::Protocol(reason));
        }
        if !proof.matches(&Proof::new(
            &self.key,
            "follower",
            &leader_nonce,
            &follower_nonce,
        )) {
            let _ = write_frame(&mut stream, &reject("wrong job secret".into())).await;
            return Err(RendezvousError::Protocol(format!(
                "node {} ({}) does not know this job's secret",
                node.node_rank, node.host
            )));
        }
        write_frame(
            &mut stream,
            &Handshake::Welcome {
                proof: Proof::new(&self.key, "leader", &leader_nonce, &follower_nonce),
            },
        )
        .await?;
        Ok((
            Link {
                stream,
                peer,
                local,
            },
            node,
        ))
    }
}

/// How often a follower tries every candidate again while no leader answers.
const ROUND_PERIOD: Duration = Duration::from_millis(100);
/// The shortest gap between two knocks on the port the leader is expected at.
const MIN_KNOCK_GAP: Duration = Duration::from_millis(2);

/// The gap before the next knock on the expected port, `waited` after the follower began
/// looking: a 20th of the wait so far, from [`MIN_KNOCK_GAP`] up to [`ROUND_PERIOD`]. A
/// leader that starts late is found at most ~5 % of its lateness (and 2 ms) after it
/// listens, while a follower sends about as many knocks in its first 100 ms as one round
/// of candidates, and after 2 s no more than the rounds alone.
fn knock_gap(waited: Duration) -> Duration {
    (waited / 20).clamp(MIN_KNOCK_GAP, ROUND_PERIOD)
}

/// Find the leader of `key` at `leader_ip` and authenticate both ways. Candidates are
/// tried in order, over and over ([`ROUND_PERIOD`] apart), until `deadline` passes:
/// the leader may start later than this follower. Between rounds the follower knocks on the
/// first candidate nothing listens on (the connection was refused), where the leader binds
/// when it starts ([`Leader::bind`] takes the first free candidate), every [`knock_gap`]:
/// a leader that starts a few milliseconds after its followers is found then, not at the
/// next round.
pub async fn connect(
    key: &JobKey,
    leader_ip: IpAddr,
    node: &NodeInfo,
    count: usize,
    deadline: Duration,
) -> Result<Link, RendezvousError> {
    let candidates = port_candidates(&key.id, count);
    let start = tokio::time::Instant::now();
    let mut last_error = String::new();
    let timeout = |last_error: &str| {
        RendezvousError::Timeout(format!(
            "no leader of job {} found at {leader_ip} within {deadline:?} (last: {last_error})",
            key.id
        ))
    };
    loop {
        let mut expected = None;
        for &port in &candidates {
            let addr = SocketAddr::new(leader_ip, port);
            match try_candidate(key, addr, node).await {
                Ok(link) => return Ok(link),
                Err(Attempt::Rejected(reason)) => return Err(rejected(addr, &reason)),
                Err(Attempt::Refused(why)) => {
                    expected.get_or_insert(addr);
                    last_error = format!("{addr}: {why}");
                }
                Err(Attempt::NotHere(why)) => last_error = format!("{addr}: {why}"),
            }
            if start.elapsed() >= deadline {
                return Err(timeout(&last_error));
            }
        }
        // Knock on the expected port until the next round is due.
        let round_end = tokio::time::Instant::now() + ROUND_PERIOD;
        while let Some(addr) = expected {
            let next = tokio::time::Instant::now() + knock_gap(start.elapsed());
            if next >= round_end {
                break;
            }
            tokio::time::sleep_until(next).await;
            match try_candidate(key, addr, node).await {
                Ok(link) => return Ok(link),
                Err(Attempt::Rejected(reason)) => return Err(rejected(addr, &reason)),
                Err(Attempt::Refused(_)) => {}
                // Something else took the port: the rounds find where the leader went.
                Err(Attempt::NotHere(why)) => {
                    last_error = format!("{addr}: {why}");
                    expected = None;
                }
            }
            if start.elapsed() >= deadline {
                return Err(timeout(&last_error));
            }
        }
        tokio::time::sleep_until(round_end).await;
    }
}

fn rejected(addr: SocketAddr, reason: &str) -> RendezvousError {
    RendezvousError::Protocol(format!(
        "the leader at {addr} rejected this agent: {reason}"
    ))
}

enum Attempt {
    /// Nothing listens there: the connection was refused.
    Refused(String),
    /// Nothing of ours listens there (silent, another program, another job).
    NotHere(String),
    /// Our job's leader refused us: retrying will not help.
    Rejected(String),
}

async fn try_candidate(key: &JobKey, addr: SocketAddr, node: &NodeInfo) -> Result<Link, Attempt> {
    let not_here = |e: RendezvousError| Attempt::NotHere(e.to_string());
    let mut stream = tokio::time::timeout(HANDSHAKE_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| Attempt::NotHere("connect timed out".into()))?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Attempt::Refused(e.to_string()),
            _ => Attempt::NotHere(e.to_string()),
        })?;
    let _ = stream.set_nodelay(true);
    let challenge = within(
        "waiting for the leader's challenge",
        read_frame(&mut stream),
    )
    .await
    .map_err(not_here)?;
    let Some(Handshake::Challenge {
        protocol,
        job,
        nonce: leader_nonce,
    }) = challenge
    else {
        return Err(Attempt::NotHere("not a herd leader".into()));
    };
    if job != key.id {
        return Err(Attempt::NotHere(format!("leader of another job ({job})")));
    }
    if protocol != PROTOCOL {
        return Err(Attempt::Rejected(format!(
            "it speaks protocol {protocol}, this agent {PROTOCOL} (mixed herd versions?)"
        )));
    }
    let follower_nonce = nonce().map_err(|e| Attempt::NotHere(e.to_string()))?;
    write_frame(
        &mut stream,
        &Handshake::Hello {
            protocol: PROTOCOL,
            node: node.clone(),
            nonce: follower_nonce.clone(),
            proof: Proof::new(key, "follower", &leader_nonce, &follower_nonce),
        },
    )
    .await
    .map_err(not_here)?;
    match within("waiting for the leader's welcome", read_frame(&mut stream))
        .await
        .map_err(not_here)?
    {
        Some(Handshake::Welcome { proof })
            if proof.matches(&Proof::new(key, "leader", &leader_nonce, &follower_nonce)) =>
        {
            let peer = stream
                .peer_addr()
                .map_err(|e| Attempt::NotHere(e.to_string()))?;
            let local = stream
                .local_addr()
                .map_err(|e| Attempt::NotHere(e.to_string()))?;
            Ok(Link {
                stream,
                peer,
                local,
            })
        }
        Some(Handshake::Welcome { .. }) => Err(Attempt::NotHere(
            "a leader that does not know this job's secret".into(),
        )),
        Some(Handshake::Reject { reason }) => Err(Attempt::Rejected(reason)),
        _ => Err(Attempt::NotHere("unexpected answer to hello".into())),
    }
}

#[cfg(test)]
mod tests;
