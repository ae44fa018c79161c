//! A fault-injecting TCP proxy between the workers and their database: it forwards
//! bytes both ways and, on the driver's command, delays every chunk (latency), holds
//! every chunk (a stall: the database looks alive but nothing arrives), resets every
//! open connection (RST, as a dead network path or a load balancer does), or refuses
//! everything for a while (the database is down).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to the bytes it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Forward every chunk after this delay.
    Latency(Duration),
    /// Forward nothing until the mode changes.
    Stall,
    /// Unreachable: every open connection reset, every new one reset at once (a database
    /// that is down, a host that refuses).
    Down,
}

/// A running proxy; dropping it leaves the listener running until the process ends.
#[derive(Clone)]
pub struct Proxy {
    /// The local port the workers connect to.
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    resets: Arc<watch::Sender<u64>>,
}

impl Proxy {
    /// Listen on a free local port and forward to `upstream` (`host:port`).
    pub async fn start(upstream: String) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let proxy = Proxy {
            port,
            mode: Arc::new(Mutex::new(Mode::Pass)),
            resets: Arc::new(watch::channel(0).0),
        };
        let p = proxy.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if p.mode() == Mode::Down {
                    #[allow(deprecated)]
                    let _ = client.set_linger(Some(Duration::ZERO));
                    drop(client);
                    continue;
                }
                let (p, upstream) = (p.clone(), upstream.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        p.pipe(client, server).await;
                    }
                });
            }
        });
        Ok(proxy)
    }

    /// Change what the proxy does to the bytes from now on.
    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
        if mode == Mode::Down {
            self.reset_all();
        }
    }

    /// Reset every open connection (new ones are accepted as before).
    pub fn reset_all(&self) {
        self.resets.send_modify(|g| *g += 1);
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn pipe(&self, client: TcpStream, server: TcpStream) {
        // a close is a reset: what a dead path looks like to both ends
        for s in [&client, &server] {
            let _ = s.set_nodelay(true);
            #[allow(deprecated)]
            let _ = s.set_linger(Some(Duration::ZERO));
        }
        let mut resets = self.resets.subscribe();
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        tokio::select! {
            _ = self.pump(cr, sw) => {}
            _ = self.pump(sr, cw) => {}
            _ = resets.changed() => {}
        }
    }

    async fn pump(
        &self,
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
    ) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            loop {
                match self.mode() {
                    Mode::Pass | Mode::Down => break,
                    Mode::Latency(d) => {
                        tokio::time::sleep(d).await;
                        break;
                    }
                    Mode::Stall => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
}
