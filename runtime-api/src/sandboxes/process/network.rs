//! A `process` sandbox's network: a network namespace of its own, reaching what a sandbox
//! pod's NetworkPolicy lets it reach on Kubernetes
//! (`k8s/chart/templates/sandbox-networkpolicies.yaml`), and nothing else of this machine.
//!
//! - The stage's bwrap makes the namespace (`--unshare-net`). As root, it belongs to the
//!   machine's user namespace; without root, to the stage's ([`Joining::Rootless`]),
//!   where Sandgate's uid is root. Either way, nothing the sandbox runs, as its own uid in
//!   a user namespace of its own, may change its addresses, routes or rules.
//! - pasta (from passt, the network of rootless Podman) joins it to the machine: its
//!   address and default route are the machine's (`--config-net`), its connections out
//!   become connections of pasta's on this machine, and the gateway's address is not
//!   this machine (`--no-map-gw`): the machine's loopback is not reachable from inside.
//! - What a sandbox reaches at its own `127.0.0.1` (pasta's `-T`, port to port): Sandgate's
//!   port, led to its door (`door.rs`: the webhooks and the gateway, without `/metrics`),
//!   the ports of [`NetworkOptions::forwards`], and the loopback webhook targets its start
//!   names (`OH_WEBHOOKS*`), each at its own port.
//! - Out: the internet when the operator allows it ([`Egress::Internet`], the default,
//!   as the chart's `sandboxEgress.internet`), less IANA's special-purpose blocks (private
//!   networks, link-local and the metadata service at 169.254.169.254, this machine's
//!   other addresses, other sandboxes'): `prohibit` rules of the namespace, looked up
//!   before any route, so that no route pasta adds (its link's subnet) reaches them. With
//!   [`Egress::None`] the rules refuse every address.
//! - Names: with egress to the internet, the sandbox's `/etc/resolv.conf` names
//!   [`DNS_FORWARD`] (rootless Podman's choice for pasta), which pasta answers from this
//!   machine's own resolver (`--dns-forward`): the resolver may sit where the sandbox may
//!   not go (a private address, as a cloud's, or `127.0.0.53`), and one rule lets port 53
//!   of that one address through. With [`Egress::None`], no names: DNS carries data out.
//! - In: Sandgate reaches the agent-server at `127.0.0.1:{port}` of this machine, which
//!   pasta (`-t`) forwards to the same port inside: nothing else of the sandbox listens
//!   on this machine.
//!
//! The steps of a start: bwrap writes its first process's pid (`--info-fd`) and waits
//! (`--block-fd`); as root, Sandgate names the namespace (`ip netns attach sandgate-{id}`:
//! pasta of Debian 12 joins a namespace by name, not by pid, as root; without root, it is
//! reached by that pid), adds the rules
//! (`ip -n … rule add … prohibit`), starts pasta, which returns once the namespace is
//! configured and goes on as a daemon (its pid in the sandbox's state), then lets bwrap
//! go on. Stopping a sandbox ends its pasta and removes the name. What it costs a start
//! is in BENCHMARKS.md.
//!
//! pasta runs as root (`--runas 0:0`): that release drops to `nobody` before joining the
//! namespace, which only root may join. It keeps two capabilities, in namespaces of its
//! own, under its own seccomp filter.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use command_fds::FdMapping;
use sandgate_proto::special_addresses::{SPECIAL_V4, SPECIAL_V6};

/// The descriptors the outer bwrap writes its child's pid to, and waits on.
pub(super) const INFO_FD: i32 = 4;
pub(super) const BLOCK_FD: i32 = 5;
/// pasta's pid, in the sandbox's state directory.
pub(super) const PASTA_PID_FILE: &str = "pasta.pid";
/// How long the namespace's setup may take (bwrap's pid, the rules, pasta).
pub(super) const SETUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Ahead of the main table's routes; after `local` (0), which keeps the namespace's own
/// addresses and loopback its own.
const RULE_PRIORITY: &str = "100";
/// Ahead of [`RULE_PRIORITY`]: the one exception, DNS to [`DNS_FORWARD`].
const DNS_RULE_PRIORITY: &str = "90";
/// The address a sandbox asks names of, which pasta forwards to this machine's resolver
/// (link-local, as rootless Podman has it).
pub(super) const DNS_FORWARD: &str = "169.254.1.1";

/// The programs that make a sandbox's network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkTools {
    /// iproute2's `ip`.
    pub ip: PathBuf,
    pub pasta: PathBuf,
    pub joining: Joining,
}

