use super::*;
use std::net::Ipv4Addr;

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn key(id: &str, secret: &str) -> JobKey {
    JobKey {
        id: id.into(),
        secret: secret.as_bytes().to_vec(),
    }
}

fn node(rank: u32) -> NodeInfo {
    NodeInfo {
        node_rank: rank,
        host: format!("n{rank}"),
        nproc: 2,
        pid: 100 + rank,
    }
}

/// A unique job id per test run so parallel test processes never share candidates.
fn unique(name: &str) -> String {
    format!(
        "test-{name}-{}-{}",
        std::process::id(),
        nonce().expect("urandom")
    )
}

/// A fresh job id and its first candidate port, held by a listener bound here: new ids are
/// tried until the OS grants one, so the port is certainly held while the test runs.
async fn id_with_first_candidate_held(name: &str) -> (String, u16, TcpListener) {
    for _ in 0..100 {
        let id = unique(name);
        let first = port_candidates(&id, 1)[0];
        if let Ok(l) = TcpListener::bind(SocketAddr::new(LOOPBACK, first)).await {
            return (id, first, l);
        }
    }
    panic!("100 job ids in a row found their first candidate port taken on this machine");
}

#[test]
fn candidates_are_stable_distinct_and_in_range() {
    let a = port_candidates("slurm-42.0", 16);
    assert_eq!(a, port_candidates("slurm-42.0", 16));
    assert_eq!(a.len(), 16);
    let mut sorted = a.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 16);
    assert!(a.iter().all(|p| (20_000..60_000).contains(p)));
    assert_ne!(a[0], port_candidates("slurm-43.0", 1)[0]);
}

#[tokio::test]
async fn followers_find_the_leader_and_both_sides_authenticate() {
    let k = key(&unique("ok"), "s3cret");
    let leader = Leader::bind(k.clone(), LOOPBACK, 32).await.expect("bind");
    let f1 = tokio::spawn({
        let k = k.clone();
        async move { connect(&k, LOOPBACK, &node(1), 32, Duration::from_secs(10)).await }
    });
    let f2 = tokio::spawn({
        let k = k.clone();
        async move { connect(&k, LOOPBACK, &node(2), 32, Duration::from_secs(10)).await }
    });
    let mut ranks = vec![
        leader.accept().await.expect("first").1.node_rank,
        leader.accept().await.expect("second").1.node_rank,
    ];
    ranks.sort_unstable();
    assert_eq!(ranks, [1, 2]);
    let link = f1.await.expect("join").expect("follower 1");
    assert_eq!(link.peer.port(), leader.port);
    f2.await.expect("join").expect("follower 2");
}

#[tokio::test]
async fn a_follower_with_the_wrong_secret_is_refused_and_told_why() {
    let id = unique("secret");
    let leader = Leader::bind(key(&id, "right"), LOOPBACK, 32)
        .await
        .expect("bind");
    let intruder = tokio::spawn({
        let k = key(&id, "wrong");
        async move { connect(&k, LOOPBACK, &node(1), 32, Duration::from_secs(10)).await }
    });
    // The leader keeps waiting for a real follower; the intruder gets a clear refusal.
    let accepted = tokio::time::timeout(Duration::from_millis(1500), leader.accept()).await;
    assert!(accepted.is_err(), "the intruder must not be accepted");
    let err = intruder.await.expect("join").expect_err("refused");
    assert!(err.to_string().contains("wrong job secret"), "{err}");
}

#[tokio::test]
async fn a_leader_of_another_job_on_a_shared_port_is_skipped() {
    // Another job's leader sits on my first candidate.
    let (mine, first, squatter) = id_with_first_candidate_held("mine").await;
    let leader = Leader::bind(key(&mine, "k"), LOOPBACK, 32)
        .await
        .expect("bind");
    assert_ne!(leader.port, first, "the busy first candidate is skipped");
    // Serve the squatter as a leader of another job: the follower must pass it by.
    let other = Leader {
        listener: squatter,
        key: JobKey {
            id: "someone-else".into(),
            secret: b"x".to_vec(),
        },
        port: first,
    };
    let squatter_task = tokio::spawn(async move {
        let _ = other.accept().await;
    });
    let port = leader.port;
    let accept = tokio::spawn(async move { leader.accept().await });
    let link = connect(
        &key(&mine, "k"),
        LOOPBACK,
        &node(1),
        32,
        Duration::from_secs(10),
    )
    .await
    .expect("the follower passes the other job's leader by");
    assert_eq!(link.peer.port(), port);
    let accepted = tokio::time::timeout(Duration::from_secs(10), accept)
        .await
        .expect("the leader accepts the follower")
        .expect("join");
    assert_eq!(accepted.expect("leader").1.node_rank, 1);
    squatter_task.abort();
}

