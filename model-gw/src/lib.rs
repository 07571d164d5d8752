//! The built-in model gateway (ModelGateway gRPC service): model registry, `/v1/models`,
//! `/model/new`, chat completions with streaming, header policy and spend log.
//!
//! Not implemented yet: this crate only holds its place in the workspace layout of
//! design.md. The work is tracked by the issue "The built-in model gateway".