/// How Sandgate's tools reach a sandbox's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Joining {
    /// Sandgate is root: the namespace is named (`ip netns attach`), pasta runs as root.
    Root,
    /// Sandgate is not root: the namespace belongs to the stage's user namespace, where
    /// Sandgate's uid is root (`view.rs`). util-linux's `nsenter` enters both for `ip`
    /// (keeping Sandgate's uid, which is that root), and pasta joins them by the stage's
    /// pid, as rootless Podman's does. pasta then opens `/dev/net/tun` as Sandgate's uid.
    Rootless { nsenter: PathBuf },
}

/// Where one sandbox's namespace is, for the tools that configure it.
enum Namespace<'a> {
    /// By its name in `/run/netns` (root).
    Named(String),
    /// By the host pid of its stage's first process (without root), entered by `nsenter`.
    Stage { pid: i32, nsenter: &'a Path },
}

/// Where sandboxes' connections may go out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Egress {
    /// Every address but IANA's special-purpose blocks.
    #[default]
    Internet,
    /// Only the ports forwarded to this machine's loopback.
    None,
}

impl std::str::FromStr for Egress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "internet" => Ok(Self::Internet),
            "none" => Ok(Self::None),
            other => Err(format!("{other:?} is neither \"internet\" nor \"none\"")),
        }
    }
}

/// What every process sandbox's network lets through.
#[derive(Clone, Debug, Default)]
pub struct NetworkOptions {
    /// This machine's loopback ports a sandbox reaches at its own: `(inside, outside)`.
    pub forwards: Vec<(u16, u16)>,
    pub egress: Egress,
}

/// The name of `runtime_id`'s namespace in `/run/netns`.
pub(super) fn namespace_name(runtime_id: &str) -> String {
    format!("sandgate-{runtime_id}")
}

/// The parent's ends of the two descriptors, and the mappings that hand the other ends
/// to the outer bwrap.
pub(super) struct Handshake {
    info: std::fs::File,
    go: std::fs::File,
}