#[tokio::test]
async fn a_silent_program_on_the_preferred_port_costs_a_timeout_not_a_hang() {
    // Holds the port, accepts, never speaks.
    let (mine, first, silent) = id_with_first_candidate_held("silent").await;
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let leader = Leader::bind(key(&mine, "k"), LOOPBACK, 32)
        .await
        .expect("bind");
    assert_ne!(leader.port, first);
    let started = std::time::Instant::now();
    let (k, n) = (key(&mine, "k"), node(1));
    let follower = connect(&k, LOOPBACK, &n, 32, Duration::from_secs(20));
    // Without the handshake timeout the follower would wait on the silent port for ever
    // (its own deadline is only looked at between candidates): a minute tells that hang
    // from the one timeout it costs.
    let (link, _) = tokio::time::timeout(Duration::from_secs(60), async {
        tokio::join!(follower, leader.accept())
    })
    .await
    .expect("the follower hangs on the silent port");
    link.expect("found the leader past the silent port");
    eprintln!(
        "found the leader past the silent port in {:?} (handshake timeout {HANDSHAKE_TIMEOUT:?})",
        started.elapsed()
    );
    hold.abort();
}

#[tokio::test]
async fn no_leader_is_a_timeout_naming_the_job() {
    let k = key(&unique("none"), "k");
    let err = connect(&k, LOOPBACK, &node(1), 4, Duration::from_millis(300))
        .await
        .expect_err("nobody there");
    assert!(
        err.to_string().contains("no leader of job test-none"),
        "{err}"
    );
}

#[tokio::test]
async fn oversized_frames_are_refused() {
    let (mut a, mut b) = tokio::io::duplex(64);
    let writer = tokio::spawn(async move {
        let _ = a.write_all(&(u32::MAX).to_be_bytes()).await;
    });
    let err = read_frame::<_, serde_json::Value>(&mut b)
        .await
        .expect_err("too big");
    assert!(err.to_string().contains("exceeds"), "{err}");
    writer.await.expect("join");
}

#[tokio::test]
async fn frames_round_trip() {
    let (mut a, mut b) = tokio::io::duplex(1 << 16);
    write_frame(&mut a, &node(3)).await.expect("write");
    drop(a);
    let got: Option<NodeInfo> = read_frame(&mut b).await.expect("read");
    assert_eq!(got, Some(node(3)));
    let end: Option<NodeInfo> = read_frame(&mut b).await.expect("eof");
    assert_eq!(end, None);
}

#[test]
fn knocks_come_often_at_first_and_no_more_often_than_rounds_later() {
    assert_eq!(knock_gap(Duration::ZERO), MIN_KNOCK_GAP);
    assert_eq!(
        knock_gap(Duration::from_millis(100)),
        Duration::from_millis(5)
    );
    assert_eq!(knock_gap(Duration::from_secs(1)), Duration::from_millis(50));
    assert_eq!(knock_gap(Duration::from_secs(2)), ROUND_PERIOD);
    assert_eq!(knock_gap(Duration::from_secs(3600)), ROUND_PERIOD);
}

#[tokio::test]
async fn a_follower_that_starts_before_its_leader_finds_it() {
    let k = key(&unique("late"), "k");
    let follower = tokio::spawn({
        let k = k.clone();
        async move { connect(&k, LOOPBACK, &node(1), 32, Duration::from_secs(10)).await }
    });
    // The follower's first round is refused everywhere; it knocks until the leader listens.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let leader = Leader::bind(k, LOOPBACK, 32).await.expect("bind");
    let (_, info) = leader.accept().await.expect("accept");
    assert_eq!(info.node_rank, 1);
    let link = follower.await.expect("join").expect("follower");
    assert_eq!(link.peer.port(), leader.port);
}

#[tokio::test]
async fn a_program_on_the_expected_port_sends_the_follower_to_the_leader_elsewhere() {
    let (mine, first, squatter) = id_with_first_candidate_held("moved").await;
    // Nothing listens on the first candidate while the follower's first round runs...
    drop(squatter);
    let k = key(&mine, "k");
    let follower = tokio::spawn({
        let k = k.clone();
        async move { connect(&k, LOOPBACK, &node(1), 32, Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    // ...then another job's leader takes it, and this job's leader binds the next one.
    let other = Leader::bind(key(&mine, "other-secret"), LOOPBACK, 1)
        .await
        .expect("the first candidate is free again");
    assert_eq!(other.port, first);
    let other = Leader {
        key: JobKey {
            id: "someone-else".into(),
            secret: b"x".to_vec(),
        },
        ..other
    };
    let squatter_task = tokio::spawn(async move {
        loop {
            let _ = other.accept().await;
        }
    });
    let leader = Leader::bind(k, LOOPBACK, 32).await.expect("bind");
    assert_ne!(leader.port, first);
    let (_, info) = tokio::time::timeout(Duration::from_secs(10), leader.accept())
        .await
        .expect("the follower comes")
        .expect("accept");
    assert_eq!(info.node_rank, 1);
    let link = follower.await.expect("join").expect("follower");
    assert_eq!(link.peer.port(), leader.port);
    squatter_task.abort();
}
