//! The replay gate of the plain-writer and `E` modes: a TCP relay between
//! the durable clients and recalld that the harness closes before each
//! restart and opens once the plain writer's burst is where the mode needs
//! it (held by the server, or acknowledged). While it is closed, the
//! clients' new connections are accepted but not forwarded, so no client
//! learns of the new instance, and none replays to it, before the burst
//! has reached the server: the order is made by events, not by a slow poll
//! interval. A client whose request times out behind the closed gate just
//! polls again later (its control connection is reopened each time).
//!
//! Closing waits for every relay task that saw the gate open and is still
//! connecting upstream, so after [`Gate::close`] returns no connection of
//! the clients can reach an instance started afterwards until
//! [`Gate::open`].

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, RwLock};

/// The relay; dropping it stops accepting (relayed connections end with
/// their server's).
pub struct Gate {
    addr: SocketAddr,
    /// Open or closed; relay tasks hold it shared from the check to the
    /// end of their upstream connect.
    state: Arc<RwLock<bool>>,
    /// Wakes relay tasks waiting for the gate to open.
    opened: watch::Sender<bool>,
    accept: tokio::task::AbortHandle,
}

impl Gate {
    /// A relay to `upstream` on an ephemeral local port, open.
    pub async fn start(upstream: SocketAddr) -> Result<Gate, String> {
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| format!("gate: bind: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("gate: {e}"))?;
        let state = Arc::new(RwLock::new(true));
        let (opened, _) = watch::channel(true);
        let (st, rx) = (state.clone(), opened.subscribe());
        let accept = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                tokio::spawn(relay(down, upstream, st.clone(), rx.clone()));
            }
        })
        .abort_handle();
        Ok(Gate { addr, state, opened, accept })
    }

    /// Where the durable clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop forwarding new connections; returns once no relay task is
    /// between seeing the gate open and finishing its upstream connect.
    pub async fn close(&self) {
        let mut open = self.state.write().await;
        *open = false;
        self.opened.send_replace(false);
    }

    pub async fn open(&self) {
        *self.state.write().await = true;
        self.opened.send_replace(true);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(mut down: TcpStream, upstream: SocketAddr, state: Arc<RwLock<bool>>, mut opened: watch::Receiver<bool>) {
    let mut up = loop {
        if opened.wait_for(|open| *open).await.is_err() {
            return;
        }
        let open = state.read().await;
        if *open {
            // Refused while the server is down: the client sees its
            // connection closed, as a connection-level error.
            match TcpStream::connect(upstream).await {
                Ok(up) => break up,
                Err(_) => return,
            }
        }
    };
    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
}