impl Handshake {
    pub fn new() -> std::io::Result<(Self, Vec<FdMapping>)> {
        let (info_read, info_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let (go_read, go_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mappings = vec![
            FdMapping {
                parent_fd: info_write,
                child_fd: INFO_FD,
            },
            FdMapping {
                parent_fd: go_read,
                child_fd: BLOCK_FD,
            },
        ];
        let handshake = Self {
            info: std::fs::File::from(info_read),
            go: std::fs::File::from(go_write),
        };
        Ok((handshake, mappings))
    }
}

/// One sandbox's network settings.
pub(super) struct Plan {
    pub tools: NetworkTools,
    pub options: NetworkOptions,
    pub runtime_id: String,
    /// The agent-server's port, inside and on this machine's loopback.
    pub port: u16,
    /// Loopback ports the start's webhooks name.
    pub webhook_ports: Vec<u16>,
    pub state: PathBuf,
}

impl Plan {
    /// Joins the namespace bwrap made to this machine and lets bwrap go on; blocking.
    pub fn attach(&self, handshake: Handshake) -> Result<(), String> {
        let Handshake { mut info, mut go } = handshake;
        let pid = child_pid(&mut info)?;
        let namespace = match &self.tools.joining {
            Joining::Root => {
                let name = namespace_name(&self.runtime_id);
                run(
                    Command::new(&self.tools.ip).args(["netns", "attach", &name, &pid.to_string()]),
                    None,
                )?;
                Namespace::Named(name)
            }
            Joining::Rootless { nsenter } => {
                until_mapped(pid)?;
                Namespace::Stage { pid, nsenter }
            }
        };
        let (v4, v6) = rules(self.options.egress);
        run(&mut self.ip(&namespace, &["-batch", "-"]), Some(&v4))?;
        run(&mut self.ip(&namespace, &["-6", "-batch", "-"]), Some(&v6))?;
        self.start_pasta(&namespace)?;
        go.write_all(b"1").map_err(|err| {
            // bubblewrap is gone: what it said is in the sandbox's log.
            let log = std::fs::read_to_string(self.state.join(super::LOG_FILE)).unwrap_or_default();
            let said: String = log
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("cannot start the sandbox's namespace: {err}; its log ends: {said:?}")
        })
    }

    /// Joins the sandbox's namespace to this machine again, with this plan's forwards
    /// (a claim's webhooks): its pasta ended, then a new one; blocking. `stage`: the host
    /// pid of its stage's first process, by which it is found without root.
    pub fn reattach(&self, stage: Option<i32>) -> Result<(), String> {
        let namespace = match (&self.tools.joining, stage) {
            (Joining::Root, _) => Namespace::Named(namespace_name(&self.runtime_id)),
            (Joining::Rootless { nsenter }, Some(pid)) => Namespace::Stage { pid, nsenter },
            (Joining::Rootless { .. }, None) => {
                return Err("its namespace is gone (its processes ended)".to_owned());
            }
        };
        stop_pasta(&self.state);
        self.start_pasta(&namespace)
    }

    /// `ip args` in the namespace.
    fn ip(&self, namespace: &Namespace, args: &[&str]) -> Command {
        match namespace {
            Namespace::Named(name) => {
                let mut command = Command::new(&self.tools.ip);
                command.args(["-n", name]).args(args);
                command
            }
            Namespace::Stage { pid, nsenter } => {
                let mut command = Command::new(nsenter);
                command
                    .args(["--target", &pid.to_string()])
                    .args(["--user", "--net", "--preserve-credentials", "--"])
                    .arg(&self.tools.ip)
                    .args(args);
                command
            }
        }
    }

    fn start_pasta(&self, namespace: &Namespace) -> Result<(), String> {
        let _ = std::fs::remove_file(self.state.join(PASTA_PID_FILE));
        run(
            Command::new(&self.tools.pasta).args(self.pasta_args(namespace)),
            None,
        )?;
        self.default_routes(namespace)
    }

    /// The machine's default routes in the namespace, `onlink`. pasta copies them, but the
    /// kernel first looks their gateway up, through the namespace's rules, which refuse
    /// it where it sits in a special-purpose block (a private network's router, as on
    /// most machines): pasta's route is refused and the sandbox has no way out. `onlink`
    /// skips that lookup; the rules still refuse the gateway itself as a destination. A
    /// route the namespace does not take (a family pasta did not configure) leaves the
    /// sandbox without that way out, said in the log: not a failed start.
    fn default_routes(&self, namespace: &Namespace) -> Result<(), String> {
        if self.options.egress == Egress::None {
            return Ok(());
        }
        for family in ["-4", "-6"] {
            let output = Command::new(&self.tools.ip)
                .args([family, "route", "show", "default"])
                .stderr(Stdio::null())
                .output()
                .map_err(|err| format!("cannot read this machine's default route: {err}"))?;
            let Some(route) = onlink_default(&String::from_utf8_lossy(&output.stdout)) else {
                continue;
            };
            let mut args = vec![family];
            args.extend(route.iter().map(String::as_str));
            if let Err(err) = run(&mut self.ip(namespace, &args), None) {
                tracing::warn!(runtime_id = %self.runtime_id, error = %err, "a sandbox's default route was not added: it has no way out of that family");
            }
        }
        Ok(())
    }

    fn pasta_args(&self, namespace: &Namespace) -> Vec<String> {
        let mut forwards: Vec<String> = self
            .options
            .forwards
            .iter()
            .map(|(inside, outside)| format!("{inside}:{outside}"))
            .collect();
        for port in &self.webhook_ports {
            if !self
                .options
                .forwards
                .iter()
                .any(|(inside, _)| inside == port)
            {
                forwards.push(port.to_string());
            }
        }
        forwards.sort();
        forwards.dedup();
        let forwards = if forwards.is_empty() {
            "none".to_owned()
        } else {
            forwards.join(",")
        };
        let dns: &[&str] = match self.options.egress {
            Egress::Internet => &["--dns-forward", DNS_FORWARD],
            Egress::None => &[],
        };
        // As root, the namespace by its name (pasta as root: see the module's notes);
        // without root, by the stage's pid, whose user namespace pasta joins with it.
        let (runas, target): (&[&str], Vec<String>) = match namespace {
            Namespace::Named(name) => (&["--runas", "0:0"], vec!["--netns".into(), name.clone()]),
            Namespace::Stage { pid, .. } => (&[], vec![pid.to_string()]),
        };
        dns.iter()
            .chain(runas)
            .chain(&[
                "--config-net",
                "--no-map-gw",
                "--quiet",
                "--tcp-ports",
                &format!("127.0.0.1/{}", self.port),
                "--udp-ports",
                "none",
                "--tcp-ns",
                &forwards,
                "--udp-ns",
                "none",
                "--pid",
                &self.state.join(PASTA_PID_FILE).display().to_string(),
            ])
            .map(|arg| (*arg).to_owned())
            .chain(target)
            .collect()
    }
}

type Command = std::process::Command;

/// Runs `command` with `input` on its standard input; its error output in the error.
fn run(command: &mut Command, input: Option<&str>) -> Result<(), String> {
    let what = format!("{command:?}");
    let mut child = command
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("cannot run {what}: {err}"))?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(input.as_bytes())
            .map_err(|err| format!("cannot run {what}: {err}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|err| format!("cannot run {what}: {err}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let said: Vec<&str> = stderr
            .lines()
            .filter(|line| !line.starts_with("Failed to send") && !line.trim().is_empty())
            .collect();
        Err(format!(
            "{what} failed ({}): {}",
            output.status,
            said.join("; ")
        ))
    }
}

/// The pid bwrap writes on `info` (`{"child-pid": N, …}`).
fn child_pid(info: &mut std::fs::File) -> Result<i32, String> {
    let mut text = Vec::new();
    let mut buffer = [0_u8; 512];
    while !text.contains(&b'}') && text.len() < 4096 {
        match info.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => text.extend_from_slice(&buffer[..read]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(format!("cannot read bubblewrap's pid: {err}")),
        }
    }
    serde_json::from_slice::<serde_json::Value>(&text)
        .ok()
        .and_then(|info| info["child-pid"].as_i64())
        .and_then(|pid| i32::try_from(pid).ok())
        .ok_or_else(|| {
            format!(
                "bubblewrap ended before making the sandbox's namespace ({:?})",
                String::from_utf8_lossy(&text)
            )
        })
}

/// Waits until the stage's user namespace maps its root to Sandgate's uid: bwrap writes
/// its pid before the map, and a tool entering the namespace before the map would be
/// nobody there, without the capabilities to set up its network.
fn until_mapped(pid: i32) -> Result<(), String> {
    let deadline = std::time::Instant::now() + SETUP_TIMEOUT;
    loop {
        match std::fs::read_to_string(format!("/proc/{pid}/uid_map")) {
            Ok(map) if !map.trim().is_empty() => return Ok(()),
            Ok(_) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(_) => return Err("its user namespace was never mapped".to_owned()),
            Err(err) => return Err(format!("bubblewrap's stage is gone: {err}")),
        }
    }
}

/// The `ip -batch` lines of the namespace's rules, IPv4 and IPv6.
fn rules(egress: Egress) -> (String, String) {
    let rule = |network: String| format!("rule add to {network} prohibit pref {RULE_PRIORITY}\n");
    let mut v4: String = SPECIAL_V4
        .iter()
        .map(|(network, length, _)| rule(format!("{network}/{length}")))
        .collect();
    let mut v6: String = SPECIAL_V6
        .iter()
        .map(|(network, length)| rule(format!("{network}/{length}")))
        .collect();
    match egress {
        Egress::None => {
            v4 = rule("0.0.0.0/0".into());
            v6 = rule("::/0".into());
        }
        Egress::Internet => {
            for protocol in ["udp", "tcp"] {
                v4.push_str(&format!(
                    "rule add to {DNS_FORWARD}/32 ipproto {protocol} dport 53 lookup main pref {DNS_RULE_PRIORITY}\n"
                ));
            }
        }
    }
    (v4, v6)
}

/// `route replace default via GW dev IF onlink` for the first default route of `routes`
/// (`ip route show default`'s lines) that names both; `None` without one.
fn onlink_default(routes: &str) -> Option<Vec<String>> {
    routes.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |word: &str| {
            let at = words.iter().position(|found| *found == word)?;
            words.get(at + 1).copied()
        };
        let (gateway, device) = (after("via")?, after("dev")?);
        (words.first() == Some(&"default")).then(|| {
            [
                "route", "replace", "default", "via", gateway, "dev", device, "onlink",
            ]
            .map(str::to_owned)
            .to_vec()
        })
    })
}

