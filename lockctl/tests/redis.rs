//! lockctl against a real Redis server.

mod common;

use std::time::{Duration, Instant};

use common::{finish, until_go, Lockctl};
use conformance_tests::server::{specs, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::all_scenarios(&server.url(), "redis").await;
}

/// `lockctl --url rediss://...?tls_ca=...` against a server with only a TLS port that
/// asks for a client certificate: the runs serialise as over plain TCP.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockctl_over_tls_on_redis() {
    use conformance_tests::server::tls_specs::REDIS_TLS;
    let server = TestServer::start(&REDIS_TLS)
        .await
        .expect("redis server with TLS");
    assert!(server.url().starts_with("rediss://"), "{}", server.url());
    common::two_runs_serialise(&server.url(), "redis").await;
    common::no_wait_fails_at_once_while_held(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_runs_at_once_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::at_most_n_runs_at_once(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_group_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::group_scenarios(&server.url(), "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_is_noticed_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::force_unlock_is_noticed_within_a_second(&server.url(), "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_the_holder_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::status_names_the_holder_and_a_token_breaks_only_it(&server.url(), "redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::option_scenarios(&server.url(), "redis").await;
}

/// The server dies while the command runs: the release at the end cannot be made, and
/// lockctl exits within seconds, not the lease, saying the lease expires on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_gone_at_exit_costs_seconds_not_the_lease() {
    let mut server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    if !server.can_fault() {
        println!("SKIP: the Redis server was given by URL and cannot be stopped here");
        return;
    }
    let ctl = Lockctl::new(&server.url(), "gone");
    let holder = ctl.spawn(&[
        "run",
        "--watchdog-lease",
        "60s",
        "jobs",
        "--",
        "sh",
        "-c",
        &until_go("h", "go"),
    ]);
    ctl.wait_for_file("h.in").await;
    server.kill().await.expect("kill redis");
    std::fs::write(ctl.file("go"), "").unwrap();
    let ended = Instant::now();
    let (code, stderr) = finish(holder).await;
    let took = ended.elapsed();
    assert_eq!(code, 0, "the command's code stands: {stderr}");
    assert!(
        stderr.contains("expire"),
        "says the lease expires on its own: {stderr}"
    );
    assert!(
        took < Duration::from_secs(20),
        "exited {took:?} after its command, with a 60 s lease: {stderr}"
    );
    println!("PASS a_backend_gone_at_exit_costs_seconds_not_the_lease (exited {took:?} after the command)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_runs_at_a_time_on_redis() {
    let server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    common::one_leader_runs_at_a_time(&server.url()).await;
}

/// `elect --again` rides out a server restart: the campaign that finds the server down
/// is tried again (not the end of lockctl), and once the server is back the candidate
/// leads again, with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_again_campaigns_on_across_a_server_restart() {
    let mut server = TestServer::start(&specs::REDIS)
        .await
        .expect("redis server");
    if !server.can_fault() {
        println!("SKIP: the Redis server was given by URL and cannot be restarted here");
        return;
    }
    let ctl = Lockctl::new(&server.url(), "again");
    let candidate = ctl.spawn(&[
        "elect",
        "--again",
        "--watchdog-lease",
        "3s",
        "office",
        "-c",
        "echo \"$LOCK_FENCING_TOKEN\" >> \"$D/terms\"; sleep 0.2",
    ]);
    let terms = |ctl: &Lockctl| -> Vec<u64> {
        std::fs::read_to_string(ctl.file("terms"))
            .unwrap_or_default()
            .lines()
            .map(|line| line.trim().parse().expect("a term"))
            .collect()
    };
    ctl.wait_for_file("terms").await;
    server.kill().await.expect("kill redis");
    let before = terms(&ctl);
    // Long enough for campaigns to find the server down, and for lockctl's old
    // behaviour (exit 69 at the first) to show.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.restart().await.expect("restart redis");
    let restarted = Instant::now();
    let later = loop {
        let now = terms(&ctl);
        if now.len() > before.len() + 1 {
            break now;
        }
        assert!(
            restarted.elapsed() < common::PATIENCE,
            "no new term within {:?} of the restart (terms {now:?})",
            common::PATIENCE
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    common::signal(&candidate, libc::SIGTERM);
    let (code, stderr) = finish(candidate).await;
    assert!(
        later.windows(2).all(|pair| pair[0] < pair[1]),
        "terms increase across the restart: {later:?}"
    );
    assert_eq!(code, 143, "ended by SIGTERM, not by the restart: {stderr}");
    println!("PASS elect_again_campaigns_on_across_a_server_restart (terms {later:?})");
}
