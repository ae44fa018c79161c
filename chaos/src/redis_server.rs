//! The suite's own Redis server, for the relay and the consumers: durable (every write in
//! the append-only file, synced before the reply) so that an immediate restart loses
//! nothing acknowledged, as the database servers are run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use backstop::redis::redis;
use tokio::process::{Child, Command};

use crate::BoxError;

/// A `redis-server` child with its data in the run's directory.
pub struct RedisServer {
    exe: PathBuf,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Start one on a free port: the binary `BACKSTOP_TEST_REDIS_SERVER` names
    /// (`scripts/servers.sh` sets it), else `redis-server` on the `PATH`.
    pub async fn start(dir: &Path) -> Result<RedisServer, BoxError> {
        let exe = std::env::var("BACKSTOP_TEST_REDIS_SERVER")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let dir = dir.join("redis");
        std::fs::create_dir_all(&dir)?;
        let mut server = RedisServer {
            exe: exe.into(),
            port,
            dir,
            child: None,
        };
        server.spawn().await?;
        Ok(server)
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) -> Result<(), BoxError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.log"))?;
        let child = Command::new(&self.exe)
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "yes", "--appendfsync", "always"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} (install redis-server, or set BACKSTOP_TEST_REDIS_SERVER): {e}",
                    self.exe.display()
                )
            })?;
        self.child = Some(child);
        let client = redis::Client::open(self.url())?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // a restarted server answers LOADING until its append-only file is read
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("Redis on port {} did not come up", self.port).into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `kill -9` and start again on the same port and data.
    pub async fn restart(&mut self) -> Result<(), BoxError> {
        if let Some(mut c) = self.child.take() {
            c.kill().await?;
        }
        self.spawn().await
    }

    /// The length of `stream` (0 when it does not exist).
    pub async fn len(&self, stream: &str) -> Result<u64, BoxError> {
        let client = redis::Client::open(self.url())?;
        let mut c = client.get_multiplexed_async_connection().await?;
        Ok(redis::cmd("XLEN").arg(stream).query_async(&mut c).await?)
    }

    /// Stop it (at the end of a run).
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }
}