/// Where this machine's `/etc/resolv.conf` leads: itself, or the file its links end at
/// (systemd-resolved's `/run/systemd/resolve/stub-resolv.conf`, resolvconf's
/// `/run/resolvconf/resolv.conf`), where a sandbox's is bound (`view.rs`).
pub(super) fn resolv_conf_path() -> std::path::PathBuf {
    std::fs::canonicalize("/etc/resolv.conf").unwrap_or_else(|_| "/etc/resolv.conf".into())
}

/// The `/etc/resolv.conf` a sandbox with names sees: [`DNS_FORWARD`], with the search
/// domains and options of this machine's (`host`).
pub(super) fn resolv_conf(host: &str) -> String {
    let mut conf = format!("nameserver {DNS_FORWARD}\n");
    for line in host.lines() {
        let line = line.trim();
        if ["search", "domain", "options"]
            .iter()
            .any(|word| line.split_whitespace().next() == Some(word))
        {
            conf.push_str(line);
            conf.push('\n');
        }
    }
    conf
}

/// Ends the sandbox's pasta, if it has one, and waits until it is gone (with it its
/// interface in the namespace, its addresses and routes).
fn stop_pasta(state: &Path) {
    let pid_file = state.join(PASTA_PID_FILE);
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<i32>().ok())
        .filter(|pid| is_pasta(*pid))
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let deadline = std::time::Instant::now() + SETUP_TIMEOUT;
        while is_pasta(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let _ = std::fs::remove_file(pid_file);
}

