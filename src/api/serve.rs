//! The accept loop. `axum::serve` has no header-read timeout and no bound on connections, so a
//! few slow clients could hold the server's sockets and tasks forever; this loop serves each
//! connection with hyper's HTTP/1 builder (header-read timeout on, also for idle keep-alive
//! connections) and accepts only while fewer than `max_connections` are open. Connections beyond
//! the bound wait in the kernel's backlog until one closes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Clone, Debug)]
pub struct Limits {
    /// How long a client may take to send a request's headers (and an idle keep-alive
    /// connection may wait for its next request).
    pub header_read_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
}

/// Connections the kernel queues for the accept loop (capped by `net.core.somaxconn`). The
/// default of 128 overflowed with a fleet of 10,000 agents: every task of every node ending at
/// once sends each agent's events on a new connection, and a dropped connection attempt waits
/// 1, then 3, then 7 s to try again (the fleet benchmark counted 279,127 dropped).
const BACKLOG: u32 = 4096;

/// Binds `addr` for [`serve`], with a listen backlog of [`BACKLOG`].
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &Limits,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener, &permits) => accepted,
        };
        let (stream, permit) = accepted;
        let service = TowerToHyperService::new(router.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                // Timeouts and clients that hang up mid-request end here.
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// The next connection, once a permit is free.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> (tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit) {
    let permit = permits
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed");
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                return (stream, permit);
            }
            Err(e) => {
                // Out of file descriptors and the like: wait rather than spin (as axum::serve).
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}
