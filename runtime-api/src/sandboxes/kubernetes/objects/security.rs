//! What a sandbox's Pod Security level allows: the security contexts of its pod and its
//! container (the `restricted` standard, unless the installation's level needs more), and
//! the specs a level refuses before anything is created.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

use crate::sandboxes::driver::Refusal;
use crate::sandboxes::kubernetes::PodSecurity;
use sandgate_store::SandboxSpec;

/// Why the installation's pod security refuses `spec`: the field, and what to change.
pub fn refusal(spec: &SandboxSpec, level: PodSecurity) -> Option<Refusal> {
    if spec.fuse_s3_mount == Some(true) && level != PodSecurity::Privileged {
        return Some(Refusal {
            field: "fuse_s3_mount",
            input: true.into(),
            message:
                "a FUSE S3 mount needs /dev/fuse and CAP_SYS_ADMIN, which only a privileged pod \
             has: the installation must allow it (SANDBOX_POD_SECURITY=privileged)"
                    .to_owned(),
        });
    }
    if spec.run_as_user == Some(0) && level == PodSecurity::Restricted {
        return Some(Refusal {
            field: "run_as_user",
            input: 0.into(),
            message:
                "sandboxes run under the restricted Pod Security Standard, which refuses user 0 \
             (root): use another user, or an installation that allows root \
             (SANDBOX_POD_SECURITY=baseline)"
                    .to_owned(),
        });
    }
    None
}

/// The pod's security context: the spec's user and groups, the runtime's default seccomp
/// profile, and under `restricted` no root.
pub(super) fn pod_security_context(spec: &SandboxSpec, level: PodSecurity) -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: spec.run_as_user,
        run_as_group: spec.run_as_group,
        fs_group: spec.fs_group,
        run_as_non_root: (level == PodSecurity::Restricted).then_some(true),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

/// The container's: no privilege escalation, and under `restricted` no capabilities; a
/// FUSE mount (allowed only by `privileged`) runs privileged, which gives it `/dev/fuse`.
pub(super) fn container_security_context(
    spec: &SandboxSpec,
    level: PodSecurity,
) -> SecurityContext {
    if spec.fuse_s3_mount == Some(true) && level == PodSecurity::Privileged {
        return SecurityContext {
            privileged: Some(true),
            ..SecurityContext::default()
        };
    }
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: (level == PodSecurity::Restricted).then(|| Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}