/// Ends the sandbox's pasta and removes its namespace's name; nothing when it has none.
pub(super) fn detach(tools: &NetworkTools, runtime_id: &str, state: &Path) {
    stop_pasta(state);
    let name = namespace_name(runtime_id);
    if Path::new("/run/netns").join(&name).exists() {
        let _ = run(
            Command::new(&tools.ip).args(["netns", "delete", &name]),
            None,
        );
    }
}

/// Whether `pid` runs pasta (and not a process that took its pid since), and has not
/// exited.
fn is_pasta(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    // pasta is passt under another name, and Debian's runs `passt.avx2` where it can.
    let name = field("Name:");
    (name.starts_with("pasta") || name.starts_with("passt")) && !field("State:").starts_with('Z')
}

/// The loopback ports of `urls` (`http://127.0.0.1:3000/…`, `http://localhost:3000`).
pub(super) fn loopback_ports<'a>(urls: impl IntoIterator<Item = &'a str>) -> Vec<u16> {
    let mut ports: Vec<u16> = urls
        .into_iter()
        .filter_map(|url| reqwest::Url::parse(url).ok())
        .filter(|url| {
            let host = url.host_str().unwrap_or_default();
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            bare.parse::<std::net::IpAddr>().map_or_else(
                |_| host.eq_ignore_ascii_case("localhost"),
                |ip| ip.is_loopback(),
            )
        })
        .filter_map(|url| url.port_or_known_default())
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rules_refuse_every_special_block_ahead_of_the_routes() {
        let (v4, v6) = rules(Egress::Internet);
        for wanted in [
            "rule add to 169.254.0.0/16 prohibit pref 100",
            "rule add to 10.0.0.0/8 prohibit pref 100",
            "rule add to 192.168.0.0/16 prohibit pref 100",
        ] {
            assert!(v4.lines().any(|line| line == wanted), "{wanted} in {v4}");
        }
        assert!(
            v6.lines()
                .any(|line| line == "rule add to ::/3 prohibit pref 100")
        );
        // One exception, ahead of them: DNS to the address pasta answers.
        let exceptions: Vec<&str> = v4
            .lines()
            .filter(|line| !line.contains("prohibit"))
            .collect();
        assert_eq!(
            exceptions,
            [
                "rule add to 169.254.1.1/32 ipproto udp dport 53 lookup main pref 90",
                "rule add to 169.254.1.1/32 ipproto tcp dport 53 lookup main pref 90",
            ]
        );
        let (v4, v6) = rules(Egress::None);
        assert_eq!(v4, "rule add to 0.0.0.0/0 prohibit pref 100\n");
        assert_eq!(v6, "rule add to ::/0 prohibit pref 100\n");
    }

    #[test]
    fn the_machine_s_default_route_is_added_onlink() {
        let route = onlink_default(
            "default via 10.0.0.1 dev ens5 proto dhcp src 10.0.0.7 metric 100\ndefault via 10.0.0.2 dev ens6\n",
        );
        assert_eq!(
            route.as_deref().map(|words| words.join(" ")),
            Some("route replace default via 10.0.0.1 dev ens5 onlink".into())
        );
        assert_eq!(onlink_default(""), None);
        assert_eq!(onlink_default("default dev wg0 scope link\n"), None);
    }

    #[test]
    fn a_sandbox_asks_names_of_pasta_with_this_machine_s_search_domains() {
        let host = "# generated\nnameserver 127.0.0.53\nnameserver 10.0.0.2\nsearch corp.example\noptions edns0 trust-ad\n";
        assert_eq!(
            resolv_conf(host),
            "nameserver 169.254.1.1\nsearch corp.example\noptions edns0 trust-ad\n"
        );
    }

    #[test]
    fn pasta_forwards_sandgate_s_ports_and_the_webhooks_and_serves_only_the_agent_server() {
        let tools = NetworkTools {
            ip: "/usr/bin/ip".into(),
            pasta: "/usr/bin/pasta".into(),
            joining: Joining::Root,
        };
        let options = NetworkOptions {
            forwards: vec![(8080, 41234)],
            egress: Egress::Internet,
        };
        let plan = Plan {
            tools,
            options,
            runtime_id: "abc".into(),
            port: 45000,
            webhook_ports: vec![8080, 3000],
            state: "/data/sandbox-state/abc".into(),
        };
        let named = Namespace::Named("sandgate-abc".into());
        let args = plan.pasta_args(&named);
        let after = |flag: &str| {
            let at = args.iter().position(|arg| arg == flag).expect(flag);
            args[at + 1].clone()
        };
        assert_eq!(after("--tcp-ports"), "127.0.0.1/45000");
        // Sandgate's own port leads to the sandbox's door, not to the edge.
        assert_eq!(after("--tcp-ns"), "3000,8080:41234");
        assert_eq!(after("--udp-ns"), "none");
        assert_eq!(after("--netns"), "sandgate-abc");
        assert_eq!(after("--runas"), "0:0");
        assert!(args.iter().any(|arg| arg == "--no-map-gw"));
        assert_eq!(after("--dns-forward"), DNS_FORWARD);
        // Without egress, no names either.
        let plan = Plan {
            options: NetworkOptions {
                egress: Egress::None,
                ..plan.options.clone()
            },
            tools: plan.tools.clone(),
            runtime_id: plan.runtime_id.clone(),
            webhook_ports: plan.webhook_ports.clone(),
            state: plan.state.clone(),
            ..plan
        };
        assert!(
            !plan
                .pasta_args(&named)
                .iter()
                .any(|arg| arg == "--dns-forward")
        );
    }

    /// Without root: pasta joins the stage's namespaces by its pid, as Sandgate's uid, and
    /// `ip` runs in them through `nsenter`, keeping Sandgate's uid (the stage's root).
    #[test]
    fn without_root_the_tools_join_the_stage_by_its_pid() {
        let nsenter = Path::new("/usr/bin/nsenter");
        let plan = Plan {
            tools: NetworkTools {
                ip: "/usr/bin/ip".into(),
                pasta: "/usr/bin/pasta".into(),
                joining: Joining::Rootless {
                    nsenter: nsenter.into(),
                },
            },
            options: NetworkOptions::default(),
            runtime_id: "abc".into(),
            port: 45000,
            webhook_ports: Vec::new(),
            state: "/data/sandbox-state/abc".into(),
        };
        let stage = Namespace::Stage { pid: 4242, nsenter };
        let args = plan.pasta_args(&stage);
        assert_eq!(args.last().map(String::as_str), Some("4242"));
        assert!(!args.iter().any(|arg| arg == "--runas" || arg == "--netns"));
        let ip = plan.ip(&stage, &["-6", "-batch", "-"]);
        assert_eq!(ip.get_program(), nsenter);
        let ip_args: Vec<_> = ip.get_args().map(|arg| arg.to_string_lossy()).collect();
        assert_eq!(
            ip_args,
            [
                "--target",
                "4242",
                "--user",
                "--net",
                "--preserve-credentials",
                "--",
                "/usr/bin/ip",
                "-6",
                "-batch",
                "-"
            ]
        );
        // Its namespace has no name: a new pasta needs the stage's pid.
        assert!(plan.reattach(None).is_err());
    }

    #[test]
    fn only_loopback_webhooks_are_forwarded() {
        assert_eq!(
            loopback_ports([
                "http://127.0.0.1:3000/api/v1/webhooks",
                "http://localhost:8080",
                "http://[::1]:9000/",
                "https://app.example.com/hooks",
                "http://10.0.0.5:4000",
                "not a url",
                "http://127.0.0.1:3000/again",
            ]),
            [3000, 8080, 9000]
        );
    }
}
