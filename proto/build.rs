//! Compiles `sandgate/**/v1/*.proto` with protox, a protobuf compiler in Rust, so that
//! building Sandgate never needs a system `protoc`.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "sandgate/errors/v1/errors.proto",
    "sandgate/admin/v1/admin.proto",
    "sandgate/conversations/v1/conversations.proto",
    "sandgate/settings/v1/settings.proto",
    "sandgate/models/v1/models.proto",
    "sandgate/sandboxes/v1/sandboxes.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={}", root.join(proto).display());
    }
    let files = protox::compile(PROTOS, [&root])?;
    // Bodies travel as `Bytes`, so the edge hands a request body on without copying it.
    // A message that does not decode is the caller's fault: `crate::codec` says so.
    tonic_prost_build::configure()
        .bytes(".")
        .codec_path("crate::codec::ProtoCodec")
        .compile_fds(files)?;
    Ok(())
}
