//! Peak RSS and CPU seconds of a process over a stretch of its run, read from `/proc`
//! (Linux). The peers' binaries include this file (`#[path]`), so backstop and every peer
//! are measured the same way: the peak resident set since the meter started (the kernel's
//! high-water mark, reset at the start) and the user + system CPU time spent since.

/// A process's CPU time and peak RSS from one point of its run on.
pub struct Meter {
    proc_dir: String,
    cpu0: f64,
}

/// utime + stime of `/proc/<pid>/stat` (fields 14 and 15), in seconds (100 ticks a second
/// on Linux).
fn cpu_seconds(proc_dir: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// `VmHWM` of `/proc/<pid>/status`, in MB.
fn peak_rss_mb(proc_dir: &str) -> f64 {
    let status = std::fs::read_to_string(format!("{proc_dir}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

impl Meter {
    /// This process, from now on.
    pub fn start() -> Meter {
        Meter::at("/proc/self".into())
    }

    /// Process `pid` (a child this process started), from now on.
    #[allow(dead_code)] // the peers' binaries measure only themselves
    pub fn of(pid: u32) -> Meter {
        Meter::at(format!("/proc/{pid}"))
    }

    fn at(proc_dir: String) -> Meter {
        // Reset the peak RSS counter (Linux ≥ 4.0).
        let _ = std::fs::write(format!("{proc_dir}/clear_refs"), "5");
        Meter {
            cpu0: cpu_seconds(&proc_dir),
            proc_dir,
        }
    }

    /// (peak RSS MB, CPU seconds) since the start; the process must still run.
    pub fn stop(&self) -> (f64, f64) {
        (
            peak_rss_mb(&self.proc_dir),
            cpu_seconds(&self.proc_dir) - self.cpu0,
        )
    }
}

/// CPU seconds of every process whose name is `comm` (a database server's processes),
/// with those of their children that have exited: PostgreSQL's backends are processes,
/// and a connection closed during a measure takes its CPU time to the postmaster's
/// `cutime`/`cstime` (without them a drain whose workers disconnect at its end counted
/// only the backends still open).
#[allow(dead_code)] // the peers' binaries measure only themselves
pub fn server_cpu(comm: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut ticks = 0.0;
    for entry in dir.flatten() {
        let path = entry.path();
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // "pid (comm) state …": comm between the first '(' and the last ')'
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != comm {
            continue;
        }
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        ticks += n(11) + n(12) + n(13) + n(14);
    }
    ticks / 100.0
}
