//! What a process has used of the machine, from the scheduler's own counts: steadier than
//! a rate on a shared machine, where neighbours take CPU time but not instructions.

/// What a process's threads have used so far (`/proc/<pid>/task/*/schedstat`, the
/// scheduler's own counts): CPU time in ns, and how many times a thread was put on a CPU.
/// Threads that have exited are no longer counted.
pub fn cpu_use(pid: Option<u32>) -> Option<[u64; 2]> {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", pid?)).ok()?;
    let mut total = [0, 0];
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let fields: Vec<u64> = stat
            .split_whitespace()
            .filter_map(|field| field.parse().ok())
            .collect();
        if let [on_cpu, _waiting, runs] = fields[..] {
            total[0] += on_cpu;
            total[1] += runs;
        }
    }
    Some(total)
}
