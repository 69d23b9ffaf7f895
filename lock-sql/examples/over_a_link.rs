//! Measures the lease strategy's uncontended acquire, release and cycle as a client a
//! network away sees them: through a proxy on loopback that holds every chunk of bytes
//! back for a while in each direction, so each round trip costs what it would over a
//! link (blocking threads, so delays below a millisecond hold).
//!
//! ```sh
//! cargo run --release -p lock-sql --example over_a_link -- mysql://root@127.0.0.1:3306/locks 250
//! ```
//! Arguments: a server URL (`mysql://` or `postgres://`, with host and port), and the
//! delay in microseconds each way (default 250).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use lock_core::prelude::*;
use lock_core::LockClient;
use lock_sql::SqlBackend;
use tokio::time::Instant;

const CYCLES: usize = 300;
const ROUNDS: usize = 3;

fn median(mut samples: Vec<Duration>) -> f64 {
    samples.sort_unstable();
    samples[samples.len() / 2].as_secs_f64() * 1e6
}

/// Copies `from` to `to`, each chunk `delay` after it was read.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n @ 1..) = from.read(&mut buf) {
        std::thread::sleep(delay);
        if to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A proxy to `server` ("host:port") on a free loopback port; returns that port.
fn delaying_proxy(server: String, delay: Duration) -> std::io::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(upstream) = TcpStream::connect(&server) else {
                continue;
            };
            let _ = (client.set_nodelay(true), upstream.set_nodelay(true));
            let (Ok(client_back), Ok(upstream_back)) = (client.try_clone(), upstream.try_clone())
            else {
                continue;
            };
            std::thread::spawn(move || pump(client, upstream, delay));
            std::thread::spawn(move || pump(upstream_back, client_back, delay));
        }
    });
    Ok(port)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: over_a_link URL [DELAY_US]")?;
    let delay = Duration::from_micros(args.next().map_or(Ok(250), |d| d.parse())?);
    // scheme://[user@]host:port/rest
    let (scheme, rest) = url.split_once("://").ok_or("a URL with a scheme")?;
    let (user, rest) = rest.rsplit_once('@').map_or(("", rest), |(u, r)| (u, r));
    let (server, path) = rest.split_once('/').unwrap_or((rest, ""));
    let port = delaying_proxy(server.to_owned(), delay)?;
    let at = if user.is_empty() {
        String::new()
    } else {
        format!("{user}@")
    };
    let proxied = format!("{scheme}://{at}127.0.0.1:{port}/{path}");
    let client = LockClient::new(SqlBackend::connect_url(&proxied).await?);
    let lock = client.lock("over-a-link")?;
    println!("{url}, {delay:?} each way");
    for round in 1..=ROUNDS {
        let (mut acquires, mut releases, mut cycles) = (vec![], vec![], vec![]);
        for _ in 0..CYCLES {
            let started = Instant::now();
            let guard = lock.acquire().await?;
            let granted = Instant::now();
            guard.release().await?;
            let released = Instant::now();
            acquires.push(granted - started);
            releases.push(released - granted);
            cycles.push(released - started);
        }
        println!(
            "round {round}: median acquire {:.0} µs, release {:.0} µs, cycle {:.0} µs",
            median(acquires),
            median(releases),
            median(cycles)
        );
    }
    client.shutdown().await?;
    Ok(())
}
